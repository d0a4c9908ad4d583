package online

import (
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// collect walks shards in order from the position, takes exactly what it wants, and
// says where to go on: never past a user it did not take.
func TestCollect(t *testing.T) {
	bms := func(online, idle []uint32) statestore.ShardBitmaps {
		return statestore.ShardBitmaps{roaring.BitmapOf(online...), roaring.BitmapOf(idle...), nil}
	}
	shards := []int{1, 3}
	loaded := []statestore.ShardBitmaps{bms([]uint32{0, 5, 9}, []uint32{2, 7}), bms([]uint32{4}, nil)}
	type taken struct {
		shard int
		index uint32
	}
	tests := []struct {
		pos  Position
		want int
		got  []taken
		next Position
	}{
		{Position{Shard: 1}, 3, []taken{{1, 0}, {1, 2}, {1, 5}}, Position{1, 6}},
		{Position{Shard: 1, From: 6}, 2, []taken{{1, 7}, {1, 9}}, Position{Shard: 2}},
		{Position{Shard: 1, From: 6}, 10, []taken{{1, 7}, {1, 9}, {3, 4}}, Position{Shard: 4}},
		{Position{Shard: 1, From: 10}, 1, []taken{{3, 4}}, Position{Shard: 4}},
		{Position{Shard: 1}, 6, []taken{{1, 0}, {1, 2}, {1, 5}, {1, 7}, {1, 9}, {3, 4}}, Position{Shard: 4}},
	}
	for _, tt := range tests {
		cands, next := collect(shards, loaded, tt.pos, tt.want)
		var got []taken
		for _, c := range cands {
			got = append(got, taken{c.shard, c.index})
		}
		if !slices.Equal(got, tt.got) || next != tt.next {
			t.Errorf("collect from %+v want %d = %v then %+v; want %v then %+v", tt.pos, tt.want, got, next, tt.got, tt.next)
		}
	}
	cands, _ := collect(shards, loaded, Position{Shard: 1}, 3)
	if cands[1].status != presence.Idle || cands[2].status != presence.Online {
		t.Errorf("statuses = %v %v, want idle online", cands[1].status, cands[2].status)
	}
}

func TestGroupByShard(t *testing.T) {
	for _, tt := range []struct {
		shards []int
		want   []span
	}{
		{nil, nil},
		{[]int{3}, []span{{0, 1}}},
		{[]int{0, 0, 2, 5, 5, 5}, []span{{0, 2}, {2, 3}, {3, 6}}},
	} {
		if got := groupByShard(tt.shards, func(sh int) int { return sh }); !slices.Equal(got, tt.want) {
			t.Errorf("groupByShard(%v) = %v, want %v", tt.shards, got, tt.want)
		}
	}
}
