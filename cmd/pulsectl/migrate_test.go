package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/platform/cassx"
)

func TestParseMigrateFlags(t *testing.T) {
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want migrateFlags
	}{
		{
			name: "defaults",
			want: migrateFlags{
				cass:        cassx.Config{Hosts: []string{"127.0.0.1"}, Port: 19042, Consistency: "LOCAL_QUORUM", Timeout: 30 * time.Second, ConnectTimeout: 10 * time.Second},
				keyspace:    "pulse",
				replication: "{'class': 'SimpleStrategy', 'replication_factor': 1}",
				dir:         "migrations",
				timeout:     30 * time.Second,
			},
		},
		{
			name: "everything",
			args: []string{"-hosts", "10.0.0.1, 10.0.0.2,", "-port", "9042", "-keyspace", "pulse_prod", "-consistency", "EACH_QUORUM",
				"-replication", "{'class': 'NetworkTopologyStrategy', 'dc1': 3}", "-dir", "/srv/migrations", "-timeout", "2m", "-dry-run", "-username", "ops"},
			env: map[string]string{"PULSE_CASSANDRA_PASSWORD": "pw"},
			want: migrateFlags{
				cass: cassx.Config{Hosts: []string{"10.0.0.1", "10.0.0.2"}, Port: 9042, Consistency: "EACH_QUORUM", Timeout: 2 * time.Minute,
					ConnectTimeout: 10 * time.Second, Username: "ops", Password: "pw"},
				keyspace:    "pulse_prod",
				replication: "{'class': 'NetworkTopologyStrategy', 'dc1': 3}",
				dir:         "/srv/migrations",
				timeout:     2 * time.Minute,
				dryRun:      true,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMigrateFlags(tt.args, env(tt.env))
			if err != nil {
				t.Fatalf("parseMigrateFlags() error = %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("parseMigrateFlags() =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestParseMigrateFlagsErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-keyspace", "Pulse"}, `migrate -keyspace: "Pulse" is not a valid keyspace name (lower-case letter, then up to 47 lower-case letters, digits or underscores)`},
		{[]string{"-timeout", "0s"}, "migrate -timeout: 0s must be positive"},
		{[]string{"-hosts", " , "}, "cassandra Hosts: at least one contact point is required"},
		{[]string{"-port", "0x10000"}, "cassandra Port: 65536 is not a TCP port (1-65535)"},
		{[]string{"-consistency", "ANY"}, `cassandra Consistency: unknown level "ANY" (want one of ONE, TWO, THREE, QUORUM, ALL, LOCAL_QUORUM, EACH_QUORUM, LOCAL_ONE)`},
		{[]string{"up"}, `migrate: unexpected arguments ["up"]`},
	}
	for _, tt := range tests {
		_, err := parseMigrateFlags(tt.args, func(string) string { return "" })
		if err == nil || err.Error() != tt.want {
			t.Errorf("parseMigrateFlags(%q) error = %v, want %q", tt.args, err, tt.want)
		}
	}
}

func TestRunMigrateHelp(t *testing.T) {
	if err := runMigrate(context.Background(), []string{"-h"}, &bytes.Buffer{}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("runMigrate(-h) = %v, want flag.ErrHelp", err)
	}
}

// TestRunMigrateFailsBeforeConnecting checks that bad migration files are reported
// without touching a server (the port given is closed).
func TestRunMigrateFailsBeforeConnecting(t *testing.T) {
	empty := t.TempDir()
	broken := t.TempDir()
	if err := os.WriteFile(filepath.Join(broken, "1_users.cql"), []byte("A;"), 0o644); err != nil {
		t.Fatal(err)
	}
	port := closedPort(t)
	tests := []struct {
		dir, want string
	}{
		{filepath.Join(empty, "missing"), "loading migrations from " + filepath.Join(empty, "missing") + ": reading migrations: open .: no such file or directory"},
		{empty, "no NNNN_name.cql files in " + empty},
		{broken, "loading migrations from " + broken + ": 1_users.cql: migration file names must look like NNNN_name.cql (four digits, then lower-case letters, digits and underscores)"},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		err := runMigrate(context.Background(), []string{"-dir", tt.dir, "-port", port}, &out)
		if err == nil || err.Error() != tt.want {
			t.Errorf("runMigrate(-dir %s) error = %v, want %q", tt.dir, err, tt.want)
		}
		if out.Len() != 0 {
			t.Errorf("runMigrate(-dir %s) printed %q, want nothing", tt.dir, out.String())
		}
	}
}

// TestRunMigrateUnreachable checks that a server that is not there makes an error
// promptly, naming where it tried.
func TestRunMigrateUnreachable(t *testing.T) {
	port := closedPort(t)
	start := time.Now()
	err := runMigrate(context.Background(), []string{"-dir", "../../migrations", "-port", port, "-timeout", "2s"}, &bytes.Buffer{})
	if err == nil || !strings.HasPrefix(err.Error(), "connecting to cassandra at 127.0.0.1 port "+port+": ") {
		t.Fatalf("runMigrate() error = %v, want a connection error naming 127.0.0.1 port %s", err, port)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("runMigrate() took %v to fail", took)
	}
}

// closedPort returns a local TCP port that nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	return port
}
