package statestore

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/redis/go-redis/v9"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/shard"
)

// Reads for listings and set queries ("who is online", "which of these are"): whole
// bitmaps of a few shards and both directions of the id <-> index mapping. Each
// helper takes a batch of shards and answers it in one pipelined round trip; the
// pipelines hold only single-slot commands, so they work on Redis Cluster too.

// ShardBitmaps are one shard's bitmaps, by position in Tracked, as of one instant;
// nil for a status that was not loaded.
type ShardBitmaps [len(Tracked)]*roaring.Bitmap

// StatusOf is the status whose loaded bitmap holds index i; false when none does.
func (b *ShardBitmaps) StatusOf(i uint32) (presence.Status, bool) {
	for k, bm := range b {
		if bm != nil && bm.Contains(i) {
			return Tracked[k], true
		}
	}
	return presence.StatusUnknown, false
}

// TrackedPos is st's position in Tracked, -1 for a status without a bitmap.
func TrackedPos(st presence.Status) int {
	for i, t := range Tracked {
		if t == st {
			return i
		}
	}
	return -1
}

// LoadBitmaps reads the bitmaps of statuses (each one of Tracked) in every one of
// shards, in one round trip; out[k] belongs to shards[k]. A shard's bitmaps are read
// by a single MGET, atomic because they share the shard's hash slot, so a user whose
// status changes meanwhile is in exactly one of them, never in two or in none.
func (s *Store) LoadBitmaps(ctx context.Context, shards []int, statuses []presence.Status) ([]ShardBitmaps, error) {
	return s.LoadBitmapsIn(ctx, shards, statuses, "")
}

// LoadBitmapsIn is LoadBitmaps limited to the members of group (docs/design.md,
// "Groups"): each status bitmap ANDed with the group's, read by the same MGET, so
// that a user joining or changing status meanwhile is seen before or after, never
// half. An empty group is every user.
func (s *Store) LoadBitmapsIn(ctx context.Context, shards []int, statuses []presence.Status, group string) ([]ShardBitmaps, error) {
	pos := make([]int, len(statuses))
	for i, st := range statuses {
		if pos[i] = TrackedPos(st); pos[i] < 0 {
			return nil, fmt.Errorf("loading bitmaps: %s has no bitmap", st)
		}
	}
	out := make([]ShardBitmaps, len(shards))
	if len(shards) == 0 || len(statuses) == 0 {
		return out, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(shards))
	for k, sh := range shards {
		keys := make([]string, len(statuses), len(statuses)+1)
		for i, st := range statuses {
			keys[i] = s.keys.Bitmap(sh, st)
		}
		if group != "" {
			keys = append(keys, s.keys.GroupBitmap(sh, group))
		}
		cmds[k] = pipe.MGet(ctx, keys...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("loading bitmaps of %d shards: %w", len(shards), err)
	}
	for k, cmd := range cmds {
		vals := cmd.Val()
		if group != "" {
			if err := andGroup(&out[k], vals, pos); err != nil {
				return nil, fmt.Errorf("shard %d group %q: %w", shards[k], group, err)
			}
			continue
		}
		for i, v := range vals {
			bm := roaring.New()
			if str, ok := v.(string); ok {
				if err := bm.UnmarshalBinary([]byte(str)); err != nil {
					return nil, fmt.Errorf("shard %d bitmap %s: %w", shards[k], statuses[i], err)
				}
			}
			out[k][pos[i]] = bm
		}
	}
	return out, nil
}

// andGroup sets out's bitmaps at pos to the status bitmaps of vals ANDed with the
// group's, the last of vals. The operands are read in place, as views of the strings
// Redis returned (borrowedBitmap), and only the intersections are built: a shard's
// status bitmaps are far larger than its members in them, and a page of a group's
// listing would otherwise copy them whole, twice, to list a hundred users.
func andGroup(out *ShardBitmaps, vals []any, pos []int) error {
	members, err := borrowedBitmap(vals[len(vals)-1])
	if err != nil {
		return fmt.Errorf("members: %w", err)
	}
	for i, v := range vals[:len(vals)-1] {
		bm, err := borrowedBitmap(v)
		if err != nil {
			return fmt.Errorf("bitmap %s: %w", Tracked[pos[i]], err)
		}
		out[pos[i]] = roaring.And(bm, members)
	}
	return nil
}

// borrowedBitmap is the bitmap serialized in v (a string of MGET; nil: empty) read
// without copying: it borrows the string's bytes, which are never written, and must
// itself never be written to.
func borrowedBitmap(v any) (*roaring.Bitmap, error) {
	bm := roaring.New()
	str, ok := v.(string)
	if !ok || str == "" {
		return bm, nil
	}
	if _, err := bm.FromUnsafeBytes(unsafe.Slice(unsafe.StringData(str), len(str))); err != nil {
		return nil, err
	}
	return bm, nil
}

// ShardCounts reads every one of n shards' counts in one round trip; out[s] is shard
// s's. Like Counts, it reads the cardinalities stored beside the bitmaps.
func (s *Store) ShardCounts(ctx context.Context, n int) ([]Counts, error) {
	out := make([]Counts, n)
	if n == 0 {
		return out, nil
	}
	pipe := s.rdb.Pipeline()
	cnts := make([]*redis.SliceCmd, n)
	nexts := make([]*redis.SliceCmd, n)
	for sh := range n {
		cnts[sh] = pipe.HMGet(ctx, s.keys.Counts(sh), "online", "idle", "invisible")
		nexts[sh] = pipe.HMGet(ctx, s.keys.Meta(sh), "next", "offset", "rebuilding")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("reading counts of %d shards: %w", n, err)
	}
	for sh := range n {
		meta := nexts[sh].Val()
		if err := shardUsable(sh, meta[1:]); err != nil {
			return nil, err
		}
		vals := cnts[sh].Val()
		out[sh] = Counts{
			Registered: parseCount(meta[0]),
			Online:     parseCount(vals[0]),
			Idle:       parseCount(vals[1]),
			Invisible:  parseCount(vals[2]),
		}
	}
	return out, nil
}

// Of is the count of status st (one of Tracked, else 0).
func (c Counts) Of(st presence.Status) uint64 {
	switch st {
	case presence.Online:
		return c.Online
	case presence.Idle:
		return c.Idle
	case presence.Invisible:
		return c.Invisible
	}
	return 0
}

// Location is where a user lives: the shard, and the bitmap index once Pulse has
// seen the user (Known).
type Location struct {
	Shard int
	Index uint32
	Known bool
}

// Locate finds the shard and bitmap index of each of ids among n shards: the index
// is in the user's state, so this is one HMGET of each state bucket involved,
// pipelined in one round trip. out[i] is ids[i]'s.
func (s *Store) Locate(ctx context.Context, n int, ids []string) ([]Location, error) {
	out := make([]Location, len(ids))
	if n <= 0 || len(ids) == 0 {
		return out, nil
	}
	refs := make([]userRef, len(ids))
	for i, id := range ids {
		out[i].Shard = shard.For(id, n)
		refs[i] = userRef{shard: out[i].Shard, id: id}
	}
	l, err := s.loadLayout(ctx)
	if err != nil {
		return nil, fmt.Errorf("locating %d users: %w", len(ids), err)
	}
	if l.buckets == 0 {
		return out, nil
	}
	vals, err := s.readStates(ctx, l.buckets, refs)
	if err != nil {
		return nil, fmt.Errorf("locating %d users: %w", len(ids), err)
	}
	for i, v := range vals {
		if v == "" {
			continue
		}
		x, err := stateIndex(v)
		if err != nil {
			return nil, fmt.Errorf("shard %d index of %q: %w", out[i].Shard, ids[i], err)
		}
		out[i].Index, out[i].Known = x, true
	}
	return out, nil
}

// ShardIndexes are bitmap indexes of one shard.
type ShardIndexes struct {
	Shard   int
	Indexes []uint32
}

// UserIDs maps bitmap indexes back to user ids: one HMGET of each rev bucket
// involved, pipelined in one round trip. out[k][j] is the id at
// batches[k].Indexes[j], "" for an index that has none.
func (s *Store) UserIDs(ctx context.Context, batches []ShardIndexes) ([][]string, error) {
	out := make([][]string, len(batches))
	var refs []indexRef
	for k, b := range batches {
		out[k] = make([]string, len(b.Indexes))
		for _, x := range b.Indexes {
			refs = append(refs, indexRef{shard: b.Shard, index: x})
		}
	}
	if len(refs) == 0 {
		return out, nil
	}
	ids, err := s.readIDs(ctx, refs)
	if err != nil {
		return nil, fmt.Errorf("mapping %d indexes to user ids: %w", len(refs), err)
	}
	for k := range out {
		n := copy(out[k], ids)
		ids = ids[n:]
	}
	return out, nil
}

// indexRef is a bitmap index and its shard.
type indexRef struct {
	shard int
	index uint32
}

// readIDs reads the user ids of refs, "" for an index without one: one HMGET of each
// rev bucket involved, all pipelined in one round trip.
func (s *Store) readIDs(ctx context.Context, refs []indexRef) ([]string, error) {
	return hmgetByKey(ctx, s.rdb, len(refs),
		func(i int) (indexRef, string) {
			// A rev bucket is named by its first index: the index with the field bits cleared.
			r := refs[i]
			return indexRef{shard: r.shard, index: r.index &^ (1<<revBits - 1)}, revField(r.index)
		},
		func(b indexRef) string { return s.keys.RevBucket(b.shard, b.index) })
}

// ShardUsers are user ids of one shard.
type ShardUsers struct {
	Shard int
	IDs   []string
}

// LoadUserStates reads the states of each batch's users: one HMGET of each state
// bucket involved, pipelined in one round trip. out[k][j] is batches[k].IDs[j]'s, nil
// for a user without state.
func (s *Store) LoadUserStates(ctx context.Context, batches []ShardUsers) ([][]*presence.User, error) {
	out := make([][]*presence.User, len(batches))
	var refs []userRef
	for k, b := range batches {
		out[k] = make([]*presence.User, len(b.IDs))
		for _, id := range b.IDs {
			refs = append(refs, userRef{shard: b.Shard, id: id})
		}
	}
	if len(refs) == 0 {
		return out, nil
	}
	l, err := s.loadLayout(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading %d user states: %w", len(refs), err)
	}
	if l.buckets == 0 {
		return out, nil
	}
	vals, err := s.readStates(ctx, l.buckets, refs)
	if err != nil {
		return nil, fmt.Errorf("reading %d user states: %w", len(refs), err)
	}
	i := 0
	for k, b := range batches {
		for j, id := range b.IDs {
			v := vals[i]
			i++
			if v == "" {
				continue
			}
			u, err := decodeState(v)
			if err != nil {
				return nil, fmt.Errorf("user %q: %w", id, err)
			}
			out[k][j] = u
		}
	}
	return out, nil
}
