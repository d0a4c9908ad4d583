package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/labstack/echo/v4"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/shard"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
	"github.com/pulse-presence/pulse/services/query/online"
)

// Point in time (Q5): at=T on the count, the listing and the statuses answers from
// history's snapshots and changes (internal/stores/historystore) instead of Redis, for the instant T:
// the status of a user at T is the one set by their latest change at or before T. The
// views are the present's: invisible users read as offline except to operators.

// atParam reads ?at=: past is false when it is absent. An empty value (at=), an
// instant in the future or further back than the retention is a 400: a reader who
// names an instant must not get the live state instead. An instant of the past costs costAt
// reads of the credential's bucket (costs.go): a 429 when it lacks them.
func (a *api) atParam(c echo.Context) (at time.Time, past bool, err error) {
	vals, given := c.QueryParams()["at"]
	if !given {
		return time.Time{}, false, nil
	}
	s := vals[0]
	if s == "" {
		return time.Time{}, false, httpserver.BadRequest("at", "must not be empty: give an RFC 3339 instant, or leave at out for the live state")
	}
	at, err = time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, false, httpserver.BadRequest("at", fmt.Sprintf("must be an RFC 3339 time such as 2026-11-22T20:13:07Z (fractions of a second allowed), got %q", s))
	}
	at = at.UTC().Truncate(time.Microsecond)
	now := time.Now()
	switch {
	case at.After(now):
		return time.Time{}, false, httpserver.BadRequest("at", fmt.Sprintf("%s is in the future", at.Format(time.RFC3339Nano)))
	case at.Before(now.Add(-a.atRetention)):
		return time.Time{}, false, httpserver.BadRequest("at", fmt.Sprintf("%s is older than the %v history keeps", at.Format(time.RFC3339Nano), a.atRetention))
	}
	if err := a.limits.charge(c, costAt); err != nil {
		return time.Time{}, false, err
	}
	return at, true, nil
}

// or is err when there is one, else what past answers.
func (a *api) or(err error, past func() error) error {
	if err != nil {
		return err
	}
	return past()
}

// atReader is the history store with the request's deadline and read slots (up to
// want reads at once, limits.go), once history has written every shard's changes up to
// the instant; otherwise the error to answer. final says whether the answer is final: at
// or before every shard's final mark, no change can alter it any more; after it (inside
// history's lateness) the answer is provisional, what history has received so far.
// done ends the deadline and gives the slots back.
func (a *api) atReader(c echo.Context, at time.Time, shards, want int) (r *historystore.Store, ctx context.Context, ls *lease, done func(), final bool, err error) {
	r = a.history.get()
	if r == nil {
		return nil, nil, nil, nil, false, httpserver.Unavailable("history (Cassandra) is not reachable right now", historyRetryAfter)
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), a.historyTimeout)
	if ls, err = a.limits.lease(ctx, want); err != nil {
		cancel()
		return nil, nil, nil, nil, false, a.atErr(err)
	}
	done = func() { ls.end(); cancel() }
	p, err := a.progressFor(ctx, r, at, shards)
	if err != nil {
		done()
		return nil, nil, nil, nil, false, a.atErr(err)
	}
	if p.Provisional.IsZero() {
		done()
		return nil, nil, nil, nil, false, httpserver.Unavailable("history has not written the state of every shard yet", progressRetryAfter)
	}
	if at.After(p.Provisional) {
		done()
		wait := time.Duration(math.Ceil(at.Sub(p.Provisional).Seconds())) * time.Second
		return nil, nil, nil, nil, false, httpserver.Unavailable(fmt.Sprintf(
			"the state at %s is not written yet: history has every shard's changes up to %s (%v ago)",
			at.Format(time.RFC3339Nano), p.Provisional.Format(time.RFC3339Nano), time.Since(p.Provisional).Round(time.Millisecond)),
			max(wait, time.Second))
	}
	return r, ctx, ls, done, !at.After(p.Final), nil
}

// progressRetryAfter is the wait suggested while a shard has no progress mark: history
// writes one for every shard within seconds of taking it, quiet or not.
const progressRetryAfter = 5 * time.Second

// freshWait bounds how long a reader of an instant history has not written yet waits
// for it: history writes each shard's changes about every second
// (PULSE_HISTORY_FLUSH_INTERVAL), so an instant a second or two old is answered
// after its next write rather than refused. freshPoll is how often it looks.
const (
	freshWait = 3 * time.Second
	freshPoll = 200 * time.Millisecond
)

// progressFor reads how far history has written shards 0 to shards-1, waiting up to
// freshWait (within ctx) for the provisional mark to reach at when at is that recent.
func (a *api) progressFor(ctx context.Context, r *historystore.Store, at time.Time, shards int) (historystore.Progress, error) {
	deadline := time.Now().Add(freshWait)
	for {
		p, err := r.Progress(ctx, int32(shards))
		if err != nil || p.Provisional.IsZero() || !at.After(p.Provisional) ||
			time.Since(at) > freshWait || time.Now().Add(freshPoll).After(deadline) {
			return p, err
		}
		select {
		case <-ctx.Done():
			return p, nil
		case <-time.After(freshPoll):
		}
	}
}

// atErr turns a failed point-in-time read into its answer; a limit's refusal is
// its own.
func (a *api) atErr(err error) error {
	if isRefusal(err) {
		return err
	}
	if errors.Is(err, historystore.ErrNoSnapshot) {
		return &httpserver.Error{Status: http.StatusNotFound, Code: "not_found",
			Message: "history holds no state of that instant: it is from before history began, or history was stopped then"}
	}
	return fmt.Errorf("%w: reading the past: %w", httpserver.Unavailable("history (Cassandra) did not answer", historyRetryAfter), err)
}

// pastCountView is GET /v1/online/count?at=: the counts at the instant At.
type pastCountView struct {
	Total    uint64            `json:"total"`
	ByStatus map[string]uint64 `json:"byStatus"`
	At       time.Time         `json:"at"`
	// Final is false while At is inside history's lateness (see atReader).
	Final bool `json:"final"`
}

func (a *api) pastCount(c echo.Context, at time.Time) error {
	n, err := a.shardCount(c)
	if err != nil {
		return err
	}
	counts, final, err := a.countsAt(c, at, n, nil)
	if err != nil {
		return err
	}
	on, idle, inv := counts[0], counts[1], counts[2]
	v := pastCountView{Total: on + idle, ByStatus: map[string]uint64{"online": on, "idle": idle}, At: at, Final: final}
	if auth.OperatorView(c) {
		v.Total += inv
		v.ByStatus["invisible"] = inv
	}
	return httpserver.JSON(c, http.StatusOK, v)
}

// countsAt is the number of users online, idle and invisible at at in n shards. With
// members (one bitmap per shard, a group's), only the users of members[shard] count,
// and a shard where members is empty is not read.
func (a *api) countsAt(c echo.Context, at time.Time, n int, members []*roaring.Bitmap) (counts [3]uint64, final bool, err error) {
	shards := shardsToRead(n, members)
	r, ctx, ls, done, final, err := a.atReader(c, at, n, len(shards))
	if err != nil {
		return counts, false, err
	}
	defer done()
	states := make([]*historystore.ShardState, len(shards))
	err = ls.each(ctx, len(shards), func(ctx context.Context, i int) (err error) {
		states[i], err = r.StateAt(ctx, int32(shards[i]), at)
		return err
	})
	if err != nil {
		return counts, false, a.atErr(err)
	}
	for i, st := range states {
		var m *roaring.Bitmap
		if members != nil {
			m = members[shards[i]]
		}
		for k, c := range stateCounts(st, m) {
			counts[k] += c
		}
	}
	return counts, final, nil
}

// shardsToRead is the shards of n that hold a member; every shard when members is nil.
func shardsToRead(n int, members []*roaring.Bitmap) []int {
	var out []int
	for s := range n {
		if members == nil || !members[s].IsEmpty() {
			out = append(out, s)
		}
	}
	return out
}

// stateCounts is the number of users online, idle and invisible in st, or of members
// alone when members is not nil.
func stateCounts(st *historystore.ShardState, members *roaring.Bitmap) [3]uint64 {
	var out [3]uint64
	for k, bm := range [3]*roaring.Bitmap{st.Online, st.Idle, st.Invisible} {
		if members == nil {
			out[k] = bm.GetCardinality()
		} else {
			out[k] = bm.AndCardinality(members)
		}
	}
	return out
}

// shardCount is the number of shards, from the live state's layout.
func (a *api) shardCount(c echo.Context) (int, error) {
	ctx, cancel := a.ctx(c)
	defer cancel()
	n, err := a.store.Shards(ctx)
	if err != nil {
		return 0, a.readErr(err)
	}
	if n == 0 {
		return 0, httpserver.Unavailable("no shard layout registered yet", time.Second)
	}
	return n, nil
}

// pastStatusView is a user's status at the instant At.
type pastStatusView struct {
	UserID string    `json:"userId"`
	Status string    `json:"status"`
	At     time.Time `json:"at"`
	// Final is false while At is inside history's lateness (see atReader).
	Final bool `json:"final"`
}

// pastStatuses reads the statuses of ids at at, in the reader's view.
func (a *api) pastStatusesOf(c echo.Context, at time.Time, ids []string) ([]pastStatusView, error) {
	n, err := a.shardCount(c)
	if err != nil {
		return nil, err
	}
	r, ctx, ls, done, final, err := a.atReader(c, at, n, len(ids))
	if err != nil {
		return nil, err
	}
	defer done()
	// Each id is located, then each shard holding one is read once, a few reads at
	// a time (PULSE_QUERY_HISTORY_READS_PER_REQUEST).
	locs := make([]location, len(ids))
	err = ls.each(ctx, len(ids), func(ctx context.Context, i int) (err error) {
		l := &locs[i]
		l.shard, l.index, l.found, err = r.Locate(ctx, ids[i])
		if err == nil && !l.found {
			// The shard is read all the same, so that a user history never saw (a
			// twin who stayed offline) gets the same answer, errors included, as one
			// it saw only while invisible.
			l.shard = int32(shard.For(ids[i], n))
		}
		return err
	})
	if err != nil {
		return nil, a.atErr(err)
	}
	shards := shardsOf(locs)
	states := make([]*historystore.ShardState, len(shards))
	err = ls.each(ctx, len(shards), func(ctx context.Context, i int) (err error) {
		states[i], err = r.StateAt(ctx, shards[i], at)
		return err
	})
	if err != nil {
		return nil, a.atErr(err)
	}
	byShard := make(map[int32]*historystore.ShardState, len(shards))
	for i, sh := range shards {
		byShard[sh] = states[i]
	}
	operator := auth.OperatorView(c)
	out := make([]pastStatusView, len(ids))
	for i, id := range ids {
		out[i] = pastStatusView{UserID: id, Status: presence.Offline.String(), At: at, Final: final}
		if locs[i].found { // else never changed status: offline at every instant
			out[i].Status = viewStatus(byShard[locs[i].shard].Status(locs[i].index), operator)
		}
	}
	return out, nil
}

// location is where history keeps a user's bit: found is false for a user whose
// status never changed, whose shard is then the one the user's events would go to.
type location struct {
	shard int32
	index uint32
	found bool
}

// shardsOf is the shards of the locations, each once.
func shardsOf(locs []location) []int32 {
	seen := map[int32]bool{}
	var out []int32
	for _, l := range locs {
		if !seen[l.shard] {
			seen[l.shard] = true
			out = append(out, l.shard)
		}
	}
	return out
}

// pastStatus is GET /status/{id}?at= and
// GET /v1/users/{id}/status?at=.
func (a *api) pastStatus(c echo.Context, at time.Time) error {
	id, err := userIDParam(c)
	if err != nil {
		return err
	}
	if err := auth.ForUser(c, id); err != nil {
		return err
	}
	out, err := a.pastStatusesOf(c, at, []string{id})
	if err != nil {
		return err
	}
	return httpserver.JSON(c, http.StatusOK, out[0])
}

// pastStatuses is POST /statuses?at=.
func (a *api) pastStatuses(c echo.Context, at time.Time, ids []string) error {
	out, err := a.pastStatusesOf(c, at, ids)
	if err != nil {
		return err
	}
	// Every status of one answer is read at the same progress: the first says for all.
	return httpserver.JSON(c, http.StatusOK, map[string]any{"statuses": out, "at": at, "final": len(out) == 0 || out[0].Final})
}

// pastList is GET /v1/online?at=: the listing's walk in (shard, index) order over the
// shards' states at at, with the listing's cursor. With members (one bitmap per shard,
// a group's), only the users of members[shard] are listed, and a shard where members
// is empty is not read.
func (a *api) pastList(c echo.Context, at time.Time, n int, q listQuery, members []*roaring.Bitmap) error {
	var pos online.Position
	if q.cursor != nil {
		if q.cursor.Shards != n {
			return httpserver.BadRequest("cursor", fmt.Sprintf("belongs to a state of %d shards, which now has %d; start the walk again", q.cursor.Shards, n))
		}
		pos = q.cursor.Pos
	}
	// The walk reads one shard after another: one read slot.
	r, ctx, _, done, final, err := a.atReader(c, at, n, 1)
	if err != nil {
		return err
	}
	defer done()
	res := onlineList{Users: []onlineUser{}, At: &at, Final: &final}
	for pos.Shard < n && len(res.Users) < q.limit {
		if members != nil && members[pos.Shard].IsEmpty() {
			pos = online.Position{Shard: pos.Shard + 1}
			continue
		}
		st, err := r.StateAt(ctx, int32(pos.Shard), at)
		if err != nil {
			return a.atErr(err)
		}
		listed := roaring.New()
		for _, s := range q.statuses {
			switch s {
			case presence.Online:
				listed.Or(st.Online)
			case presence.Idle:
				listed.Or(st.Idle)
			case presence.Invisible:
				listed.Or(st.Invisible)
			}
		}
		if members != nil {
			listed.And(members[pos.Shard])
		}
		it := listed.Iterator()
		it.AdvanceIfNeeded(pos.From)
		var page []uint32
		for it.HasNext() && len(res.Users)+len(page) < q.limit {
			page = append(page, it.Next())
		}
		names, err := r.UserNames(ctx, int32(pos.Shard), page)
		if err != nil {
			return a.atErr(err)
		}
		for _, idx := range page {
			id, ok := names[idx]
			if !ok {
				a.logger.Warn("point in time: an index has no user", "shard", pos.Shard, "index", idx)
				continue
			}
			res.Users = append(res.Users, onlineUser{UserID: id, Status: st.Status(idx).String()})
		}
		if it.HasNext() {
			pos.From = it.PeekNext()
		} else {
			pos = online.Position{Shard: pos.Shard + 1}
		}
	}
	if pos.Shard < n {
		s := a.cursors.Sign(online.Cursor{Shards: n, Pos: pos}.Encode())
		res.NextCursor = &s
	}
	return httpserver.JSON(c, http.StatusOK, res)
}
