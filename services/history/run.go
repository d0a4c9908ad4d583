package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/pulse-presence/pulse/pkg/app"
	"github.com/pulse-presence/pulse/pkg/cassx"
	"github.com/pulse-presence/pulse/pkg/config"
	"github.com/pulse-presence/pulse/pkg/health"
	"github.com/pulse-presence/pulse/pkg/httpserver"
	"github.com/pulse-presence/pulse/pkg/kafkax"
)

func run(ctx context.Context, logger *slog.Logger, env *config.Env) error {
	cfg, err := loadConfig(env)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	logger.Info("starting", "http_addr", cfg.HTTP.Addr, "kafka_brokers", cfg.Kafka.Brokers,
		"group", cfg.Group, "cassandra", cfg.Cassandra.String())

	reg := app.NewRegistry()
	kc, err := kafkax.NewClient(cfg.Kafka, logger, reg)
	if err != nil {
		return err
	}
	defer kc.Close()
	// The session is opened at start: history cannot do anything without Cassandra,
	// and failing fast with the driver's reason beats a service that is never ready.
	session, err := cassx.NewSession(cfg.Cassandra)
	if err != nil {
		return fmt.Errorf("connecting to cassandra: %w", err)
	}
	defer session.Close()

	srv := httpserver.New(cfg.HTTP, logger, reg,
		health.Check{Name: "kafka", Func: func(ctx context.Context) error {
			return kafkax.Ping(ctx, kc, cfg.Kafka.EventsTopic, cfg.Kafka.ChangesTopic)
		}},
		health.Check{Name: "cassandra", Func: func(ctx context.Context) error { return cassx.Ping(ctx, session) }},
	)
	return srv.Run(ctx)
}
