package main

import (
	"net/http"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/labstack/echo/v4"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
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
	counts, err := h.countsAt(c, at, n, members)
	if err != nil {
		return err
	}
	return httpserver.JSON(c, http.StatusOK, groupPastCount(g, at, cardinality(members), counts, auth.OperatorView(c)))
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
