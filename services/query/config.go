package main

import (
	"errors"

	"github.com/pulse-presence/pulse/pkg/config"
	"github.com/pulse-presence/pulse/pkg/httpserver"
	"github.com/pulse-presence/pulse/pkg/redisx"
)

// Config is everything pulse-query reads at start.
type Config struct {
	HTTP  httpserver.Config
	Redis redisx.Config
}

func loadConfig(env *config.Env) (Config, error) {
	cfg := Config{
		HTTP:  httpserver.ConfigFromEnv(env, ":18081"),
		Redis: redisx.ConfigFromEnv(env),
	}
	return cfg, errors.Join(env.Err(), cfg.Validate())
}

// Validate reports every setting that cannot work.
func (c Config) Validate() error {
	return errors.Join(c.HTTP.Validate(), c.Redis.Validate())
}
