package statestore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/redis/go-redis/v9"
)

// Groups (docs/design.md, "Groups") live beside the status bitmaps, in the same shard
// hash tag, so that a window's membership and status writes stay one atomic script:
//
//	P:{s}:groups        hash: group id -> "members online idle invisible", the
//	                    group's counts in the shard
//	P:{s}:g:<group>     roaring bitmap of the indexes of the group's members
//
// A group's count is then one HGET per shard, whatever its size; its members online
// are its bitmap AND the online bitmap.

// GroupIndex is shard s's hash of its groups' counts.
func (k Keys) GroupIndex(s int) string { return k.tag(s) + "groups" }

// GroupBitmap is shard s's bitmap of group g's members.
func (k Keys) GroupBitmap(s int, g string) string { return k.tag(s) + "g:" + g }

// GroupShard is one group's part of a shard: its members and how many of them are in
// each tracked status. A group with no member in a shard has no GroupShard there.
type GroupShard struct {
	Members *roaring.Bitmap
	// Counts by position in Tracked.
	Counts [len(Tracked)]uint64
	// MembersDirty says the window changed Members (the counts are written always).
	MembersDirty bool
}

// encodeGroupCounts is a GroupShard's field in the group index.
func encodeGroupCounts(g *GroupShard) string {
	var b strings.Builder
	b.WriteString(strconv.FormatUint(g.Members.GetCardinality(), 10))
	for _, c := range g.Counts {
		b.WriteByte(' ')
		b.WriteString(strconv.FormatUint(c, 10))
	}
	return b.String()
}

// decodeGroupCounts reads a group index field: members, then the tracked counts.
func decodeGroupCounts(v string) (Counts, error) {
	f := strings.Fields(v)
	if len(f) != 1+len(Tracked) {
		return Counts{}, fmt.Errorf("group counts %q: want %d numbers", v, 1+len(Tracked))
	}
	var n [1 + len(Tracked)]uint64
	for i, s := range f {
		x, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return Counts{}, fmt.Errorf("group counts %q: %w", v, err)
		}
		n[i] = x
	}
	return Counts{Registered: n[0], Online: n[1], Idle: n[2], Invisible: n[3]}, nil
}

// loadGroups reads shard sh's groups: the index, then every group's bitmap, in two
// round trips. The aggregator does it when it takes the shard.
func (s *Store) loadGroups(ctx context.Context, sh int) (map[string]*GroupShard, error) {
	idx, err := s.rdb.HGetAll(ctx, s.keys.GroupIndex(sh)).Result()
	if err != nil {
		return nil, fmt.Errorf("loading the groups of shard %d: %w", sh, err)
	}
	out := make(map[string]*GroupShard, len(idx))
	if len(idx) == 0 {
		return out, nil
	}
	names := make([]string, 0, len(idx))
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, 0, len(idx))
	for g := range idx {
		names = append(names, g)
		cmds = append(cmds, pipe.Get(ctx, s.keys.GroupBitmap(sh, g)))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("loading the group bitmaps of shard %d: %w", sh, err)
	}
	for i, g := range names {
		b, err := cmds[i].Bytes()
		if err != nil {
			return nil, fmt.Errorf("shard %d group %q: its bitmap is missing: %w", sh, g, err)
		}
		bm := roaring.New()
		if err := bm.UnmarshalBinary(b); err != nil {
			return nil, fmt.Errorf("shard %d group %q bitmap: %w", sh, g, err)
		}
		out[g] = &GroupShard{Members: bm}
	}
	return out, nil
}

// GroupCounts reads group g's counts in every one of n shards in one round trip;
// out[s] is shard s's, with Registered the group's members there. Like ShardCounts it
// refuses a shard being rebuilt.
func (s *Store) GroupCounts(ctx context.Context, n int, g string) ([]Counts, error) {
	out := make([]Counts, n)
	if n == 0 {
		return out, nil
	}
	pipe := s.rdb.Pipeline()
	cnts := make([]*redis.StringCmd, n)
	metas := make([]*redis.SliceCmd, n)
	for sh := range n {
		cnts[sh] = pipe.HGet(ctx, s.keys.GroupIndex(sh), g)
		metas[sh] = pipe.HMGet(ctx, s.keys.Meta(sh), "offset", "rebuilding")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("reading the counts of group %q: %w", g, err)
	}
	for sh := range n {
		if err := shardUsable(sh, metas[sh].Val()); err != nil {
			return nil, err
		}
		v, err := cnts[sh].Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if out[sh], err = decodeGroupCounts(v); err != nil {
			return nil, fmt.Errorf("shard %d group %q: %w", sh, g, err)
		}
	}
	return out, nil
}

// LoadGroupBitmaps reads group g's member bitmap in every one of shards, in one round
// trip; out[k] belongs to shards[k], empty where the group has no member.
func (s *Store) LoadGroupBitmaps(ctx context.Context, shards []int, g string) ([]*roaring.Bitmap, error) {
	out := make([]*roaring.Bitmap, len(shards))
	if len(shards) == 0 {
		return out, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(shards))
	for k, sh := range shards {
		cmds[k] = pipe.Get(ctx, s.keys.GroupBitmap(sh, g))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("loading the bitmaps of group %q: %w", g, err)
	}
	for k, cmd := range cmds {
		out[k] = roaring.New()
		if b, err := cmd.Bytes(); err == nil {
			if err := out[k].UnmarshalBinary(b); err != nil {
				return nil, fmt.Errorf("shard %d group %q bitmap: %w", shards[k], g, err)
			}
		}
	}
	return out, nil
}

// IsMember reports whether userID is a member of group g, in a state of n shards: the
// user's index, then the group's bitmap of the user's shard.
func (s *Store) IsMember(ctx context.Context, n int, g, userID string) (bool, error) {
	locs, err := s.Locate(ctx, n, []string{userID})
	if err != nil || len(locs) == 0 || !locs[0].Known {
		return false, err
	}
	bms, err := s.LoadGroupBitmaps(ctx, []int{locs[0].Shard}, g)
	if err != nil {
		return false, err
	}
	return bms[0].Contains(locs[0].Index), nil
}

// ErrGroupTooLarge: a group has more members than the reader asked for at most.
var ErrGroupTooLarge = errors.New("the group has more members than asked for")

// GroupMembers reads every member of group g, in (shard, index) order, when it has at
// most max: the counts, then every shard's bitmap, then the ids, a round trip each.
// A group of more members is ErrGroupTooLarge, read no further.
func (s *Store) GroupMembers(ctx context.Context, g string, max int) ([]string, error) {
	n, err := s.Shards(ctx)
	if err != nil || n == 0 {
		return nil, err
	}
	counts, err := s.GroupCounts(ctx, n, g)
	if err != nil {
		return nil, err
	}
	var total uint64
	var shards []int
	for sh, c := range counts {
		if c.Registered > 0 {
			total += c.Registered
			shards = append(shards, sh)
		}
	}
	if total > uint64(max) {
		return nil, fmt.Errorf("%w: group %q has %d members, at most %d are read", ErrGroupTooLarge, g, total, max)
	}
	bms, err := s.LoadGroupBitmaps(ctx, shards, g)
	if err != nil {
		return nil, err
	}
	batches := make([]ShardIndexes, len(shards))
	for k, sh := range shards {
		batches[k] = ShardIndexes{Shard: sh, Indexes: bms[k].ToArray()}
	}
	ids, err := s.UserIDs(ctx, batches)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, total)
	for _, part := range ids {
		for _, id := range part {
			if id != "" {
				out = append(out, id)
			}
		}
	}
	return out, nil
}

// userGroupsBatch is how many group bitmaps one round trip of UserGroups reads: a
// shard may hold the bitmaps of many groups (rooms, channels), and only one batch of
// them is held in memory at a time.
const userGroupsBatch = 256

// UserGroups lists the groups of shard sh whose members include the user of dense
// index index, in name order. Redis keeps no list of a user's groups (the aggregator
// holds it in memory, services/aggregator/groups.go): the shard's group index names
// its groups, whose bitmaps are then read userGroupsBatch per round trip and
// dropped once looked at, so memory stays bounded whatever the number of groups, and
// time grows with it. The operator's export (GET /v1/users/{id}/export) reads it.
func (s *Store) UserGroups(ctx context.Context, sh int, index uint32) ([]string, error) {
	names, err := s.rdb.HKeys(ctx, s.keys.GroupIndex(sh)).Result()
	if err != nil {
		return nil, fmt.Errorf("reading the groups of shard %d: %w", sh, err)
	}
	slices.Sort(names)
	out := []string{}
	for lo := 0; lo < len(names); lo += userGroupsBatch {
		part := names[lo:min(lo+userGroupsBatch, len(names))]
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.StringCmd, len(part))
		for i, g := range part {
			cmds[i] = pipe.Get(ctx, s.keys.GroupBitmap(sh, g))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("reading the group bitmaps of shard %d: %w", sh, err)
		}
		for i, g := range part {
			b, err := cmds[i].Bytes()
			if errors.Is(err, redis.Nil) {
				continue // emptied between the two reads
			}
			if err != nil {
				return nil, fmt.Errorf("shard %d group %q: %w", sh, g, err)
			}
			bm := roaring.New()
			if err := bm.UnmarshalBinary(b); err != nil {
				return nil, fmt.Errorf("shard %d group %q bitmap: %w", sh, g, err)
			}
			if bm.Contains(index) {
				out = append(out, g)
			}
		}
	}
	return out, nil
}
