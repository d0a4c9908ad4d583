package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/labstack/echo/v4"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
)

// A group's past (docs/analytics.md): the group's members NOW — its member bitmaps in
// Redis, of the same dense indexes history keeps — applied to history's data, shard by
// shard. Membership has no history: a user who joined today counts in yesterday's
// numbers, one who left does not. The answers are those of the whole service's
// routes restricted to the members, with the same rules (finality, views, errors).

// groupMembersNow is group g's members in each of n shards, out[s] for shard s, read
// as one state: a shard Redis lost or rebuilt between the reads is a 503, not a
// group that looks smaller.
func (a *api) groupMembersNow(c echo.Context, g string, n int) ([]*roaring.Bitmap, error) {
	ctx, cancel := a.ctx(c)
	defer cancel()
	guard, err := a.store.GuardShards(ctx, n)
	if err != nil {
		return nil, a.readErr(err)
	}
	shards := make([]int, n)
	for s := range shards {
		shards[s] = s
	}
	members, err := a.store.LoadGroupBitmaps(ctx, shards, g)
	if err != nil {
		return nil, a.readErr(err)
	}
	if err := a.store.Unchanged(ctx, guard); err != nil {
		return nil, a.readErr(err)
	}
	return members, nil
}

// cardinality is the number of indexes in bms.
func cardinality(bms []*roaring.Bitmap) uint64 {
	var n uint64
	for _, bm := range bms {
		n += bm.GetCardinality()
	}
	return n
}

// groupPastCountView is GET /v1/groups/{groupId}/online/count?at=: the group's
// current members by their status at the instant At.
type groupPastCountView struct {
	GroupID  string            `json:"groupId"`
	Total    uint64            `json:"total"`
	ByStatus map[string]uint64 `json:"byStatus"`
	Members  uint64            `json:"members"`
	At       time.Time         `json:"at"`
	// Final is false while At is inside history's lateness (see atReader).
	Final bool `json:"final"`
}

// pastGroupCount is GET /v1/groups/{groupId}/online/count?at=.
func (h *groups) pastGroupCount(c echo.Context, g string, at time.Time) error {
	n, err := h.shardCount(c)
	if err != nil {
		return err
	}
	members, err := h.groupMembersNow(c, g, n)
	if err != nil {
		return err
	}
	counts, final, err := h.countsAt(c, at, n, members)
	if err != nil {
		return err
	}
	v := groupPastCount(g, at, cardinality(members), counts, auth.OperatorView(c))
	v.Final = final
	return httpserver.JSON(c, http.StatusOK, v)
}

// groupPastCount is the answer for m members of which counts were online, idle and
// invisible at at: invisible members count as offline to readers, as in the live count.
func groupPastCount(g string, at time.Time, m uint64, counts [3]uint64, operator bool) groupPastCountView {
	on, idle, inv := counts[0], counts[1], counts[2]
	v := groupPastCountView{GroupID: g, Members: m, At: at}
	if operator {
		v.Total = on + idle + inv
		v.ByStatus = map[string]uint64{"online": on, "idle": idle, "invisible": inv, "offline": m - on - idle - inv}
	} else {
		v.Total = on + idle
		v.ByStatus = map[string]uint64{"online": on, "idle": idle, "offline": m - on - idle}
	}
	return v
}

// pastGroupList is GET /v1/groups/{groupId}/online?at=: the listing at at of the group's
// current members.
func (h *groups) pastGroupList(c echo.Context, g string, at time.Time, n int, q listQuery) error {
	members, err := h.groupMembersNow(c, g, n)
	if err != nil {
		return err
	}
	return h.pastList(c, at, n, q, members)
}

// groupParam reads the stats routes' group=: "" when absent.
func groupParam(q url.Values) (string, error) {
	g := q.Get("group")
	if !q.Has("group") {
		return "", nil
	}
	if err := presence.ValidateGroupID(g); err != nil {
		return "", httpserver.BadRequest("group", err.Error())
	}
	return g, nil
}

// statsGroup is the group a stats request names and its members now in every shard;
// nil members without group=.
func (h *historyHandlers) statsGroup(c echo.Context, g string) (members []*roaring.Bitmap, ans groupAnswer, err error) {
	if g == "" {
		return nil, ans, nil
	}
	ctx, cancel := h.ctx(c)
	defer cancel()
	n, err := h.store.Shards(ctx)
	if err != nil {
		return nil, ans, h.readErr(err)
	}
	if n == 0 {
		return nil, ans, httpserver.Unavailable("no shard layout registered yet", time.Second)
	}
	if members, err = h.groupMembersNow(c, g, n); err != nil {
		return nil, ans, err
	}
	m := cardinality(members)
	return members, groupAnswer{GroupID: g, Members: &m}, nil
}

// Concurrency of a group (GET /v1/stats/concurrency?group=). The concurrency table
// holds counts per shard, which no group can be cut out of, so a group's points are
// computed from the point-in-time rows instead: per shard holding a member, the
// members' statuses just before the range's first minute (a snapshot and its changes,
// as at= reads them), then the shard's changes of the members over the range, which
// give the members online at the end of every second — the same per-second counts
// the table holds for everyone (internal/domain/rollup, Concurrency). Only minutes
// history holds final are answered: a minute's point is never revised.

// maxGroupConcurrencySpan bounds a group's range: it reads every minute partition of
// shard_changes of each shard holding a member (1,440 a day).
const maxGroupConcurrencySpan = day

// minuteSums is the counts of one minute: online at the end of each second, and the
// statuses at its last instant (online, idle, invisible).
type minuteSums struct {
	online [60]int64
	close  [3]int64
}

// add adds o's counts to m's.
func (m *minuteSums) add(o *minuteSums) {
	for s := range m.online {
		m.online[s] += o.online[s]
	}
	for k := range m.close {
		m.close[k] += o.close[k]
	}
}

// memberSeconds folds one shard's changes, in time order, into the per-second counts
// of a group's members over the minutes from m0 on.
type memberSeconds struct {
	members *roaring.Bitmap
	// st is the members' statuses as of the changes folded so far; counts its sizes.
	st     *historystore.ShardState
	counts [3]int64
	m0     int64 // µs
	out    []minuteSums
	// next is the first second, from m0, whose end has not been counted yet.
	next int
}

// newMemberSeconds starts from start, the shard's statuses just before m0 (every
// change dated before it applied), over the given number of minutes. start is
// restricted to members in place.
func newMemberSeconds(start *historystore.ShardState, members *roaring.Bitmap, m0 time.Time, minutes int) *memberSeconds {
	start.Restrict(members)
	f := &memberSeconds{members: members, st: start, m0: m0.UnixMicro(), out: make([]minuteSums, minutes)}
	f.counts = [3]int64{int64(start.Online.GetCardinality()), int64(start.Idle.GetCardinality()), int64(start.Invisible.GetCardinality())}
	return f
}

// slot is the position of st in counts; -1 for offline.
func slot(st presence.Status) int {
	switch st {
	case presence.Online:
		return 0
	case presence.Idle:
		return 1
	case presence.Invisible:
		return 2
	}
	return -1
}

// add folds c, which is dated at or after the previous change and within the range;
// a change of a user who is not a member is skipped.
func (f *memberSeconds) add(c historystore.IndexChange) {
	if !f.members.Contains(c.Index) {
		return
	}
	// A change counts from the end of its own second on: the seconds before it end
	// with the counts as they are.
	f.countUpTo(int((c.AtUs - f.m0) / int64(time.Second/time.Microsecond)))
	if k := slot(f.st.Status(c.Index)); k >= 0 {
		f.counts[k]--
	}
	if k := slot(c.Status); k >= 0 {
		f.counts[k]++
	}
	f.st.Apply(c)
}

// countUpTo records the current counts as those at the end of every second from next
// up to sec, sec excluded.
func (f *memberSeconds) countUpTo(sec int) {
	for sec = min(sec, 60*len(f.out)); f.next < sec; f.next++ {
		m, s := &f.out[f.next/60], f.next%60
		m.online[s] = f.counts[0]
		if s == 59 {
			m.close = f.counts
		}
	}
}

// finish is the minutes' counts.
func (f *memberSeconds) finish() []minuteSums {
	f.countUpTo(60 * len(f.out))
	return f.out
}

// minuteRange is the minutes a group's concurrency answers: those starting in
// [from, to) that ended by final, as the first minute and their number.
func minuteRange(from, to, final time.Time) (m0 time.Time, minutes int) {
	m0 = from.Truncate(time.Minute)
	if m0.Before(from) {
		m0 = m0.Add(time.Minute)
	}
	end := to.Truncate(time.Minute)
	if end.Before(to) {
		end = end.Add(time.Minute)
	}
	if f := final.Truncate(time.Minute); f.Before(end) {
		end = f
	}
	if !m0.Before(end) {
		return m0, 0
	}
	return m0, int(end.Sub(m0) / time.Minute)
}

// groupConcurrency is GET /v1/stats/concurrency?group=.
func (h *historyHandlers) groupConcurrency(c echo.Context, g string, st step) error {
	from, to, err := parseRange(c.QueryParams(), h.now(), time.Hour, maxGroupConcurrencySpan)
	if err != nil {
		return err
	}
	if oldest := h.now().Add(-h.atRetention); from.Before(oldest) {
		return httpserver.BadRequest("from", fmt.Sprintf("%s is older than the %v history keeps point-in-time rows (a group's concurrency is computed from them)",
			from.Format(time.RFC3339Nano), h.atRetention))
	}
	members, group, err := h.statsGroup(c, g)
	if err != nil {
		return err
	}
	shards := shardsToRead(len(members), members)
	if err := h.limits.charge(c, groupConcurrencyCost(from, to, len(shards))); err != nil {
		return err
	}
	s, ctx, ls, done, err := h.historyReads(c, len(shards))
	if err != nil {
		return err
	}
	defer done()
	final, err := s.FinalThrough(ctx, int32(len(members)))
	if err != nil {
		return h.cassErr(err)
	}
	m0, minutes := minuteRange(from, to, final)
	sums := make([]minuteSums, minutes)
	if minutes > 0 {
		var mu sync.Mutex
		err = ls.each(ctx, len(shards), func(ctx context.Context, i int) error {
			out, err := shardMemberSeconds(ctx, s, int32(shards[i]), members[shards[i]], m0, minutes)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			for k := range sums {
				sums[k].add(&out[k])
			}
			return nil
		})
		if errors.Is(err, historystore.ErrNoSnapshot) {
			return &httpserver.Error{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf(
				"history holds no state of %s, the range's first minute: it is from before history began, or history was stopped then; ask from a later instant",
				m0.Format(time.RFC3339))}
		}
		if err != nil {
			return h.atErr(err)
		}
	}
	ans := concurrencyAnswer{From: from, To: to, Step: string(st), Points: groupPoints(st, m0, sums, auth.OperatorView(c)), GroupAnswer: group}
	if !final.IsZero() {
		ans.FinalThrough = &final
	}
	return httpserver.JSON(c, http.StatusOK, ans)
}

// shardMemberSeconds is the per-second counts of members in shard over the minutes
// from m0 on.
func shardMemberSeconds(ctx context.Context, s *historystore.Store, shard int32, members *roaring.Bitmap, m0 time.Time, minutes int) ([]minuteSums, error) {
	start, err := s.StateAt(ctx, shard, m0.Add(-time.Microsecond))
	if err != nil {
		return nil, err
	}
	f := newMemberSeconds(start, members, m0, minutes)
	err = s.Changes(ctx, shard, m0, m0.Add(time.Duration(minutes)*time.Minute), func(c historystore.IndexChange) bool {
		f.add(c)
		return true
	})
	if err != nil {
		return nil, err
	}
	return f.finish(), nil
}

// groupPoints folds the minutes from m0 into points of step st, as the whole
// service's concurrency does.
func groupPoints(st step, m0 time.Time, sums []minuteSums, operator bool) []concurrencyPoint {
	fold := concurrencyFold{step: st}
	for i := range sums {
		m := &sums[i]
		online := make([]int, 60)
		for s, n := range m.online {
			online[s] = int(n)
		}
		fold.add(historystore.MinuteCounts{Minute: m0.Add(time.Duration(i) * time.Minute), Online: online,
			CloseOnline: int(m.close[0]), CloseIdle: int(m.close[1]), CloseInvisible: int(m.close[2])})
	}
	points := fold.finish()
	if !operator {
		for i := range points {
			points[i].CloseInvisible = nil
		}
	}
	return points
}
