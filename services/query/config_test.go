package main

import (
	"strings"
	"testing"

	"github.com/pulse-presence/pulse/internal/platform/app"
	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/config/configtest"
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

// The table is sound and docs/configuration.md documents every row of it (make
// config-doc).
func TestConfigDocDocumentsServiceVariables(t *testing.T) {
	vars := new(Config).vars()
	configtest.Table(t, vars)
	configtest.Doc(t, "../../docs/configuration.md", vars, "query")
}

// -help lists every variable the service reads, logging's first, once each.
func TestHelpListsEveryVariable(t *testing.T) {
	vars := new(Config).vars()
	var b strings.Builder
	if err := app.Help(&b, "query", vars); err != nil {
		t.Fatal(err)
	}
	configtest.Help(t, b.String(), vars, "PULSE_OPERATOR_TOKEN (secret, no default)")
}
