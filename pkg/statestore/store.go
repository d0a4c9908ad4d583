package statestore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/pkg/presence"
	"github.com/pulse-presence/pulse/pkg/shard"
)

//go:embed write.lua
var writeLua string

// Store reads and writes Pulse's state in Redis. Writers are aggregators, each the
// only writer of the shards (partitions) it owns; readers are everyone else.
type Store struct {
	rdb   redis.UniversalClient
	keys  Keys
	write *redis.Script

	// The shard count changes only when the topic is recreated, so readers cache it.
	mu       sync.Mutex
	shards   int
	shardsAt time.Time
}

// New returns a store over rdb with keys under prefix.
func New(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: rdb, keys: Keys{Prefix: prefix}, write: redis.NewScript(writeLua)}
}

// Keys is the store's key layout.
func (s *Store) Keys() Keys { return s.keys }

// ErrShardCountMismatch means the topic's partition count differs from the one the
// state was built with: users would be looked up in the wrong shards.
var ErrShardCountMismatch = errors.New("shard count mismatch")

// RegisterShards records the shard count, or checks it against the recorded one.
func (s *Store) RegisterShards(ctx context.Context, n int) error {
	ok, err := s.rdb.SetNX(ctx, s.keys.Shards(), n, 0).Result()
	if err != nil {
		return fmt.Errorf("registering shard count: %w", err)
	}
	if ok {
		return nil
	}
	got, err := s.rdb.Get(ctx, s.keys.Shards()).Int()
	if err != nil {
		return fmt.Errorf("reading shard count: %w", err)
	}
	if got != n {
		return fmt.Errorf("%w: state in Redis has %d shards, presence.events has %d partitions", ErrShardCountMismatch, got, n)
	}
	return nil
}

// Shards is the registered shard count, 0 while no aggregator has registered one
// (then no user has state yet). Cached for ten seconds.
func (s *Store) Shards(ctx context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shards > 0 && time.Since(s.shardsAt) < 10*time.Second {
		return s.shards, nil
	}
	n, err := s.rdb.Get(ctx, s.keys.Shards()).Int()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading shard count: %w", err)
	}
	s.shards, s.shardsAt = n, time.Now()
	return n, nil
}

// ShardState is what the owner of a shard loads when it is assigned the partition.
type ShardState struct {
	// Offset is the last record folded into Redis, -1 for none.
	Offset int64
	// Next is the next free bitmap index; every index below it is a registered user.
	Next uint32
	// Bitmaps by position in Tracked.
	Bitmaps [len(Tracked)]*roaring.Bitmap
	// Outbox is the last window's changes, nil if none was ever written.
	Outbox *pulsev1.ChangeBatch
}

// LoadShard reads shard sh's bookkeeping, bitmaps and outbox in one round trip.
func (s *Store) LoadShard(ctx context.Context, sh int) (*ShardState, error) {
	pipe := s.rdb.Pipeline()
	meta := pipe.HMGet(ctx, s.keys.Meta(sh), "offset", "next")
	var bms [len(Tracked)]*redis.StringCmd
	for i, st := range Tracked {
		bms[i] = pipe.Get(ctx, s.keys.Bitmap(sh, st))
	}
	outbox := pipe.Get(ctx, s.keys.Outbox(sh))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("loading shard %d: %w", sh, err)
	}
	st := &ShardState{Offset: -1}
	vals := meta.Val()
	if v, ok := vals[0].(string); ok {
		o, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("shard %d offset %q: %w", sh, v, err)
		}
		st.Offset = o
	}
	if v, ok := vals[1].(string); ok {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("shard %d next index %q: %w", sh, v, err)
		}
		st.Next = uint32(n)
	}
	for i, cmd := range bms {
		st.Bitmaps[i] = roaring.New()
		if b, err := cmd.Bytes(); err == nil {
			if err := st.Bitmaps[i].UnmarshalBinary(b); err != nil {
				return nil, fmt.Errorf("shard %d bitmap %s: %w", sh, Tracked[i], err)
			}
		}
	}
	if b, err := outbox.Bytes(); err == nil {
		st.Outbox = &pulsev1.ChangeBatch{}
		if err := proto.Unmarshal(b, st.Outbox); err != nil {
			return nil, fmt.Errorf("shard %d outbox: %w", sh, err)
		}
	}
	return st, nil
}

// LoadUsers reads the states of ids, all of shard sh, in one round trip. Users
// without state are absent from the result.
func (s *Store) LoadUsers(ctx context.Context, sh int, ids []string) (map[string]*presence.User, error) {
	out := make(map[string]*presence.User, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = s.keys.User(sh, id)
	}
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("loading %d users of shard %d: %w", len(ids), sh, err)
	}
	for i, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue
		}
		u, err := decodeUser(str)
		if err != nil {
			return nil, fmt.Errorf("user %q: %w", ids[i], err)
		}
		out[ids[i]] = u
	}
	return out, nil
}

func decodeUser(b string) (*presence.User, error) {
	var p pulsev1.UserState
	if err := proto.Unmarshal([]byte(b), &p); err != nil {
		return nil, fmt.Errorf("decoding state: %w", err)
	}
	return presence.UserFromPB(&p), nil
}

// NewID is a user seen for the first time, with the bitmap index it was given.
type NewID struct {
	UserID string
	Index  uint32
}

// Window is one window's net result for one shard.
type Window struct {
	Shard int
	// LastOffset is the offset of the window's last record: the guard and new offset.
	LastOffset int64
	// Next is the shard's next free index after this window's new users.
	Next   uint32
	NewIDs []NewID
	// Users are the states of every user the window changed.
	Users map[string]*presence.User
	// Bitmaps by position in Tracked; Dirty says which changed and must be written.
	Bitmaps [len(Tracked)]*roaring.Bitmap
	Dirty   [len(Tracked)]bool
	// Outbox is the window's changes; nil when there were none.
	Outbox *pulsev1.ChangeBatch
}

// WriteWindow writes w in one round trip, atomically. It reports false, and writes
// nothing, when the shard already holds w.LastOffset or a later one.
func (s *Store) WriteWindow(ctx context.Context, w *Window) (bool, error) {
	sh := w.Shard
	keys := make([]string, 0, 8+len(w.Users))
	keys = append(keys, s.keys.Meta(sh), s.keys.IDs(sh), s.keys.Counts(sh), s.keys.Outbox(sh))
	for _, st := range Tracked {
		keys = append(keys, s.keys.Bitmap(sh, st))
	}
	keys = append(keys, s.keys.Rev(sh))
	args := make([]any, 0, 10+2*len(w.NewIDs)+len(w.Users))
	args = append(args, w.LastOffset, w.Next)
	if w.Outbox != nil && len(w.Outbox.Changes) > 0 {
		b, err := proto.Marshal(w.Outbox)
		if err != nil {
			return false, fmt.Errorf("encoding outbox: %w", err)
		}
		args = append(args, b)
	} else {
		args = append(args, "")
	}
	for i, bm := range w.Bitmaps {
		if !w.Dirty[i] {
			args = append(args, "")
			continue
		}
		bm.RunOptimize()
		b, err := bm.ToBytes()
		if err != nil {
			return false, fmt.Errorf("encoding bitmap: %w", err)
		}
		args = append(args, b)
	}
	for _, bm := range w.Bitmaps {
		args = append(args, bm.GetCardinality())
	}
	args = append(args, len(w.NewIDs))
	for _, n := range w.NewIDs {
		args = append(args, n.UserID, n.Index)
	}
	for id, u := range w.Users {
		b, err := proto.Marshal(u.ToPB())
		if err != nil {
			return false, fmt.Errorf("encoding state of %q: %w", id, err)
		}
		keys = append(keys, s.keys.User(sh, id))
		args = append(args, b)
	}
	res, err := s.write.Run(ctx, s.rdb, keys, args...).Int()
	if err != nil {
		return false, fmt.Errorf("writing window of shard %d at offset %d: %w", sh, w.LastOffset, err)
	}
	return res == 1, nil
}

// Get reads one user's state; nil, nil for a user Pulse has never seen.
func (s *Store) Get(ctx context.Context, userID string) (*presence.User, error) {
	n, err := s.Shards(ctx)
	if err != nil || n == 0 {
		return nil, err
	}
	b, err := s.rdb.Get(ctx, s.keys.User(shard.For(userID, n), userID)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading user state: %w", err)
	}
	return decodeUser(b)
}

// GetMany reads the states of ids, in order, nil for unknown users: one MGET per
// shard involved, all pipelined in one round trip.
func (s *Store) GetMany(ctx context.Context, ids []string) ([]*presence.User, error) {
	out := make([]*presence.User, len(ids))
	n, err := s.Shards(ctx)
	if err != nil || n == 0 || len(ids) == 0 {
		return out, err
	}
	byShard := make(map[int][]int)
	for i, id := range ids {
		sh := shard.For(id, n)
		byShard[sh] = append(byShard[sh], i)
	}
	pipe := s.rdb.Pipeline()
	cmds := make(map[int]*redis.SliceCmd, len(byShard))
	for sh, idx := range byShard {
		keys := make([]string, len(idx))
		for j, i := range idx {
			keys[j] = s.keys.User(sh, ids[i])
		}
		cmds[sh] = pipe.MGet(ctx, keys...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("reading %d user states: %w", len(ids), err)
	}
	for sh, cmd := range cmds {
		for j, v := range cmd.Val() {
			str, ok := v.(string)
			if !ok {
				continue
			}
			i := byShard[sh][j]
			if out[i], err = decodeUser(str); err != nil {
				return nil, fmt.Errorf("user %q: %w", ids[i], err)
			}
		}
	}
	return out, nil
}

// Counts are the numbers of users by status, summed over every shard.
type Counts struct {
	// Registered is every user Pulse has seen.
	Registered uint64
	Online     uint64
	Idle       uint64
	Invisible  uint64
}

// Offline is every registered user not online, idle or invisible.
func (c Counts) Offline() uint64 { return c.Registered - c.Online - c.Idle - c.Invisible }

// Counts sums the bitmaps' cardinalities, which the aggregator stores beside each
// bitmap in the same atomic write: one small hash per shard, no user is scanned.
func (s *Store) Counts(ctx context.Context) (Counts, error) {
	var c Counts
	n, err := s.Shards(ctx)
	if err != nil || n == 0 {
		return c, err
	}
	shards, err := s.ShardCounts(ctx, n)
	if err != nil {
		return c, err
	}
	for _, sc := range shards {
		c.Registered += sc.Registered
		c.Online += sc.Online
		c.Idle += sc.Idle
		c.Invisible += sc.Invisible
	}
	return c, nil
}

func parseCount(v any) uint64 {
	s, _ := v.(string)
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

// Ping checks that Redis answers.
func (s *Store) Ping(ctx context.Context) error {
	return s.rdb.Ping(ctx).Err()
}
