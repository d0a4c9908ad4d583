package main

import (
	"slices"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
)

// Users restored from history take the next indexes in the order given, join the
// bitmap of their status, keep history's times, and hold one device while present:
// the one a timeout can end OfflineAfter after their last-seen time.
func TestSeedWindow(t *testing.T) {
	st := newShard()
	st.next = 7
	st.bitmaps[trackedIndex(presence.Online)].Add(2)
	seen := base.Add(-time.Hour)
	states := map[string]historystore.LastKnown{
		"ann": {Status: presence.Online, LastSeen: seen, LastActive: seen, LastUpdated: seen.Add(-time.Minute)},
		"bea": {Status: presence.Idle, LastSeen: seen},
		"cat": {Status: presence.Offline, LastSeen: seen},
		"dan": {Status: presence.Invisible, LastSeen: seen},
	}
	w := seedWindow(st, 41, []string{"ann", "bea", "cat", "dan"}, states, nil)
	if w.LastOffset != 41 || w.Next != 11 || w.Outbox != nil {
		t.Fatalf("window at %d, next %d, outbox %v; want 41, 11, none", w.LastOffset, w.Next, w.Outbox)
	}
	for i, n := range w.NewIDs {
		if want := uint32(7 + i); n.Index != want || w.Users[n.UserID].Index != want {
			t.Fatalf("new id %d = %+v, user index %d; want index %d", i, n, w.Users[n.UserID].Index, want)
		}
	}
	want := map[presence.Status][]uint32{presence.Online: {2, 7}, presence.Idle: {8}, presence.Invisible: {10}}
	for s, idx := range want {
		i := trackedIndex(s)
		if got := w.Bitmaps[i].ToArray(); !w.Dirty[i] || !slices.Equal(got, idx) {
			t.Fatalf("%s bitmap %v (dirty %v), want %v", s, got, w.Dirty[i], idx)
		}
	}
	if st.bitmaps[trackedIndex(presence.Online)].GetCardinality() != 1 {
		t.Fatal("seedWindow changed the worker's bitmaps before the write")
	}
	// Public times are the user's own, but for an invisible user, of whom readers who
	// are not operators are told nothing: history keeps no public times.
	devices := map[string][]presence.Device{
		"ann": {{ID: HistoryDevice, Status: presence.Online, LastSeen: seen, PublicLastSeen: seen}},
		"bea": {{ID: HistoryDevice, Status: presence.Idle, LastSeen: seen, PublicLastSeen: seen}},
		"cat": nil,
		"dan": {{ID: HistoryDevice, Status: presence.Online, LastSeen: seen, Hidden: true}},
	}
	for id, s := range states {
		u := w.Users[id]
		if u.Status != s.Status || u.Invisible != (s.Status == presence.Invisible) || !u.LastSeen.Equal(s.LastSeen) ||
			!u.LastActive.Equal(s.LastActive) || !u.LastUpdated.Equal(s.LastUpdated) || u.Offset != 41 {
			t.Fatalf("%s restored as %+v from %+v", id, u, s)
		}
		if len(u.Devices) != len(devices[id]) || (len(u.Devices) == 1 && u.Devices[0] != devices[id][0]) {
			t.Fatalf("%s devices %+v, want %+v", id, u.Devices, devices[id])
		}
		public := presence.Public{LastUpdated: s.LastUpdated, LastActive: s.LastActive, LastSeen: s.LastSeen}
		if s.Status == presence.Invisible {
			public = presence.Public{}
		}
		if u.Public != public {
			t.Fatalf("%s public times %+v, want %+v", id, u.Public, public)
		}
	}
}

// A custom status comes back from history with the user: in full for a user the log
// holds no record of, and alone (a user otherwise new) for one the log will fold.
func TestSeedWindowRestoresCustomStatus(t *testing.T) {
	st := newShard()
	seen := base.Add(-time.Hour)
	setAt := seen.Add(-time.Minute + 3*time.Microsecond)
	meeting := presence.CustomStatus{Text: "In a meeting", Emoji: "📅", Until: base.Add(time.Hour + 7*time.Microsecond)}
	states := map[string]historystore.LastKnown{
		"ann": {Status: presence.Online, LastSeen: seen, Custom: meeting, CustomSetAt: setAt},
		"bea": {Status: presence.Idle, LastSeen: seen, Custom: meeting, CustomSetAt: setAt},
	}
	w := seedWindow(st, 41, []string{"ann", "bea"}, states, map[string]struct{}{"bea": {}})
	ann, bea := w.Users["ann"], w.Users["bea"]
	if ann.Status != presence.Online || ann.Custom != meeting || !ann.CustomSetAt.Equal(setAt) {
		t.Fatalf("ann restored as %+v, want online with the custom status set at %v", ann, setAt)
	}
	want := presence.NewUser(1)
	want.Offset, want.Custom, want.CustomSetAt = 41, meeting, setAt
	if bea.Status != presence.Offline || len(bea.Devices) != 0 || !bea.LastSeen.IsZero() || bea.Index != 1 ||
		bea.Custom != meeting || !bea.CustomSetAt.Equal(setAt) || bea.Offset != 41 {
		t.Fatalf("bea, in the log, restored as %+v; want %+v: her custom status alone", bea, want)
	}
	if got := w.Bitmaps[trackedIndex(presence.Idle)].GetCardinality(); got != 0 {
		t.Fatalf("the idle bitmap holds %d users; bea's status is the log's to fold", got)
	}
}
