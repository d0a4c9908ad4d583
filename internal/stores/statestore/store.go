package statestore

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/shard"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

//go:embed write.lua
var writeLua string

// Store reads and writes Pulse's state in Redis. Writers are aggregators, each the
// only writer of the shards (partitions) it owns; readers are everyone else.
type Store struct {
	rdb   redis.UniversalClient
	keys  Keys
	write *redis.Script

	// The shard and bucket counts change only when the state is rebuilt, so readers
	// cache them; a writer pins what it registered.
	mu       sync.Mutex
	layout   layout
	layoutAt time.Time
	pinned   bool
}

// layout is what locates a user: the shard count and the state buckets per shard.
type layout struct {
	shards, buckets int
}

// New returns a store over rdb with keys under prefix.
func New(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: rdb, keys: Keys{Prefix: prefix}, write: redis.NewScript(writeLua)}
}

// Keys is the store's key layout.
func (s *Store) Keys() Keys { return s.keys }

var (
	// ErrShardCountMismatch means the topic's partition count differs from the one the
	// state was built with: users would be looked up in the wrong shards.
	ErrShardCountMismatch = errors.New("shard count mismatch")
	// ErrBucketCountMismatch means the configured state buckets differ from the ones
	// the state was built with: users would be looked up in the wrong buckets.
	ErrBucketCountMismatch = errors.New("state bucket count mismatch")
	// ErrLegacyLayout means Redis holds state of the layout before state buckets
	// (a key per user), which this version neither reads nor converts.
	ErrLegacyLayout = errors.New("state in Redis has the layout of an older Pulse")
	// ErrStateLost means a window write found its shard holding less than the writer
	// had written: Redis lost its data. The writer must rebuild the shard from the log
	// (docs/design.md guarantee 10).
	ErrStateLost = errors.New("the shard's state is gone from Redis")
	// ErrStateCorrupt means Redis holds a user state that does not decode: bytes
	// Pulse did not write (another program, a damaged restore). The log, not Redis,
	// is the truth, so the shard's owner rebuilds the shard from it, as for
	// ErrStateLost.
	ErrStateCorrupt = errors.New("a user state in Redis does not decode")
	// ErrRebuilding means a read touched a shard whose state is missing or being
	// rebuilt from the log: any answer from it could be wrong.
	ErrRebuilding = errors.New("state is being rebuilt")
)

// bucketsPerShard is how many state buckets each of shards gets of total: total /
// shards, rounded up, at least one.
func bucketsPerShard(total, shards int) int {
	if shards < 1 || total <= shards {
		return 1
	}
	return (total + shards - 1) / shards
}

// RegisterShards records the shard count and the state buckets per shard (buckets,
// the total over all shards, divided among them), or checks them against the
// recorded ones. The bucket count is written first, so a reader that finds the shard
// count finds the bucket count too.
func (s *Store) RegisterShards(ctx context.Context, n, buckets int) error {
	if n < 1 || buckets < 1 {
		return fmt.Errorf("registering %d shards of %d state buckets: both must be positive", n, buckets)
	}
	per := bucketsPerShard(buckets, n)

	// State of the old layout would read as no state at all: every user would be
	// registered again under a new index while the bitmaps keep the old ones.
	pipe := s.rdb.Pipeline()
	legacy := make([]*redis.IntCmd, n)
	for sh := range n {
		legacy[sh] = pipe.Exists(ctx, s.keys.legacyIDs(sh))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("looking for state of the old layout: %w", err)
	}
	for sh, c := range legacy {
		if c.Val() > 0 {
			return fmt.Errorf("%w: %s exists; delete the keys under %s: and let the aggregators rebuild the state from the log", ErrLegacyLayout, s.keys.legacyIDs(sh), s.keys.Prefix)
		}
	}

	shardMismatch := func(got int) error {
		return fmt.Errorf("%w: state in Redis has %d shards, presence.events has %d partitions", ErrShardCountMismatch, got, n)
	}
	// A different shard count is the graver mistake; say so before the buckets differ.
	if got, err := s.rdb.Get(ctx, s.keys.Shards()).Int(); err == nil && got != n {
		return shardMismatch(got)
	} else if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("reading shard count: %w", err)
	}
	if err := s.register(ctx, s.keys.Buckets(), per, func(got int) error {
		return fmt.Errorf("%w: state in Redis has %d buckets per shard, %d buckets over %d shards make %d", ErrBucketCountMismatch, got, buckets, n, per)
	}); err != nil {
		return err
	}
	if err := s.register(ctx, s.keys.Shards(), n, shardMismatch); err != nil {
		return err
	}
	pipe = s.rdb.Pipeline()
	for sh := range n {
		pipe.Eval(ctx, initShardsLua, []string{s.keys.Meta(sh)}, newEpoch())
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("initialising the bookkeeping of %d shards: %w", n, err)
	}
	s.mu.Lock()
	s.layout, s.layoutAt, s.pinned = layout{shards: n, buckets: per}, time.Now(), true
	s.mu.Unlock()
	return nil
}

// register sets key to v unless it is set, and then checks it holds v.
func (s *Store) register(ctx context.Context, key string, v int, mismatch func(got int) error) error {
	ok, err := s.rdb.SetNX(ctx, key, v, 0).Result()
	if err != nil {
		return fmt.Errorf("registering %s: %w", key, err)
	}
	if ok {
		return nil
	}
	got, err := s.rdb.Get(ctx, key).Int()
	if err != nil {
		return fmt.Errorf("reading %s: %w", key, err)
	}
	if got != v {
		return mismatch(got)
	}
	return nil
}

// Shards is the registered shard count, 0 while no aggregator has registered one
// (then no user has state yet). Cached for ten seconds.
func (s *Store) Shards(ctx context.Context) (int, error) {
	l, err := s.loadLayout(ctx)
	return l.shards, err
}

// Buckets is the registered number of state buckets per shard, 0 while no aggregator
// has registered one. Cached like Shards.
func (s *Store) Buckets(ctx context.Context) (int, error) {
	l, err := s.loadLayout(ctx)
	return l.buckets, err
}

// loadLayout reads the shard and bucket counts in one round trip (a pipeline: the two
// keys are in different Redis Cluster slots), or returns them from the cache.
func (s *Store) loadLayout(ctx context.Context) (layout, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.layout.shards > 0 && (s.pinned || time.Since(s.layoutAt) < 10*time.Second) {
		return s.layout, nil
	}
	pipe := s.rdb.Pipeline()
	shards := pipe.Get(ctx, s.keys.Shards())
	buckets := pipe.Get(ctx, s.keys.Buckets())
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return layout{}, fmt.Errorf("reading shard and bucket counts: %w", err)
	}
	n, err := shards.Int()
	if errors.Is(err, redis.Nil) {
		if s.layout.shards > 0 {
			// This store read a layout before: Redis lost it (a flush, a restart
			// without persistence), and with it the state.
			return layout{}, fmt.Errorf("the shard layout is gone from Redis: %w", ErrRebuilding)
		}
		return layout{}, nil
	}
	if err != nil {
		return layout{}, fmt.Errorf("reading shard count: %w", err)
	}
	b, err := buckets.Int()
	if errors.Is(err, redis.Nil) {
		return layout{}, fmt.Errorf("%w: %s is set but %s is not", ErrLegacyLayout, s.keys.Shards(), s.keys.Buckets())
	}
	if err != nil {
		return layout{}, fmt.Errorf("reading state bucket count: %w", err)
	}
	if n < 1 || b < 1 {
		return layout{}, fmt.Errorf("reading shard and bucket counts: %d shards of %d buckets", n, b)
	}
	s.layout, s.layoutAt = layout{shards: n, buckets: b}, time.Now()
	return s.layout, nil
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
	// Groups are the shard's groups by id, their counts not loaded: the owner derives
	// them from the bitmaps.
	Groups map[string]*GroupShard
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
	groups, err := s.loadGroups(ctx, sh)
	if err != nil {
		return nil, err
	}
	st.Groups = groups
	return st, nil
}

// LoadUsers reads the states of ids, all of shard sh, in one round trip. Users
// without state are absent from the result.
func (s *Store) LoadUsers(ctx context.Context, sh int, ids []string) (map[string]*presence.User, error) {
	out := make(map[string]*presence.User, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	l, err := s.loadLayout(ctx)
	if err != nil || l.buckets == 0 {
		return out, err
	}
	refs := make([]userRef, len(ids))
	for i, id := range ids {
		refs[i] = userRef{shard: sh, id: id}
	}
	vals, err := s.readStates(ctx, l.buckets, refs)
	if err != nil {
		return nil, fmt.Errorf("loading %d users of shard %d: %w", len(ids), sh, err)
	}
	for i, v := range vals {
		if v == "" {
			continue
		}
		u, err := decodeState(v)
		if err != nil {
			return nil, fmt.Errorf("user %q of shard %d: %w: %w", ids[i], sh, ErrStateCorrupt, err)
		}
		out[ids[i]] = u
	}
	return out, nil
}

// userRef is a user id and its shard.
type userRef struct {
	shard int
	id    string
}

// readStates reads the encoded states of refs, "" for a user without one: one HMGET
// of each state bucket involved, all pipelined in one round trip. Every command reads
// one key, so the pipeline works on Redis Cluster too.
func (s *Store) readStates(ctx context.Context, buckets int, refs []userRef) ([]string, error) {
	return hmgetByKey(ctx, s.rdb, len(refs),
		func(i int) ([2]int, string) { return [2]int{refs[i].shard, BucketOf(refs[i].id, buckets)}, refs[i].id },
		func(k [2]int) string { return s.keys.State(k[0], k[1]) })
}

// hmgetByKey reads n fields, "" for one that is absent: ref(i) names the i-th field and
// the group of the hash holding it, key(group) that hash's key. Fields of one hash are
// read by one HMGET, the hashes in one pipelined round trip; out[i] is the i-th field.
// Groups are comparable values rather than key strings, so a key is built once per hash.
func hmgetByKey[G comparable](ctx context.Context, rdb redis.UniversalClient, n int,
	ref func(i int) (G, string), key func(G) string,
) ([]string, error) {
	if n == 0 {
		return make([]string, 0), nil
	}
	pipe := rdb.Pipeline()
	collect := queueHMGets(ctx, pipe, n, ref, key)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	return collect(), nil
}

// queueHMGets queues on pipe the HMGETs hmgetByKey sends, and returns what gathers
// their answers once pipe ran.
func queueHMGets[G comparable](ctx context.Context, pipe redis.Pipeliner, n int,
	ref func(i int) (G, string), key func(G) string,
) (collect func() []string) {
	type hash struct {
		key    string
		fields []string
		at     []int
	}
	byGroup := make(map[G]*hash)
	var order []*hash
	for i := range n {
		g, field := ref(i)
		h := byGroup[g]
		if h == nil {
			h = &hash{key: key(g)}
			byGroup[g] = h
			order = append(order, h)
		}
		h.fields = append(h.fields, field)
		h.at = append(h.at, i)
	}
	cmds := make([]*redis.SliceCmd, len(order))
	for k, h := range order {
		cmds[k] = pipe.HMGet(ctx, h.key, h.fields...)
	}
	return func() []string {
		out := make([]string, n)
		for k, h := range order {
			for j, v := range cmds[k].Val() {
				out[h.at[j]], _ = v.(string)
			}
		}
		return out
	}
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
	// Written is one past the offset the writer last wrote to the shard (0: it wrote
	// none). A shard holding less means Redis lost it: the write is refused with
	// ErrStateLost.
	Written int64
	// Rebuilding marks the shard as being rebuilt from the log (FinishRebuild clears it).
	Rebuilding bool
	// Groups are the groups whose counts or members the window changed; a group
	// with no member left is deleted.
	Groups map[string]*GroupShard
	// Erased are the users the window erased (docs/design.md, "Erasure"): their state
	// and their index's id entry are deleted, unless the window registered the same id
	// again after the erasure (Users holds it), whose state the write keeps.
	Erased []Erased
}

// Erased is a user a window erased: the id, the index it had and its last state.
type Erased struct {
	UserID string
	Index  uint32
	State  *presence.User
}

// WriteWindow writes w in one round trip, atomically. It reports false, and writes
// nothing, when the shard already holds w.LastOffset or a later one. The store must
// know the layout: RegisterShards first.
func (s *Store) WriteWindow(ctx context.Context, w *Window) (bool, error) {
	sh := w.Shard
	l, err := s.loadLayout(ctx)
	if err != nil {
		return false, err
	}
	if l.buckets == 0 {
		return false, fmt.Errorf("writing window of shard %d: no shard and bucket counts registered", sh)
	}
	keys, args, err := s.windowCall(w, l.buckets)
	if err != nil {
		return false, err
	}
	res, err := s.write.Run(ctx, s.rdb, keys, args...).Int()
	if err != nil {
		return false, fmt.Errorf("writing window of shard %d at offset %d: %w", sh, w.LastOffset, err)
	}
	if res == -1 {
		return false, fmt.Errorf("writing window of shard %d at offset %d after offset %d: %w", sh, w.LastOffset, w.Written-1, ErrStateLost)
	}
	return res == 1, nil
}

// initShards gives every shard without bookkeeping an empty one marked as rebuilding:
// until its owner has checked the shard against the log (FinishRebuild), readers are
// told the state is being rebuilt rather than shown an empty shard as the truth.
const initShardsLua = `if redis.call('HSETNX', KEYS[1], 'offset', '-1') == 1 then
  redis.call('HSET', KEYS[1], 'rebuilding', '1', 'epoch', ARGV[1])
end
return 0`

// Bookkeeping is what Redis holds of a shard's bookkeeping.
type Bookkeeping struct {
	// Exists is false when Redis holds none: it lost the shard (or no aggregator has
	// registered the layout yet).
	Exists bool
	// Offset is the last offset the shard holds, -1 for none.
	Offset int64
	// Rebuilding is set while the shard is marked as being rebuilt.
	Rebuilding bool
}

// ShardBookkeeping reads shard sh's bookkeeping.
func (s *Store) ShardBookkeeping(ctx context.Context, sh int) (Bookkeeping, error) {
	vals, err := s.rdb.HMGet(ctx, s.keys.Meta(sh), "offset", "rebuilding").Result()
	if err != nil {
		return Bookkeeping{}, fmt.Errorf("reading the bookkeeping of shard %d: %w", sh, err)
	}
	b := Bookkeeping{Offset: -1, Rebuilding: vals[1] != nil}
	if v, ok := vals[0].(string); ok {
		b.Exists = true
		if b.Offset, err = strconv.ParseInt(v, 10, 64); err != nil {
			return Bookkeeping{}, fmt.Errorf("shard %d offset %q: %w", sh, v, err)
		}
	}
	return b, nil
}

// MarkRebuilding marks shard sh as being rebuilt: readers of it answer ErrRebuilding
// until FinishRebuild.
func (s *Store) MarkRebuilding(ctx context.Context, sh int) error {
	if err := s.rdb.HSet(ctx, s.keys.Meta(sh), "rebuilding", "1").Err(); err != nil {
		return fmt.Errorf("marking shard %d as rebuilding: %w", sh, err)
	}
	return nil
}

// FinishRebuild marks shard sh as whole again: its owner found it consistent with the
// log, or rebuilt it from there.
func (s *Store) FinishRebuild(ctx context.Context, sh int) error {
	if err := s.rdb.HDel(ctx, s.keys.Meta(sh), "rebuilding").Err(); err != nil {
		return fmt.Errorf("clearing the rebuilding mark of shard %d: %w", sh, err)
	}
	return nil
}

// CheckShards returns ErrRebuilding when one of shards 0 to n-1 has no state in Redis
// or is being rebuilt: a reader of bitmaps or counts must not answer from it.
func (s *Store) CheckShards(ctx context.Context, n int) error {
	_, err := s.GuardShards(ctx, n)
	return err
}

// ShardsGuard is the bookkeeping of shards 0 to n-1 as a reader found it whole before
// a read of several round trips (a listing page, a filter); Unchanged tells afterwards
// whether Redis lost any of them meanwhile.
type ShardsGuard struct {
	epochs []any
}

// GuardShards returns ErrRebuilding as CheckShards does, and otherwise what Unchanged
// compares.
func (s *Store) GuardShards(ctx context.Context, n int) (ShardsGuard, error) {
	g := ShardsGuard{epochs: make([]any, n)}
	vals, err := s.readMeta(ctx, n)
	if err != nil {
		return g, err
	}
	for sh, v := range vals {
		if err := shardUsable(sh, v); err != nil {
			return g, err
		}
		g.epochs[sh] = v[2]
	}
	return g, nil
}

// Unchanged returns ErrRebuilding when one of g's shards is no longer whole, or is a
// new life of it (lost and registered again), since GuardShards: what was read in
// between may be partial.
func (s *Store) Unchanged(ctx context.Context, g ShardsGuard) error {
	vals, err := s.readMeta(ctx, len(g.epochs))
	if err != nil {
		return err
	}
	for sh, v := range vals {
		if err := sameWholeShard(sh, []any{"", nil, g.epochs[sh]}, v); err != nil {
			return err
		}
	}
	return nil
}

// readMeta reads offset, rebuilding and epoch of shards 0 to n-1 in one round trip.
func (s *Store) readMeta(ctx context.Context, n int) ([][]any, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, n)
	for sh := range n {
		cmds[sh] = pipe.HMGet(ctx, s.keys.Meta(sh), "offset", "rebuilding", "epoch")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("reading the bookkeeping of %d shards: %w", n, err)
	}
	out := make([][]any, n)
	for sh, c := range cmds {
		out[sh] = c.Val()
	}
	return out, nil
}

// newEpoch names one life of a shard's bookkeeping: the meta hash gets a new one each
// time it is created, so a reader that sees the same epoch before and after its reads
// knows Redis did not lose the shard in between (GetMany).
func newEpoch() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sameWholeShard judges a shard by its meta's offset, rebuilding and epoch fields read
// before and after a read of its keys: whole both times, and the same life of it.
func sameWholeShard(sh int, before, after []any) error {
	if err := shardUsable(sh, before); err != nil {
		return err
	}
	if err := shardUsable(sh, after); err != nil {
		return err
	}
	if before[2] != after[2] {
		return fmt.Errorf("shard %d was lost and registered again during the read: %w", sh, ErrRebuilding)
	}
	return nil
}

// shardUsable judges a shard by its meta's offset and rebuilding fields.
func shardUsable(sh int, vals []any) error {
	if len(vals) < 2 || vals[0] == nil {
		return fmt.Errorf("shard %d has no state in Redis: %w", sh, ErrRebuilding)
	}
	if vals[1] != nil {
		return fmt.Errorf("shard %d: %w", sh, ErrRebuilding)
	}
	return nil
}

// windowCall is write.lua's KEYS and ARGV for w with buckets state buckets per shard.
// KEYS name every key the script touches, all of shard w.Shard.
func (s *Store) windowCall(w *Window, buckets int) ([]string, []any, error) {
	sh := w.Shard
	// Entries grouped by bucket, so each bucket is one HSET.
	type bucket struct {
		key  string
		args []any
	}
	var states, revs []*bucket
	stateAt := make(map[int]*bucket)
	// One buffer for every state: a value stays valid when a later append moves the
	// buffer, as it keeps pointing into the old array.
	buf := make([]byte, 0, 48*len(w.Users))
	for id, u := range w.Users {
		start := len(buf)
		var err error
		if buf, err = encodeState(buf, u); err != nil {
			return nil, nil, fmt.Errorf("encoding state of %q: %w", id, err)
		}
		v := buf[start:len(buf):len(buf)]
		bi := BucketOf(id, buckets)
		b := stateAt[bi]
		if b == nil {
			b = &bucket{key: s.keys.State(sh, bi)}
			stateAt[bi] = b
			states = append(states, b)
		}
		b.args = append(b.args, id, v)
	}
	revAt := make(map[uint32]*bucket)
	for _, n := range w.NewIDs {
		b := revAt[n.Index>>revBits]
		if b == nil {
			b = &bucket{key: s.keys.RevBucket(sh, n.Index)}
			revAt[n.Index>>revBits] = b
			revs = append(revs, b)
		}
		b.args = append(b.args, revField(n.Index), n.UserID)
	}

	keys := make([]string, 0, 6+len(states)+len(revs))
	keys = append(keys, s.keys.Meta(sh), s.keys.Counts(sh), s.keys.Outbox(sh))
	for _, st := range Tracked {
		keys = append(keys, s.keys.Bitmap(sh, st))
	}
	args := make([]any, 0, 11+len(states)+len(revs)+2*len(w.Users)+2*len(w.NewIDs))
	args = append(args, w.LastOffset, w.Next)
	if w.Outbox != nil && len(w.Outbox.Changes) > 0 {
		b, err := proto.Marshal(w.Outbox)
		if err != nil {
			return nil, nil, fmt.Errorf("encoding outbox: %w", err)
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
			return nil, nil, fmt.Errorf("encoding bitmap: %w", err)
		}
		args = append(args, b)
	}
	for _, bm := range w.Bitmaps {
		args = append(args, bm.GetCardinality())
	}
	rebuilding := ""
	if w.Rebuilding {
		rebuilding = "1"
	}
	args = append(args, len(states), len(revs), w.Written-1, rebuilding)
	for _, b := range append(states, revs...) {
		keys = append(keys, b.key)
		args = append(args, len(b.args)/2)
		args = append(args, b.args...)
	}
	// The group index is declared only when the window writes groups: a script's
	// keys are what it touches.
	if len(w.Groups) > 0 {
		keys = append(keys, s.keys.GroupIndex(sh))
	}
	args = append(args, len(w.Groups))
	for g, gs := range w.Groups {
		keys = append(keys, s.keys.GroupBitmap(sh, g))
		if gs.Members.IsEmpty() {
			args = append(args, g, "", "")
			continue
		}
		var members any = ""
		if gs.MembersDirty {
			gs.Members.RunOptimize()
			b, err := gs.Members.ToBytes()
			if err != nil {
				return nil, nil, fmt.Errorf("encoding the bitmap of group %q: %w", g, err)
			}
			members = b
		}
		args = append(args, g, members, encodeGroupCounts(gs))
	}
	// Erasures last: a state bucket and a rev bucket per user, and the fields to delete
	// from them ('' for a state the window writes again).
	args = append(args, len(w.Erased))
	for _, e := range w.Erased {
		keys = append(keys, s.keys.State(sh, BucketOf(e.UserID, buckets)), s.keys.RevBucket(sh, e.Index))
		field := e.UserID
		if _, again := w.Users[e.UserID]; again {
			field = ""
		}
		args = append(args, field, revField(e.Index))
	}
	return keys, args, nil
}

// Get reads one user's state; nil, nil for a user Pulse has never seen.
func (s *Store) Get(ctx context.Context, userID string) (*presence.User, error) {
	l, err := s.loadLayout(ctx)
	if err != nil || l.shards == 0 {
		return nil, err
	}
	sh := shard.For(userID, l.shards)
	// The shard's bookkeeping on both sides of the state, as in GetMany.
	pipe := s.rdb.Pipeline()
	before := pipe.HMGet(ctx, s.keys.Meta(sh), "offset", "rebuilding", "epoch")
	state := pipe.HGet(ctx, s.keys.State(sh, BucketOf(userID, l.buckets)), userID)
	after := pipe.HMGet(ctx, s.keys.Meta(sh), "offset", "rebuilding", "epoch")
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("reading user state: %w", err)
	}
	if err := sameWholeShard(sh, before.Val(), after.Val()); err != nil {
		return nil, err
	}
	b, err := state.Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading user state: %w", err)
	}
	return decodeState(b)
}

// GetMany reads the states of ids, in order, nil for unknown users: one HMGET per
// state bucket involved, all pipelined in one round trip.
func (s *Store) GetMany(ctx context.Context, ids []string) ([]*presence.User, error) {
	out := make([]*presence.User, len(ids))
	l, err := s.loadLayout(ctx)
	if err != nil || l.shards == 0 || len(ids) == 0 {
		return out, err
	}
	refs := make([]userRef, len(ids))
	var shards []int
	seen := map[int]bool{}
	for i, id := range ids {
		refs[i] = userRef{shard: shard.For(id, l.shards), id: id}
		if !seen[refs[i].shard] {
			seen[refs[i].shard] = true
			shards = append(shards, refs[i].shard)
		}
	}
	// One round trip: each shard's bookkeeping, the states, then the bookkeeping again.
	// Redis may lose the shard between two commands of the pipeline (a FLUSHALL from
	// another client): states read after it would be missing and look like unknown
	// users. The shard is trusted only when it was whole, and of the same epoch, on
	// both sides of the state reads.
	metaFields := []string{"offset", "rebuilding", "epoch"}
	pipe := s.rdb.Pipeline()
	before := make([]*redis.SliceCmd, len(shards))
	for i, sh := range shards {
		before[i] = pipe.HMGet(ctx, s.keys.Meta(sh), metaFields...)
	}
	collect := queueHMGets(ctx, pipe, len(refs),
		func(i int) ([2]int, string) {
			return [2]int{refs[i].shard, BucketOf(refs[i].id, l.buckets)}, refs[i].id
		},
		func(k [2]int) string { return s.keys.State(k[0], k[1]) })
	after := make([]*redis.SliceCmd, len(shards))
	for i, sh := range shards {
		after[i] = pipe.HMGet(ctx, s.keys.Meta(sh), metaFields...)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("reading %d user states: %w", len(ids), err)
	}
	for i, sh := range shards {
		if err := sameWholeShard(sh, before[i].Val(), after[i].Val()); err != nil {
			return nil, err
		}
	}
	vals := collect()
	for i, v := range vals {
		if v == "" {
			continue
		}
		if out[i], err = decodeState(v); err != nil {
			return nil, fmt.Errorf("user %q: %w", ids[i], err)
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

// MarkWhole clears the rebuilding mark of shards 0 to n-1: for a state written by
// other means than the aggregators (a bulk load, a test), which is whole as written.
func (s *Store) MarkWhole(ctx context.Context, n int) error {
	for sh := range n {
		if err := s.FinishRebuild(ctx, sh); err != nil {
			return err
		}
	}
	return nil
}

// DeleteShard removes every key of shard sh: its bookkeeping first (so that no window
// write lands meanwhile: the writer's guard finds the shard lost), then its states, ids,
// bitmaps, counts and outbox. The shard's owner does it before rebuilding the shard
// from the log, so that nothing of a partial state (a lagging replica's) is folded
// into the rebuilt one. It returns how many keys it deleted.
func (s *Store) DeleteShard(ctx context.Context, sh int) (int, error) {
	deleted, err := s.rdb.Del(ctx, s.keys.Meta(sh)).Result()
	if err != nil {
		return 0, fmt.Errorf("deleting the bookkeeping of shard %d: %w", sh, err)
	}
	// SCAN lists the keys of one server. Every key of the shard is in its hash tag's
	// slot, so on a Redis Cluster the master serving that slot holds them all.
	var scanner redis.Cmdable = s.rdb
	if c, ok := s.rdb.(*redis.ClusterClient); ok {
		node, err := c.MasterForKey(ctx, s.keys.Meta(sh))
		if err != nil {
			return int(deleted), fmt.Errorf("finding the Redis node of shard %d: %w", sh, err)
		}
		scanner = node
	}
	var cursor uint64
	for {
		keys, next, err := scanner.Scan(ctx, cursor, s.keys.tag(sh)+"*", 1000).Result()
		if err != nil {
			return int(deleted), fmt.Errorf("listing the keys of shard %d: %w", sh, err)
		}
		if len(keys) > 0 {
			n, err := s.rdb.Del(ctx, keys...).Result()
			if err != nil {
				return int(deleted), fmt.Errorf("deleting the keys of shard %d: %w", sh, err)
			}
			deleted += n
		}
		if cursor = next; cursor == 0 {
			return int(deleted), nil
		}
	}
}

// ForgetShard deletes shard sh's bookkeeping alone: its owner then finds the shard
// lost and rebuilds it from the log, answering readers 503 meanwhile (what `pulsectl
// rebuild` asks for).
func (s *Store) ForgetShard(ctx context.Context, sh int) error {
	if err := s.rdb.Del(ctx, s.keys.Meta(sh)).Err(); err != nil {
		return fmt.Errorf("deleting the bookkeeping of shard %d: %w", sh, err)
	}
	return nil
}
