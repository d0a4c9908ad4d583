package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/api/customjson"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/cursor"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
	"github.com/pulse-presence/pulse/services/query/countcache"
	"github.com/pulse-presence/pulse/services/query/dashboard"
)

// api answers reads from the state the aggregator keeps in Redis.
type api struct {
	store *statestore.Store
	// cursors sign every cursor handed out and check every one handed back.
	cursors *cursor.Keys
	// get reads one user's state: through the coalescer, or straight from the store.
	get func(ctx context.Context, id string) (*presence.User, error)
	// counts answers GET /v1/online/count (from memory unless its interval is 0).
	counts *countcache.Cache
	// timeout bounds each request's Redis work; past it the reader gets a 503.
	timeout  time.Duration
	maxBatch int
	maxBody  int64
	logger   *slog.Logger
	// feed serves the live change feed (watch.go); nil: no feed routes.
	feed *watcher
	// history reads the analysts' tables (history.go); nil or not yet connected:
	// the history routes answer 503.
	history        *historyDB
	historyTimeout time.Duration
	// atRetention is how far back at= reaches (attime.go).
	atRetention time.Duration
	// exportRetention is how far back a user's export reads their history
	// (export.go); 0: defaultExportRetention.
	exportRetention time.Duration
	// pipeline answers the dashboard's pipeline view; nil: a 503.
	pipeline *dashboard.Pipeline
	// limits charges each request its cost and bounds the Cassandra reads
	// (limits.go); nil: no limit (unit tests).
	limits *readLimits
	// atMaxBatch bounds the ids of POST /statuses?at= (0: maxBatch).
	atMaxBatch int
	// now is the reader's clock, which expires custom statuses; nil: time.Now.
	now func() time.Time
}

// clock reads a.now, or the system clock.
func (a *api) clock() time.Time {
	if a.now != nil {
		return a.now()
	}
	return time.Now()
}

// routes registers query's routes, metered by a.limits: call it after the guard is
// installed, so the meter knows each request's credential.
func (a *api) routes(e *echo.Echo) {
	if a.limits != nil {
		e.Use(a.limits.meter)
	}
	e.Use(refuseEmptyParams)
	e.GET("/status/:userId", a.getStatus)
	e.POST("/statuses", a.postStatuses)
	e.GET("/v1/users/:userId/status", a.getUserStatus)
	e.POST("/v1/statuses", a.postFullStatuses)
	e.GET("/v1/online/count", a.getOnlineCount)
	a.onlineRoutes(e)
	a.watchRoutes(e)
	a.historyRoutes(e)
	// The dashboard page (/dashboard/) and its pipeline view.
	dashboard.Mount(e, a.pipeline)
}

// refuseEmptyParams answers 400 to a query parameter given with no value (`?to=`,
// `?view=`): the document's schemas refuse the empty string, and reading it as
// "absent" would answer a question the client did not ask. A cursor may be empty: it
// is the first page, as when it is left out.
func refuseEmptyParams(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		for name, values := range c.QueryParams() {
			if name != "cursor" && slices.Contains(values, "") {
				return httpserver.BadRequest(name, "must not be empty: leave it out for its default")
			}
		}
		return next(c)
	}
}

// seedStatus is the seed API's shape of a status: lastUpdated is null for users Pulse
// has never seen.
type seedStatus struct {
	UserID      string     `json:"userId"`
	Status      string     `json:"status"`
	LastUpdated *time.Time `json:"lastUpdated"`
}

// toSeedView is a user's seed status in the reader's view: operators see invisible
// users as invisible and every time as it is, everyone else an offline user and the
// public times (presence.Public).
func toSeedView(id string, u *presence.User, operator bool) seedStatus {
	s := seedStatus{UserID: id, Status: presence.Offline.String()}
	if u == nil {
		return s
	}
	s.Status = viewStatus(u.Status, operator)
	if operator {
		s.LastUpdated = timePtr(u.LastUpdated)
	} else {
		s.LastUpdated = timePtr(u.Public.LastUpdated)
	}
	return s
}

// viewStatus is st as the reader may see it: operators see every status as it is.
func viewStatus(st presence.Status, operator bool) string {
	if operator && st != presence.StatusUnknown {
		return st.String()
	}
	return st.Public().String()
}

func userIDParam(c echo.Context) (string, error) {
	id := c.Param("userId")
	if err := presence.ValidateID(id, presence.MaxUserIDLen); err != nil {
		return "", httpserver.BadRequest("userId", err.Error())
	}
	return id, nil
}

// readErr turns a Redis failure into the 503 readers can retry. The client sees only
// the 503; the server's error handler logs the chain, cause included.
func (a *api) readErr(err error) error {
	if errors.Is(err, statestore.ErrRebuilding) {
		return fmt.Errorf("%w: %w", httpserver.Unavailable("the presence state is being rebuilt from the log (Redis lost it); retry shortly", 2*time.Second), err)
	}
	return fmt.Errorf("%w: reading state: %w", httpserver.Unavailable("presence state is unreachable right now", time.Second), err)
}

func (a *api) ctx(c echo.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Request().Context(), a.timeout)
}

// loadUser reads the state of the user the path names; nil for a user never seen.
func (a *api) loadUser(c echo.Context) (string, *presence.User, error) {
	id, err := userIDParam(c)
	if err != nil {
		return "", nil, err
	}
	ctx, cancel := a.ctx(c)
	defer cancel()
	u, err := a.get(ctx, id)
	if err != nil {
		return "", nil, a.readErr(err)
	}
	return id, u, nil
}

func (a *api) getStatus(c echo.Context) error {
	if at, past, err := a.atParam(c); err != nil || past {
		return a.or(err, func() error { return a.pastStatus(c, at) })
	}
	id, u, err := a.loadUser(c)
	if err != nil {
		return err
	}
	return httpserver.JSON(c, http.StatusOK, toSeedView(id, u, auth.OperatorView(c)))
}

type statusesRequest struct {
	UserIDs []string `json:"userIds"`
}

func (a *api) postStatuses(c echo.Context) error {
	at, past, err := a.atParam(c)
	if err != nil {
		return err
	}
	ids, err := a.statusesIDs(c, past, func(id string) error { return auth.ForUser(c, id) })
	if err != nil {
		return err
	}
	if past {
		return a.pastStatuses(c, at, ids)
	}
	ctx, cancel := a.ctx(c)
	defer cancel()
	users, err := a.store.GetMany(ctx, ids)
	if err != nil {
		return a.readErr(err)
	}
	operator := auth.OperatorView(c)
	out := make([]seedStatus, len(ids))
	for i, id := range ids {
		out[i] = toSeedView(id, users[i], operator)
	}
	return httpserver.JSON(c, http.StatusOK, map[string]any{"statuses": out})
}

// statusesIDs reads the userIds of a POST /statuses or /v1/statuses body — present,
// within the batch bound, each a valid id that mayRead allows (else its 403) — and
// charges the request their cost.
func (a *api) statusesIDs(c echo.Context, past bool, mayRead func(id string) error) ([]string, error) {
	body, err := httpserver.ReadBody(c, a.maxBody)
	if err != nil {
		return nil, err
	}
	var req statusesRequest
	if err := httpserver.DecodeObject(body, &req, ""); err != nil {
		return nil, err
	}
	if req.UserIDs == nil {
		return nil, httpserver.BadRequest("userIds", "is required")
	}
	if err := a.checkBatch(len(req.UserIDs), past); err != nil {
		return nil, err
	}
	for i, id := range req.UserIDs {
		if err := presence.ValidateID(id, presence.MaxUserIDLen); err != nil {
			return nil, httpserver.BadRequest(fmt.Sprintf("userIds[%d]", i), err.Error())
		}
		if err := mayRead(id); err != nil {
			return nil, err
		}
	}
	return req.UserIDs, a.limits.charge(c, statusesCost(len(req.UserIDs), past))
}

// postFullStatuses is POST /v1/statuses: the full status of up to
// PULSE_QUERY_MAX_BATCH users in one read, in request order, for a contact list's
// "last seen". A user token may read its own user and those of its pulse_watch claim,
// as it may watch them on the feed.
func (a *api) postFullStatuses(c echo.Context) error {
	p := auth.PrincipalOf(c)
	ids, err := a.statusesIDs(c, false, func(id string) error {
		if !p.MayWatch(id) {
			return auth.Forbidden(fmt.Sprintf("this user token may not read %q: only its own user and the users of its %s claim", id, auth.WatchClaim))
		}
		return nil
	})
	if err != nil {
		return err
	}
	ctx, cancel := a.ctx(c)
	defer cancel()
	users, err := a.store.GetMany(ctx, ids)
	if err != nil {
		return a.readErr(err)
	}
	operator, now := auth.OperatorView(c), a.clock()
	out := make([]statusView, len(ids))
	for i, id := range ids {
		out[i] = toStatusView(id, users[i], operator, now)
	}
	return httpserver.JSON(c, http.StatusOK, map[string]any{"statuses": out})
}

// checkBatch refuses more ids than one POST /statuses may carry: PULSE_QUERY_MAX_BATCH,
// and with at= (a Cassandra read per id) PULSE_QUERY_AT_MAX_BATCH.
func (a *api) checkBatch(n int, past bool) error {
	most, variable, with := a.maxBatch, "PULSE_QUERY_MAX_BATCH", ""
	if past && a.atMaxBatch > 0 && a.atMaxBatch < most {
		most, variable, with = a.atMaxBatch, "PULSE_QUERY_AT_MAX_BATCH", " with at="
	}
	if n <= most {
		return nil
	}
	return refused(reasonTooManyIDs, httpserver.BadRequest("userIds",
		fmt.Sprintf("at most %d user ids per request%s (%s), got %d", most, with, variable, n)))
}

type deviceView struct {
	DeviceID string    `json:"deviceId"`
	Status   string    `json:"status"`
	LastSeen time.Time `json:"lastSeen"`
}

// statusView is a user's full status, in the reader's view.
type statusView struct {
	UserID      string     `json:"userId"`
	Status      string     `json:"status"`
	LastUpdated *time.Time `json:"lastUpdated"`
	LastActive  *time.Time `json:"lastActive"`
	LastSeen    *time.Time `json:"lastSeen"`
	// Data is the user's custom status; null for none, for one whose until has passed,
	// and for readers who are not operators while the user reads offline to them.
	Data *customjson.Out `json:"data"`
}

// userView is GET /v1/users/{userId}/status: the full status and the devices.
type userView struct {
	statusView
	Devices []deviceView `json:"devices"`
}

// toStatusView is user id's full status as the reader may see it: an operator sees
// invisible users as invisible and every time as it is; anyone else an offline user
// with the times such a reader knew before (docs/design.md, "Invisible looks
// offline"). A user never seen is offline with no times. A custom status whose until
// is not after now is none.
func toStatusView(id string, u *presence.User, operator bool, now time.Time) statusView {
	v := statusView{UserID: id, Status: presence.Offline.String()}
	if u == nil {
		return v
	}
	v.Status = viewStatus(u.Status, operator)
	t := u.TimesFor(operator)
	v.LastUpdated, v.LastActive, v.LastSeen = timePtr(t.LastUpdated), timePtr(t.LastActive), timePtr(t.LastSeen)
	if operator {
		v.Data = customjson.View(u.CustomAt(now))
	} else {
		v.Data = customjson.View(u.PublicCustomAt(now))
	}
	return v
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func (a *api) getUserStatus(c echo.Context) error {
	if at, past, err := a.atParam(c); err != nil || past {
		return a.or(err, func() error { return a.pastStatus(c, at) })
	}
	id, u, err := a.loadUser(c)
	if err != nil {
		return err
	}
	operator := auth.OperatorView(c)
	v := userView{statusView: toStatusView(id, u, operator, a.clock()), Devices: []deviceView{}}
	if u == nil {
		return httpserver.JSON(c, http.StatusOK, v)
	}
	devices := u.Devices
	if !operator {
		// The devices such a reader knew before an invisible period.
		devices = u.PublicDevices()
	}
	for _, d := range devices {
		v.Devices = append(v.Devices, deviceView{DeviceID: d.ID, Status: d.Status.String(), LastSeen: d.LastSeen})
	}
	return httpserver.JSON(c, http.StatusOK, v)
}

type countView struct {
	// Total is everyone the reader may see as present: online or idle, and for an
	// operator invisible too.
	Total      uint64            `json:"total"`
	ByStatus   map[string]uint64 `json:"byStatus"`
	Registered uint64            `json:"registered"`
	// AsOf is when the counts were read from Redis; they reflect every window the
	// aggregators had written by then.
	AsOf time.Time `json:"asOf"`
}

func (a *api) getOnlineCount(c echo.Context) error {
	if at, past, err := a.atParam(c); err != nil || past {
		return a.or(err, func() error { return a.pastCount(c, at) })
	}
	ctx, cancel := a.ctx(c)
	defer cancel()
	snap, err := a.counts.Get(ctx)
	if err != nil {
		return a.readErr(err)
	}
	n, asOf := snap.Counts, snap.At.UTC()
	if auth.OperatorView(c) {
		return httpserver.JSON(c, http.StatusOK, countView{
			Total: n.Online + n.Idle + n.Invisible,
			ByStatus: map[string]uint64{
				"online":    n.Online,
				"idle":      n.Idle,
				"invisible": n.Invisible,
				"offline":   n.Offline(),
			},
			Registered: n.Registered,
			AsOf:       asOf,
		})
	}
	// Invisible users count as offline to readers.
	return httpserver.JSON(c, http.StatusOK, countView{
		Total: n.Online + n.Idle,
		ByStatus: map[string]uint64{
			"online":  n.Online,
			"idle":    n.Idle,
			"offline": n.Offline() + n.Invisible,
		},
		Registered: n.Registered,
		AsOf:       asOf,
	})
}
