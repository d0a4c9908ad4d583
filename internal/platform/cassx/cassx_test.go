package cassx

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
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

// A node that accepts connections and never answers (one starting up, or hung) holds
// the driver's connect for as long as its own timeouts allow; createSession gives up
// at its deadline instead.
func TestCreateSessionGivesUpAtItsDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}()
	cluster := gocql.NewCluster("127.0.0.1")
	cluster.Port = ln.Addr().(*net.TCPAddr).Port
	cluster.ConnectTimeout = time.Minute
	cluster.Timeout = time.Minute
	start := time.Now()
	s, err := createSession(cluster, 300*time.Millisecond)
	if err == nil {
		s.Close()
		t.Fatal("createSession connected to a node that never answers")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("createSession returned after %v, want about its 300ms deadline", took)
	}
	if !strings.Contains(err.Error(), "no session after 300ms") {
		t.Fatalf("error = %v, want it to name the deadline", err)
	}
}

func TestConnectDeadlineCoversTheDriversTimeouts(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want time.Duration
	}{
		{Config{ConnectTimeout: time.Second, Timeout: time.Second}, 30 * time.Second},
		{Config{ConnectTimeout: 10 * time.Second, Timeout: 30 * time.Second}, 100 * time.Second},
	} {
		if got := connectDeadline(c.cfg); got != c.want {
			t.Errorf("connectDeadline(%+v) = %v, want %v", c.cfg, got, c.want)
		}
	}
}
