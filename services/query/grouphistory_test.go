package main

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/pulse-presence/pulse/internal/stores/historystore"
)

// The count of a group at T: the members by status, invisible ones offline to readers.
func TestGroupPastCountViews(t *testing.T) {
	st := &historystore.ShardState{Online: roaring.BitmapOf(1, 2, 3, 9), Idle: roaring.BitmapOf(4, 5), Invisible: roaring.BitmapOf(6, 7)}
	members := roaring.BitmapOf(1, 2, 4, 6, 8, 10)
	counts := stateCounts(st, members)
	if counts != [3]uint64{2, 1, 1} {
		t.Fatalf("counts of members %v = %v, want 2 online, 1 idle, 1 invisible", members.ToArray(), counts)
	}
	if all := stateCounts(st, nil); all != [3]uint64{4, 2, 2} {
		t.Fatalf("counts of everyone = %v", all)
	}
	at := time.Date(2026, 11, 22, 20, 13, 7, 0, time.UTC)
	for _, c := range []struct {
		operator bool
		want     string
	}{
		{false, "total=3 online=2 idle=1 invisible=0 offline=3 members=6"},
		{true, "total=4 online=2 idle=1 invisible=1 offline=2 members=6"},
	} {
		v := groupPastCount("team", at, members.GetCardinality(), counts, c.operator)
		_, hasInv := v.ByStatus["invisible"]
		got := fmt.Sprintf("total=%d online=%d idle=%d invisible=%d offline=%d members=%d", v.Total, v.ByStatus["online"], v.ByStatus["idle"], v.ByStatus["invisible"], v.ByStatus["offline"], v.Members)
		if got != c.want || hasInv != c.operator || v.GroupID != "team" || !v.At.Equal(at) {
			t.Errorf("operator %v: %s (%+v), want %s", c.operator, got, v, c.want)
		}
	}
}

// shardsToRead skips the shards where the group has no member.
func TestShardsToRead(t *testing.T) {
	members := []*roaring.Bitmap{roaring.New(), roaring.BitmapOf(3), roaring.New(), roaring.BitmapOf(0, 1)}
	if got := shardsToRead(4, members); !slices.Equal(got, []int{1, 3}) {
		t.Errorf("shards with members = %v, want [1 3]", got)
	}
	if got := shardsToRead(3, nil); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("without a group = %v, want every shard", got)
	}
}
