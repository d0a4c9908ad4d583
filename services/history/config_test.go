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
	if cfg.HTTP.Addr != ":18083" || cfg.Cassandra.Port != 19042 || cfg.Cassandra.Keyspace != "pulse" || cfg.Group != "pulse-history" {
		t.Fatalf("defaults = %+v", cfg)
	}
}

func TestLoadConfigRejectsBadValues(t *testing.T) {
	_, err := loadConfig(config.NewEnv(config.MapLookup(map[string]string{
		"PULSE_CASSANDRA_CONSISTENCY": "SOME",
		"PULSE_CASSANDRA_PORT":        "70000",
		"PULSE_CASSANDRA_PASSWORD":    "secret",
	})))
	if err == nil {
		t.Fatal("loadConfig accepted a bad consistency, port and a password without user")
	}
	for _, want := range []string{"SOME", "70000", "Username"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("error %q leaks the password", err)
	}
}
