package main

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/cursor"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
	"github.com/pulse-presence/pulse/services/query/online"
)

// Who is online. GET /v1/online walks the shards' bitmaps in (shard, index) order
// behind an opaque cursor (online.Page); POST /v1/online/filter answers "which of
// these users are online" from the bitmaps and the id map alone, never reading a
// user's state.

const (
	defaultListLimit = 100
	maxListLimit     = 1000
	maxActiveWithin  = 24 * time.Hour

	maxFilterIDs = 10_000
	// filterMaxBody fits 10,000 ids of the longest length; PULSE_QUERY_MAX_BODY
	// raises it, never lowers it.
	filterMaxBody = 2 << 20
	// filterCacheTTL is how long the filter reuses a shard's bitmaps: much less than
	// a heartbeat, and it spares re-reading every shard's bitmaps per request.
	filterCacheTTL = 250 * time.Millisecond
)

// onlineHandlers serve the listing and the filter.
type onlineHandlers struct {
	*api
	cache *online.BitmapCache
	now   func() time.Time
}

// onlineRoutes registers who-is-online listing and the friends filter.
func (a *api) onlineRoutes(e *echo.Echo) {
	h := &onlineHandlers{api: a, cache: online.NewBitmapCache(a.store, filterCacheTTL, time.Now), now: time.Now}
	e.GET("/v1/online", h.list)
	e.POST("/v1/online/filter", h.filter)
}

type onlineUser struct {
	UserID string `json:"userId"`
	Status string `json:"status"`
}

type onlineList struct {
	Users []onlineUser `json:"users"`
	// NextCursor is null once the walk is complete.
	NextCursor *string `json:"nextCursor"`
	// At is the instant a listing of the past (at=) describes, and Final whether the
	// page is final (see atReader).
	At    *time.Time `json:"at,omitempty"`
	Final *bool      `json:"final,omitempty"`
}

// badListCursor is what a client whose cursor the listing cannot read is told.
const badListCursor = "is not a cursor this API returned; send the nextCursor of the previous page, or none"

// listQuery is a checked GET /v1/online request.
type listQuery struct {
	// statuses to list, in Tracked order.
	statuses     []presence.Status
	limit        int
	cursor       *online.Cursor
	activeWithin time.Duration
}

// parseListQuery checks the query parameters; operator says whether the request has
// the operator view, the only one that lists invisible users.
func parseListQuery(q url.Values, operator bool, cursors *cursor.Keys) (listQuery, error) {
	lq := listQuery{limit: defaultListLimit}
	for name := range q {
		switch name {
		case "status", "limit", "cursor", "activeWithin", "view", "at":
		default:
			return lq, httpserver.BadRequest(name, "unknown parameter; want status, limit, cursor, activeWithin, at or view")
		}
	}
	switch s := q.Get("status"); s {
	case "":
		lq.statuses = []presence.Status{presence.Online, presence.Idle}
		if operator {
			lq.statuses = append(lq.statuses, presence.Invisible)
		}
	case "online", "idle":
		st, _ := presence.ParseStatus(s)
		lq.statuses = []presence.Status{st}
	case "invisible":
		if !operator {
			return lq, httpserver.BadRequest("status", "invisible users are listed only in the operator view (view=operator)")
		}
		lq.statuses = []presence.Status{presence.Invisible}
	default:
		want := "online or idle"
		if operator {
			want = "online, idle or invisible"
		}
		return lq, httpserver.BadRequest("status", fmt.Sprintf("must be %s, got %q", want, s))
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxListLimit {
			return lq, httpserver.BadRequest("limit", fmt.Sprintf("must be an integer from 1 to %d, got %q", maxListLimit, s))
		}
		lq.limit = n
	}
	if s := q.Get("cursor"); s != "" {
		raw, err := cursors.Open(s)
		var c online.Cursor
		if err == nil {
			c, err = online.DecodeCursor(raw)
		}
		if err != nil {
			return lq, httpserver.BadRequest("cursor", badListCursor)
		}
		lq.cursor = &c
	}
	if s := q.Get("activeWithin"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 || d > maxActiveWithin {
			return lq, httpserver.BadRequest("activeWithin", fmt.Sprintf("must be a duration such as 15m, above 0 and at most %v, got %q", maxActiveWithin, s))
		}
		lq.activeWithin = d
	}
	return lq, nil
}

func (h *onlineHandlers) list(c echo.Context) error {
	return h.onlinePage(c, "", h.now, func(at time.Time, n int, q listQuery) error { return h.pastList(c, at, n, q, nil) })
}

// onlinePage answers a page of GET /v1/online, or of a group's listing (group set,
// GET /v1/groups/{groupId}/online): the live walk, or pastList for at=. now is the
// clock activeWithin is measured back from.
func (a *api) onlinePage(c echo.Context, group string, now func() time.Time, pastList func(at time.Time, n int, q listQuery) error) error {
	operator := auth.OperatorView(c)
	q, err := parseListQuery(c.QueryParams(), operator, a.cursors)
	if err != nil {
		return err
	}
	at, past, err := a.atParam(c)
	if err != nil {
		return err
	}
	if past && q.activeWithin > 0 {
		return httpserver.BadRequest("activeWithin", "cannot be combined with at: activity is known for the present only")
	}
	if err := a.limits.charge(c, pageCost(q.limit, past)); err != nil {
		return err
	}
	ctx, cancel := a.ctx(c)
	defer cancel()
	n, err := a.store.Shards(ctx)
	if err != nil {
		return a.readErr(err)
	}
	if n == 0 {
		return httpserver.JSON(c, http.StatusOK, onlineList{Users: []onlineUser{}})
	}
	if past {
		return pastList(at, n, q)
	}
	var pos online.Position
	if q.cursor != nil {
		if q.cursor.Shards != n {
			return httpserver.BadRequest("cursor", fmt.Sprintf("belongs to a state of %d shards, which now has %d; start the walk again", q.cursor.Shards, n))
		}
		pos = q.cursor.Pos
	}
	// A page takes several round trips: Redis losing a shard between them must not
	// show as a page with users missing (docs/design.md guarantee 10).
	guard, err := a.store.GuardShards(ctx, n)
	if err != nil {
		return a.readErr(err)
	}
	oq := online.Query{Statuses: q.statuses, Limit: q.limit, Public: !operator, Group: group}
	if q.activeWithin > 0 {
		oq.ActiveSince = now().Add(-q.activeWithin)
	}
	users, next, err := online.Page(ctx, a.store, n, oq, pos)
	if err != nil {
		return a.readErr(err)
	}
	if err := a.store.Unchanged(ctx, guard); err != nil {
		return a.readErr(err)
	}
	res := onlineList{Users: make([]onlineUser, len(users))}
	for i, u := range users {
		res.Users[i] = onlineUser{UserID: u.ID, Status: u.Status.String()}
	}
	if next.Shard < n {
		s := a.cursors.Sign(online.Cursor{Shards: n, Pos: next}.Encode())
		res.NextCursor = &s
	}
	return httpserver.JSON(c, http.StatusOK, res)
}

type filterRequest struct {
	UserIDs []string `json:"userIds"`
}

type filterResponse struct {
	Online []onlineUser `json:"online"`
}

// filter answers which of the given users are online or idle (and, in the operator
// view, invisible), in request order.
func (h *onlineHandlers) filter(c echo.Context) error {
	body, err := httpserver.ReadBody(c, max(h.maxBody, filterMaxBody))
	if err != nil {
		return err
	}
	var req filterRequest
	if err := httpserver.DecodeObject(body, &req, ""); err != nil {
		return err
	}
	if req.UserIDs == nil {
		return httpserver.BadRequest("userIds", "is required")
	}
	if len(req.UserIDs) > maxFilterIDs {
		return refused(reasonTooManyIDs, httpserver.BadRequest("userIds", fmt.Sprintf("at most %d user ids per request, got %d", maxFilterIDs, len(req.UserIDs))))
	}
	for i, id := range req.UserIDs {
		if err := presence.ValidateID(id, presence.MaxUserIDLen); err != nil {
			return httpserver.BadRequest(fmt.Sprintf("userIds[%d]", i), err.Error())
		}
	}
	if err := h.limits.charge(c, filterCost(len(req.UserIDs))); err != nil {
		return err
	}
	visible := [len(statestore.Tracked)]bool{}
	visible[statestore.TrackedPos(presence.Online)] = true
	visible[statestore.TrackedPos(presence.Idle)] = true
	visible[statestore.TrackedPos(presence.Invisible)] = auth.OperatorView(c)

	ctx, cancel := h.ctx(c)
	defer cancel()
	res := filterResponse{Online: []onlineUser{}}
	n, err := h.store.Shards(ctx)
	if err != nil {
		return h.readErr(err)
	}
	if n == 0 || len(req.UserIDs) == 0 {
		return httpserver.JSON(c, http.StatusOK, res)
	}
	guard, err := h.store.GuardShards(ctx, n)
	if err != nil {
		return h.readErr(err)
	}
	locs, err := h.store.Locate(ctx, n, req.UserIDs)
	if err != nil {
		return h.readErr(err)
	}
	seen := make([]bool, n)
	var shards []int
	for _, l := range locs {
		if l.Known && !seen[l.Shard] {
			seen[l.Shard] = true
			shards = append(shards, l.Shard)
		}
	}
	bms, err := h.cache.Get(ctx, shards)
	if err != nil {
		return h.readErr(err)
	}
	// Users Redis lost between the reads would be left out as unknown.
	if err := h.store.Unchanged(ctx, guard); err != nil {
		return h.readErr(err)
	}
	for i, l := range locs {
		if !l.Known {
			continue
		}
		if st, ok := bms[l.Shard].StatusOf(l.Index); ok && visible[statestore.TrackedPos(st)] {
			res.Online = append(res.Online, onlineUser{UserID: req.UserIDs[i], Status: st.String()})
		}
	}
	return httpserver.JSON(c, http.StatusOK, res)
}
