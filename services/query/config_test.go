package main

import (
	"strings"
	"testing"

	"github.com/pulse-presence/pulse/pkg/config"
)

func TestLoadConfigDefaults(t *testing.T) {
	cfg, err := loadConfig(config.NewEnv(config.MapLookup(nil)))
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if cfg.HTTP.Addr != ":18081" || cfg.Redis.Addrs[0] != "127.0.0.1:16379" {
		t.Fatalf("defaults = %+v", cfg)
	}
}

func TestLoadConfigRejectsBadValues(t *testing.T) {
	_, err := loadConfig(config.NewEnv(config.MapLookup(map[string]string{
		"PULSE_REDIS_ADDR":         "a:1,b:2",
		"PULSE_REDIS_DB":           "3",
		"PULSE_REDIS_READ_TIMEOUT": "soon",
	})))
	if err == nil {
		t.Fatal("loadConfig accepted a database number on a cluster and a bad timeout")
	}
	for _, want := range []string{"PULSE_REDIS_DB", `PULSE_REDIS_READ_TIMEOUT="soon"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}
