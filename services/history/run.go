package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

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
	"github.com/pulse-presence/pulse/internal/stores/historystore"
)

func run(ctx context.Context, logger *slog.Logger, env *config.Env) error {
	cfg, err := loadConfig(env)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	logger.Info("starting", "http_addr", cfg.HTTP.Addr, "kafka_brokers", cfg.Kafka.Brokers,
		"topics", []string{cfg.Kafka.EventsTopic, cfg.Kafka.ChangesTopic}, "group", cfg.Group,
		"cassandra", cfg.Cassandra.String(), "horizon", cfg.Horizon, "write_concurrency", cfg.WriteConcurrency)

	reg := app.NewRegistry()
	// The session is opened at start: history cannot do anything without Cassandra,
	// and failing fast with the driver's reason beats a service that is never ready.
	store, err := historystore.Open(cfg.Cassandra)
	if err != nil {
		return fmt.Errorf("connecting to cassandra: %w", err)
	}
	defer store.Close()

	m := newMetrics(reg)
	var cons *consume.Consumer
	h := &history{
		cfg:    cfg,
		writer: newWriter(store, cfg.Cassandra.Timeout, cfg.WriteConcurrency, logger, m),
		// Workers start only once cons.Run runs, so cons is set by then.
		commit:      func(ctx context.Context, r *kgo.Record) error { return cons.Client().CommitRecords(ctx, r) },
		readRange:   dedupe.FromKafka(cfg.Kafka, logger),
		checkpoints: store,
		scrubs:      store,
		produce: func(ctx context.Context, recs ...*kgo.Record) error {
			return cons.Client().ProduceSync(ctx, recs...).FirstErr()
		},
		committed: func(topic string, partition int32) (int64, bool) {
			o, ok := cons.Client().CommittedOffsets()[topic][partition]
			return o.Offset, ok
		},
		logger: logger,
		m:      m,
	}
	h.ends = &endOffsets{maxAge: cfg.QuietAfter / 2, list: func(ctx context.Context) (map[int32]span, error) {
		adm := kadm.NewClient(cons.Client())
		starts, err := adm.ListStartOffsets(ctx, cfg.Kafka.ChangesTopic)
		if err != nil {
			return nil, err
		}
		ends, err := adm.ListEndOffsets(ctx, cfg.Kafka.ChangesTopic)
		if err != nil {
			return nil, err
		}
		spans := map[int32]span{}
		var errs []error
		ends.Each(func(o kadm.ListedOffset) {
			s, ok := starts.Lookup(o.Topic, o.Partition)
			switch {
			case o.Err != nil:
				errs = append(errs, fmt.Errorf("partition %d: %w", o.Partition, o.Err))
			case !ok || s.Err != nil:
				errs = append(errs, fmt.Errorf("partition %d: no start offset listed: %v", o.Partition, s.Err))
			default:
				spans[o.Partition] = span{s.Offset, o.Offset}
			}
		})
		return spans, errors.Join(errs...)
	}}
	cons, err = consume.New(cfg.Kafka, consume.Config{
		Group:          cfg.Group,
		Topics:         []string{cfg.Kafka.EventsTopic, cfg.Kafka.ChangesTopic},
		MaxPollRecords: cfg.MaxPollRecords,
		QueueBatches:   cfg.QueueBatches,
		RevokeTimeout:  cfg.RevokeTimeout,
	}, h.newWorker, logger, reg, kgo.SessionTimeout(cfg.SessionTimeout))
	if err != nil {
		return err
	}

	srv := httpserver.New(cfg.HTTP, logger, reg,
		health.Check{Name: "kafka", Func: func(ctx context.Context) error {
			return kafkax.Ping(ctx, cons.Client(), cfg.Kafka.EventsTopic, cfg.Kafka.ChangesTopic)
		}},
		health.Check{Name: "cassandra", Func: store.Ping},
	)

	// Either loop ending ends both. On SIGTERM the consumer stops polling, lets every
	// partition finish its in-flight writes and commit, then leaves the group.
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return srv.Run(gctx) })
	g.Go(func() error {
		if err := cons.Run(gctx); err != nil {
			return fmt.Errorf("consuming: %w", err)
		}
		return nil
	})
	return g.Wait()
}
