package main

import (
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/pkg/config"
)

func TestLoadConfigDefaults(t *testing.T) {
	cfg, err := loadConfig(config.NewEnv(config.MapLookup(nil)))
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if cfg.HTTP.Addr != ":18080" || cfg.Kafka.EventsTopic != "presence.events" || cfg.AckTimeout != 5*time.Second {
		t.Fatalf("defaults = %+v", cfg)
	}
}

func TestLoadConfigRejectsBadValues(t *testing.T) {
	_, err := loadConfig(config.NewEnv(config.MapLookup(map[string]string{
		"PULSE_INGEST_ACK_TIMEOUT": "-1s",
		"PULSE_HTTP_ADDR":          "nonsense",
	})))
	if err == nil {
		t.Fatal("loadConfig accepted a negative ack timeout and a bad address")
	}
	for _, want := range []string{"PULSE_INGEST_ACK_TIMEOUT", "PULSE_HTTP_ADDR"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}
