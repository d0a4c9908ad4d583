package main

import (
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/platform/app"
	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/config/configtest"
)

func TestLoadConfigDefaults(t *testing.T) {
	cfg, err := loadConfig(config.NewEnv(config.MapLookup(nil)))
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if cfg.HTTP.Addr != ":18082" || cfg.Group != "pulse-aggregator" || cfg.Kafka.ChangesTopic != "presence.changes" ||
		cfg.StateBuckets != 131072 || cfg.Window != 100*time.Millisecond || cfg.MinWindow != 20*time.Millisecond || cfg.RevokeTimeout != 10*time.Second {
		t.Fatalf("defaults = %+v", cfg)
	}
}

func TestLoadConfigRejectsBadValues(t *testing.T) {
	_, err := loadConfig(config.NewEnv(config.MapLookup(map[string]string{
		"PULSE_TOPIC_EVENTS":              "same",
		"PULSE_TOPIC_CHANGES":             "same",
		"PULSE_REDIS_POOL_SIZE":           "-1",
		"PULSE_SHUTDOWN_TIMEOUT":          "0s",
		"PULSE_STATE_BUCKETS":             "0",
		"PULSE_AGGREGATOR_MIN_WINDOW":     "200ms",
		"PULSE_AGGREGATOR_REVOKE_TIMEOUT": "1m",
	})))
	if err == nil {
		t.Fatal("loadConfig accepted equal topics, a negative pool, no shutdown time and no state buckets")
	}
	for _, want := range []string{"PULSE_TOPIC_EVENTS", "PULSE_REDIS_POOL_SIZE", "PULSE_SHUTDOWN_TIMEOUT", "PULSE_STATE_BUCKETS=0", "PULSE_AGGREGATOR_MIN_WINDOW=200ms", "PULSE_AGGREGATOR_REVOKE_TIMEOUT=1m0s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

// The table is sound and docs/configuration.md documents every row of it (make
// config-doc).
func TestConfigDocDocumentsServiceVariables(t *testing.T) {
	vars := new(Config).vars()
	configtest.Table(t, vars)
	configtest.Doc(t, "../../docs/configuration.md", vars, "aggregator")
}

// -help lists every variable the service reads, logging's first, once each.
func TestHelpListsEveryVariable(t *testing.T) {
	vars := new(Config).vars()
	var b strings.Builder
	if err := app.Help(&b, "aggregator", vars); err != nil {
		t.Fatal(err)
	}
	configtest.Help(t, b.String(), vars, "PULSE_AGGREGATOR_REVOKE_TIMEOUT (default 10s)")
}
