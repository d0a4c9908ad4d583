package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/api/openapi"
	"github.com/pulse-presence/pulse/internal/platform/app"
	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/health"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/platform/kafkax"
	"github.com/pulse-presence/pulse/internal/stores/eventlog"
)

func run(ctx context.Context, logger *slog.Logger, env *config.Env) error {
	cfg, err := loadConfig(env)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	authn, err := auth.New(cfg.Auth)
	if err != nil {
		return fmt.Errorf("authentication: %w", err)
	}
	logger.Info("starting", append([]any{"http_addr", cfg.HTTP.Addr, "kafka_brokers", cfg.Kafka.Brokers,
		"topic", cfg.Kafka.EventsTopic, "ack_timeout", cfg.AckTimeout, "linger", cfg.Linger, "max_skew", cfg.MaxSkew,
		"max_body", cfg.MaxBody, "max_batch", cfg.MaxBatch, "key_rate", cfg.KeyRate, "user_rate", cfg.UserRate,
		"user_burst", cfg.UserBurst, "gogc", cfg.GCPercent}, authn.Describe()...)...)
	if cfg.GCPercent > 0 {
		// Each request allocates a few kilobytes that die with it, against a live
		// heap of a few megabytes: at Go's default 100 the collector ran so often
		// that it took a quarter of BenchmarkPostStatus's CPU.
		debug.SetGCPercent(cfg.GCPercent)
	}
	loops := app.NewLoops(ctx)
	defer func() { _ = loops.Stop() }() // on an early return; the last one reports the loops' errors
	loops.Go("auth warning", func(ctx context.Context) error { authn.WarnWhileOff(ctx, logger, time.Minute); return nil })
	loops.Go("keys reload", func(ctx context.Context) error { authn.WatchKeys(ctx, logger, cfg.Auth.KeysReload); return nil })

	reg := app.NewRegistry()
	client, err := kafkax.NewClient(cfg.Kafka, logger, reg, producerOpts(cfg)...)
	if err != nil {
		return err
	}
	// Closing after the HTTP server has drained lets in-flight requests get their acks.
	defer client.Close()

	srv, _, err := newServer(cfg, logger, reg, client, authn)
	if err != nil {
		return err
	}
	err = srv.Run(ctx)
	return errors.Join(err, loops.Stop())
}

// producerOpts are the Kafka client settings ingest's guarantees rest on: a 2xx
// means every in-sync replica has the events (eventlog.Opts).
func producerOpts(cfg Config) []kgo.Opt {
	return eventlog.Opts(cfg.Kafka.EventsTopic, cfg.AckTimeout, cfg.Linger)
}

// newServer is the HTTP server with the ingest endpoints, producing through client.
// Every route but the probes, /metrics and /openapi.json needs the write scope; user
// tokens may post, for their own user only (handler.admit).
func newServer(cfg Config, logger *slog.Logger, reg *prometheus.Registry, client *kgo.Client, authn *auth.Authenticator) (*httpserver.Server, *handler, error) {
	srv := httpserver.New(cfg.HTTP, logger, reg, health.Check{
		Name: "kafka",
		Func: func(ctx context.Context) error { return kafkax.Ping(ctx, client, cfg.Kafka.EventsTopic) },
	})
	h := newHandler(cfg, eventlog.NewProducer(client, cfg.Kafka.EventsTopic, cfg.AckTimeout, "pulse_ingest_produce_duration_seconds", reg), reg)
	authn.Guard(reg, auth.ScopeWrite, "/status", "/v1/events", "/v1/heartbeat").Install(srv.Echo)
	h.register(srv.Echo)
	if err := openapi.Register(srv.Echo, "ingest"); err != nil {
		return nil, nil, err
	}
	return srv, h, nil
}
