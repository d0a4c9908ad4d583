package kafkax

import (
	"errors"
	"strings"
	"testing"

	"github.com/pulse-presence/pulse/pkg/config"
)

func TestConfigFromEnvDefaultsAreValid(t *testing.T) {
	cfg := ConfigFromEnv(config.NewEnv(config.MapLookup(nil)), "pulse-test")
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	if cfg.EventsTopic != "presence.events" || cfg.ChangesTopic != "presence.changes" || cfg.Brokers[0] != "127.0.0.1:19092" {
		t.Fatalf("defaults = %+v", cfg)
	}
}

func TestConfigValidateNamesTheVariable(t *testing.T) {
	env := config.NewEnv(config.MapLookup(map[string]string{
		"PULSE_KAFKA_BROKERS": " , ",
		"PULSE_TOPIC_CHANGES": "presence.events",
	}))
	cfg := ConfigFromEnv(env, "x")
	err := errors.Join(env.Err(), cfg.Validate())
	if err == nil {
		t.Fatal("no error for no brokers and equal topics")
	}
	for _, want := range []string{"PULSE_KAFKA_BROKERS", "PULSE_TOPIC_CHANGES"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}
