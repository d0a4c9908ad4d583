package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/pulse-presence/pulse/pkg/app"
	"github.com/pulse-presence/pulse/pkg/config"
	"github.com/pulse-presence/pulse/pkg/health"
	"github.com/pulse-presence/pulse/pkg/httpserver"
	"github.com/pulse-presence/pulse/pkg/kafkax"
	"github.com/pulse-presence/pulse/pkg/redisx"
)

func run(ctx context.Context, logger *slog.Logger, env *config.Env) error {
	cfg, err := loadConfig(env)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	logger.Info("starting", "http_addr", cfg.HTTP.Addr, "kafka_brokers", cfg.Kafka.Brokers,
		"group", cfg.Group, "events", cfg.Kafka.EventsTopic, "changes", cfg.Kafka.ChangesTopic, "redis", cfg.Redis)

	reg := app.NewRegistry()
	kc, err := kafkax.NewClient(cfg.Kafka, logger, reg)
	if err != nil {
		return err
	}
	defer kc.Close()
	rdb := redisx.NewClient(cfg.Redis)
	defer rdb.Close()

	srv := httpserver.New(cfg.HTTP, logger, reg,
		health.Check{Name: "kafka", Func: func(ctx context.Context) error {
			return kafkax.Ping(ctx, kc, cfg.Kafka.EventsTopic, cfg.Kafka.ChangesTopic)
		}},
		health.Check{Name: "redis", Func: func(ctx context.Context) error { return redisx.Ping(ctx, rdb) }},
	)
	return srv.Run(ctx)
}
