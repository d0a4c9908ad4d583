package migrate

import (
	"errors"
	"log/slog"
	"reflect"
	"testing"
	"time"
)

func TestNewValidatesOptions(t *testing.T) {
	good := []Migration{{Version: 1, File: "0001_a.cql", Statements: []string{"CREATE KEYSPACE {{keyspace}} WITH replication = {{replication}}"}}}
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"keyspace empty", Options{Migrations: good},
			`migrate Keyspace: "" is not a valid keyspace name (lower-case letter, then up to 47 lower-case letters, digits or underscores)`},
		{"keyspace quoted", Options{Keyspace: `"Pulse"`, Migrations: good},
			`migrate Keyspace: "\"Pulse\"" is not a valid keyspace name (lower-case letter, then up to 47 lower-case letters, digits or underscores)`},
		{"replication not a map", Options{Keyspace: "pulse", Replication: "SimpleStrategy", Migrations: good},
			`migrate Replication: "SimpleStrategy" is not a CQL map like {'class': 'SimpleStrategy', 'replication_factor': 1}`},
		{"replication with a second statement", Options{Keyspace: "pulse", Replication: "{'class': 'SimpleStrategy'}; DROP KEYSPACE x; {}", Migrations: good},
			`migrate Replication: "{'class': 'SimpleStrategy'}; DROP KEYSPACE x; {}" is not a CQL map like {'class': 'SimpleStrategy', 'replication_factor': 1}`},
		{"no migrations", Options{Keyspace: "pulse"}, "migrate Migrations: none given"},
		{"duplicate", Options{Keyspace: "pulse", Migrations: append(good, good[0])}, "migrate Migrations: version 1 given twice"},
		{"unordered", Options{Keyspace: "pulse", Migrations: []Migration{{Version: 2, File: "0002_b.cql", Statements: []string{"B"}}, good[0]}},
			"migrate Migrations: not ordered by version (0001_a.cql after 0002_b.cql)"},
		{"leftover placeholder", Options{Keyspace: "pulse", Migrations: []Migration{{Version: 1, File: "0001_a.cql", Statements: []string{"A {{ks}}"}}}},
			"0001_a.cql: statement 1: unknown placeholder {{ks}} (known: {{keyspace}}, {{replication}})"},
		{"valid options but no session", Options{Keyspace: "pulse", Migrations: good}, "migrate: nil session"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(nil, tt.opts)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("New() error = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestPending(t *testing.T) {
	migs := []Migration{
		{Version: 1, Name: "keyspace", File: "0001_keyspace.cql", Checksum: "c1"},
		{Version: 2, Name: "a", File: "0002_a.cql", Checksum: "c2"},
		{Version: 5, Name: "b", File: "0005_b.cql", Checksum: "c5"},
	}
	at := time.Date(2025, 11, 22, 6, 0, 0, 0, time.UTC)
	m := &Migrator{opts: Options{Migrations: migs}, log: discard()}

	tests := []struct {
		name    string
		records map[int]Record
		want    []int
	}{
		{"fresh", nil, []int{1, 2, 5}},
		{"first applied", map[int]Record{1: {1, "keyspace", "c1", at}}, []int{2, 5}},
		{"gap filled later", map[int]Record{1: {1, "keyspace", "c1", at}, 5: {5, "b", "c5", at}}, []int{2}},
		{"all applied plus a newer one", map[int]Record{1: {1, "keyspace", "c1", at}, 2: {2, "a", "c2", at}, 5: {5, "b", "c5", at}, 6: {6, "c", "c6", at}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := m.pending(state{records: tt.records})
			if err != nil {
				t.Fatalf("pending() error = %v", err)
			}
			var versions []int
			for _, g := range got {
				versions = append(versions, g.Version)
			}
			if !reflect.DeepEqual(versions, tt.want) {
				t.Fatalf("pending() versions = %v, want %v", versions, tt.want)
			}
		})
	}

	_, err := m.pending(state{records: map[int]Record{1: {1, "keyspace", "c1", at}, 2: {2, "a", "edited", at}}})
	var ce *ChecksumError
	if !errors.As(err, &ce) {
		t.Fatalf("pending() with an edited file: error = %v, want *ChecksumError", err)
	}
	want := ChecksumError{File: "0002_a.cql", Recorded: "edited", Current: "c2", AppliedAt: at}
	if *ce != want {
		t.Fatalf("ChecksumError = %+v, want %+v", *ce, want)
	}
	if msg := "0002_a.cql: file changed after it was applied at 2025-11-22T06:00:00Z (recorded checksum edited, file now c2); applied migrations must not be edited, add a new migration instead"; err.Error() != msg {
		t.Fatalf("error = %q, want %q", err.Error(), msg)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
