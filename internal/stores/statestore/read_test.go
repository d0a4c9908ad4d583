package statestore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/redis/go-redis/v9"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/shard"
	"github.com/pulse-presence/pulse/internal/platform/servertest"
)

func TestStatusOf(t *testing.T) {
	b := ShardBitmaps{roaring.BitmapOf(1, 2), nil, roaring.BitmapOf(7)}
	for _, tt := range []struct {
		index uint32
		want  presence.Status
		ok    bool
	}{{1, presence.Online, true}, {7, presence.Invisible, true}, {3, presence.StatusUnknown, false}} {
		if st, ok := b.StatusOf(tt.index); st != tt.want || ok != tt.ok {
			t.Errorf("StatusOf(%d) = %v %v, want %v %v", tt.index, st, ok, tt.want, tt.ok)
		}
	}
	if TrackedPos(presence.Offline) != -1 || TrackedPos(presence.Idle) != 1 {
		t.Errorf("TrackedPos(offline, idle) = %d, %d", TrackedPos(presence.Offline), TrackedPos(presence.Idle))
	}
	c := Counts{Online: 3, Idle: 2, Invisible: 1, Registered: 9}
	if c.Of(presence.Online) != 3 || c.Of(presence.Idle) != 2 || c.Of(presence.Invisible) != 1 || c.Of(presence.Offline) != 0 {
		t.Errorf("Counts.Of = %d %d %d %d", c.Of(presence.Online), c.Of(presence.Idle), c.Of(presence.Invisible), c.Of(presence.Offline))
	}
}

// readStore is a store under a prefix of its own in the Redis of internal/platform/servertest.Redis.
func readStore(t *testing.T) *Store {
	t.Helper()
	rdb, prefix := servertest.Redis(t, nil)
	return New(rdb, prefix)
}

// readFixture writes users with statuses into shards, one window per shard.
func readFixture(t *testing.T, s *Store, shards int, users map[string]presence.Status) map[string]*presence.User {
	t.Helper()
	ctx := context.Background()
	if err := s.RegisterShards(ctx, shards, 64); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkWhole(ctx, shards); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, len(users))
	for id := range users {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	wins := map[int]*Window{}
	out := map[string]*presence.User{}
	for _, id := range ids {
		sh := shard.For(id, shards)
		w := wins[sh]
		if w == nil {
			w = &Window{Shard: sh, LastOffset: 1, Users: map[string]*presence.User{},
				Bitmaps: [len(Tracked)]*roaring.Bitmap{roaring.New(), roaring.New(), roaring.New()}, Dirty: [len(Tracked)]bool{true, true, true}}
			wins[sh] = w
		}
		u := presence.NewUser(w.Next)
		u.Status, u.LastActive = users[id], time.UnixMicro(int64(len(out)+1)).UTC()
		w.NewIDs = append(w.NewIDs, NewID{UserID: id, Index: w.Next})
		w.Next++
		if p := TrackedPos(u.Status); p >= 0 {
			w.Bitmaps[p].Add(u.Index)
		}
		w.Users[id] = u
		out[id] = u
	}
	for _, w := range wins {
		if ok, err := s.WriteWindow(ctx, w); err != nil || !ok {
			t.Fatalf("WriteWindow = %v, %v", ok, err)
		}
	}
	return out
}

func TestReadHelpers(t *testing.T) {
	s := readStore(t)
	ctx := context.Background()
	const shards = 4
	statuses := map[string]presence.Status{}
	sts := []presence.Status{presence.Online, presence.Idle, presence.Invisible, presence.Offline}
	for i := range 40 {
		statuses[fmt.Sprintf("u-%d", i)] = sts[i%4]
	}
	users := readFixture(t, s, shards, statuses)

	// ShardCounts: per shard, matching the bitmaps.
	counts, err := s.ShardCounts(ctx, shards)
	if err != nil {
		t.Fatal(err)
	}
	var want [shards]Counts
	for id, u := range users {
		c := &want[shard.For(id, shards)]
		c.Registered++
		switch u.Status {
		case presence.Online:
			c.Online++
		case presence.Idle:
			c.Idle++
		case presence.Invisible:
			c.Invisible++
		}
	}
	if !slices.Equal(counts, want[:]) {
		t.Errorf("ShardCounts = %+v, want %+v", counts, want)
	}

	// LoadBitmaps: only the statuses asked for, by position in Tracked.
	bms, err := s.LoadBitmaps(ctx, []int{2, 0}, []presence.Status{presence.Idle, presence.Online})
	if err != nil {
		t.Fatal(err)
	}
	for k, sh := range []int{2, 0} {
		if bms[k][2] != nil {
			t.Errorf("shard %d: invisible loaded without being asked for", sh)
		}
		for id, u := range users {
			if shard.For(id, shards) != sh {
				continue
			}
			st, ok := bms[k].StatusOf(u.Index)
			wantOK := u.Status == presence.Online || u.Status == presence.Idle
			if ok != wantOK || ok && st != u.Status {
				t.Errorf("shard %d %s: StatusOf = %v %v, want %v", sh, id, st, ok, u.Status)
			}
		}
	}
	if _, err := s.LoadBitmaps(ctx, []int{0}, []presence.Status{presence.Offline}); err == nil {
		t.Error("LoadBitmaps of offline, which has no bitmap, did not fail")
	}

	// Locate, then UserIDs back: the round trip gives the ids again.
	ids := []string{"u-3", "nobody", "u-17", "u-3", "u-38"}
	locs, err := s.Locate(ctx, shards, ids)
	if err != nil {
		t.Fatal(err)
	}
	var batches []ShardIndexes
	for i, l := range locs {
		u, known := users[ids[i]]
		if l.Shard != shard.For(ids[i], shards) || l.Known != known || known && l.Index != u.Index {
			t.Errorf("Locate(%s) = %+v, want shard %d index %v", ids[i], l, shard.For(ids[i], shards), u)
		}
		if l.Known {
			batches = append(batches, ShardIndexes{Shard: l.Shard, Indexes: []uint32{l.Index, 1 << 30}})
		}
	}
	back, err := s.UserIDs(ctx, append(batches, ShardIndexes{Shard: 1}))
	if err != nil {
		t.Fatal(err)
	}
	k := 0
	for i, l := range locs {
		if !l.Known {
			continue
		}
		if back[k][0] != ids[i] || back[k][1] != "" {
			t.Errorf("UserIDs(%+v) = %q, want [%q \"\"]", batches[k], back[k], ids[i])
		}
		k++
	}
	if len(back[k]) != 0 {
		t.Errorf("UserIDs of no index = %q", back[k])
	}

	// LoadUserStates: states by batch, nil for users without one.
	sh := shard.For("u-5", shards)
	states, err := s.LoadUserStates(ctx, []ShardUsers{{Shard: sh, IDs: []string{"u-5", "nobody"}}, {Shard: 0}})
	if err != nil {
		t.Fatal(err)
	}
	if got := states[0][0]; got == nil || got.Status != users["u-5"].Status || !got.LastActive.Equal(users["u-5"].LastActive) {
		t.Errorf("LoadUserStates(u-5) = %+v, want %+v", got, users["u-5"])
	}
	if states[0][1] != nil || len(states[1]) != 0 {
		t.Errorf("LoadUserStates of nobody = %+v, %v", states[0][1], states[1])
	}
}

// A pipeline that cannot reach Redis fails with the batch named, never hangs.
func TestReadHelpersReportUnreachableRedis(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})
	defer rdb.Close()
	s := New(rdb, "none")
	ctx := context.Background()
	if _, err := s.LoadBitmaps(ctx, []int{0}, Tracked[:]); err == nil {
		t.Error("LoadBitmaps did not fail")
	}
	if _, err := s.Locate(ctx, 4, []string{"a"}); err == nil {
		t.Error("Locate did not fail")
	}
	if _, err := s.UserIDs(ctx, []ShardIndexes{{Shard: 0, Indexes: []uint32{1}}}); err == nil {
		t.Error("UserIDs did not fail")
	}
	if _, err := s.LoadUserStates(ctx, []ShardUsers{{Shard: 0, IDs: []string{"a"}}}); err == nil {
		t.Error("LoadUserStates did not fail")
	}
	if _, err := s.ShardCounts(ctx, 2); err == nil {
		t.Error("ShardCounts did not fail")
	}
}

// lossHook runs GetMany's pipeline in two parts, with the shard's loss in between, as
// a FLUSHALL from another client may fall between two commands of it.
type lossHook struct {
	armed bool
	split int
	loss  func(context.Context)
}

func (h *lossHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *lossHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *lossHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.armed || len(cmds) <= h.split {
			return next(ctx, cmds)
		}
		h.armed = false
		if err := next(ctx, cmds[:h.split]); err != nil {
			return err
		}
		h.loss(ctx)
		return next(ctx, cmds[h.split:])
	}
}

// GetMany never answers from a shard Redis lost while it read: after the bookkeeping
// was read and before the states were, the shard is deleted (its states read as
// absent, unknown users), or deleted and registered again and marked whole (a new
// epoch). Either is ErrRebuilding, never a nil state with no error.
func TestGetManyRefusesAShardLostDuringTheRead(t *testing.T) {
	ctx := context.Background()
	users := map[string]presence.Status{"ann": presence.Online, "bob": presence.Idle, "cat": presence.Online}
	ids := []string{"ann", "bob", "cat"}
	for _, tt := range []struct {
		name string
		loss func(context.Context, *Store) error
	}{
		{"deleted", func(ctx context.Context, s *Store) error {
			_, err := s.DeleteShard(ctx, 0)
			return err
		}},
		{"deleted and registered again", func(ctx context.Context, s *Store) error {
			if _, err := s.DeleteShard(ctx, 0); err != nil {
				return err
			}
			if err := s.RegisterShards(ctx, 1, 64); err != nil {
				return err
			}
			return s.FinishRebuild(ctx, 0)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rdb, prefix := servertest.Redis(t, nil)
			s := New(rdb, prefix)
			readFixture(t, s, 1, users)
			if got, err := s.GetMany(ctx, ids); err != nil || got[0] == nil || got[1] == nil || got[2] == nil {
				t.Fatalf("GetMany before any loss = %v, %v", got, err)
			}
			// The pipeline's first command is the one shard's bookkeeping.
			h := &lossHook{armed: true, split: 1, loss: func(ctx context.Context) {
				if err := tt.loss(ctx, s); err != nil {
					t.Error(err)
				}
			}}
			rdb.AddHook(h)
			defer func() { h.armed = false }()
			got, err := s.GetMany(ctx, ids)
			if h.armed {
				t.Fatal("the hook never split GetMany's pipeline")
			}
			if !errors.Is(err, ErrRebuilding) {
				t.Fatalf("GetMany across the loss = %v, %v; want ErrRebuilding", got, err)
			}
		})
	}
}

// A guard taken before a read of several round trips finds a shard lost meanwhile,
// also when it was registered again and marked whole since (a new epoch).
func TestShardsGuard(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := servertest.Redis(t, nil)
	s := New(rdb, prefix)
	readFixture(t, s, 2, map[string]presence.Status{"ann": presence.Online})
	g, err := s.GuardShards(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Unchanged(ctx, g); err != nil {
		t.Fatalf("Unchanged with nothing lost = %v", err)
	}
	if _, err := s.DeleteShard(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Unchanged(ctx, g); !errors.Is(err, ErrRebuilding) {
		t.Fatalf("Unchanged after shard 1 was deleted = %v, want ErrRebuilding", err)
	}
	if err := s.RegisterShards(ctx, 2, 64); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkWhole(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Unchanged(ctx, g); !errors.Is(err, ErrRebuilding) {
		t.Fatalf("Unchanged after shard 1 was registered again = %v, want ErrRebuilding", err)
	}
	if g, err = s.GuardShards(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Unchanged(ctx, g); err != nil {
		t.Fatalf("a new guard = %v", err)
	}
}
