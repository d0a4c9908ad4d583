package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/errgroup"

	"github.com/pulse-presence/pulse/internal/platform/app"
	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/consume"
	"github.com/pulse-presence/pulse/internal/platform/deadletter"
	"github.com/pulse-presence/pulse/internal/platform/health"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/platform/kafkax"
)

// notifier is what the partition workers share.
type notifier struct {
	cfg       Config
	endpoints atomic.Pointer[endpointSet]
	sender    *sender
	m         *metrics
	logger    *slog.Logger
	// lanes maps every running lane to its endpoint's id, for the backlog metrics.
	lanes sync.Map
	// produce writes records and waits for Kafka's acks; commit commits a partition's
	// next offset. Both go through the group's client.
	produce func(ctx context.Context, recs ...*kgo.Record) error
	commit  func(ctx context.Context, topic string, partition int32, next int64) error
}

func (n *notifier) register(l *lane, endpoint string) { n.lanes.Store(l, endpoint) }
func (n *notifier) unregister(l *lane)                { n.lanes.Delete(l) }

// newWorker is the consumer's consume.NewWorker.
func (n *notifier) newWorker(topic string, partition int32) consume.Worker {
	logger := n.logger.With("topic", topic, "partition", partition)
	if topic == n.cfg.WebhooksTopic {
		return &replayWorker{n: n, topic: topic, partition: partition, logger: logger}
	}
	return &worker{n: n, topic: topic, partition: partition, logger: logger}
}

// setEndpoints puts list in force.
func (n *notifier) setEndpoints(list []*Endpoint) {
	old := n.endpoints.Load()
	kept := map[string]bool{}
	for _, ep := range list {
		kept[ep.ID] = true
	}
	version := uint64(1)
	if old != nil {
		version = old.version + 1
		for _, ep := range old.list {
			if !kept[ep.ID] {
				n.m.forget(ep.ID)
			}
		}
	}
	n.endpoints.Store(&endpointSet{list: list, version: version})
	n.m.endpoints.Set(float64(len(list)))
}

// watchEndpoints reads the endpoints file every interval until ctx ends.
func (n *notifier) watchEndpoints(ctx context.Context, f *endpointsFile) error {
	t := time.NewTicker(n.cfg.EndpointsReload)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		list, changed, err := f.load()
		switch {
		case err != nil:
			n.m.reloads.WithLabelValues("refused").Inc()
			n.logger.Warn("endpoints file refused; keeping the endpoints in force", "err", err)
		case changed:
			n.setEndpoints(list)
			n.m.reloads.WithLabelValues("applied").Inc()
			n.logger.Info("endpoints reloaded", "endpoints", endpointIDs(list))
		}
	}
}

func endpointIDs(list []*Endpoint) []string {
	ids := make([]string, len(list))
	for i, ep := range list {
		ids[i] = ep.ID
	}
	return ids
}

func run(ctx context.Context, logger *slog.Logger, env *config.Env) error {
	cfg, err := loadConfig(env)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	// A file that cannot be used at start stops the notifier: running without the
	// endpoints an operator configured would commit past changes they never got.
	file := &endpointsFile{path: cfg.EndpointsFile}
	list, _, err := file.load()
	if err != nil {
		return err
	}
	logger.Info("starting", "http_addr", cfg.HTTP.Addr, "kafka_brokers", cfg.Kafka.Brokers,
		"topics", []string{cfg.Kafka.ChangesTopic, cfg.WebhooksTopic}, "group", cfg.Group,
		"endpoints", endpointIDs(list))

	reg := app.NewRegistry()
	n := &notifier{cfg: cfg, logger: logger}
	n.m = newMetrics(reg, n)
	n.sender = newSender(logger, n.m)
	n.setEndpoints(list)

	var cons *consume.Consumer
	n.produce = func(ctx context.Context, recs ...*kgo.Record) error {
		return cons.Client().ProduceSync(ctx, recs...).FirstErr()
	}
	n.commit = func(ctx context.Context, topic string, partition int32, next int64) error {
		var cerr error
		cons.Client().CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{
			topic: {partition: {Epoch: -1, Offset: next}},
		}, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			cerr = err
			if err == nil {
				for _, t := range resp.Topics {
					for _, p := range t.Partitions {
						cerr = errors.Join(cerr, kerr.ErrorForCode(p.ErrorCode))
					}
				}
			}
		})
		return cerr
	}
	cons, err = consume.New(cfg.Kafka, consume.Config{
		Group:          cfg.Group,
		Topics:         []string{cfg.Kafka.ChangesTopic, cfg.WebhooksTopic},
		MaxPollRecords: cfg.MaxPollRecords,
		QueueBatches:   cfg.QueueBatches,
		RevokeTimeout:  cfg.RevokeTimeout,
	}, n.newWorker, logger, reg, kgo.SessionTimeout(cfg.SessionTimeout))
	if err != nil {
		return err
	}

	srv := httpserver.New(cfg.HTTP, logger, reg,
		health.Check{Name: "kafka", Func: func(ctx context.Context) error {
			return kafkax.Ping(ctx, cons.Client(), cfg.Kafka.ChangesTopic, cfg.WebhooksTopic, deadletter.Topic(cfg.WebhooksTopic))
		}},
	)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return srv.Run(gctx) })
	g.Go(func() error { return n.watchEndpoints(gctx, file) })
	g.Go(func() error {
		if err := cons.Run(gctx); err != nil {
			return fmt.Errorf("consuming: %w", err)
		}
		return nil
	})
	return g.Wait()
}
