package main

import (
	"slices"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// shardGroups is what a worker keeps of its shard's groups (docs/design.md,
// "Groups"): each group's members and counts in the shard, and each member's groups,
// so that a change of a user's status updates the counts of its groups without
// looking at the others.
type shardGroups struct {
	groups   map[string]*statestore.GroupShard
	memberOf map[uint32][]string
}

// newShardGroups indexes groups as LoadShard read them, deriving their counts from
// the status bitmaps: Redis' stored counts are the readers', the bitmaps the truth.
func newShardGroups(groups map[string]*statestore.GroupShard, bitmaps [len(statestore.Tracked)]*roaring.Bitmap) shardGroups {
	g := shardGroups{groups: make(map[string]*statestore.GroupShard, len(groups)), memberOf: make(map[uint32][]string)}
	for id, gs := range groups {
		for i, bm := range bitmaps {
			if bm != nil {
				gs.Counts[i] = gs.Members.AndCardinality(bm)
			}
		}
		g.groups[id] = gs
		it := gs.Members.Iterator()
		for it.HasNext() {
			x := it.Next()
			g.memberOf[x] = append(g.memberOf[x], id)
		}
	}
	return g
}

// groupFold stages one window's group changes over the shard's: the worker's
// shardGroups change only when the window is written (commit).
type groupFold struct {
	base *shardGroups
	// touched are the window's copies of the groups it changed.
	touched map[string]*statestore.GroupShard
	// memberOf holds the member lists the window changed.
	memberOf map[uint32][]string
	// refused counts joins past presence.MaxGroupsPerUser.
	refused int
}

func newGroupFold(base *shardGroups) *groupFold {
	return &groupFold{base: base, touched: map[string]*statestore.GroupShard{}, memberOf: map[uint32][]string{}}
}

// group is the window's copy of group id, created empty when the shard has none. The
// copy shares the members bitmap until the window changes it (own).
func (f *groupFold) group(id string) *statestore.GroupShard {
	if g, ok := f.touched[id]; ok {
		return g
	}
	g := &statestore.GroupShard{Members: roaring.New(), MembersDirty: true}
	if b, ok := f.base.groups[id]; ok {
		c := *b
		c.MembersDirty = false
		g = &c
	}
	f.touched[id] = g
	return g
}

func (f *groupFold) own(g *statestore.GroupShard) {
	if !g.MembersDirty {
		g.Members = g.Members.Clone()
		g.MembersDirty = true
	}
}

// of is the groups index i is a member of, as of the window so far.
func (f *groupFold) of(i uint32) []string {
	if l, ok := f.memberOf[i]; ok {
		return l
	}
	return f.base.memberOf[i]
}

// apply folds a member event into u's groups and reports whether the membership
// changed: joining a group twice, or leaving one the user is not in, changes nothing,
// and a join past presence.MaxGroupsPerUser is refused (counted in refused).
func (f *groupFold) apply(e *presence.Event, u *presence.User) bool {
	mine := f.of(u.Index)
	at := slices.Index(mine, e.GroupID)
	switch {
	case e.Leave && at >= 0:
		f.memberOf[u.Index] = slices.Delete(slices.Clone(mine), at, at+1)
		g := f.group(e.GroupID)
		f.own(g)
		g.Members.Remove(u.Index)
		if p := statestore.TrackedPos(u.Status); p >= 0 {
			g.Counts[p]--
		}
		return true
	case !e.Leave && at < 0:
		if len(mine) >= presence.MaxGroupsPerUser {
			f.refused++
			return false
		}
		f.memberOf[u.Index] = append(slices.Clip(mine), e.GroupID)
		g := f.group(e.GroupID)
		f.own(g)
		g.Members.Add(u.Index)
		if p := statestore.TrackedPos(u.Status); p >= 0 {
			g.Counts[p]++
		}
		return true
	}
	return false
}

// statusChanged moves index i from status prev to cur in the counts of its groups.
func (f *groupFold) statusChanged(i uint32, prev, cur presence.Status) {
	for _, id := range f.of(i) {
		g := f.group(id)
		if p := statestore.TrackedPos(prev); p >= 0 {
			g.Counts[p]--
		}
		if p := statestore.TrackedPos(cur); p >= 0 {
			g.Counts[p]++
		}
	}
}

// commit makes the window's group changes the shard's, once the window is written.
func (f *groupFold) commit() {
	for id, g := range f.touched {
		g.MembersDirty = false
		if g.Members.IsEmpty() {
			delete(f.base.groups, id)
			continue
		}
		f.base.groups[id] = g
	}
	for i, l := range f.memberOf {
		if len(l) == 0 {
			delete(f.base.memberOf, i)
			continue
		}
		f.base.memberOf[i] = l
	}
}

// forget makes u leave every group it is a member of, as a leave of each would: the
// user is erased (docs/design.md, "Erasure").
func (f *groupFold) forget(u *presence.User) {
	for _, id := range slices.Clone(f.of(u.Index)) {
		f.apply(&presence.Event{GroupID: id, Leave: true}, u)
	}
}
