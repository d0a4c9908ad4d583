package statestore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
)

// A window's groups are written with it and declared by it: each group's bitmap and
// its counts in the group index, which LoadShard, GroupCounts, LoadGroupBitmaps,
// LoadBitmapsIn, IsMember and UserGroups read back; a group left with no member is
// deleted.
func TestWindowWritesGroups(t *testing.T) {
	s := readStore(t)
	ctx := context.Background()
	w := newWriter(t, s, 1, 1)
	// user-i's status is events' i%5: online, idle, invisible, offline, online.
	win := w.window(0, events(10, time.Date(2026, 11, 26, 7, 0, 0, 0, time.UTC)))
	win.Groups = map[string]*GroupShard{
		"team-a": {Members: roaring.BitmapOf(0, 1, 2, 3, 4, 5), Counts: [3]uint64{2, 2, 1}, MembersDirty: true},
		"chan:x": {Members: roaring.BitmapOf(9), Counts: [3]uint64{0, 0, 0}, MembersDirty: true},
	}
	keys, _, err := s.windowCall(win, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.WriteWindow(ctx, win); err != nil || !ok {
		t.Fatalf("WriteWindow = %v, %v", ok, err)
	}
	written := slices.Sorted(maps.Keys(keysUnder(t, s)))
	written = slices.DeleteFunc(written, func(k string) bool { return k == s.keys.Shards() || k == s.keys.Buckets() })
	if declared := slices.Sorted(slices.Values(keys)); !slices.Equal(written, declared) {
		t.Fatalf("keys written %v\nkeys declared %v", written, declared)
	}

	counts, err := s.GroupCounts(ctx, 1, "team-a")
	if err != nil || counts[0] != (Counts{Registered: 6, Online: 2, Idle: 2, Invisible: 1}) {
		t.Fatalf("GroupCounts(team-a) = %+v, %v", counts, err)
	}
	if counts, err := s.GroupCounts(ctx, 1, "nobody"); err != nil || counts[0] != (Counts{}) {
		t.Fatalf("GroupCounts(nobody) = %+v, %v; want zero", counts, err)
	}
	bms, err := s.LoadBitmapsIn(ctx, []int{0}, Tracked[:], "team-a")
	if err != nil {
		t.Fatal(err)
	}
	// Online users 0, 4, 5, 9 (i%5 in {0, 4}); of team-a: 0, 4, 5.
	if got := bms[0][0].ToArray(); !slices.Equal(got, []uint32{0, 4, 5}) {
		t.Errorf("online of team-a = %v, want [0 4 5]", got)
	}
	for id, want := range map[string]bool{"user-3": true, "user-9": false, "stranger": false} {
		if got, err := s.IsMember(ctx, 1, "team-a", id); err != nil || got != want {
			t.Errorf("IsMember(team-a, %s) = %v, %v; want %v", id, got, err, want)
		}
	}
	for index, want := range map[uint32][]string{3: {"team-a"}, 9: {"chan:x"}, 7: {}, 4096: {}} {
		if got, err := s.UserGroups(ctx, 0, index); err != nil || !slices.Equal(got, want) {
			t.Errorf("UserGroups(0, %d) = %q, %v; want %q", index, got, err, want)
		}
	}
	loaded, err := s.LoadShard(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded.Groups) != 2 || !loaded.Groups["team-a"].Members.Equals(roaring.BitmapOf(0, 1, 2, 3, 4, 5)) || !loaded.Groups["chan:x"].Members.Equals(roaring.BitmapOf(9)) {
		t.Fatalf("LoadShard groups = %v", loaded.Groups)
	}

	// chan:x empties, team-a's counts change but not its members.
	win = w.window(0, events(1, time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)))
	win.Groups = map[string]*GroupShard{
		"chan:x": {Members: roaring.New(), MembersDirty: true},
		"team-a": {Members: roaring.BitmapOf(0, 1, 2, 3, 4, 5), Counts: [3]uint64{3, 1, 1}},
	}
	if ok, err := s.WriteWindow(ctx, win); err != nil || !ok {
		t.Fatalf("WriteWindow = %v, %v", ok, err)
	}
	if _, ok := keysUnder(t, s)[s.keys.GroupBitmap(0, "chan:x")]; ok {
		t.Error("the bitmap of an emptied group is kept")
	}
	if got, err := s.UserGroups(ctx, 0, 9); err != nil || len(got) != 0 {
		t.Errorf("UserGroups(0, 9) after chan:x emptied = %q, %v; want none", got, err)
	}
	loaded, err = s.LoadShard(ctx, 0)
	if err != nil || len(loaded.Groups) != 1 || loaded.Groups["team-a"] == nil {
		t.Fatalf("LoadShard groups = %v, %v; want team-a alone", loaded.Groups, err)
	}
	if counts, err := s.GroupCounts(ctx, 1, "team-a"); err != nil || counts[0] != (Counts{Registered: 6, Online: 3, Idle: 1, Invisible: 1}) {
		t.Fatalf("GroupCounts(team-a) = %+v, %v", counts, err)
	}
}

// UserGroups reads a shard's group bitmaps a batch at a time: a user in groups on
// both sides of a batch's edge is found in each, in name order, and nobody else.
func TestUserGroupsReadsEveryBatch(t *testing.T) {
	s := readStore(t)
	ctx := context.Background()
	w := newWriter(t, s, 1, 1)
	win := w.window(0, events(3, time.Date(2026, 11, 26, 7, 0, 0, 0, time.UTC)))
	win.Groups = map[string]*GroupShard{}
	var want []string
	for i := range 2*userGroupsBatch + 3 {
		g := fmt.Sprintf("room-%04d", i)
		members := roaring.BitmapOf(0)
		if i%userGroupsBatch == userGroupsBatch-1 || i%userGroupsBatch == 0 {
			members.Add(2)
			want = append(want, g)
		}
		win.Groups[g] = &GroupShard{Members: members, MembersDirty: true}
	}
	if ok, err := s.WriteWindow(ctx, win); err != nil || !ok {
		t.Fatalf("WriteWindow = %v, %v", ok, err)
	}
	if got, err := s.UserGroups(ctx, 0, 2); err != nil || !slices.Equal(got, want) {
		t.Errorf("UserGroups(0, 2) = %q, %v; want %q", got, err, want)
	}
	if got, err := s.UserGroups(ctx, 0, 1); err != nil || len(got) != 0 {
		t.Errorf("UserGroups(0, 1) = %q, %v; want none", got, err)
	}
	if got, err := s.UserGroups(ctx, 0, 0); err != nil || len(got) != 2*userGroupsBatch+3 {
		t.Errorf("UserGroups(0, 0) = %d groups, %v; want all %d", len(got), err, 2*userGroupsBatch+3)
	}
}
