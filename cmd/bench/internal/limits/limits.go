// Package limits is the limits phase: what each engine Pulse is built on does alone,
// on the same servers and in the same run, for work of the same shape as Pulse's:
// Kafka's own producer, a minimal go-redis loop, a minimal gocql writer and a bare
// Echo handler. Each is a bare engine loop on purpose: it is the yardstick Pulse's
// stage is divided by, so it must not go through Pulse's code.
package limits

import (
	"context"
	"fmt"
	"time"

	"github.com/pulse-presence/pulse/cmd/bench/internal/harness"
	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
)

// Phase runs every limit; one that fails is noted and the others still run.
var Phase = harness.Phase{Name: "limits", Before: "the limits", Title: "the engines' own limits, on the same servers", Run: run}

func run(ctx context.Context, env *harness.Env) error {
	res := &report.LimitsResult{}
	env.Res.Limits = res
	for _, part := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"Kafka's producer", func(ctx context.Context) (err error) { res.Kafka, err = kafkaLimit(ctx, env); return err }},
		{"Redis window writes", func(ctx context.Context) (err error) { res.Redis, err = redisLimit(ctx, env); return err }},
		{"Cassandra rows", func(ctx context.Context) (err error) { res.Cassandra, err = cassandraLimit(ctx, env); return err }},
		{"a bare Echo handler", func(ctx context.Context) (err error) { res.Echo, err = echoLimit(ctx, env); return err }},
	} {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fmt.Fprintf(env.Out, "    limit: %s\n", part.name)
		start := time.Now()
		if err := part.run(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			env.Note("limits: %s not measured: %v", part.name, err)
			continue
		}
		fmt.Fprintf(env.Out, "      (%.0f s)\n", time.Since(start).Seconds())
	}
	return nil
}
