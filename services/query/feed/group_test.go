package feed

import (
	"slices"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

// membership makes the user's next membership change of group, as the aggregator
// would: the user's status on both sides, groups the user's groups after it.
func (h *harness) membership(user, group string, left bool, groups ...string) *pulsev1.Change {
	h.mu.Lock()
	st := h.status[user]
	h.mu.Unlock()
	if st == presence.StatusUnknown {
		st = presence.Offline
	}
	c := h.change(user, st)
	c.Previous, c.Current = presence.StatusToPB(st), presence.StatusToPB(st)
	c.GroupId, c.Left, c.Groups, c.DeviceId = group, left, groups, presence.AllDevices
	return c
}

// with is c carrying the user's groups.
func with(c *pulsev1.Change, groups ...string) *pulsev1.Change {
	c.Groups = groups
	return c
}

// A group's watcher gets a snapshot of the members, then the changes of the users who
// are members when they change (by the groups on the change) and the group's own
// membership changes; watchers by id and the firehose get no membership change, and a
// user watched both by id and through the group is sent a change once.
func TestGroupWatch(t *testing.T) {
	h := newHarness(t, 3, nil)
	h.state.groups = map[string][]string{"team": {"ann", "bob"}}
	h.state.set("ann", presence.Online, 0, time.Now())
	h.state.set("bob", presence.Invisible, 0, time.Now())
	h.status["ann"], h.status["bob"] = presence.Online, presence.Invisible
	h.start()

	g := h.open(Options{Group: "team", UserIDs: []string{"ann"}})
	snap := read(t, g, 1)[0]
	if snap.Type != TypeSnapshot || len(snap.Statuses) != 2 || snap.Statuses[0].UserID != "ann" || snap.Statuses[0].Status != "online" ||
		snap.Statuses[1].UserID != "bob" || snap.Statuses[1].Status != "offline" {
		t.Fatalf("snapshot = %+v", snap)
	}
	byID := h.open(Options{UserIDs: []string{"cat"}})
	read(t, byID, 1)
	fire := h.open(Options{Firehose: true, Operator: true})
	read(t, fire, 1)

	h.produce(
		with(h.change("ann", presence.Idle), "team"),   // a member, watched by id too: once
		with(h.change("dan", presence.Online), "solo"), // not a member
		h.membership("cat", "team", false, "team"),     // cat joins
		with(h.change("cat", presence.Online), "team"),
		h.membership("ann", "team", true),              // ann leaves: still watched by id
		with(h.change("bob", presence.Online), "team"), // out of invisible
		h.membership("dan", "other", false, "solo", "other"),
	)
	got := read(t, g, 5)
	if want := []string{"ann:online>idle", "member", "cat:offline>online", "member", "bob:offline>online"}; !slices.Equal(shorts(got), want) {
		t.Fatalf("group watcher got %v, want %v", shorts(got), want)
	}
	if got[1].UserID != "cat" || got[3].UserID != "ann" {
		t.Errorf("membership messages are of %s and %s, want cat and ann", got[1].UserID, got[3].UserID)
	}
	quiet(t, g, 200*time.Millisecond)
	if got := shorts(read(t, byID, 1)); !slices.Equal(got, []string{"cat:offline>online"}) {
		t.Errorf("watcher of cat got %v", got)
	}
	quiet(t, byID, 100*time.Millisecond)
	if got := shorts(read(t, fire, 4)); !slices.Equal(got, []string{"ann:online>idle", "dan:offline>online", "cat:offline>online", "bob:invisible>online"}) {
		t.Errorf("firehose got %v", got)
	}
	quiet(t, fire, 100*time.Millisecond)
}

// A group larger than a connection may watch ends the session when its snapshot is
// taken.
func TestGroupWatchTooLarge(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.MaxUsers = 1 })
	h.state.groups = map[string][]string{"big": {"a", "b"}}
	h.start()
	s := h.open(Options{Group: "big"})
	if _, err := next(t, s, 5*time.Second); err != ErrGroupTooLarge {
		t.Fatalf("Next = %v, want ErrGroupTooLarge", err)
	}
}
