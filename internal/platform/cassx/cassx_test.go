package cassx

import (
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/platform/config"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []string // every line of the error, in order; nil for valid
	}{
		{name: "defaults", cfg: Config{Hosts: []string{"127.0.0.1"}}},
		{name: "full", cfg: Config{Hosts: []string{"a", "b"}, Port: 19042, Keyspace: "pulse_it_1", Consistency: "one", Timeout: time.Second, ConnectTimeout: time.Second, Username: "u", Password: "p"}},
		{name: "no hosts", cfg: Config{}, want: []string{"cassandra Hosts: at least one contact point is required"}},
		{name: "blank host", cfg: Config{Hosts: []string{"a", " "}}, want: []string{"cassandra Hosts[1]: empty host"}},
		{name: "port", cfg: Config{Hosts: []string{"a"}, Port: 70000}, want: []string{"cassandra Port: 70000 is not a TCP port (1-65535)"}},
		{name: "keyspace upper case", cfg: Config{Hosts: []string{"a"}, Keyspace: "Pulse"}, want: []string{`cassandra Keyspace: "Pulse" is not a valid keyspace name (lower-case letter, then up to 47 lower-case letters, digits or underscores)`}},
		{name: "serial consistency", cfg: Config{Hosts: []string{"a"}, Consistency: "SERIAL"}, want: []string{`cassandra Consistency: unknown level "SERIAL" (want one of ONE, TWO, THREE, QUORUM, ALL, LOCAL_QUORUM, EACH_QUORUM, LOCAL_ONE)`}},
		{name: "negative timeouts and password alone", cfg: Config{Hosts: []string{"a"}, Timeout: -time.Second, ConnectTimeout: -time.Millisecond, Password: "p"}, want: []string{
			"cassandra Timeout: -1s is negative",
			"cassandra ConnectTimeout: -1ms is negative",
			"cassandra Username: required when Password is set",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tt.want)
			}
			if got, want := err.Error(), strings.Join(tt.want, "\n"); got != want {
				t.Fatalf("Validate() =\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func TestStringMasksPassword(t *testing.T) {
	got := Config{Hosts: []string{"h1", "h2"}, Username: "pulse", Password: "s3cret"}.String()
	want := `hosts=h1,h2 port=9042 keyspace="" consistency=LOCAL_QUORUM timeout=10s connect_timeout=5s username="pulse" password="***" tls=false`
	if got != want {
		t.Fatalf("String() = %s\nwant %s", got, want)
	}
	got = Config{Hosts: []string{"h1"}, Username: "pulse", PasswordFile: "/run/secrets/cassandra", TLS: config.ClientTLS{Enabled: true}}.String()
	if !strings.Contains(got, `password="***" tls=true`) || strings.Contains(got, "/run/secrets") {
		t.Fatalf("String() = %s: want the password file masked and tls=true", got)
	}
}

func TestNewSessionRejectsInvalidConfig(t *testing.T) {
	_, err := NewSession(Config{Hosts: []string{"127.0.0.1"}, Consistency: "ANY"})
	if err == nil || !strings.HasPrefix(err.Error(), "cassandra Consistency: unknown level \"ANY\"") {
		t.Fatalf("NewSession() error = %v, want the Consistency validation error", err)
	}
}
