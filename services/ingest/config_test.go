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
	if cfg.HTTP.Addr != ":18080" || cfg.Kafka.EventsTopic != "presence.events" || cfg.AckTimeout != 5*time.Second ||
		cfg.MaxSkew != 5*time.Minute || cfg.MaxBody != 1<<20 || cfg.MaxBatch != 1000 {
		t.Fatalf("defaults = %+v", cfg)
	}
}

func TestLoadConfigReadsEnv(t *testing.T) {
	cfg, err := loadConfig(config.NewEnv(config.MapLookup(map[string]string{
		"PULSE_INGEST_ACK_TIMEOUT": "750ms",
		"PULSE_INGEST_MAX_SKEW":    "90s",
		"PULSE_INGEST_MAX_BODY":    "65536",
		"PULSE_INGEST_MAX_BATCH":   "250",
	})))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AckTimeout != 750*time.Millisecond || cfg.MaxSkew != 90*time.Second || cfg.MaxBody != 65536 || cfg.MaxBatch != 250 {
		t.Fatalf("cfg = %+v", cfg)
	}
}

func TestLoadConfigRejectsBadValues(t *testing.T) {
	_, err := loadConfig(config.NewEnv(config.MapLookup(map[string]string{
		"PULSE_INGEST_ACK_TIMEOUT": "-1s",
		"PULSE_HTTP_ADDR":          "nonsense",
		"PULSE_INGEST_MAX_SKEW":    "0s",
		"PULSE_INGEST_MAX_BODY":    "100",
		"PULSE_INGEST_MAX_BATCH":   "lots",
	})))
	if err == nil {
		t.Fatal("loadConfig accepted bad values")
	}
	for _, want := range []string{
		"PULSE_INGEST_ACK_TIMEOUT=-1s: must be positive",
		"PULSE_HTTP_ADDR",
		"PULSE_INGEST_MAX_SKEW=0s: must be positive",
		"PULSE_INGEST_MAX_BODY=100: must be at least 1024 bytes",
		`PULSE_INGEST_MAX_BATCH="lots": want an integer`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestLoadConfigRejectsZeroBatch(t *testing.T) {
	_, err := loadConfig(config.NewEnv(config.MapLookup(map[string]string{"PULSE_INGEST_MAX_BATCH": "0"})))
	if err == nil || !strings.Contains(err.Error(), "PULSE_INGEST_MAX_BATCH=0: must be positive") {
		t.Fatalf("err = %v", err)
	}
}

func TestLoadConfigWantsAckTimeoutBelowHTTPTimeouts(t *testing.T) {
	_, err := loadConfig(config.NewEnv(config.MapLookup(map[string]string{
		"PULSE_INGEST_ACK_TIMEOUT": "20s",
		"PULSE_SHUTDOWN_TIMEOUT":   "15s",
	})))
	want := "PULSE_INGEST_ACK_TIMEOUT=20s: must be below PULSE_HTTP_WRITE_TIMEOUT (30s) and PULSE_SHUTDOWN_TIMEOUT (15s)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

// The table is sound and docs/configuration.md documents every row of it (make
// config-doc).
func TestConfigDocDocumentsServiceVariables(t *testing.T) {
	vars := new(Config).vars()
	configtest.Table(t, vars)
	configtest.Doc(t, "../../docs/configuration.md", vars, "ingest")
}

// -help lists every variable the service reads, logging's first, once each.
func TestHelpListsEveryVariable(t *testing.T) {
	vars := new(Config).vars()
	var b strings.Builder
	if err := app.Help(&b, "ingest", vars); err != nil {
		t.Fatal(err)
	}
	configtest.Help(t, b.String(), vars, "PULSE_INGEST_ACK_TIMEOUT (default 5s)")
}

func TestLoadConfigLinger(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want time.Duration
	}{{"", time.Millisecond}, {"0s", 0}, {"5ms", 5 * time.Millisecond}} {
		vars := map[string]string{}
		if tc.env != "" {
			vars["PULSE_INGEST_LINGER"] = tc.env
		}
		cfg, err := loadConfig(config.NewEnv(config.MapLookup(vars)))
		if err != nil || cfg.Linger != tc.want {
			t.Errorf("PULSE_INGEST_LINGER=%q: linger %v, %v; want %v", tc.env, cfg.Linger, err, tc.want)
		}
	}
	_, err := loadConfig(config.NewEnv(config.MapLookup(map[string]string{"PULSE_INGEST_LINGER": "2s"})))
	if err == nil || !strings.Contains(err.Error(), "PULSE_INGEST_LINGER=2s: want 0s..1s") {
		t.Errorf("PULSE_INGEST_LINGER=2s: error %v", err)
	}
}

func TestLoadConfigGCPercent(t *testing.T) {
	cfg, err := loadConfig(config.NewEnv(config.MapLookup(nil)))
	if err != nil || cfg.GCPercent != 200 {
		t.Fatalf("default GC percent %d, %v; want 200", cfg.GCPercent, err)
	}
	cfg, err = loadConfig(config.NewEnv(config.MapLookup(map[string]string{"PULSE_INGEST_GOGC": "0"})))
	if err != nil || cfg.GCPercent != 0 {
		t.Fatalf("PULSE_INGEST_GOGC=0: %d, %v", cfg.GCPercent, err)
	}
	_, err = loadConfig(config.NewEnv(config.MapLookup(map[string]string{"PULSE_INGEST_GOGC": "-1"})))
	if err == nil || !strings.Contains(err.Error(), "PULSE_INGEST_GOGC=-1: must not be negative") {
		t.Fatalf("PULSE_INGEST_GOGC=-1: error %v", err)
	}
}
