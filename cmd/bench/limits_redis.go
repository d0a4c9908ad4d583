package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/redis/go-redis/v9"

	"github.com/pulse-presence/pulse/internal/domain/shard"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// Prefixes of the Redis limit's two passes, apart from any deployment's and from the
// scale phase's, and fixed so that a run that died is cleaned up by the next.
const (
	limitsLoopPrefix   = "blimr"
	limitsWindowPrefix = "blimw"
)

// redisLimit writes windows of -scale-window users of one shard, as the scale phase's
// bulk load makes them, twice for -limits-time each (at most -limits-redis-users
// users): through statestore.WriteWindow, the aggregator's write (one Lua script call),
// then with a minimal pipelined loop writing the same keys — an HSET per state bucket
// and rev bucket, a SET of the shard's online bitmap, an HSET of the counts and one of
// the meta. Both prefixes are deleted afterwards.
func (b *bench) redisLimit(ctx context.Context) (*RedisLimit, error) {
	rdb := redis.NewClient(&redis.Options{
		Addr: fmt.Sprintf("127.0.0.1:%d", b.cfg.ports.redis), PoolSize: 2 * b.cfg.scaleWorkers,
		ReadTimeout: time.Minute, WriteTimeout: time.Minute,
	})
	defer rdb.Close()
	shards, err := b.lag.partitions(ctx)
	if err != nil {
		return nil, err
	}
	clean := func(ctx context.Context) error {
		for _, p := range []string{limitsLoopPrefix, limitsWindowPrefix} {
			if _, err := deletePrefix(ctx, rdb, p); err != nil {
				return err
			}
		}
		return nil
	}
	if err := clean(ctx); err != nil {
		return nil, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		if err := clean(cctx); err != nil {
			b.note("deleting the Redis limit's keys under %s: and %s: %v", limitsLoopPrefix, limitsWindowPrefix, err)
		}
	}()
	res := &RedisLimit{Shards: shards, UsersPerWindow: b.cfg.scaleWindow, Writers: min(b.cfg.scaleWorkers, shards),
		Commands: "per window: HSET of each state bucket and rev bucket written, SET of the shard's online bitmap, HSET of its counts, HSET of its meta; one pipeline"}

	// Pulse's write first: it also gives the encoded states' size the loop writes.
	ws := statestore.New(rdb, limitsWindowPrefix)
	if err := ws.RegisterShards(ctx, shards, statestore.DefaultBuckets); err != nil {
		return nil, err
	}
	if err := ws.MarkWhole(ctx, shards); err != nil {
		return nil, err
	}
	if res.WriteWindow, err = b.writeWindows(ctx, shards, func(ctx context.Context, w *statestore.Window) error {
		_, err := ws.WriteWindow(ctx, w)
		return err
	}); err != nil {
		return nil, fmt.Errorf("statestore.WriteWindow: %w", err)
	}
	buckets, err := ws.Buckets(ctx)
	if err != nil {
		return nil, err
	}
	if res.StateBytes, err = meanStateBytes(ctx, rdb, ws.Keys(), shards, buckets); err != nil {
		return nil, err
	}
	if _, err := deletePrefix(ctx, rdb, limitsWindowPrefix); err != nil {
		return nil, err
	}

	keys := statestore.Keys{Prefix: limitsLoopPrefix}
	state := make([]byte, int(res.StateBytes+0.5))
	for i := range state {
		state[i] = byte('a' + i%26)
	}
	if res.Loop, err = b.writeWindows(ctx, shards, func(ctx context.Context, w *statestore.Window) error {
		return loopWrite(ctx, rdb, keys, buckets, state, w)
	}); err != nil {
		return nil, fmt.Errorf("the minimal loop: %w", err)
	}
	fmt.Fprintf(b.out, "      minimal loop %s users/s; statestore.WriteWindow %s users/s (windows of %d users, %d writers)\n",
		num(res.Loop.UsersPerSec), num(res.WriteWindow.UsersPerSec), res.UsersPerWindow, res.Writers)
	return res, nil
}

// loopWrite is the minimal client's window: the keys WriteWindow writes, without the
// script's guard, in one pipeline.
func loopWrite(ctx context.Context, rdb *redis.Client, keys statestore.Keys, buckets int, state []byte, w *statestore.Window) error {
	sh := w.Shard
	byBucket := map[int][]any{}
	for id := range w.Users {
		bk := fnvBucket(id, buckets)
		byBucket[bk] = append(byBucket[bk], id, state)
	}
	revs := map[uint32][]any{}
	for _, n := range w.NewIDs {
		revs[n.Index>>7] = append(revs[n.Index>>7], strconv.FormatUint(uint64(n.Index&127), 10), n.UserID)
	}
	pipe := rdb.Pipeline()
	for bk, args := range byBucket {
		pipe.HSet(ctx, keys.State(sh, bk), args...)
	}
	for blk, args := range revs {
		pipe.HSet(ctx, keys.RevBucket(sh, blk<<7), args...)
	}
	counts := make([]any, 0, 6)
	for i, st := range statestore.Tracked {
		counts = append(counts, st.String(), w.Bitmaps[i].GetCardinality())
		if !w.Dirty[i] {
			continue
		}
		w.Bitmaps[i].RunOptimize()
		bm, err := w.Bitmaps[i].ToBytes()
		if err != nil {
			return err
		}
		pipe.Set(ctx, keys.Bitmap(sh, st), bm, 0)
	}
	pipe.HSet(ctx, keys.Counts(sh), counts...)
	pipe.HSet(ctx, keys.Meta(sh), "offset", w.LastOffset, "next", w.Next)
	_, err := pipe.Exec(ctx)
	return err
}

// fnvBucket is statestore's state bucket of a user id: FNV-1a 32 modulo n.
func fnvBucket(id string, n int) int {
	if n <= 1 {
		return 0
	}
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}

// meanStateBytes samples the encoded states WriteWindow wrote (of users u0 …) and
// answers their mean length.
func meanStateBytes(ctx context.Context, rdb *redis.Client, keys statestore.Keys, shards, buckets int) (float64, error) {
	var sum, n int64
	for i := 0; i < 2000 && n < 200; i++ {
		id := scaleUserID(i)
		l, err := rdb.HStrLen(ctx, keys.State(shard.For(id, shards), fnvBucket(id, buckets)), id).Result()
		if err != nil {
			return 0, err
		}
		if l > 0 {
			sum, n = sum+l, n+1
		}
	}
	if n == 0 {
		return 0, errors.New("no state found after WriteWindow")
	}
	return float64(sum) / float64(n), nil
}

// writeWindows deals users u0, u1 … to their shards and has -scale-workers writers
// write each shard's windows of -scale-window users in order with write, until
// -limits-time passed or -limits-redis-users were written.
func (b *bench) writeWindows(ctx context.Context, shards int, write func(context.Context, *statestore.Window) error) (RedisRun, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	workers := min(b.cfg.scaleWorkers, shards)
	type job struct {
		shard int
		users []int
	}
	jobs := make([]chan job, workers)
	for i := range jobs {
		jobs[i] = make(chan job, 2)
	}
	var users, windows atomic.Int64
	now := time.Now()
	before := b.st.cpu(b.ticks)
	start := time.Now()
	deadline := start.Add(b.cfg.limitsTime)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			states := map[int]*scaleShard{}
			for j := range jobs[w] {
				if ctx.Err() != nil || time.Now().After(deadline) {
					continue
				}
				s := states[j.shard]
				if s == nil {
					s = &scaleShard{online: roaring.New()}
					states[j.shard] = s
				}
				if err := write(ctx, s.window(j.shard, j.users, b.cfg.scaleOnline, now)); err != nil {
					cancel(err)
					continue
				}
				users.Add(int64(len(j.users)))
				windows.Add(1)
			}
		})
	}
	pending := make([][]int, shards)
	for i := 0; i < b.cfg.limitsRedisUsers && ctx.Err() == nil && time.Now().Before(deadline); i++ {
		sh := shard.For(scaleUserID(i), shards)
		pending[sh] = append(pending[sh], i)
		if len(pending[sh]) >= b.cfg.scaleWindow {
			select {
			case jobs[sh%workers] <- job{sh, pending[sh]}:
			case <-ctx.Done():
			}
			pending[sh] = nil
		}
	}
	for _, ch := range jobs {
		close(ch)
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return RedisRun{}, err
	}
	run := RedisRun{Users: int(users.Load()), Windows: int(windows.Load()), Seconds: elapsed.Seconds()}
	if run.Seconds > 0 {
		run.UsersPerSec = float64(run.Users) / run.Seconds
		run.RedisCPUCore = cpuDelta(before, b.st.cpu(b.ticks))["redis"] / run.Seconds
	}
	return run, nil
}
