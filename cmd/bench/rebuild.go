package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// RebuildResult is the rebuild phase: every shard of the stack's state rebuilt from
// the log by the running aggregators, as after Redis lost it (docs/design.md
// guarantee 10), timed from the moment the shards' bookkeeping went.
type RebuildResult struct {
	Shards int `json:"shards"`
	// Records is how many records of presence.events the rebuild folded again.
	Records int64 `json:"records"`
	// Registered is the users in the state before and after (they must be equal).
	RegisteredBefore int64   `json:"registeredBefore"`
	RegisteredAfter  int64   `json:"registeredAfter"`
	Seconds          float64 `json:"seconds"`
	// UsersPerSecond is registered users written into Redis per second of rebuild;
	// RecordsPerSecond the log's records folded per second.
	UsersPerSecond   float64 `json:"usersPerSecond"`
	RecordsPerSecond float64 `json:"recordsPerSecond"`
}

// rebuild has the aggregators rebuild every shard from the log, as pulsectl rebuild
// does (it deletes the shards' bookkeeping), and times it to the last shard whole,
// polling every 50 ms.
func (b *bench) rebuild(ctx context.Context) (*RebuildResult, error) {
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", b.cfg.ports.redis)})
	defer rdb.Close()
	store := statestore.New(rdb, b.cfg.prefix)
	n, err := store.Shards(ctx)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("no shard layout under %q in Redis: nothing to rebuild", b.cfg.prefix)
	}
	before, err := store.Counts(ctx)
	if err != nil {
		return nil, fmt.Errorf("counting before the rebuild: %w", err)
	}
	ends, err := b.lag.adm.ListEndOffsets(ctx, b.lag.events)
	if err != nil {
		return nil, err
	}
	starts, err := b.lag.adm.ListStartOffsets(ctx, b.lag.events)
	if err != nil {
		return nil, err
	}
	res := &RebuildResult{Shards: n, RegisteredBefore: int64(before.Registered)}
	end := make([]int64, n)
	for s := range n {
		e, _ := ends.Lookup(b.lag.events, int32(s))
		st, _ := starts.Lookup(b.lag.events, int32(s))
		end[s] = e.Offset
		res.Records += e.Offset - st.Offset
	}
	fmt.Fprintf(b.out, "    %d shards, %s users registered, %s records in the log\n", n, num(float64(before.Registered)), num(float64(res.Records)))
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
		b.note("the rebuild registered %d users, the state held %d before it", res.RegisteredAfter, res.RegisteredBefore)
	}
	fmt.Fprintf(b.out, "    rebuilt in %.2f s: %s users/s into Redis, %s records/s folded\n", res.Seconds, num(res.UsersPerSecond), num(res.RecordsPerSecond))
	return res, nil
}

func (m *markdown) rebuild(r *RebuildResult) {
	m.p("## Rebuild from the log\n\n")
	m.p("Every shard's bookkeeping deleted at once (what `pulsectl rebuild` does, and what a flushed Redis looks like to the aggregators), timed until the last shard was whole again, polled every 50 ms.\n\n")
	m.p("| shards | records folded | users registered (before → after) | time | users/s into Redis | records/s |\n|---|---|---|---|---|---|\n")
	m.p("| %d | %s | %s → %s | %.2f s | %s | %s |\n\n", r.Shards, num(float64(r.Records)), num(float64(r.RegisteredBefore)),
		num(float64(r.RegisteredAfter)), r.Seconds, num(r.UsersPerSecond), num(r.RecordsPerSecond))
}
