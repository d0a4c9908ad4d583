package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/pulse-presence/pulse/internal/domain/dedupe"
	"github.com/pulse-presence/pulse/internal/platform/app"
	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/consume"
	"github.com/pulse-presence/pulse/internal/platform/health"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/platform/kafkax"
	"github.com/pulse-presence/pulse/internal/platform/redisx"
	"github.com/pulse-presence/pulse/internal/platform/retry"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

func run(ctx context.Context, logger *slog.Logger, env *config.Env) error {
	cfg, err := loadConfig(env)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	logger.Info("starting", "http_addr", cfg.HTTP.Addr, "kafka_brokers", cfg.Kafka.Brokers,
		"group", cfg.Group, "events", cfg.Kafka.EventsTopic, "changes", cfg.Kafka.ChangesTopic,
		"redis", cfg.Redis, "window", cfg.Window, "dedupe_horizon", cfg.DedupeHorizon,
		"offline_after", cfg.OfflineAfter, "idle_after", cfg.IdleAfter, "state_buckets", cfg.StateBuckets)

	reg := app.NewRegistry()
	rdb := redisx.NewClient(cfg.Redis)
	defer rdb.Close()
	store := statestore.New(rdb, cfg.RedisPrefix)
	m := newMetrics(reg)

	var (
		cons       *consume.Consumer
		partitions int
		rebuilding atomic.Int32
	)
	// register records the layout again after Redis lost it (guarantee 10).
	register := func(ctx context.Context) error {
		return store.RegisterShards(ctx, partitions, cfg.StateBuckets)
	}
	written := crashAfter(cfg.CrashAfterWrite, logger)
	var hist history
	if cfg.RebuildFromHistory {
		ch := &cassandraHistory{cfg: cfg.Cassandra}
		defer ch.Close()
		hist = ch
	}
	newWorker := func(topic string, partition int32) consume.Worker {
		return &worker{
			cfg: cfg, topic: topic, cl: cons.Client(), store: store, metrics: m,
			register: register, rebuilding: &rebuilding, written: written, history: hist,
			readRange: dedupe.FromKafka(cfg.Kafka, logger),
			logger:    logger.With("partition", partition),
			st:        shardState{partition: partition},
			now:       time.Now,
		}
	}
	opts := []kgo.Opt{
		// Changes are produced with the consuming client: acks=all, idempotent.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.SessionTimeout(cfg.SessionTimeout),
	}
	if cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(cfg.InstanceID))
	}
	cons, err = consume.New(cfg.Kafka, consume.Config{
		Group:          cfg.Group,
		Topics:         []string{cfg.Kafka.EventsTopic},
		MaxPollRecords: cfg.MaxWindowRecords,
		QueueBatches:   cfg.QueueBatches,
		RevokeTimeout:  cfg.RevokeTimeout,
	}, newWorker, logger, reg, opts...)
	if err != nil {
		return err
	}

	// Shards are partitions: record their number so readers can find users.
	if partitions, err = registerShards(ctx, cons.Client(), store, cfg.Kafka.EventsTopic, cfg.StateBuckets, logger); err != nil {
		return err
	}

	srv := httpserver.New(cfg.HTTP, logger, reg,
		health.Check{Name: "kafka", Func: func(ctx context.Context) error {
			return kafkax.Ping(ctx, cons.Client(), cfg.Kafka.EventsTopic, cfg.Kafka.ChangesTopic)
		}},
		health.Check{Name: "redis", Func: func(ctx context.Context) error { return redisx.Ping(ctx, rdb) }},
		health.Check{Name: "state", Func: func(context.Context) error {
			if n := rebuilding.Load(); n > 0 {
				return fmt.Errorf("rebuilding %d shards from the log: Redis lost their state", n)
			}
			return nil
		}},
	)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return srv.Run(gctx) })
	g.Go(func() error { return cons.Run(gctx) })
	return g.Wait()
}

// registerShards records the partition count of the events topic as the shard count,
// and with it the state buckets.
// A topic created moments ago may not be in every broker's metadata yet, so a missing
// topic is retried for a minute before the aggregator gives up.
func registerShards(ctx context.Context, cl *kgo.Client, store *statestore.Store, topic string, buckets int, logger *slog.Logger) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	adm := kadm.NewClient(cl)
	var partitions int
	// A flat half-second poll: a topic just created appears within moments, so backing
	// off would only delay the start.
	p := retry.Policy{Initial: 500 * time.Millisecond, Max: 500 * time.Millisecond, LogEvery: 5 * time.Second}
	err := retry.Do(ctx, p, logger, "waiting for the events topic", func(ctx context.Context) error {
		topics, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return err
		}
		d := topics[topic]
		if d.Err != nil {
			return d.Err
		}
		if len(d.Partitions) == 0 {
			return errors.New("no partitions in the metadata yet")
		}
		partitions = len(d.Partitions)
		return nil
	}, "topic", topic)
	if err != nil {
		return 0, fmt.Errorf("topic %s: not found within a minute (run pulsectl topics): %w", topic, err)
	}
	return partitions, store.RegisterShards(ctx, partitions, buckets)
}
