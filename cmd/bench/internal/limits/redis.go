package limits

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pulse-presence/pulse/cmd/bench/internal/harness"
	"github.com/pulse-presence/pulse/cmd/bench/internal/probe"
	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
	"github.com/pulse-presence/pulse/cmd/bench/internal/scale"
	"github.com/pulse-presence/pulse/internal/domain/shard"
	"github.com/pulse-presence/pulse/internal/platform/redisx"
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
func redisLimit(ctx context.Context, env *harness.Env) (*report.RedisLimit, error) {
	rdb := scale.Client(env)
	defer rdb.Close()
	shards, _, err := env.Lag.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	cleanup, err := scale.ClearPrefixes(ctx, env, rdb, 5*time.Minute, limitsLoopPrefix, limitsWindowPrefix)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	res := &report.RedisLimit{Shards: shards, UsersPerWindow: env.Cfg.ScaleWindow, Writers: min(env.Cfg.ScaleWorkers, shards),
		Commands: "per window: HSET of each state bucket and rev bucket written, SET of the shard's online bitmap, HSET of its counts, HSET of its meta; one pipeline"}

	// Pulse's write first: it also gives the encoded states' size the loop writes.
	ws := statestore.New(rdb, limitsWindowPrefix)
	if err := ws.RegisterShards(ctx, shards, statestore.DefaultBuckets); err != nil {
		return nil, err
	}
	if err := ws.MarkWhole(ctx, shards); err != nil {
		return nil, err
	}
	if res.WriteWindow, err = writeWindows(ctx, env, shards, func(ctx context.Context, w *statestore.Window) error {
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
	if _, err := redisx.DeletePrefix(ctx, rdb, limitsWindowPrefix); err != nil {
		return nil, err
	}

	keys := statestore.Keys{Prefix: limitsLoopPrefix}
	state := make([]byte, int(res.StateBytes+0.5))
	for i := range state {
		state[i] = byte('a' + i%26)
	}
	if res.Loop, err = writeWindows(ctx, env, shards, func(ctx context.Context, w *statestore.Window) error {
		return loopWrite(ctx, rdb, keys, buckets, state, w)
	}); err != nil {
		return nil, fmt.Errorf("the minimal loop: %w", err)
	}
	fmt.Fprintf(env.Out, "      minimal loop %s users/s; statestore.WriteWindow %s users/s (windows of %d users, %d writers)\n",
		report.Num(res.Loop.UsersPerSec), report.Num(res.WriteWindow.UsersPerSec), res.UsersPerWindow, res.Writers)
	return res, nil
}

// loopWrite is the minimal client's window: the keys WriteWindow writes, without the
// script's guard, in one pipeline.
func loopWrite(ctx context.Context, rdb redis.UniversalClient, keys statestore.Keys, buckets int, state []byte, w *statestore.Window) error {
	sh := w.Shard
	byBucket := map[int][]any{}
	for id := range w.Users {
		bk := statestore.BucketOf(id, buckets)
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

// meanStateBytes samples the encoded states WriteWindow wrote (of users u0 …) and
// answers their mean length.
func meanStateBytes(ctx context.Context, rdb redis.UniversalClient, keys statestore.Keys, shards, buckets int) (float64, error) {
	var sum, n int64
	for i := 0; i < 2000 && n < 200; i++ {
		id := scale.UserID(i)
		l, err := rdb.HStrLen(ctx, keys.State(shard.For(id, shards), statestore.BucketOf(id, buckets)), id).Result()
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

// writeWindows writes windows of -scale-window users with write from -scale-workers
// writers (scale.WriteWindows) for -limits-time or -limits-redis-users users.
func writeWindows(ctx context.Context, env *harness.Env, shards int, write func(context.Context, *statestore.Window) error) (report.RedisRun, error) {
	before, start := env.CPU(), time.Now()
	users, windows, err := scale.WriteWindows(ctx, env.Cfg.LimitsRedisUsers, shards, env.Cfg.ScaleWindow, env.Cfg.ScaleWorkers,
		env.Cfg.ScaleOnline, start.Add(env.Cfg.LimitsTime), write)
	if err != nil {
		return report.RedisRun{}, err
	}
	run := report.RedisRun{Users: int(users), Windows: int(windows), Seconds: time.Since(start).Seconds()}
	if run.Seconds > 0 {
		run.UsersPerSec = float64(run.Users) / run.Seconds
		run.RedisCPUCore = probe.Delta(before, env.CPU())["redis"] / run.Seconds
	}
	return run, nil
}
