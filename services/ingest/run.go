package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/pkg/app"
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
		"topic", cfg.Kafka.EventsTopic, "ack_timeout", cfg.AckTimeout)

	reg := app.NewRegistry()
	// acks=all with the idempotent producer (franz-go's default): a 2xx means every
	// in-sync replica has the event, and retries never write it twice.
	producer, err := kafkax.NewClient(cfg.Kafka, logger, reg,
		kgo.DefaultProduceTopic(cfg.Kafka.EventsTopic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProduceRequestTimeout(cfg.AckTimeout),
	)
	if err != nil {
		return err
	}
	// Closing after the HTTP server has drained lets in-flight requests get their acks.
	defer producer.Close()

	srv := httpserver.New(cfg.HTTP, logger, reg, health.Check{
		Name: "kafka",
		Func: func(ctx context.Context) error { return kafkax.Ping(ctx, producer, cfg.Kafka.EventsTopic) },
	})
	return srv.Run(ctx)
}
