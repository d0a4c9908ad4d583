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
var Phase = harness.Phase{Name: "rebuild", Before: "the rebuild", Title: "every shard rebuilt from the log (guarantee 10)",
	Run: func(ctx context.Context, env *harness.Env) (err error) {
		env.Res.Rebuild, err = run(ctx, env)
		return err
	}}

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
	if err := AwaitFolded(ctx, store, end, func(int64) error { return nil }); err != nil {
		return nil, fmt.Errorf("the rebuild had not finished after %v: %w", time.Since(start).Round(time.Second), err)
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

// AwaitFolded polls the shards' bookkeeping every 50 ms until every shard s has folded
// its records below end[s], and calls progress with the records folded so far after
// each poll; an error of progress ends the wait.
func AwaitFolded(ctx context.Context, store *statestore.Store, end []int64, progress func(folded int64) error) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		folded, all, err := foldedSoFar(ctx, store, end)
		if err == nil {
			err = progress(folded)
		}
		if err != nil || all {
			return err
		}
	}
}

// foldedSoFar is how many of the records below end the shards' bookkeeping says were
// folded, and whether all were. A shard without records is whole with or without
// bookkeeping; one being rebuilt has folded none.
func foldedSoFar(ctx context.Context, store *statestore.Store, end []int64) (int64, bool, error) {
	var folded int64
	all := true
	for s, e := range end {
		bk, err := store.ShardBookkeeping(ctx, s)
		if err != nil {
			return 0, false, err
		}
		if !bk.Exists || bk.Rebuilding {
			all = all && e == 0
			continue
		}
		folded += min(bk.Offset+1, e)
		all = all && bk.Offset >= e-1
	}
	return folded, all, nil
}
