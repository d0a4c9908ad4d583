package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/labstack/echo/v4"

	"github.com/pulse-presence/pulse/pkg/auth"
	"github.com/pulse-presence/pulse/pkg/historyapi"
	"github.com/pulse-presence/pulse/pkg/httpserver"
)

// The analysts' read API (docs/analytics.md): a user's timeline, sessions and daily
// totals, and the service's concurrency, unique users and every user's totals of a
// day, read from the history tables of migrations/0003 and 0005. Each request reads a
// bounded number of partitions, one after the other, under one deadline
// (PULSE_QUERY_HISTORY_TIMEOUT); while Cassandra cannot answer the routes are a 503
// with Retry-After, and nothing else query serves is affected.

// historyRetryAfter is what a reader is told to wait when Cassandra cannot answer.
const historyRetryAfter = 5 * time.Second

// concurrencyReaders bounds the day partitions one concurrency request reads at once.
// A day of 16 shards is 23,040 rows, about half a second of Cassandra's time on the
// local stack; a few at once keep a month within the request deadline without
// letting one request take every core.
const concurrencyReaders = 4

type historyHandlers struct {
	*api
	db      *historyDB
	timeout time.Duration
	now     func() time.Time
}

func (a *api) historyRoutes(e *echo.Echo) {
	h := &historyHandlers{api: a, db: a.history, timeout: a.historyTimeout, now: time.Now}
	if h.timeout <= 0 {
		h.timeout = 10 * time.Second
	}
	e.GET("/v1/users/:userId/timeline", h.timeline, operatorOnly)
	e.GET("/v1/users/:userId/sessions", h.sessions, operatorOnly)
	e.GET("/v1/users/:userId/daily", h.daily, operatorOnly)
	e.GET("/v1/stats/concurrency", h.concurrency)
	e.GET("/v1/stats/uniques", h.uniques)
	e.GET("/v1/stats/daily", h.statsDaily, operatorOnly)
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

// session is the Cassandra session and the request's deadline, or the 503 to answer.
func (h *historyHandlers) session(c echo.Context) (*gocql.Session, context.Context, context.CancelFunc, error) {
	s := h.db.get()
	if s == nil {
		return nil, nil, nil, httpserver.Unavailable("history (Cassandra) is not reachable right now", historyRetryAfter)
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), h.timeout)
	return s, ctx, cancel, nil
}

// cassErr turns a failed read into the 503 readers can retry; the server's error
// handler logs the cause.
func (h *historyHandlers) cassErr(err error) error {
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
	var cur *timelineCursor
	if s := q.Get("cursor"); s != "" {
		tc, err := decodeTimelineCursor(s)
		if err != nil {
			return httpserver.BadRequest("cursor", badTimelineCursor)
		}
		cur = &tc
	}
	s, ctx, cancel, err := h.session(c)
	if err != nil {
		return err
	}
	defer cancel()

	// Walk the day buckets from the newest down; the page takes limit+1 entries to
	// know whether another follows.
	if cur != nil && !cur.At.Before(to) {
		cur = nil // the cursor is past the range: nothing of it to skip
	}
	upper := to.Add(-time.Millisecond)
	if cur != nil && cur.At.Before(upper) {
		upper = cur.At
	}
	page := timelinePage{UserID: id, From: from, To: to, Entries: []timelineEntry{}}
	var more bool
	for b := dayOf(upper); !b.Before(dayOf(from)) && !more; b = b.AddDate(0, 0, -1) {
		stmt := `SELECT occurred_at, entry_id, entry_type, kind, status, previous_status, device_id, source, cause,
			received_at, stale, log_partition, log_offset FROM user_activity
			WHERE user_id = ? AND bucket = ? AND occurred_at >= ? AND occurred_at < ?`
		hi := to
		if cur != nil {
			hi = cur.At.Add(time.Millisecond) // the cursor's millisecond is read, then skipped up to the cursor
		}
		it := s.Query(stmt, id, b, from, hi).PageSize(limit + 1).IterContext(ctx)
		var e timelineEntry
		var received time.Time
		for it.Scan(&e.OccurredAt, &e.EntryID, &e.EntryType, &e.Kind, &e.Status, &e.PreviousStatus, &e.DeviceID,
			&e.Source, &e.Cause, &received, &e.Stale, &e.LogPartition, &e.LogOffset) {
			if cur != nil && e.OccurredAt.Equal(cur.At) && e.EntryID >= cur.EntryID {
				continue
			}
			if len(page.Entries) == limit {
				more = true
				break
			}
			e.OccurredAt = e.OccurredAt.UTC()
			e.ReceivedAt = nil
			if !received.IsZero() {
				r := received.UTC()
				e.ReceivedAt = &r
			}
			page.Entries = append(page.Entries, e)
			e = timelineEntry{}
			received = time.Time{}
		}
		if err := it.Close(); err != nil {
			return h.cassErr(fmt.Errorf("timeline of %s on %s: %w", id, b.Format(time.DateOnly), err))
		}
	}
	if more {
		last := page.Entries[len(page.Entries)-1]
		next := timelineCursor{At: last.OccurredAt, EntryID: last.EntryID}.Encode()
		page.NextCursor = &next
	}
	return httpserver.JSON(c, http.StatusOK, page)
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
	s, ctx, cancel, err := h.session(c)
	if err != nil {
		return err
	}
	defer cancel()
	ans := sessionsAnswer{UserID: id, From: from, To: to, Sessions: []sessionView{}}
	for m := monthOf(to.Add(-time.Microsecond)); !m.Before(monthOf(from)) && !ans.Truncated; m = m.AddDate(0, -1, 0) {
		it := s.Query(`SELECT session_start, session_end, open, online_us, idle_us, invisible_us, through, status
			FROM user_sessions WHERE user_id = ? AND month = ? AND session_start >= ? AND session_start < ?`,
			id, m, from, to).PageSize(1000).IterContext(ctx)
		var (
			v                  sessionView
			end                time.Time
			online, idle, invi int64
		)
		for it.Scan(&v.Start, &end, &v.Open, &online, &idle, &invi, &v.Through, &v.Status) {
			if len(ans.Sessions) == maxSessions {
				ans.Truncated = true
				break
			}
			v.Start, v.Through = v.Start.UTC(), v.Through.UTC()
			if !end.IsZero() {
				e := end.UTC()
				v.End = &e
			}
			v.OnlineSeconds, v.IdleSeconds, v.InvisibleSeconds = seconds(online), seconds(idle), seconds(invi)
			ans.Sessions = append(ans.Sessions, v)
			v, end = sessionView{}, time.Time{}
		}
		if err := it.Close(); err != nil {
			return h.cassErr(fmt.Errorf("sessions of %s in %s: %w", id, m.Format("2006-01"), err))
		}
	}
	return httpserver.JSON(c, http.StatusOK, ans)
}

// Q3: a user's totals per day, and every user's totals of a day.

// dayScan holds one row's columns as Cassandra returns them.
type dayScan struct {
	online, idle, invisible int64
	sessions                int
	first, last, through    time.Time
	status                  string
}

func (d *dayScan) dest() []any {
	return []any{&d.online, &d.idle, &d.invisible, &d.sessions, &d.first, &d.last, &d.through, &d.status}
}

func (d *dayScan) totals() dayTotals {
	return dayTotals{
		OnlineSeconds: seconds(d.online), IdleSeconds: seconds(d.idle), InvisibleSeconds: seconds(d.invisible),
		Sessions: d.sessions, FirstSeen: timePtr(d.first.UTC()), LastSeen: timePtr(d.last.UTC()),
		Through: d.through.UTC(), Status: d.status,
	}
}

const dayColumns = `online_us, idle_us, invisible_us, sessions, first_seen, last_seen, through, status`

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
	s, ctx, cancel, err := h.session(c)
	if err != nil {
		return err
	}
	defer cancel()
	ans := userDaysAnswer{UserID: id, From: from.Format(time.DateOnly), To: to.Format(time.DateOnly), Days: []userDay{}}
	for y := to.Year(); y >= from.Year(); y-- {
		it := s.Query(`SELECT day, `+dayColumns+` FROM user_daily WHERE user_id = ? AND year = ? AND day >= ? AND day <= ?`,
			id, y, from, to).PageSize(400).IterContext(ctx)
		var d time.Time
		var row dayScan
		for it.Scan(append([]any{&d}, row.dest()...)...) {
			ans.Days = append(ans.Days, userDay{Day: d.UTC().Format(time.DateOnly), DayTotals: row.totals()})
			row = dayScan{}
		}
		if err := it.Close(); err != nil {
			return h.cassErr(fmt.Errorf("daily totals of %s in %d: %w", id, y, err))
		}
	}
	return httpserver.JSON(c, http.StatusOK, ans)
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
	var cur *dailyCursor
	if s := q.Get("cursor"); s != "" {
		dc, err := decodeDailyCursor(s)
		if err != nil {
			return httpserver.BadRequest("cursor", badDailyCursor)
		}
		cur = &dc
	}
	s, ctx, cancel, err := h.session(c)
	if err != nil {
		return err
	}
	defer cancel()
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
		it := s.Query(`SELECT user_id, `+dayColumns+` FROM daily_users WHERE day = ? AND bucket = ? AND user_id > ? LIMIT ?`,
			d, pos.Bucket, pos.After, want+1).PageSize(want + 1).IterContext(ctx)
		var u dayUser
		var row dayScan
		got := 0
		for it.Scan(append([]any{&u.UserID}, row.dest()...)...) {
			if got++; got > want {
				break
			}
			u.DayTotals = row.totals()
			page.Users = append(page.Users, u)
			pos.After = u.UserID
			row = dayScan{}
		}
		if err := it.Close(); err != nil {
			return h.cassErr(fmt.Errorf("daily totals of %s, bucket %d: %w", page.Day, pos.Bucket, err))
		}
		if got > want {
			break // the bucket holds more: the cursor resumes in it
		}
	}
	if pos.Bucket < n {
		next := pos.Encode()
		page.NextCursor = &next
	}
	return httpserver.JSON(c, http.StatusOK, page)
}

// Q4: concurrency.

func (h *historyHandlers) concurrency(c echo.Context) error {
	q := c.QueryParams()
	if err := checkParams(q, "from", "to", "step", "view"); err != nil {
		return err
	}
	st, err := parseStep(q.Get("step"))
	if err != nil {
		return err
	}
	from, to, err := parseRange(q, h.now(), time.Hour, maxConcurrencySpan)
	if err != nil {
		return err
	}
	s, ctx, cancel, err := h.session(c)
	if err != nil {
		return err
	}
	defer cancel()
	// Days are read concurrently, a few at a time, and each folded on its own: a
	// point never spans two UTC days, so the days' points simply follow each other.
	var days []time.Time
	for d := dayOf(from); d.Before(to); d = d.AddDate(0, 0, 1) {
		days = append(days, d)
	}
	perDay := make([][]concurrencyPoint, len(days))
	errs := make([]error, len(days))
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	sem := make(chan struct{}, concurrencyReaders)
	var wg sync.WaitGroup
	for i, d := range days {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			fold := concurrencyFold{step: st}
			it := s.Query(`SELECT minute, shard, online, close_online, close_idle, close_invisible FROM concurrency
				WHERE day = ? AND minute >= ? AND minute < ?`, d, from, to).PageSize(2000).IterContext(ctx)
			var r minuteRow
			for it.Scan(&r.Minute, &r.Shard, &r.Online, &r.CloseOnline, &r.CloseIdle, &r.CloseInvisible) {
				fold.add(r)
				r = minuteRow{}
			}
			if err := it.Close(); err != nil {
				errs[i] = fmt.Errorf("concurrency of %s: %w", d.Format(time.DateOnly), err)
				stop()
				return
			}
			perDay[i] = fold.finish()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return h.cassErr(err)
	}
	points := []concurrencyPoint{}
	for _, p := range perDay {
		points = append(points, p...)
	}
	return httpserver.JSON(c, http.StatusOK, concurrencyAnswer{From: from, To: to, Step: string(st), Points: points})
}

// Q6: unique users.

func (h *historyHandlers) uniques(c echo.Context) error {
	q := c.QueryParams()
	if err := checkParams(q, "from", "to", "period", "view"); err != nil {
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
	// Whole periods: from the start of the one holding from to the end of the one
	// holding to's last instant.
	start, _ := period.Bounds(from)
	_, end := period.Bounds(to.Add(-time.Microsecond))
	s, ctx, cancel, err := h.session(c)
	if err != nil {
		return err
	}
	defer cancel()
	fold := uniquesFold{period: period}
	for d := dayOf(start); d.Before(end); d = d.AddDate(0, 0, 1) {
		it := s.Query(`SELECT hour, shard, users FROM uniques WHERE day = ? AND hour >= ? AND hour < ?`,
			d, start, end).PageSize(500).IterContext(ctx)
		var r hourRow
		for it.Scan(&r.Hour, &r.Shard, &r.Users) {
			if err := fold.add(r); err != nil {
				_ = it.Close()
				return fmt.Errorf("reading unique users: %w", err)
			}
			r = hourRow{}
		}
		if err := it.Close(); err != nil {
			return h.cassErr(fmt.Errorf("uniques of %s: %w", d.Format(time.DateOnly), err))
		}
	}
	return httpserver.JSON(c, http.StatusOK, uniquesAnswer{From: start, To: end, Period: name, Points: fold.finish()})
}
