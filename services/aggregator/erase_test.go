package main

import (
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/dedupe"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

func eraseRec(off int64, user string, sec int) record {
	at := base.Add(time.Duration(sec) * time.Second)
	return record{offset: off, event: presence.Event{ID: "x" + user, UserID: user, Kind: presence.KindErase,
		DeviceID: presence.AllDevices, OccurredAt: at, ReceivedAt: at, Source: presence.SourceSystem}}
}

// An erasure removes the user from the status bitmaps and every group, deletes their
// state and index entry with the window, and emits a change to offline with cause
// erase. Their events dated at or before it that come later are dropped; one dated
// after registers a new user with a new index. Others are untouched.
func TestFoldErasesAUser(t *testing.T) {
	st := newShard()
	st.tombstones = dedupe.NewWindow(10 * time.Minute)
	users := map[string]*presence.User{}
	none := func(*presence.Event) bool { return false }
	w, _ := fold(st, []record{
		rec(10, "a1", "alice", presence.KindStatus, presence.Online, "phone", 1),
		rec(11, "b1", "bob", presence.KindStatus, presence.Online, "phone", 1),
		member(12, "alice", "team", false),
		member(13, "bob", "team", false),
	}, users, none)
	st.bitmaps, st.next = w.Bitmaps, w.Next
	st.staged.commit()
	alice := users["alice"].Index

	late := rec(16, "a2", "alice", presence.KindStatus, presence.Online, "laptop", 5) // dated before the erasure
	late.event.ReceivedAt = base.Add(20 * time.Second)
	fresh := rec(17, "a3", "alice", presence.KindStatus, presence.Idle, "phone", 30) // after it
	fresh.event.ReceivedAt = base.Add(30 * time.Second)
	w, stats := fold(st, []record{eraseRec(15, "alice", 10), late, fresh}, users, none)
	if stats.erased != 1 || stats.inFlight != 1 || stats.applied != 1 {
		t.Errorf("stats = %+v; want 1 erased, 1 in flight, 1 applied", stats)
	}
	if len(w.Erased) != 1 || w.Erased[0].UserID != "alice" || w.Erased[0].Index != alice {
		t.Fatalf("Erased = %+v", w.Erased)
	}
	if w.Bitmaps[0].Contains(alice) || !w.Bitmaps[0].Contains(users["bob"].Index) {
		t.Errorf("online bitmap %v: alice's old index must be gone, bob's kept", w.Bitmaps[0])
	}
	if u := users["alice"]; u == nil || u.Index == alice || u.Status != presence.Idle || !w.Bitmaps[1].Contains(u.Index) {
		t.Errorf("alice after the erasure = %+v; want a new user, idle, with a new index", u)
	}
	if len(w.NewIDs) != 1 || w.NewIDs[0].Index == alice {
		t.Errorf("NewIDs = %v; want alice's new index only", w.NewIDs)
	}
	g := w.Groups["team"]
	if g == nil || g.Members.Contains(alice) || !g.Members.Contains(users["bob"].Index) || g.Counts[0] != 1 {
		t.Errorf("team = %+v; want bob alone, 1 online", g)
	}
	c := w.Outbox.Changes[0]
	if c.GetCause() != pulsev1.Cause_CAUSE_ERASE || c.GetPrevious() != pulsev1.Status_STATUS_ONLINE ||
		c.GetCurrent() != pulsev1.Status_STATUS_OFFLINE || c.GetUserIndex() != alice || c.GetChangedAtUs() != presence.Micros(base.Add(10*time.Second)) {
		t.Errorf("erasure change = %v", c)
	}
	// An erasure of a user Pulse does not hold changes nothing and emits nothing.
	w, stats = fold(st, []record{eraseRec(18, "nobody", 40)}, users, none)
	if len(w.Erased) != 0 || len(w.Outbox.Changes) != 0 || stats.erased != 0 {
		t.Errorf("erasing nobody = %+v, %+v", w.Erased, stats)
	}
	_ = statestore.Tracked
}
