package statestore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/redis/go-redis/v9"

	"github.com/pulse-presence/pulse/pkg/presence"
	"github.com/pulse-presence/pulse/pkg/shard"
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
		keys := make([]string, len(statuses))
		for i, st := range statuses {
			keys[i] = s.keys.Bitmap(sh, st)
		}
		cmds[k] = pipe.MGet(ctx, keys...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("loading bitmaps of %d shards: %w", len(shards), err)
	}
	for k, cmd := range cmds {
		for i, v := range cmd.Val() {
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

// ShardCounts reads every one of n shards' counts in one round trip; out[s] is shard
// s's. Like Counts, it reads the cardinalities stored beside the bitmaps.
func (s *Store) ShardCounts(ctx context.Context, n int) ([]Counts, error) {
	out := make([]Counts, n)
	if n == 0 {
		return out, nil
	}
	pipe := s.rdb.Pipeline()
	cnts := make([]*redis.SliceCmd, n)
	nexts := make([]*redis.StringCmd, n)
	for sh := range n {
		cnts[sh] = pipe.HMGet(ctx, s.keys.Counts(sh), "online", "idle", "invisible")
		nexts[sh] = pipe.HGet(ctx, s.keys.Meta(sh), "next")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("reading counts of %d shards: %w", n, err)
	}
	for sh := range n {
		vals := cnts[sh].Val()
		out[sh] = Counts{
			Registered: parseCount(nexts[sh].Val()),
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

// Locate finds the shard and bitmap index of each of ids among n shards: one HMGET
// of each involved shard's id map, pipelined in one round trip. out[i] is ids[i]'s.
func (s *Store) Locate(ctx context.Context, n int, ids []string) ([]Location, error) {
	out := make([]Location, len(ids))
	if n <= 0 || len(ids) == 0 {
		return out, nil
	}
	byShard := make(map[int][]int)
	for i, id := range ids {
		sh := shard.For(id, n)
		out[i].Shard = sh
		byShard[sh] = append(byShard[sh], i)
	}
	pipe := s.rdb.Pipeline()
	cmds := make(map[int]*redis.SliceCmd, len(byShard))
	for sh, idx := range byShard {
		fields := make([]string, len(idx))
		for j, i := range idx {
			fields[j] = ids[i]
		}
		cmds[sh] = pipe.HMGet(ctx, s.keys.IDs(sh), fields...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("locating %d users: %w", len(ids), err)
	}
	for sh, cmd := range cmds {
		for j, v := range cmd.Val() {
			str, ok := v.(string)
			if !ok {
				continue
			}
			i := byShard[sh][j]
			x, err := strconv.ParseUint(str, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("shard %d index of %q is %q: %w", sh, ids[i], str, err)
			}
			out[i].Index, out[i].Known = uint32(x), true
		}
	}
	return out, nil
}

// ShardIndexes are bitmap indexes of one shard.
type ShardIndexes struct {
	Shard   int
	Indexes []uint32
}

// UserIDs maps bitmap indexes back to user ids: one HMGET of each batch's reverse
// map, pipelined in one round trip. out[k][j] is the id at batches[k].Indexes[j], ""
// for an index that has none.
func (s *Store) UserIDs(ctx context.Context, batches []ShardIndexes) ([][]string, error) {
	out := make([][]string, len(batches))
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(batches))
	total := 0
	for k, b := range batches {
		out[k] = make([]string, len(b.Indexes))
		if len(b.Indexes) == 0 {
			continue
		}
		fields := make([]string, len(b.Indexes))
		for j, x := range b.Indexes {
			fields[j] = strconv.FormatUint(uint64(x), 10)
		}
		cmds[k] = pipe.HMGet(ctx, s.keys.Rev(b.Shard), fields...)
		total += len(b.Indexes)
	}
	if total == 0 {
		return out, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("mapping %d indexes to user ids: %w", total, err)
	}
	for k, cmd := range cmds {
		if cmd == nil {
			continue
		}
		for j, v := range cmd.Val() {
			out[k][j], _ = v.(string)
		}
	}
	return out, nil
}

// ShardUsers are user ids of one shard.
type ShardUsers struct {
	Shard int
	IDs   []string
}

// LoadUserStates reads the states of each batch's users: one MGET per batch,
// pipelined in one round trip. out[k][j] is batches[k].IDs[j]'s, nil for a user
// without state.
func (s *Store) LoadUserStates(ctx context.Context, batches []ShardUsers) ([][]*presence.User, error) {
	out := make([][]*presence.User, len(batches))
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(batches))
	total := 0
	for k, b := range batches {
		out[k] = make([]*presence.User, len(b.IDs))
		if len(b.IDs) == 0 {
			continue
		}
		keys := make([]string, len(b.IDs))
		for j, id := range b.IDs {
			keys[j] = s.keys.User(b.Shard, id)
		}
		cmds[k] = pipe.MGet(ctx, keys...)
		total += len(b.IDs)
	}
	if total == 0 {
		return out, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("reading %d user states: %w", total, err)
	}
	for k, cmd := range cmds {
		if cmd == nil {
			continue
		}
		for j, v := range cmd.Val() {
			str, ok := v.(string)
			if !ok {
				continue
			}
			u, err := decodeUser(str)
			if err != nil {
				return nil, fmt.Errorf("user %q: %w", batches[k].IDs[j], err)
			}
			out[k][j] = u
		}
	}
	return out, nil
}
