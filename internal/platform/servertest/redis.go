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
		if _, err := redisx.DeletePrefix(context.Background(), rdb, prefix); err != nil {
			tb.Errorf("deleting the test's keys %s:*: %v", prefix, err)
		}
		rdb.Close()
	})
	return rdb, prefix
}
