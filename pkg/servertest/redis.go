package servertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pulse-presence/pulse/pkg/config"
	"github.com/pulse-presence/pulse/pkg/redisx"
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
// leaves millions of keys, more than one KEYS answer should carry.
func deletePrefix(rdb redis.UniversalClient, prefix string) error {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+":*", 10_000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 10_000 {
			rdb.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		rdb.Unlink(ctx, batch...)
	}
	return iter.Err()
}
