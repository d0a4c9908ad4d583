package redisx

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/platform/config"
)

func TestValidateSecurity(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{Username: "pulse"}, `PULSE_REDIS_USERNAME="pulse": needs PULSE_REDIS_PASSWORD or PULSE_REDIS_PASSWORD_FILE`},
		{Config{Password: "pw", PasswordFile: "/f"}, "PULSE_REDIS_PASSWORD and PULSE_REDIS_PASSWORD_FILE: set one, not both"},
		{Config{TLS: config.ClientTLS{KeyFile: "k"}}, "PULSE_REDIS_TLS_CERT_FILE and PULSE_REDIS_TLS_KEY_FILE: set both"},
		{Config{TLS: config.ClientTLS{CAFile: "/nonexistent/ca.pem"}}, "PULSE_REDIS_TLS_CA_FILE: open /nonexistent/ca.pem"},
		{Config{Username: "u", PasswordFile: "/nonexistent/pw"}, "PULSE_REDIS_PASSWORD_FILE: open /nonexistent/pw"},
	} {
		if err := tt.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: Validate() = %v, want %q", tt.cfg, err, tt.want)
		}
	}
}

func TestLogValueMasksThePassword(t *testing.T) {
	cfg := Config{Addrs: []string{"r:6380"}, Username: "pulse", Password: "s3cret", TLS: config.ClientTLS{Enabled: true}}
	for _, s := range []string{cfg.LogValue().String(), fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg)} {
		if strings.Contains(s, "s3cret") || !strings.Contains(s, "password=***") || !strings.Contains(s, "tls=true") {
			t.Errorf("%s: want the password masked and tls=true", s)
		}
	}
}

// Settings that do not load make every command fail with the reason, named by its
// variable; a Config made in code takes them from the environment.
func TestNewClientFailsWithTheReason(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	t.Setenv("PULSE_REDIS_PASSWORD_FILE", missing)
	c := NewClient(Config{Addrs: []string{"127.0.0.1:1"}, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := Ping(ctx, c); err == nil || !strings.Contains(err.Error(), "PULSE_REDIS_PASSWORD_FILE: open "+missing) {
		t.Fatalf("Ping() = %v, want the password file of the environment named", err)
	}
}
