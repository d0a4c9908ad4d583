package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/pulse-presence/pulse/internal/platform/kafkax"
	"github.com/pulse-presence/pulse/internal/platform/ports"
	"github.com/pulse-presence/pulse/internal/platform/redisx"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// pulsectl rebuild [-shard N]: has the aggregators rebuild shards of the state in
// Redis from the log (docs/design.md guarantee 10), for a new Redis or a state one
// distrusts. It deletes each shard's bookkeeping; the shard's owner then finds the
// shard lost, clears it and folds its partition again, while readers get 503. The
// command follows the rebuild with progress and an estimate until every shard is whole.
func runRebuild(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("rebuild", flag.ContinueOnError)
	redisAddr := fs.String("redis", ports.LocalAddr(ports.Redis), "Redis address (several, comma-separated, for a cluster)")
	prefix := fs.String("prefix", "pulse", "the aggregators' PULSE_REDIS_PREFIX")
	brokers := fs.String("brokers", ports.LocalAddr(ports.Kafka), "comma-separated broker addresses")
	topic := fs.String("topic", kafkax.DefaultEventsTopic, "the events topic, whose partitions are the shards")
	shard := fs.Int("shard", -1, "the shard to rebuild; -1: every shard")
	timeout := fs.Duration("timeout", time.Hour, "gives up waiting after this long (the rebuild goes on)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	rdb := redisx.NewClient(redisx.Config{Addrs: strings.Split(*redisAddr, ","), DialTimeout: 5 * time.Second,
		ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	defer rdb.Close()
	store := statestore.New(rdb, *prefix)
	n, err := store.Shards(ctx)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("no shard layout under %q in Redis: start the aggregators, which rebuild what the log holds on their own", *prefix)
	}
	shards := []int{}
	switch {
	case *shard == -1:
		for s := range n {
			shards = append(shards, s)
		}
	case *shard >= 0 && *shard < n:
		shards = append(shards, *shard)
	default:
		return fmt.Errorf("-shard=%d: want -1 or 0..%d", *shard, n-1)
	}

	cl, err := kafkax.NewClient(kafkaConfig(*brokers, 30*time.Second), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		return err
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, *topic)
	cl.Close()
	if err != nil {
		return fmt.Errorf("reading the end of %s: %w", *topic, err)
	}
	total := map[int]int64{} // records to fold per shard
	var all int64
	for _, s := range shards {
		o, ok := ends.Lookup(*topic, int32(s))
		if !ok || o.Err != nil {
			return fmt.Errorf("%s has no partition %d", *topic, s)
		}
		total[s] = o.Offset
		all += o.Offset
	}
	for _, s := range shards {
		if err := store.ForgetShard(ctx, s); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "    rebuilding %d shards from %s (%d records); readers get 503 until each is done\n", len(shards), *topic, all)
	start := time.Now()
	done := map[int]bool{}
	for len(done) < len(shards) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d shards rebuilt when waiting ended (the aggregators go on): %w", len(done), len(shards), ctx.Err())
		case <-time.After(time.Second):
		}
		var folded int64
		for _, s := range shards {
			b, err := store.ShardBookkeeping(ctx, s)
			if err != nil {
				return err
			}
			if b.Exists && !b.Rebuilding && b.Offset >= total[s]-1 {
				done[s] = true
			}
			folded += min(max(b.Offset+1, 0), total[s])
		}
		elapsed := time.Since(start)
		line := fmt.Sprintf("    %d/%d shards done, %d of %d records folded (%.0f%%) in %v", len(done), len(shards), folded, all,
			100*float64(folded)/float64(max(all, 1)), elapsed.Round(time.Second))
		if folded > 0 && folded < all {
			eta := time.Duration(float64(elapsed) * float64(all-folded) / float64(folded))
			line += fmt.Sprintf(", about %v to go", eta.Round(time.Second))
		}
		fmt.Fprintln(stdout, line)
	}
	c, err := store.Counts(ctx)
	if err != nil && !errors.Is(err, statestore.ErrRebuilding) {
		return err
	}
	fmt.Fprintf(stdout, "    rebuilt in %v: %d users registered, %d online\n", time.Since(start).Round(time.Millisecond), c.Registered, c.Online)
	return nil
}
