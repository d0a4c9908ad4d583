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
	if cfg.HTTP.Addr != ":18083" || cfg.Cassandra.Port != 19042 || cfg.Cassandra.Keyspace != "pulse" || cfg.Group != "pulse-history" ||
		cfg.EventRows != eventRowsStatus || cfg.StatusInterval != 30*time.Second || cfg.CheckpointInterval != time.Minute {
		t.Fatalf("defaults = %+v", cfg)
	}
}

func TestLoadConfigRejectsBadValues(t *testing.T) {
	_, err := loadConfig(config.NewEnv(config.MapLookup(map[string]string{
		"PULSE_CASSANDRA_CONSISTENCY":       "SOME",
		"PULSE_CASSANDRA_PORT":              "70000",
		"PULSE_CASSANDRA_PASSWORD":          "secret",
		"PULSE_HISTORY_EVENT_ROWS":          "some",
		"PULSE_HISTORY_CHECKPOINT_INTERVAL": "0s",
	})))
	if err == nil {
		t.Fatal("loadConfig accepted a bad consistency, port and a password without user")
	}
	for _, want := range []string{"SOME", "70000", "Username", "PULSE_HISTORY_EVENT_ROWS", "PULSE_HISTORY_CHECKPOINT_INTERVAL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("error %q leaks the password", err)
	}
}

// The horizon must cover twice ingest's skew, or staleness could not be decided from it.
func TestLoadConfigHorizonCoversSkew(t *testing.T) {
	cfg, err := loadConfig(config.NewEnv(config.MapLookup(nil)))
	if err != nil || cfg.Horizon != 10*time.Minute || cfg.MaxSkew != 5*time.Minute {
		t.Fatalf("defaults: horizon %v skew %v err %v, want 10m, 5m", cfg.Horizon, cfg.MaxSkew, err)
	}
	_, err = loadConfig(config.NewEnv(config.MapLookup(map[string]string{
		"PULSE_HISTORY_HORIZON": "10m",
		"PULSE_INGEST_MAX_SKEW": "6m",
	})))
	if err == nil || !strings.Contains(err.Error(), "PULSE_HISTORY_HORIZON=10m0s: must be at least 2×PULSE_INGEST_MAX_SKEW (12m0s)") {
		t.Fatalf("horizon 10m with skew 6m: err = %v", err)
	}
	if _, err := loadConfig(config.NewEnv(config.MapLookup(map[string]string{
		"PULSE_HISTORY_HORIZON": "4m",
		"PULSE_INGEST_MAX_SKEW": "2m",
	}))); err != nil {
		t.Fatalf("horizon 4m with skew 2m: %v", err)
	}
	_, err = loadConfig(config.NewEnv(config.MapLookup(map[string]string{
		"PULSE_HISTORY_WRITE_CONCURRENCY": "0",
		"PULSE_HISTORY_COMMIT_INTERVAL":   "-1s",
	})))
	for _, want := range []string{"PULSE_HISTORY_WRITE_CONCURRENCY=0", "PULSE_HISTORY_COMMIT_INTERVAL=-1s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to name %s", err, want)
		}
	}
}

// The table is sound and docs/configuration.md documents every row of it (make
// config-doc).
func TestConfigDocDocumentsServiceVariables(t *testing.T) {
	vars := new(Config).vars()
	configtest.Table(t, vars)
	configtest.Doc(t, "../../docs/configuration.md", vars, "history")
}

// -help lists every variable the service reads, logging's first, once each.
func TestHelpListsEveryVariable(t *testing.T) {
	vars := new(Config).vars()
	var b strings.Builder
	if err := app.Help(&b, "history", vars); err != nil {
		t.Fatal(err)
	}
	configtest.Help(t, b.String(), vars, "PULSE_CASSANDRA_PASSWORD (secret, no default)")
}
