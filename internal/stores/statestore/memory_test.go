package statestore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/redis/go-redis/v9"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/shard"
	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/redisx"
)

// maxBytesPerUser is the target: half of the naive layout's 192 bytes per registered
// user (a two-field hash per user and a sorted set of the online ones).
const maxBytesPerUser = 96

// Redis memory per registered user, measured: 200,000 users with the bench's minimal
// states (cmd/bench loadPulse: index, status, times, offset; 30% online), 16 shards,
// written window by window as the aggregator does, against used_memory's growth. The
// bucket count is scaled to what 1M and 10M users get from DefaultBuckets, so the
// buckets are as full as they would be there: 1M is the worse case (7.6 users a
// bucket, the per-key cost shared by fewer). This is a measurement of bytes, not of
// time, so it is stable; it assumes nothing else writes to that Redis meanwhile.
func TestMemoryPerRegisteredUser(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 400,000 users to Redis")
	}
	for _, emulated := range []int{1_000_000, 10_000_000} {
		t.Run(fmt.Sprintf("bucket fill of %dM users", emulated/1_000_000), func(t *testing.T) {
			const users, shards = 200_000, 16
			perUser := measureLoad(t, users, shards, DefaultBuckets*users/emulated)
			if perUser > maxBytesPerUser {
				t.Errorf("%.1f B of Redis memory per registered user, want at most %d", perUser, maxBytesPerUser)
			}
		})
	}
}

// measureLoad writes users into a fresh prefix and returns used_memory's growth per
// user, logging the breakdown by key family.
func measureLoad(t *testing.T, users, shards, buckets int) float64 {
	s := readStore(t)
	ctx := context.Background()
	mem0 := usedMemory(t, s.rdb)

	// A client of its own, closed before measuring, so its connections' buffers on the
	// server are not counted.
	loadRDB := redisx.NewClient(redisx.ConfigFromEnv(config.NewEnv(nil)))
	load := New(loadRDB, s.keys.Prefix)
	if err := load.RegisterShards(ctx, shards, buckets); err != nil {
		t.Fatal(err)
	}
	if err := load.MarkWhole(ctx, shards); err != nil {
		t.Fatal(err)
	}
	const window = 5000
	now := time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)
	type shardState struct {
		next    uint32
		windows int64
		online  *roaring.Bitmap
		pending []int
	}
	st := make([]shardState, shards)
	for sh := range st {
		st[sh].online = roaring.New()
	}
	online := 0
	flush := func(sh int) {
		s := &st[sh]
		win := &Window{Shard: sh, LastOffset: s.windows, Users: make(map[string]*presence.User, len(s.pending)),
			Bitmaps: [len(Tracked)]*roaring.Bitmap{s.online, roaring.New(), roaring.New()}, Dirty: [len(Tracked)]bool{true}}
		for _, i := range s.pending {
			id := "u" + strconv.Itoa(i)
			u := &presence.User{Index: s.next, Status: presence.Offline, Offset: s.windows}
			if splitmix(uint64(i))%1_000_000 < 300_000 {
				u.Status = presence.Online
				u.LastSeen = now.Add(-time.Duration(splitmix(uint64(i))%30_000) * time.Millisecond)
				u.LastUpdated, u.LastActive = u.LastSeen, u.LastSeen
				s.online.Add(s.next)
				online++
			} else {
				u.LastUpdated = now.Add(-time.Duration(splitmix(uint64(i))%86_400) * time.Second)
				u.LastSeen, u.LastActive = u.LastUpdated, u.LastUpdated
			}
			win.NewIDs = append(win.NewIDs, NewID{UserID: id, Index: s.next})
			win.Users[id] = u
			s.next++
		}
		win.Next = s.next
		s.windows++
		s.pending = s.pending[:0]
		if ok, err := load.WriteWindow(ctx, win); err != nil || !ok {
			t.Fatalf("WriteWindow = %v, %v", ok, err)
		}
	}
	for i := range users {
		sh := shard.For("u"+strconv.Itoa(i), shards)
		if st[sh].pending = append(st[sh].pending, i); len(st[sh].pending) == window {
			flush(sh)
		}
	}
	for sh := range st {
		if len(st[sh].pending) > 0 {
			flush(sh)
		}
	}
	loadRDB.Close()

	c, err := s.Counts(ctx)
	if err != nil || c.Registered != uint64(users) || c.Online != uint64(online) {
		t.Fatalf("Counts after the load = %+v, %v; want %d registered, %d online", c, err, users, online)
	}
	perShard, err := s.Buckets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var stateKeys, revKeys []string
	for sh := range shards {
		for b := range perShard {
			stateKeys = append(stateKeys, s.keys.State(sh, b))
		}
		for i := uint32(0); i < st[sh].next; i += 1 << revBits {
			revKeys = append(revKeys, s.keys.RevBucket(sh, i))
		}
	}
	stateBytes, stateOther := keyFamily(t, s.rdb, stateKeys)
	revBytes, revOther := keyFamily(t, s.rdb, revKeys)
	// Minimal states are far below hash-max-listpack-value and buckets far below
	// hash-max-listpack-entries: a regular hash here would be a layout bug.
	if stateOther+revOther > 0 {
		t.Errorf("%d state and %d rev buckets are not listpacks", stateOther, revOther)
	}

	mem1 := usedMemory(t, s.rdb)
	perUser := float64(mem1-mem0) / float64(users)
	t.Logf("%d users, %d shards, %d state buckets per shard (%.1f users each), %d rev buckets: used_memory grew %d B, %.1f B per registered user; "+
		"MEMORY USAGE of state buckets %.1f B/user, rev buckets %.1f B/user, the rest (bitmaps, meta, main dict, allocator rounding) %.1f B/user",
		users, shards, perShard, float64(users)/float64(perShard*shards), len(revKeys), mem1-mem0, perUser,
		float64(stateBytes)/float64(users), float64(revBytes)/float64(users), float64(mem1-mem0-stateBytes-revBytes)/float64(users))
	return perUser
}

// keyFamily sums MEMORY USAGE of keys and counts those not encoded as a listpack
// (ziplist before Redis 7).
func keyFamily(t *testing.T, rdb redis.UniversalClient, keys []string) (bytes int64, other int) {
	t.Helper()
	ctx := context.Background()
	for lo := 0; lo < len(keys); lo += 1000 {
		pipe := rdb.Pipeline()
		var mems []*redis.IntCmd
		var encs []*redis.StringCmd
		for _, k := range keys[lo:min(lo+1000, len(keys))] {
			mems = append(mems, pipe.MemoryUsage(ctx, k))
			encs = append(encs, pipe.ObjectEncoding(ctx, k))
		}
		// A bucket no user hashed to does not exist: redis.Nil.
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("MEMORY USAGE and OBJECT ENCODING: %v", err)
		}
		for i := range mems {
			bytes += mems[i].Val()
			if e := encs[i].Val(); e != "" && e != "listpack" && e != "ziplist" {
				other++
			}
		}
	}
	return bytes, other
}

// usedMemory is INFO's used_memory once Redis has freed what it frees lazily.
func usedMemory(t *testing.T, rdb redis.UniversalClient) int64 {
	t.Helper()
	ctx := context.Background()
	for range 100 {
		info, err := rdb.Info(ctx, "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		f := map[string]string{}
		for line := range strings.SplitSeq(info, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
				f[k] = v
			}
		}
		if f["lazyfree_pending_objects"] == "0" {
			n, err := strconv.ParseInt(f["used_memory"], 10, 64)
			if err != nil {
				t.Fatalf("used_memory %q: %v", f["used_memory"], err)
			}
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("Redis still freeing objects lazily after 5s")
	return 0
}

// splitmix scatters neighbouring integers (SplitMix64's finaliser), as cmd/bench does
// to spread the online users over the index space.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
