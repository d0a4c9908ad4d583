package main

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

func member(off int64, user, group string, leave bool) record {
	return record{offset: off, event: presence.Event{ID: fmt.Sprint("m", off), UserID: user, Kind: presence.KindMember,
		DeviceID: presence.AllDevices, ReceivedAt: base, Source: presence.SourceAPI, GroupID: group, Leave: leave}}
}

// Windows of random joins, leaves and status changes, each committed as the worker
// commits a written window: every group's members and counts equal those computed
// from the model of memberships and statuses, and a group left by everyone is deleted.
func TestFoldGroupsMatchAModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 1))
	st := newShard()
	users := map[string]*presence.User{}
	members := map[string]map[string]bool{}
	status := map[string]presence.Status{}
	groups := []string{"a", "b", "c"}
	statuses := []presence.Status{presence.Online, presence.Idle, presence.Offline, presence.Invisible}
	off, sec := int64(10), 0
	for window := range 40 {
		var recs []record
		for range 30 {
			u := fmt.Sprint("u", rng.IntN(25))
			off++
			if rng.IntN(2) == 0 {
				g, leave := groups[rng.IntN(len(groups))], rng.IntN(3) == 0
				recs = append(recs, member(off, u, g, leave))
				if members[g] == nil {
					members[g] = map[string]bool{}
				}
				if leave {
					delete(members[g], u)
				} else {
					members[g][u] = true
				}
				continue
			}
			sec++
			s := statuses[rng.IntN(len(statuses))]
			recs = append(recs, rec(off, fmt.Sprint("s", off), u, presence.KindStatus, s, "phone", sec))
			status[u] = s
		}
		w, _ := fold(st, recs, users, func(*presence.Event) bool { return false })
		st.next, st.bitmaps, st.offset = w.Next, w.Bitmaps, w.LastOffset
		for id, u := range w.Users {
			users[id] = u
		}
		st.staged.commit()

		for _, g := range groups {
			gs := st.groups.groups[g]
			if len(members[g]) == 0 {
				if gs != nil {
					t.Fatalf("window %d: group %s has no member but is kept: %v", window, g, gs.Members)
				}
				continue
			}
			var want [len(statestore.Tracked)]uint64
			for u := range members[g] {
				if !gs.Members.Contains(users[u].Index) {
					t.Fatalf("window %d: %s is a member of %s, its bitmap lacks index %d", window, u, g, users[u].Index)
				}
				if p := statestore.TrackedPos(status[u]); p >= 0 {
					want[p]++
				}
			}
			if gs.Members.GetCardinality() != uint64(len(members[g])) || gs.Counts != want {
				t.Fatalf("window %d: group %s has %d members, counts %v; want %d, %v", window, g, gs.Members.GetCardinality(), gs.Counts, len(members[g]), want)
			}
		}
		// What the worker would load from Redis gives the same counts.
		loaded := map[string]*statestore.GroupShard{}
		for g, gs := range st.groups.groups {
			loaded[g] = &statestore.GroupShard{Members: gs.Members.Clone()}
		}
		again := newShardGroups(loaded, st.bitmaps)
		for g, gs := range st.groups.groups {
			if again.groups[g].Counts != gs.Counts {
				t.Fatalf("window %d: group %s counts %v when loaded, %v when folded", window, g, again.groups[g].Counts, gs.Counts)
			}
		}
	}
}

// A join past presence.MaxGroupsPerUser is refused and counted; a leave of a group the
// user is not in, and a leave by a user never seen, change nothing.
func TestFoldGroupLimits(t *testing.T) {
	st := newShard()
	var recs []record
	for i := range presence.MaxGroupsPerUser + 2 {
		recs = append(recs, member(int64(10+i), "alice", fmt.Sprint("g", i), false))
	}
	recs = append(recs, member(1000, "alice", "nope", true), member(1001, "ghost", "g0", true))
	w, stats := fold(st, recs, map[string]*presence.User{}, func(*presence.Event) bool { return false })
	if stats.groupJoinsRefused != 2 {
		t.Errorf("refused %d joins, want 2", stats.groupJoinsRefused)
	}
	if len(w.Groups) != presence.MaxGroupsPerUser || len(w.NewIDs) != 1 {
		t.Errorf("window writes %d groups and %d new users, want %d and 1 (alice; the ghost leaving registers nobody)", len(w.Groups), len(w.NewIDs), presence.MaxGroupsPerUser)
	}
	if u := w.Users["alice"]; u == nil || u.Status != presence.Offline {
		t.Errorf("alice = %+v, want registered offline", u)
	}
}
