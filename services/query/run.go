package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/pulse-presence/pulse/pkg/app"
	"github.com/pulse-presence/pulse/pkg/config"
	"github.com/pulse-presence/pulse/pkg/health"
	"github.com/pulse-presence/pulse/pkg/httpserver"
	"github.com/pulse-presence/pulse/pkg/redisx"
	"github.com/pulse-presence/pulse/pkg/statestore"
)

func run(ctx context.Context, logger *slog.Logger, env *config.Env) error {
	cfg, err := loadConfig(env)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	logger.Info("starting", "http_addr", cfg.HTTP.Addr, "redis", cfg.Redis, "prefix", cfg.RedisPrefix)

	reg := app.NewRegistry()
	rdb := redisx.NewClient(cfg.Redis)
	defer rdb.Close()

	srv := httpserver.New(cfg.HTTP, logger, reg, health.Check{
		Name: "redis",
		Func: func(ctx context.Context) error { return redisx.Ping(ctx, rdb) },
	})
	a := &api{store: statestore.New(rdb, cfg.RedisPrefix), timeout: cfg.ReadTimeout, maxBatch: cfg.MaxBatch, maxBody: cfg.MaxBody, logger: logger}
	a.routes(srv.Echo)
	return srv.Run(ctx)
}
