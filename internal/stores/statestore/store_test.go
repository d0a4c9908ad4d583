package statestore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/redis/go-redis/v9"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/shard"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

// writer folds events into windows the way the aggregator does: per shard, a new user
// gets the shard's next index, status changes move users between bitmaps, and every
// window's offset is past the last.
type writer struct {
	t      *testing.T
	s      *Store
	shards int
	next   []uint32
	offset []int64
	bms    [][len(Tracked)]*roaring.Bitmap
	users  map[string]*presence.User
}

func newWriter(t *testing.T, s *Store, shards, buckets int) *writer {
	t.Helper()
	if err := s.RegisterShards(context.Background(), shards, buckets); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkWhole(context.Background(), shards); err != nil {
		t.Fatal(err)
	}
	w := &writer{t: t, s: s, shards: shards, next: make([]uint32, shards), offset: make([]int64, shards),
		bms: make([][len(Tracked)]*roaring.Bitmap, shards), users: map[string]*presence.User{}}
	for sh := range shards {
		for i := range Tracked {
			w.bms[sh][i] = roaring.New()
		}
	}
	return w
}

// window folds events, all of shard sh, into the shard's next window.
func (w *writer) window(sh int, events []*presence.Event) *Window {
	w.offset[sh] += int64(len(events))
	win := &Window{Shard: sh, LastOffset: w.offset[sh], Users: map[string]*presence.User{},
		Outbox: &pulsev1.ChangeBatch{Partition: int32(sh), FirstOffset: w.offset[sh] - int64(len(events)) + 1, LastOffset: w.offset[sh]}}
	for i := range Tracked {
		win.Bitmaps[i] = w.bms[sh][i].Clone()
		win.Dirty[i] = true
	}
	for _, e := range events {
		u, ok := w.users[e.UserID]
		if !ok {
			u = presence.NewUser(w.next[sh])
			win.NewIDs = append(win.NewIDs, NewID{UserID: e.UserID, Index: w.next[sh]})
			w.next[sh]++
			w.users[e.UserID] = u
		}
		out := u.Apply(e)
		u.Offset = w.offset[sh]
		win.Users[e.UserID] = u
		if out.Changed {
			if p := TrackedPos(out.Previous); p >= 0 {
				win.Bitmaps[p].Remove(u.Index)
			}
			if p := TrackedPos(out.Current); p >= 0 {
				win.Bitmaps[p].Add(u.Index)
			}
			win.Outbox.Changes = append(win.Outbox.Changes, &pulsev1.Change{UserId: e.UserID, EventId: e.ID})
		}
	}
	win.Next = w.next[sh]
	w.bms[sh] = win.Bitmaps
	return win
}

// write folds events into one window per shard involved and writes them.
func (w *writer) write(events ...*presence.Event) {
	w.t.Helper()
	byShard := map[int][]*presence.Event{}
	for _, e := range events {
		sh := shard.For(e.UserID, w.shards)
		byShard[sh] = append(byShard[sh], e)
	}
	for _, sh := range slices.Sorted(maps.Keys(byShard)) {
		if ok, err := w.s.WriteWindow(context.Background(), w.window(sh, byShard[sh])); err != nil || !ok {
			w.t.Fatalf("WriteWindow of shard %d = %v, %v; want written", sh, ok, err)
		}
	}
}

// want is id's state as a reader must see it: the stored form of the writer's state
// (whole microseconds, UTC), made by protobuf's path, independent of the codec.
func (w *writer) want(id string) *presence.User {
	u, ok := w.users[id]
	if !ok {
		return nil
	}
	// pulse.v1.UserState has no public times: they are the writer's, made whole
	// microseconds in UTC.
	want := presence.UserFromPB(u.ToPB())
	us := func(t time.Time) time.Time { return presence.FromMicros(presence.Micros(t)) }
	want.Public = presence.Public{LastUpdated: us(u.Public.LastUpdated), LastActive: us(u.Public.LastActive), LastSeen: us(u.Public.LastSeen)}
	for i, d := range u.Devices {
		want.Devices[i].PublicLastSeen, want.Devices[i].Hidden = us(d.PublicLastSeen), d.Hidden
	}
	return want
}

// events makes n users' events: devices d0..d2, every status, some users with two
// devices and a heartbeat, all at distinct times.
func events(n int, base time.Time) []*presence.Event {
	sts := []presence.Status{presence.Online, presence.Idle, presence.Invisible, presence.Offline, presence.Online}
	var out []*presence.Event
	for i := range n {
		id := fmt.Sprintf("user-%d", i)
		t := base.Add(time.Duration(i) * time.Millisecond)
		out = append(out, &presence.Event{ID: fmt.Sprintf("e%d", i), UserID: id, Kind: presence.KindStatus,
			Status: sts[i%len(sts)], DeviceID: fmt.Sprintf("d%d", i%3), ReceivedAt: t, Source: presence.SourceAPI})
		if i%4 == 0 {
			out = append(out, &presence.Event{ID: fmt.Sprintf("h%d", i), UserID: id, Kind: presence.KindHeartbeat,
				DeviceID: "0f8fad5b-d9cb-469f-a165-70867728950e", ReceivedAt: t.Add(time.Second), Source: presence.SourceAPI})
		}
	}
	return out
}

// Every reader returns exactly the states a window wrote, whichever call reads them:
// users spread over several shards, several state buckets per shard and more than one
// rev bucket per shard, written in two windows per shard (new users, then changes).
func TestWindowThenEveryReader(t *testing.T) {
	s := readStore(t)
	ctx := context.Background()
	const shards, buckets = 3, 24
	w := newWriter(t, s, shards, buckets)
	base := time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)
	evs := events(900, base)
	w.write(evs...)
	// The second window changes a third of the users, on a device they already have.
	var again []*presence.Event
	for i := 0; i < 900; i += 3 {
		again = append(again, &presence.Event{ID: fmt.Sprintf("a%d", i), UserID: fmt.Sprintf("user-%d", i), Kind: presence.KindActivity,
			DeviceID: fmt.Sprintf("d%d", i%3), ReceivedAt: base.Add(time.Hour + time.Duration(i)*time.Microsecond), Source: presence.SourceAPI})
	}
	w.write(again...)

	ids := slices.Sorted(maps.Keys(w.users))
	asked := append(slices.Clone(ids), "nobody", "user-900")

	// A reader that did not register learns the layout from Redis.
	r := New(s.rdb, s.keys.Prefix)
	if n, err := r.Shards(ctx); err != nil || n != shards {
		t.Fatalf("Shards = %d, %v; want %d", n, err, shards)
	}
	if b, err := r.Buckets(ctx); err != nil || b != buckets/shards {
		t.Fatalf("Buckets = %d, %v; want %d", b, err, buckets/shards)
	}

	// Get and GetMany.
	for _, id := range asked {
		got, err := r.Get(ctx, id)
		if err != nil || !reflect.DeepEqual(got, w.want(id)) {
			t.Fatalf("Get(%s) = %+v, %v\nwant %+v", id, got, err, w.want(id))
		}
	}
	many, err := r.GetMany(ctx, asked)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range asked {
		if !reflect.DeepEqual(many[i], w.want(id)) {
			t.Fatalf("GetMany[%d] (%s) = %+v\nwant %+v", i, id, many[i], w.want(id))
		}
	}

	// LoadUsers and LoadUserStates, shard by shard.
	var batches []ShardUsers
	for sh := range shards {
		var mine []string
		for _, id := range asked {
			if shard.For(id, shards) == sh {
				mine = append(mine, id)
			}
		}
		batches = append(batches, ShardUsers{Shard: sh, IDs: mine})
		got, err := r.LoadUsers(ctx, sh, mine)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]*presence.User{}
		for _, id := range mine {
			if u := w.want(id); u != nil {
				want[id] = u
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("LoadUsers(shard %d) differs: got %d users, want %d", sh, len(got), len(want))
		}
	}
	states, err := r.LoadUserStates(ctx, append(batches, ShardUsers{Shard: 1}))
	if err != nil {
		t.Fatal(err)
	}
	for k, b := range batches {
		for j, id := range b.IDs {
			if !reflect.DeepEqual(states[k][j], w.want(id)) {
				t.Fatalf("LoadUserStates[%d][%d] (%s) = %+v\nwant %+v", k, j, id, states[k][j], w.want(id))
			}
		}
	}
	if len(states[len(batches)]) != 0 {
		t.Fatalf("LoadUserStates of no ids = %v", states[len(batches)])
	}

	// Locate, then UserIDs of every index of every shard and one past the end.
	locs, err := r.Locate(ctx, shards, asked)
	if err != nil {
		t.Fatal(err)
	}
	byIndex := make([]map[uint32]string, shards)
	for sh := range byIndex {
		byIndex[sh] = map[uint32]string{}
	}
	for i, id := range asked {
		u := w.users[id]
		if l := locs[i]; l.Shard != shard.For(id, shards) || l.Known != (u != nil) || u != nil && l.Index != u.Index {
			t.Fatalf("Locate(%s) = %+v, want shard %d, user %+v", id, l, shard.For(id, shards), u)
		}
		if u != nil {
			byIndex[locs[i].Shard][u.Index] = id
		}
	}
	var idx []ShardIndexes
	for sh := range shards {
		if w.next[sh] <= 1<<revBits {
			t.Fatalf("shard %d has %d users, too few for two rev buckets", sh, w.next[sh])
		}
		b := ShardIndexes{Shard: sh}
		for i := uint32(0); i <= w.next[sh]; i++ {
			b.Indexes = append(b.Indexes, i)
		}
		idx = append(idx, b)
	}
	back, err := r.UserIDs(ctx, idx)
	if err != nil {
		t.Fatal(err)
	}
	for k, b := range idx {
		for j, i := range b.Indexes {
			if back[k][j] != byIndex[b.Shard][i] {
				t.Fatalf("UserIDs shard %d index %d = %q, want %q", b.Shard, i, back[k][j], byIndex[b.Shard][i])
			}
		}
	}

	// LiveUsers: exactly the users in a bitmap, with their states.
	for sh := range shards {
		loaded, err := r.LoadShard(ctx, sh)
		if err != nil {
			t.Fatal(err)
		}
		if loaded.Next != w.next[sh] || loaded.Offset != w.offset[sh] {
			t.Fatalf("LoadShard(%d) = next %d offset %d, want %d %d", sh, loaded.Next, loaded.Offset, w.next[sh], w.offset[sh])
		}
		got := map[string]*presence.User{}
		if err := r.LiveUsers(ctx, sh, loaded.Bitmaps[:], func(id string, u *presence.User) { got[id] = u }); err != nil {
			t.Fatal(err)
		}
		want := map[string]*presence.User{}
		for id, u := range w.users {
			if shard.For(id, shards) == sh && TrackedPos(u.Status) >= 0 {
				want[id] = w.want(id)
			}
		}
		if len(want) == 0 || !reflect.DeepEqual(got, want) {
			t.Fatalf("LiveUsers(shard %d): %d users, want %d", sh, len(got), len(want))
		}
	}

	// Counts and ShardCounts, from the bitmaps' cardinalities.
	wantCounts := make([]Counts, shards)
	for id, u := range w.users {
		c := &wantCounts[shard.For(id, shards)]
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
	sc, err := r.ShardCounts(ctx, shards)
	if err != nil || !slices.Equal(sc, wantCounts) {
		t.Fatalf("ShardCounts = %+v, %v; want %+v", sc, err, wantCounts)
	}
	total, err := r.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if total.Registered != 900 || total.Online+total.Idle+total.Invisible+total.Offline() != 900 ||
		total.Online != wantCounts[0].Online+wantCounts[1].Online+wantCounts[2].Online {
		t.Fatalf("Counts = %+v, want the sum of %+v", total, wantCounts)
	}
}

// keysUnder is every key of s's prefix with its DUMP: the exact stored bytes and
// encoding of each. On a Redis Cluster every master is scanned, as each lists only its
// own keys.
func keysUnder(t *testing.T, s *Store) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	var mu sync.Mutex
	scan := func(ctx context.Context, rdb redis.Cmdable) error {
		iter := rdb.Scan(ctx, 0, s.keys.Prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			d, err := rdb.Dump(ctx, iter.Val()).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			out[iter.Val()] = d
			mu.Unlock()
		}
		return iter.Err()
	}
	var err error
	if c, ok := s.rdb.(*redis.ClusterClient); ok {
		err = c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return scan(ctx, node) })
	} else {
		err = scan(ctx, s.rdb)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A window at an offset the shard already holds, or an older one, writes nothing at
// all: not its states, new ids, bitmaps, counts or outbox (docs/design.md guarantee 7).
func TestReplayedWindowWritesNothing(t *testing.T) {
	s := readStore(t)
	ctx := context.Background()
	const shards = 2
	w := newWriter(t, s, shards, 8)
	base := time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)
	w.write(events(300, base)...)
	before := keysUnder(t, s)

	// A replay of each shard's window with other content: every user offline again,
	// new users, empty bitmaps and outbox.
	for sh := range shards {
		for _, off := range []int64{w.offset[sh], w.offset[sh] - 1, 0} {
			replay := &Window{Shard: sh, LastOffset: off, Next: w.next[sh] + 2, Users: map[string]*presence.User{},
				NewIDs:  []NewID{{UserID: "late-1", Index: w.next[sh]}, {UserID: "late-2", Index: w.next[sh] + 1}},
				Bitmaps: [len(Tracked)]*roaring.Bitmap{roaring.New(), roaring.New(), roaring.New()}, Dirty: [len(Tracked)]bool{true, true, true},
				Outbox: &pulsev1.ChangeBatch{Changes: []*pulsev1.Change{{UserId: "late-1"}}}}
			for id := range w.users {
				if shard.For(id, shards) == sh {
					replay.Users[id] = presence.NewUser(w.users[id].Index)
				}
			}
			replay.Users["late-1"], replay.Users["late-2"] = presence.NewUser(w.next[sh]), presence.NewUser(w.next[sh]+1)
			ok, err := s.WriteWindow(ctx, replay)
			if err != nil || ok {
				t.Fatalf("replay of shard %d at offset %d = %v, %v; want not written", sh, off, ok, err)
			}
		}
	}
	after := keysUnder(t, s)
	if !maps.Equal(before, after) {
		for k := range after {
			if before[k] != after[k] {
				t.Errorf("key %s changed by a replay", k)
			}
		}
		t.Fatalf("replays changed Redis: %d keys before, %d after", len(before), len(after))
	}
	// And the next offset is written.
	w.write(&presence.Event{ID: "n", UserID: "user-1", Kind: presence.KindActivity, DeviceID: "d1", ReceivedAt: base.Add(time.Hour), Source: presence.SourceAPI})
	if got, err := s.Get(ctx, "user-1"); err != nil || !reflect.DeepEqual(got, w.want("user-1")) {
		t.Fatalf("Get after the next window = %+v, %v; want %+v", got, err, w.want("user-1"))
	}
}

// write.lua declares every key it touches, and every one carries the shard's hash
// tag, so the script is one slot's on Redis Cluster (docs/design.md guarantee 9). A bucket
// of more than 256 users in one window takes several HSETs; rev buckets fill up to 128.
func TestWindowKeysAreDeclaredAndTagged(t *testing.T) {
	s := readStore(t)
	ctx := context.Background()
	const shards = 1
	// One state bucket: 600 users in one HSET group, five rev buckets.
	w := newWriter(t, s, shards, 1)
	win := w.window(0, events(600, time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)))
	keys, _, err := s.windowCall(win, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.WriteWindow(ctx, win); err != nil || !ok {
		t.Fatalf("WriteWindow = %v, %v", ok, err)
	}
	written := slices.Sorted(maps.Keys(keysUnder(t, s)))
	written = slices.DeleteFunc(written, func(k string) bool { return k == s.keys.Shards() || k == s.keys.Buckets() })
	declared := slices.Sorted(slices.Values(keys))
	if !slices.Equal(written, declared) {
		t.Fatalf("keys written %v\nkeys declared %v", written, declared)
	}
	if len(declared) != 6+1+5 {
		t.Errorf("declared %d keys, want meta, cnt, outbox, 3 bitmaps, 1 state bucket and 5 rev buckets", len(declared))
	}
	for _, k := range declared {
		if !strings.HasPrefix(k, s.keys.Prefix+":{0}:") {
			t.Errorf("key %s lacks shard 0's hash tag", k)
		}
	}
	n, err := s.rdb.HLen(ctx, s.keys.State(0, 0)).Result()
	if err != nil || n != 600 {
		t.Fatalf("HLEN of the state bucket = %d, %v; want 600", n, err)
	}
	for i, want := range []int64{128, 128, 128, 128, 88} {
		if n, err := s.rdb.HLen(ctx, s.keys.RevBucket(0, uint32(i)<<revBits)).Result(); err != nil || n != want {
			t.Errorf("HLEN of rev bucket %d = %d, %v; want %d", i, n, err, want)
		}
	}
	for _, id := range []string{"user-0", "user-599"} {
		if got, err := s.Get(ctx, id); err != nil || !reflect.DeepEqual(got, w.want(id)) {
			t.Fatalf("Get(%s) = %+v, %v; want %+v", id, got, err, w.want(id))
		}
	}
}

func TestRegisterShards(t *testing.T) {
	s := readStore(t)
	ctx := context.Background()
	if err := s.RegisterShards(ctx, 0, 8); err == nil {
		t.Error("RegisterShards of 0 shards did not fail")
	}
	if _, err := s.WriteWindow(ctx, &Window{}); err == nil || !strings.Contains(err.Error(), "no shard and bucket counts registered") {
		t.Errorf("WriteWindow before RegisterShards = %v, want no counts registered", err)
	}
	if err := s.RegisterShards(ctx, 4, 10); err != nil {
		t.Fatal(err)
	}
	// Ten buckets over four shards: three each. Any total giving three is the same layout.
	if err := s.RegisterShards(ctx, 4, 12); err != nil {
		t.Errorf("RegisterShards of the same layout again: %v", err)
	}
	if err := s.RegisterShards(ctx, 4, 13); !errors.Is(err, ErrBucketCountMismatch) {
		t.Errorf("RegisterShards of other buckets = %v, want %v", err, ErrBucketCountMismatch)
	}
	if err := s.RegisterShards(ctx, 5, 10); !errors.Is(err, ErrShardCountMismatch) {
		t.Errorf("RegisterShards of other shards = %v, want %v", err, ErrShardCountMismatch)
	}
	for _, tt := range []struct{ total, shards, want int }{{131072, 16, 8192}, {131072, 12, 10923}, {3, 16, 1}, {1, 1, 1}} {
		if got := bucketsPerShard(tt.total, tt.shards); got != tt.want {
			t.Errorf("bucketsPerShard(%d, %d) = %d, want %d", tt.total, tt.shards, got, tt.want)
		}
	}
}

// State of the layout before buckets is refused, not read as empty: the aggregator
// would register every user again under new indexes while the bitmaps hold the old.
func TestLegacyLayoutIsRefused(t *testing.T) {
	s := readStore(t)
	ctx := context.Background()
	if err := s.rdb.Set(ctx, s.keys.Shards(), 4, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.rdb.HSet(ctx, s.keys.legacyIDs(2), "alice", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Shards(ctx); !errors.Is(err, ErrLegacyLayout) {
		t.Errorf("Shards of a legacy layout = %v, want %v", err, ErrLegacyLayout)
	}
	if err := s.RegisterShards(ctx, 4, 64); !errors.Is(err, ErrLegacyLayout) {
		t.Errorf("RegisterShards over a legacy layout = %v, want %v", err, ErrLegacyLayout)
	}
}

// Buckets must spread one shard's users evenly though a shard is itself a hash of the
// id: the bucket hash is another one.
func TestBucketsSpreadAShardsUsers(t *testing.T) {
	const shards, buckets, users = 16, 64, 64_000
	counts := make([]int, buckets)
	n := 0
	for i := range users {
		id := fmt.Sprintf("u%d", i)
		if shard.For(id, shards) != 5 {
			continue
		}
		counts[BucketOf(id, buckets)]++
		n++
	}
	mean := float64(n) / buckets
	for b, c := range counts {
		// Poisson with mean ~62: six standard deviations either side.
		if float64(c) < mean-6*8 || float64(c) > mean+6*8 {
			t.Errorf("bucket %d holds %d of shard 5's %d users, mean %.1f", b, c, n, mean)
		}
	}
	if BucketOf("anything", 1) != 0 || BucketOf("", 7) != int(uint32(2166136261)%7) {
		t.Error("bucketOf of one bucket or an empty id")
	}
}
