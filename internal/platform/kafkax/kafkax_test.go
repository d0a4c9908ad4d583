package kafkax

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/platform/config"
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

func TestSecurityValidate(t *testing.T) {
	for _, tt := range []struct {
		sasl SASL
		tls  config.ClientTLS
		want string
	}{
		{SASL{Username: "pulse"}, config.ClientTLS{}, "PULSE_KAFKA_SASL_USERNAME=\"pulse\": needs PULSE_KAFKA_SASL_PASSWORD or PULSE_KAFKA_SASL_PASSWORD_FILE"},
		{SASL{Password: "pw"}, config.ClientTLS{}, "PULSE_KAFKA_SASL_USERNAME: required when a SASL password is set"},
		{SASL{Username: "u", Password: "pw", PasswordFile: "/f"}, config.ClientTLS{}, "PULSE_KAFKA_SASL_PASSWORD and PULSE_KAFKA_SASL_PASSWORD_FILE: set one, not both"},
		{SASL{Username: "u", Password: "pw", Mechanism: "PLAIN"}, config.ClientTLS{}, `PULSE_KAFKA_SASL_MECHANISM="PLAIN": want SCRAM-SHA-256 or SCRAM-SHA-512`},
		{SASL{}, config.ClientTLS{CertFile: "c"}, "PULSE_KAFKA_TLS_CERT_FILE and PULSE_KAFKA_TLS_KEY_FILE: set both"},
		{SASL{}, config.ClientTLS{CAFile: "/nonexistent/ca.pem"}, "PULSE_KAFKA_TLS_CA_FILE: open /nonexistent/ca.pem"},
		{SASL{Username: "u", PasswordFile: "/nonexistent/pw"}, config.ClientTLS{}, "PULSE_KAFKA_SASL_PASSWORD_FILE: open /nonexistent/pw"},
	} {
		cfg := Config{EventsTopic: "e", ChangesTopic: "c", SASL: tt.sasl, TLS: tt.tls}
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v %+v: Validate() = %v, want %q", tt.sasl, tt.tls, err, tt.want)
		}
		if _, err := NewClient(cfg, slog.New(slog.DiscardHandler), nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v %+v: NewClient() error = %v, want %q", tt.sasl, tt.tls, err, tt.want)
		}
	}
	ok := Config{EventsTopic: "e", ChangesTopic: "c", SASL: SASL{Mechanism: "scram-sha-256", Username: "u", Password: "pw"}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestLogValueMasksThePassword(t *testing.T) {
	cfg := Config{Brokers: []string{"b:9093"}, SASL: SASL{Username: "pulse", Password: "s3cret"}, TLS: config.ClientTLS{Enabled: true}}
	for _, s := range []string{cfg.LogValue().String(), fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg)} {
		if strings.Contains(s, "s3cret") || !strings.Contains(s, "sasl_password=***") || !strings.Contains(s, "tls=true") {
			t.Errorf("%s: want the password masked and tls=true", s)
		}
	}
}

// A Config made in code, as pulsectl makes its own, takes TLS and SASL from the
// environment; a Config with any of them set keeps its own.
func TestNewClientReadsSecurityFromTheEnvironment(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing-ca.pem")
	t.Setenv("PULSE_KAFKA_TLS_CA_FILE", missing)
	t.Setenv("PULSE_KAFKA_SASL_USERNAME", "pulse")
	t.Setenv("PULSE_KAFKA_SASL_PASSWORD", "s3cret")
	cfg := Config{Brokers: []string{"127.0.0.1:1"}, DialTimeout: time.Second, RequestTimeout: time.Second, RetryTimeout: time.Second}
	if _, err := NewClient(cfg, slog.New(slog.DiscardHandler), nil); err == nil || !strings.Contains(err.Error(), "PULSE_KAFKA_TLS_CA_FILE: open "+missing) {
		t.Fatalf("NewClient() error = %v, want the CA file of the environment named", err)
	}
	cfg.TLS.Enabled = true
	cl, err := NewClient(cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatalf("NewClient() with its own TLS settings: %v", err)
	}
	cl.Close()
}
