package servertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/redisx"
)

// Redis connects to the Redis at PULSE_REDIS_ADDR (the local stack's by default) and
// returns it with a key prefix of the test's own; the prefix's keys are deleted and
// the client closed when the test ends, so tests share one Redis without meeting.
// tweak, when not nil, adjusts the client's settings first. A Redis that does not
// answer ends the test through Unavailable.
func Redis(tb testing.TB, tweak func(*redisx.Config)) (redis.UniversalClient, string) {
	tb.Helper()
	cfg := redisx.ConfigFromEnv(config.NewEnv(nil))
	if tweak != nil {
		tweak(&cfg)
	}
	rdb := redisx.NewClient(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		Unavailable(tb, "Redis", err)
	}
	prefix := fmt.Sprintf("unit-%x", rand.Uint64())
	tb.Cleanup(func() {
		if err := deletePrefix(rdb, prefix); err != nil {
			tb.Errorf("deleting the test's keys %s:*: %v", prefix, err)
		}
		rdb.Close()
	})
	return rdb, prefix
}

// deletePrefix unlinks every key under prefix, scanning in batches: a bulk-load test
// leaves millions of keys, more than one KEYS answer should carry. On a Redis Cluster
// it scans every master, each of which lists only its own keys, and unlinks them one
// command per key, as they lie in many slots.
func deletePrefix(rdb redis.UniversalClient, prefix string) error {
	ctx := context.Background()
	if c, ok := rdb.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return deleteNodePrefix(ctx, node, prefix, true)
		})
	}
	return deleteNodePrefix(ctx, rdb, prefix, false)
}

func deleteNodePrefix(ctx context.Context, rdb redis.Cmdable, prefix string, perKey bool) error {
	iter := rdb.Scan(ctx, 0, prefix+":*", 10_000).Iterator()
	var batch []string
	unlink := func() {
		if !perKey {
			rdb.Unlink(ctx, batch...)
		} else {
			pipe := rdb.Pipeline()
			for _, k := range batch {
				pipe.Unlink(ctx, k)
			}
			_, _ = pipe.Exec(ctx)
		}
		batch = batch[:0]
	}
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 10_000 {
			unlink()
		}
	}
	if len(batch) > 0 {
		unlink()
	}
	return iter.Err()
}
