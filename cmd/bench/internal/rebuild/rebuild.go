// Package rebuild is the rebuild phase: every shard of the state rebuilt from the log
// by the running aggregators, as after Redis lost it (docs/design.md guarantee 10).
package rebuild

import (
	"context"
	"fmt"
	"time"

	"github.com/pulse-presence/pulse/cmd/bench/internal/harness"
	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
	"github.com/pulse-presence/pulse/internal/platform/redisx"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// Phase has the aggregators rebuild every shard from the log, as pulsectl rebuild does
// (it deletes the shards' bookkeeping), and times it to the last shard whole, polling
// every 50 ms.
type Phase struct{}

func (Phase) Name() string { return "rebuild" }

func (Phase) Run(ctx context.Context, env *harness.Env) error {
	env.Idle(ctx, "the rebuild", false)
	fmt.Fprintln(env.Out, "==> every shard rebuilt from the log (guarantee 10)")
	r, err := run(ctx, env)
	if err == nil {
		env.Res.Rebuild = r
	}
	return err
}

func run(ctx context.Context, env *harness.Env) (*report.RebuildResult, error) {
	rdb := redisx.NewClient(redisx.Config{Addrs: []string{fmt.Sprintf("127.0.0.1:%d", env.Cfg.Ports.Redis)}})
	defer rdb.Close()
	store := statestore.New(rdb, env.Cfg.Prefix)
	n, err := store.Shards(ctx)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("no shard layout under %q in Redis: nothing to rebuild", env.Cfg.Prefix)
	}
	before, err := store.Counts(ctx)
	if err != nil {
		return nil, fmt.Errorf("counting before the rebuild: %w", err)
	}
	ends, err := env.Lag.Adm.ListEndOffsets(ctx, env.Lag.Events)
	if err != nil {
		return nil, err
	}
	starts, err := env.Lag.Adm.ListStartOffsets(ctx, env.Lag.Events)
	if err != nil {
		return nil, err
	}
	res := &report.RebuildResult{Shards: n, RegisteredBefore: int64(before.Registered)}
	end := make([]int64, n)
	for s := range n {
		e, _ := ends.Lookup(env.Lag.Events, int32(s))
		st, _ := starts.Lookup(env.Lag.Events, int32(s))
		end[s] = e.Offset
		res.Records += e.Offset - st.Offset
	}
	fmt.Fprintf(env.Out, "    %d shards, %s users registered, %s records in the log\n", n, report.Num(float64(before.Registered)), report.Num(float64(res.Records)))
	start := time.Now()
	for s := range n {
		if err := store.ForgetShard(ctx, s); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	done := make([]bool, n)
	for left := n; left > 0; {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d shards rebuilt after %v: %w", n-left, n, time.Since(start).Round(time.Second), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
		for s := range n {
			if done[s] {
				continue
			}
			bk, err := store.ShardBookkeeping(ctx, s)
			if err != nil {
				return nil, err
			}
			if bk.Exists && !bk.Rebuilding && bk.Offset >= end[s]-1 {
				done[s] = true
				left--
			}
		}
	}
	res.Seconds = time.Since(start).Seconds()
	after, err := store.Counts(ctx)
	if err != nil {
		return nil, fmt.Errorf("counting after the rebuild: %w", err)
	}
	res.RegisteredAfter = int64(after.Registered)
	res.UsersPerSecond = float64(res.RegisteredAfter) / res.Seconds
	res.RecordsPerSecond = float64(res.Records) / res.Seconds
	if res.RegisteredAfter != res.RegisteredBefore {
		env.Note("the rebuild registered %d users, the state held %d before it", res.RegisteredAfter, res.RegisteredBefore)
	}
	fmt.Fprintf(env.Out, "    rebuilt in %.2f s: %s users/s into Redis, %s records/s folded\n", res.Seconds, report.Num(res.UsersPerSecond), report.Num(res.RecordsPerSecond))
	return res, nil
}
