package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/api/customjson"
	"github.com/pulse-presence/pulse/internal/api/historyapi"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
)

// The analysts' read API (docs/analytics.md): a user's timeline, sessions and daily
// totals, and the service's concurrency, unique users and every user's totals of a
// day, read from the history tables of migrations/0003 and 0005 through
// internal/stores/historystore. Each request reads a bounded number of partitions (its range is
// capped, historyquery.go), costs its credential one read per partition (costs.go),
// and holds read slots of the instance while it reads (limits.go), all under one
// deadline (PULSE_QUERY_HISTORY_TIMEOUT); while Cassandra cannot answer the routes
// are a 503 with Retry-After, and nothing else query serves is affected.

// historyRetryAfter is what a reader is told to wait when Cassandra cannot answer.
const historyRetryAfter = 5 * time.Second

type historyHandlers struct {
	*api
	db      *historyDB
	timeout time.Duration
	// exportRetention is how far back an export reads (export.go).
	exportRetention time.Duration
	now             func() time.Time
}

func (a *api) historyRoutes(e *echo.Echo) {
	h := &historyHandlers{api: a, db: a.history, timeout: a.historyTimeout, exportRetention: a.exportRetention, now: time.Now}
	if h.timeout <= 0 {
		h.timeout = 10 * time.Second
	}
	if h.exportRetention <= 0 {
		h.exportRetention = defaultExportRetention
	}
	e.GET("/v1/users/:userId/timeline", h.timeline, operatorOnly)
	e.GET("/v1/users/:userId/sessions", h.sessions, operatorOnly)
	e.GET("/v1/users/:userId/daily", h.daily, operatorOnly)
	e.GET("/v1/stats/concurrency", h.concurrency)
	e.GET("/v1/stats/uniques", h.uniques)
	e.GET("/v1/stats/daily", h.statsDaily, operatorOnly)
	// The operator scope is checked by the handler, so that a refused call is audited
	// too (export.go).
	e.GET("/v1/users/:userId/export", h.export)
}

// operatorOnly guards the routes that show single users' past. A user's timeline,
// sessions and days include the time they spent invisible, which everyone but an
// operator must see as offline (docs/design.md, Event model) — and which no stored row
// can be re-cut to hide, since an invisible stretch is part of a session. So these routes
// answer only in the operator view; the aggregates (concurrency, unique users) name
// nobody and stay open.
func operatorOnly(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !auth.OperatorView(c) {
			return &httpserver.Error{Status: http.StatusForbidden, Code: "forbidden",
				Message: "a user's history includes the time they spent invisible: ask with view=operator and a key with the operator scope (Authorization: Bearer)"}
		}
		return next(c)
	}
}

// historyStore is the history store, the request's deadline and one read slot
// (limits.go) for routes that read one partition after another, or the 503 to
// answer; done ends the deadline and gives the slot back.
func (h *historyHandlers) historyStore(c echo.Context) (s *historystore.Store, ctx context.Context, done func(), err error) {
	s, ctx, _, done, err = h.historyReads(c, 1)
	return s, ctx, done, err
}

// historyReads is historyStore with up to want read slots, for a route that reads
// partitions concurrently.
func (h *historyHandlers) historyReads(c echo.Context, want int) (s *historystore.Store, ctx context.Context, ls *lease, done func(), err error) {
	s = h.db.get()
	if s == nil {
		return nil, nil, nil, nil, httpserver.Unavailable("history (Cassandra) is not reachable right now", historyRetryAfter)
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), h.timeout)
	if ls, err = h.limits.lease(ctx, want); err != nil {
		cancel()
		return nil, nil, nil, nil, h.cassErr(err)
	}
	return s, ctx, ls, func() { ls.end(); cancel() }, nil
}

// cassErr turns a failed read into the 503 readers can retry; the server's error
// handler logs the cause.
func (h *historyHandlers) cassErr(err error) error {
	if isRefusal(err) {
		return err // a limit's own answer
	}
	msg := "history (Cassandra) did not answer"
	if errors.Is(err, context.DeadlineExceeded) {
		msg = "history (Cassandra) did not answer in time"
	}
	return fmt.Errorf("%w: reading history: %w", httpserver.Unavailable(msg, historyRetryAfter), err)
}

// The answers, in the wire form pulsectl reads too.
type (
	timelineEntry     = historyapi.TimelineEntry
	timelinePage      = historyapi.TimelinePage
	sessionView       = historyapi.Session
	sessionsAnswer    = historyapi.Sessions
	dayTotals         = historyapi.DayTotals
	userDay           = historyapi.UserDay
	userDaysAnswer    = historyapi.UserDays
	dayUser           = historyapi.DayUser
	dailyPage         = historyapi.DailyPage
	concurrencyPoint  = historyapi.ConcurrencyPoint
	concurrencyAnswer = historyapi.Concurrency
	uniquesPoint      = historyapi.UniquesPoint
	uniquesAnswer     = historyapi.Uniques
	groupAnswer       = historyapi.GroupAnswer
)

// Q1: a user's timeline.

const badTimelineCursor = "is not a cursor this route returned; send the nextCursor of the previous page (with the same from and to), or none"

func (h *historyHandlers) timeline(c echo.Context) error {
	id, err := userIDParam(c)
	if err != nil {
		return err
	}
	q := c.QueryParams()
	if err := checkParams(q, "from", "to", "limit", "cursor", "view"); err != nil {
		return err
	}
	from, to, err := parseRange(q, h.now(), day, maxTimelineSpan)
	if err != nil {
		return err
	}
	limit, err := parseLimit(q)
	if err != nil {
		return err
	}
	if err := h.limits.charge(c, timelineCost(from, to)); err != nil {
		return err
	}
	var cur *timelineCursor
	if s := q.Get("cursor"); s != "" {
		raw, err := h.cursors.Open(s)
		var tc timelineCursor
		if err == nil {
			tc, err = decodeTimelineCursor(raw)
		}
		if err != nil {
			return httpserver.BadRequest("cursor", badTimelineCursor)
		}
		cur = &tc
	}
	// One slot: the day partitions are read one after the other.
	s, ctx, ls, done, err := h.historyReads(c, 1)
	if err != nil {
		return err
	}
	defer done()
	if cur != nil && !cur.At.Before(to) {
		cur = nil // the cursor is past the range: nothing of it to skip
	}
	page := timelinePage{UserID: id, From: from, To: to}
	var more bool
	if page.Entries, more, err = walkTimeline(ctx, s, ls, id, from, to, cur, limit); err != nil {
		return h.cassErr(err)
	}
	if more {
		next := h.cursors.Sign(nextTimelinePos(page.Entries).Encode())
		page.NextCursor = &next
	}
	return httpserver.JSON(c, http.StatusOK, page)
}

// walkTimeline reads userID's user_activity rows that occurred in [from, to), after
// the position after (nil: from the newest), newest first: at most limit of them, and
// more says whether another follows. It walks the UTC day partitions from the newest
// down, as many at once as ls holds slots, asking each for the rows the page still
// lacks plus one, so it holds at most that many rows per slot besides the page.
func walkTimeline(ctx context.Context, s *historystore.Store, ls *lease, userID string, from, to time.Time, after *timelineCursor,
	limit int) (entries []timelineEntry, more bool, err error) {
	upper := to.Add(-time.Millisecond)
	hi := to
	if after != nil {
		if after.At.Before(upper) {
			upper = after.At
		}
		hi = after.At.Add(time.Millisecond) // the cursor's millisecond is read, then skipped up to the cursor
	}
	entries = []timelineEntry{}
	var days []time.Time
	for b := dayOf(upper); !b.Before(dayOf(from)); b = b.AddDate(0, 0, -1) {
		days = append(days, b)
	}
	for len(days) > 0 && !more {
		window := days[:min(max(ls.n, 1), len(days))]
		days = days[len(window):]
		want := limit + 1 - len(entries)
		rows := make([][]historystore.Activity, len(window))
		err := ls.each(ctx, len(window), func(ctx context.Context, i int) error {
			return s.Timeline(ctx, userID, window[i], from, hi, want, func(a historystore.Activity) bool {
				if after != nil && a.OccurredAt.Equal(after.At) && a.EntryID >= after.EntryID {
					return true
				}
				rows[i] = append(rows[i], a)
				return len(rows[i]) < want
			})
		})
		if err != nil {
			return nil, false, err
		}
		for _, day := range rows {
			for i := range day {
				if len(entries) == limit {
					return entries, true, nil
				}
				entries = append(entries, timelineEntryOf(&day[i]))
			}
		}
	}
	return entries, more, nil
}

// nextTimelinePos is the position after the last of entries, where the next page
// starts.
func nextTimelinePos(entries []timelineEntry) timelineCursor {
	last := entries[len(entries)-1]
	return timelineCursor{At: last.OccurredAt, EntryID: last.EntryID}
}

// timelineEntryOf is a user_activity row as the timeline answers it. The route is
// the operator's alone (operatorOnly), so an event's custom status is shown as sent
// even while the user was invisible, as the operator view of a status read shows it.
func timelineEntryOf(a *historystore.Activity) timelineEntry {
	return timelineEntry{
		OccurredAt: a.OccurredAt.UTC(), EntryID: a.EntryID, EntryType: a.EntryType, Kind: a.Kind, Status: a.Status,
		PreviousStatus: a.PreviousStatus, DeviceID: a.DeviceID, Source: a.Source, Cause: a.Cause,
		ReceivedAt: timePtr(a.ReceivedAt.UTC()), Stale: a.Stale, LogPartition: a.LogPartition, LogOffset: a.LogOffset,
		Data: customjson.EventView(a.Custom),
	}
}

// Q2: a user's sessions.

func (h *historyHandlers) sessions(c echo.Context) error {
	id, err := userIDParam(c)
	if err != nil {
		return err
	}
	q := c.QueryParams()
	if err := checkParams(q, "from", "to", "view"); err != nil {
		return err
	}
	from, to, err := parseRange(q, h.now(), 31*day, maxSessionsSpan)
	if err != nil {
		return err
	}
	if err := h.limits.charge(c, sessionsCost(from, to)); err != nil {
		return err
	}
	s, ctx, done, err := h.historyStore(c)
	if err != nil {
		return err
	}
	defer done()
	ans, err := readSessions(ctx, s, id, from, to)
	if err != nil {
		return h.cassErr(err)
	}
	return httpserver.JSON(c, http.StatusOK, ans)
}

// readSessions reads userID's sessions that started in [from, to), newest first, one
// month partition after the other: at most maxSessions, Truncated saying there were
// more.
func readSessions(ctx context.Context, s *historystore.Store, id string, from, to time.Time) (sessionsAnswer, error) {
	ans := sessionsAnswer{UserID: id, From: from, To: to, Sessions: []sessionView{}}
	for m := monthOf(to.Add(-time.Microsecond)); !m.Before(monthOf(from)) && !ans.Truncated; m = m.AddDate(0, -1, 0) {
		err := s.Sessions(ctx, id, m, from, to, func(r historystore.Session) bool {
			if len(ans.Sessions) == maxSessions {
				ans.Truncated = true
				return false
			}
			ans.Sessions = append(ans.Sessions, sessionView{
				Start: r.Start.UTC(), End: timePtr(r.End.UTC()), Open: r.Open,
				OnlineSeconds: seconds(r.OnlineMicros), IdleSeconds: seconds(r.IdleMicros), InvisibleSeconds: seconds(r.InvisibleMicros),
				Through: r.Through.UTC(), Status: r.Status,
			})
			return true
		})
		if err != nil {
			return ans, err
		}
	}
	return ans, nil
}

// Q3: a user's totals per day, and every user's totals of a day.

// totalsOf is a user's row of a day as the answers give it.
func totalsOf(d *historystore.DayTotals) dayTotals {
	return dayTotals{
		OnlineSeconds: seconds(d.OnlineMicros), IdleSeconds: seconds(d.IdleMicros), InvisibleSeconds: seconds(d.InvisibleMicros),
		Sessions: d.Sessions, FirstSeen: timePtr(d.FirstSeen.UTC()), LastSeen: timePtr(d.LastSeen.UTC()),
		Through: d.Through.UTC(), Status: d.Status,
	}
}

func (h *historyHandlers) daily(c echo.Context) error {
	id, err := userIDParam(c)
	if err != nil {
		return err
	}
	q := c.QueryParams()
	if err := checkParams(q, "from", "to", "view"); err != nil {
		return err
	}
	from, to, err := parseDayRange(q, h.now(), 31, int(maxDailySpan/day))
	if err != nil {
		return err
	}
	if err := h.limits.charge(c, userDaysCost(from, to)); err != nil {
		return err
	}
	s, ctx, done, err := h.historyStore(c)
	if err != nil {
		return err
	}
	defer done()
	ans, err := readUserDays(ctx, s, id, from, to)
	if err != nil {
		return h.cassErr(err)
	}
	return httpserver.JSON(c, http.StatusOK, ans)
}

// readUserDays reads userID's days from from to to (UTC midnights, both included),
// newest first, one year partition after the other.
func readUserDays(ctx context.Context, s *historystore.Store, id string, from, to time.Time) (userDaysAnswer, error) {
	ans := userDaysAnswer{UserID: id, From: from.Format(time.DateOnly), To: to.Format(time.DateOnly), Days: []userDay{}}
	for y := to.Year(); y >= from.Year(); y-- {
		err := s.UserDays(ctx, id, y, from, to, func(r historystore.UserDay) bool {
			ans.Days = append(ans.Days, userDay{Day: r.Day.UTC().Format(time.DateOnly), DayTotals: totalsOf(&r.DayTotals)})
			return true
		})
		if err != nil {
			return ans, err
		}
	}
	return ans, nil
}

const badDailyCursor = "is not a cursor this route returned; send the nextCursor of the previous page (with the same day), or none"

// statsDaily pages through daily_users: the day's buckets (one per shard) in order,
// each in user id order.
func (h *historyHandlers) statsDaily(c echo.Context) error {
	q := c.QueryParams()
	if err := checkParams(q, "day", "limit", "cursor", "view"); err != nil {
		return err
	}
	d := dayOf(h.now().AddDate(0, 0, -1))
	if s := q.Get("day"); s != "" {
		var err error
		if d, err = parseDate("day", s); err != nil {
			return err
		}
	}
	limit, err := parseLimit(q)
	if err != nil {
		return err
	}
	if err := h.limits.charge(c, pageCost(limit, false)); err != nil {
		return err
	}
	var cur *dailyCursor
	if s := q.Get("cursor"); s != "" {
		raw, err := h.cursors.Open(s)
		var dc dailyCursor
		if err == nil {
			dc, err = decodeDailyCursor(raw)
		}
		if err != nil {
			return httpserver.BadRequest("cursor", badDailyCursor)
		}
		cur = &dc
	}
	s, ctx, done, err := h.historyStore(c)
	if err != nil {
		return err
	}
	defer done()
	// The buckets of a day are the shards; the state's shard count says how many.
	n, err := h.store.Shards(ctx)
	if err != nil {
		return h.readErr(err)
	}
	page := dailyPage{Day: d.Format(time.DateOnly), Users: []dayUser{}}
	pos := dailyCursor{Buckets: n}
	if cur != nil {
		if cur.Buckets != n {
			return httpserver.BadRequest("cursor", fmt.Sprintf("belongs to a day split in %d buckets, and there are now %d; start the walk again", cur.Buckets, n))
		}
		pos = *cur
	}
	for ; pos.Bucket < n; pos.Bucket, pos.After = pos.Bucket+1, "" {
		want := limit - len(page.Users)
		if want == 0 {
			break
		}
		// One more than wanted tells whether the bucket holds more.
		got := 0
		err := s.DayUsers(ctx, d, pos.Bucket, pos.After, want+1, func(r historystore.DayUser) bool {
			if got++; got > want {
				return false
			}
			page.Users = append(page.Users, dayUser{UserID: r.UserID, DayTotals: totalsOf(&r.DayTotals)})
			pos.After = r.UserID
			return true
		})
		if err != nil {
			return h.cassErr(err)
		}
		if got > want {
			break // the bucket holds more: the cursor resumes in it
		}
	}
	if pos.Bucket < n {
		next := h.cursors.Sign(pos.Encode())
		page.NextCursor = &next
	}
	return httpserver.JSON(c, http.StatusOK, page)
}

// Q4: concurrency.

func (h *historyHandlers) concurrency(c echo.Context) error {
	q := c.QueryParams()
	if err := checkParams(q, "from", "to", "step", "group", "view"); err != nil {
		return err
	}
	st, err := parseStep(q.Get("step"))
	if err != nil {
		return err
	}
	g, err := groupParam(q)
	if err != nil {
		return err
	}
	if g != "" {
		return h.groupConcurrency(c, g, st)
	}
	from, to, err := parseRange(q, h.now(), time.Hour, maxConcurrencySpan)
	if err != nil {
		return err
	}
	if err := h.limits.charge(c, concurrencyCost(from, to)); err != nil {
		return err
	}
	// Days are read concurrently, a few at a time (PULSE_QUERY_HISTORY_READS_PER_REQUEST;
	// a day of 16 shards is 23,040 rows, about half a second of Cassandra's time on
	// the local stack), and each folded on its own: a point never spans two UTC
	// days, so the days' points simply follow each other.
	var days []time.Time
	for d := dayOf(from); d.Before(to); d = d.AddDate(0, 0, 1) {
		days = append(days, d)
	}
	s, ctx, ls, done, err := h.historyReads(c, len(days))
	if err != nil {
		return err
	}
	defer done()
	perDay := make([][]concurrencyPoint, len(days))
	err = ls.each(ctx, len(days), func(ctx context.Context, i int) error {
		fold := concurrencyFold{step: st}
		if err := s.Concurrency(ctx, days[i], from, to, func(r historystore.MinuteCounts) bool {
			fold.add(r)
			return true
		}); err != nil {
			return err
		}
		perDay[i] = fold.finish()
		return nil
	})
	if err != nil {
		return h.cassErr(err)
	}
	points := []concurrencyPoint{}
	for _, p := range perDay {
		points = append(points, p...)
	}
	if !auth.OperatorView(c) {
		for i := range points {
			points[i].CloseInvisible = nil
		}
	}
	return httpserver.JSON(c, http.StatusOK, concurrencyAnswer{From: from, To: to, Step: string(st), Points: points})
}

// Q6: unique users.

func (h *historyHandlers) uniques(c echo.Context) error {
	q := c.QueryParams()
	if err := checkParams(q, "from", "to", "period", "group", "view"); err != nil {
		return err
	}
	period, name, err := parsePeriod(q.Get("period"))
	if err != nil {
		return err
	}
	from, to, err := parseRange(q, h.now(), day, maxUniquesSpan)
	if err != nil {
		return err
	}
	g, err := groupParam(q)
	if err != nil {
		return err
	}
	// Whole periods: from the start of the one holding from to the end of the one
	// holding to's last instant.
	start, _ := period.Bounds(from)
	_, end := period.Bounds(to.Add(-time.Microsecond))
	if err := h.limits.charge(c, uniquesCost(start, end, g != "")); err != nil {
		return err
	}
	// A group's unique users are its current members' (grouphistory.go): each hour's
	// bitmap ANDed with the group's bitmap of the shard before the union.
	members, group, err := h.statsGroup(c, g)
	if err != nil {
		return err
	}
	s, ctx, done, err := h.historyStore(c)
	if err != nil {
		return err
	}
	defer done()
	fold := uniquesFold{period: period, operator: auth.OperatorView(c), members: members}
	for d := dayOf(start); d.Before(end); d = d.AddDate(0, 0, 1) {
		var foldErr error
		err := s.Uniques(ctx, d, start, end, func(r historystore.HourUsers) bool {
			foldErr = fold.add(r)
			return foldErr == nil
		})
		if foldErr != nil {
			return fmt.Errorf("reading unique users: %w", foldErr)
		}
		if err != nil {
			return h.cassErr(err)
		}
	}
	return httpserver.JSON(c, http.StatusOK, uniquesAnswer{From: start, To: end, Period: name, Points: fold.finish(), GroupAnswer: group})
}
