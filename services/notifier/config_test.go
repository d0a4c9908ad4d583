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
	if cfg.HTTP.Addr != ":18084" || cfg.Group != "pulse-notifier" || cfg.WebhooksTopic != "presence.webhooks" ||
		cfg.EndpointsFile != "" || cfg.EndpointsReload != 10*time.Second || cfg.MaxBacklog != 10000 ||
		cfg.CommitInterval != time.Second || cfg.drainTimeout() != 7500*time.Millisecond {
		t.Fatalf("defaults = %+v", cfg)
	}
}

func TestLoadConfigRejectsBadValues(t *testing.T) {
	_, err := loadConfig(config.NewEnv(config.MapLookup(map[string]string{
		"PULSE_TOPIC_WEBHOOKS":           "presence.changes",
		"PULSE_NOTIFIER_MAX_BACKLOG":     "0",
		"PULSE_NOTIFIER_COMMIT_INTERVAL": "0s",
	})))
	for _, want := range []string{`PULSE_TOPIC_WEBHOOKS="presence.changes"`, "PULSE_NOTIFIER_MAX_BACKLOG=0", "PULSE_NOTIFIER_COMMIT_INTERVAL=0s"} {
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
	configtest.Doc(t, "../../docs/configuration.md", vars, "notifier")
}

// -help lists every variable the service reads, logging's first, once each.
func TestHelpListsEveryVariable(t *testing.T) {
	vars := new(Config).vars()
	var b strings.Builder
	if err := app.Help(&b, "notifier", vars); err != nil {
		t.Fatal(err)
	}
	configtest.Help(t, b.String(), vars, "PULSE_KAFKA_SASL_PASSWORD (secret, no default)")
}
