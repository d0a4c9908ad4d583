package migrate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"reflect"
	"testing"
	"testing/fstest"
)

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestSplitStatements(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{name: "empty", src: "", want: nil},
		{name: "only comments", src: "-- a\n// b\n/* c; */\n", want: nil},
		{name: "one without final semicolon", src: "SELECT 1 FROM t", want: []string{"SELECT 1 FROM t"}},
		{name: "two", src: "CREATE TABLE a (x int PRIMARY KEY);\nCREATE TABLE b (y int PRIMARY KEY);\n",
			want: []string{"CREATE TABLE a (x int PRIMARY KEY)", "CREATE TABLE b (y int PRIMARY KEY)"}},
		{name: "empty statements dropped", src: ";;  ;\nA;;B;", want: []string{"A", "B"}},
		{name: "semicolon in string", src: "INSERT INTO t (a) VALUES ('x;y');", want: []string{"INSERT INTO t (a) VALUES ('x;y')"}},
		{name: "escaped quote in string", src: "INSERT INTO t (a) VALUES ('it''s; fine');B;", want: []string{"INSERT INTO t (a) VALUES ('it''s; fine')", "B"}},
		{name: "comment markers in string", src: "SELECT '--;//;/*' FROM t;", want: []string{"SELECT '--;//;/*' FROM t"}},
		{name: "semicolon in quoted identifier", src: `SELECT "a;b" FROM t;`, want: []string{`SELECT "a;b" FROM t`}},
		{name: "dollar string", src: "CREATE FUNCTION f() RETURNS NULL ON NULL INPUT RETURNS int LANGUAGE java AS $$ return 1; $$;",
			want: []string{"CREATE FUNCTION f() RETURNS NULL ON NULL INPUT RETURNS int LANGUAGE java AS $$ return 1; $$"}},
		{name: "line comments stripped with their semicolons",
			src:  "-- header; not a statement\nCREATE TABLE t (   -- the table; with a comment\n  a int, // it's a column;\n  PRIMARY KEY (a)\n);\n-- trailing; comment",
			want: []string{"CREATE TABLE t (\n  a int,\n  PRIMARY KEY (a)\n)"}},
		{name: "apostrophe in comment", src: "-- the user's row\nA;", want: []string{"A"}},
		{name: "block comment", src: "A /* one; two\nthree */ B;\nC/*x*/D;", want: []string{"A B", "C D"}},
		{name: "blank lines and trailing blanks squeezed", src: "\n\nA  \n\n\n  B\t\r\n;", want: []string{"A\n  B"}},
		{name: "blank lines inside a string kept", src: "INSERT INTO t (a) VALUES ('x  \n\n y');", want: []string{"INSERT INTO t (a) VALUES ('x  \n\n y')"}},
		{name: "replication map", src: "CREATE KEYSPACE IF NOT EXISTS {{keyspace}} WITH replication = {{replication}};",
			want: []string{"CREATE KEYSPACE IF NOT EXISTS {{keyspace}} WITH replication = {{replication}}"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := splitStatements(tt.src)
			if err != nil {
				t.Fatalf("splitStatements() error = %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("splitStatements() =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestSplitStatementsErrors(t *testing.T) {
	tests := []struct {
		src, want string
	}{
		{"A;\nINSERT INTO t (a) VALUES ('x);", "unterminated string literal starting on line 2"},
		{"A;\nB;\nSELECT \"x FROM t;", "unterminated quoted identifier starting on line 3"},
		{"A /* never closed;", "unterminated /* comment starting on line 1"},
		{"\nAS $$ return 1;", "unterminated $$ string starting on line 2"},
	}
	for _, tt := range tests {
		_, err := splitStatements(tt.src)
		if err == nil || err.Error() != tt.want {
			t.Errorf("splitStatements(%q) error = %v, want %q", tt.src, err, tt.want)
		}
	}
}

func TestLoad(t *testing.T) {
	one := "CREATE KEYSPACE IF NOT EXISTS {{keyspace}} WITH replication = {{replication}};\n"
	two := "-- users\nCREATE TABLE {{keyspace}}.a (x int PRIMARY KEY);\nCREATE TABLE {{keyspace}}.b (y int PRIMARY KEY);\n"
	ten := "DROP TABLE IF EXISTS {{keyspace}}.b;"
	fsys := fstest.MapFS{
		"0010_drop_b.cql":   {Data: []byte(ten)},
		"0002_tables.cql":   {Data: []byte(two)},
		"0001_keyspace.cql": {Data: []byte(one)},
		"README.md":         {Data: []byte("not a migration")},
		"notes.txt":         {Data: []byte("-;")},
		"old/0003_x.cql":    {Data: []byte("ignored: subdirectories are not read")},
	}
	got, err := Load(fsys)
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	want := []Migration{
		{Version: 1, Name: "keyspace", File: "0001_keyspace.cql", Checksum: sum(one),
			Statements: []string{"CREATE KEYSPACE IF NOT EXISTS {{keyspace}} WITH replication = {{replication}}"}},
		{Version: 2, Name: "tables", File: "0002_tables.cql", Checksum: sum(two),
			Statements: []string{"CREATE TABLE {{keyspace}}.a (x int PRIMARY KEY)", "CREATE TABLE {{keyspace}}.b (y int PRIMARY KEY)"}},
		{Version: 10, Name: "drop_b", File: "0010_drop_b.cql", Checksum: sum(ten),
			Statements: []string{"DROP TABLE IF EXISTS {{keyspace}}.b"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Load() =\n%+v\nwant\n%+v", got, want)
	}
}

func TestLoadErrors(t *testing.T) {
	ok := &fstest.MapFile{Data: []byte("A;")}
	tests := []struct {
		name string
		fsys fstest.MapFS
		want string
	}{
		{name: "duplicate version", fsys: fstest.MapFS{"0001_a.cql": ok, "0002_b.cql": ok, "0002_c.cql": ok},
			want: "0002_b.cql and 0002_c.cql: both have version 2"},
		{name: "no number", fsys: fstest.MapFS{"0001_a.cql": ok, "users.cql": ok},
			want: "users.cql: migration file names must look like NNNN_name.cql (four digits, then lower-case letters, digits and underscores)"},
		{name: "three digits", fsys: fstest.MapFS{"001_a.cql": ok},
			want: "001_a.cql: migration file names must look like NNNN_name.cql (four digits, then lower-case letters, digits and underscores)"},
		{name: "upper case", fsys: fstest.MapFS{"0001_Users.cql": ok},
			want: "0001_Users.cql: migration file names must look like NNNN_name.cql (four digits, then lower-case letters, digits and underscores)"},
		{name: "upper case extension", fsys: fstest.MapFS{"0001_a.CQL": ok},
			want: "0001_a.CQL: migration file names must look like NNNN_name.cql (four digits, then lower-case letters, digits and underscores)"},
		{name: "version zero", fsys: fstest.MapFS{"0000_init.cql": ok}, want: "0000_init.cql: versions start at 0001"},
		{name: "no statements", fsys: fstest.MapFS{"0001_a.cql": {Data: []byte("-- nothing yet\n")}}, want: "0001_a.cql: no statements"},
		{name: "unterminated string", fsys: fstest.MapFS{"0001_a.cql": {Data: []byte("A;\nB 'x;")}},
			want: "0001_a.cql: unterminated string literal starting on line 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Load(tt.fsys)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Load() = %v, %v; want error %q", got, err, tt.want)
			}
		})
	}
}

func TestLoadEmptyDir(t *testing.T) {
	got, err := Load(fstest.MapFS{"README.md": {Data: []byte("x")}})
	if err != nil || got != nil {
		t.Fatalf("Load() = %v, %v; want nil, nil", got, err)
	}
}

// TestChecksum pins the checksum to the file's bytes: any edit, even one to a comment
// or to whitespace, changes it, and identical bytes always give the same value.
func TestChecksum(t *testing.T) {
	base := "-- v1\nCREATE TABLE {{keyspace}}.a (x int PRIMARY KEY);\n"
	variants := map[string]string{
		"same":       base,
		"comment":    "-- v2\nCREATE TABLE {{keyspace}}.a (x int PRIMARY KEY);\n",
		"whitespace": "-- v1\nCREATE TABLE {{keyspace}}.a (x int PRIMARY KEY); \n",
		"statement":  "-- v1\nCREATE TABLE {{keyspace}}.a (x bigint PRIMARY KEY);\n",
	}
	load := func(src string) Migration {
		t.Helper()
		ms, err := Load(fstest.MapFS{"0001_a.cql": {Data: []byte(src)}})
		if err != nil {
			t.Fatal(err)
		}
		return ms[0]
	}
	b := load(base)
	if want := "sha256 of the file"; b.Checksum != sum(base) {
		t.Fatalf("Checksum = %s, want %s (%s)", b.Checksum, sum(base), want)
	}
	for name, src := range variants {
		got := load(src).Checksum
		if changed := got != b.Checksum; changed != (name != "same") {
			t.Errorf("%s: checksum %s vs base %s, changed=%v", name, got, b.Checksum, changed)
		}
	}
}

func TestRender(t *testing.T) {
	m := Migration{File: "0001_keyspace.cql", Statements: []string{
		"CREATE KEYSPACE IF NOT EXISTS {{keyspace}} WITH replication = {{replication}}",
		"CREATE TABLE {{keyspace}}.a (x int PRIMARY KEY) WITH comment = 'in {{keyspace}}'",
	}}
	got, err := m.Render("pulse_it", "{'class': 'NetworkTopologyStrategy', 'dc1': 3}")
	if err != nil {
		t.Fatalf("Render() error = %v", err)
	}
	want := []string{
		"CREATE KEYSPACE IF NOT EXISTS pulse_it WITH replication = {'class': 'NetworkTopologyStrategy', 'dc1': 3}",
		"CREATE TABLE pulse_it.a (x int PRIMARY KEY) WITH comment = 'in pulse_it'",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Render() =\n%q\nwant\n%q", got, want)
	}
}

func TestRenderLeftovers(t *testing.T) {
	tests := []struct {
		stmt, want string
	}{
		{"CREATE TABLE {{keyspace}}.a (x int PRIMARY KEY) WITH default_time_to_live = {{ttl}}",
			"0004_a.cql: statement 2: unknown placeholder {{ttl}} (known: {{keyspace}}, {{replication}})"},
		{"CREATE TABLE {{ keyspace }}.a (x int PRIMARY KEY)",
			"0004_a.cql: statement 2: unknown placeholder {{ keyspace }} (known: {{keyspace}}, {{replication}})"},
		{"CREATE TABLE {{keyspace}}.a (x int PRIMARY KEY) WITH comment = '{{'",
			"0004_a.cql: statement 2: unknown placeholder {{ (known: {{keyspace}}, {{replication}})"},
	}
	for _, tt := range tests {
		m := Migration{File: "0004_a.cql", Statements: []string{"SELECT 1 FROM {{keyspace}}.t", tt.stmt}}
		_, err := m.Render("pulse", DefaultReplication)
		if err == nil || err.Error() != tt.want || !errors.Is(err, errLeftover) {
			t.Errorf("Render(%q) error = %v, want %q", tt.stmt, err, tt.want)
		}
	}
}

// TestRepositoryMigrations loads the real migrations directory: the files must parse,
// be numbered 1..3 and render without leftovers.
func TestRepositoryMigrations(t *testing.T) {
	ms, err := Load(os.DirFS("../../../migrations"))
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	type brief struct {
		Version    int
		File       string
		Statements int
	}
	var got []brief
	for _, m := range ms {
		got = append(got, brief{m.Version, m.File, len(m.Statements)})
		if _, err := m.Render("pulse", DefaultReplication); err != nil {
			t.Errorf("Render(%s): %v", m.File, err)
		}
	}
	want := []brief{
		{1, "0001_keyspace.cql", 1},
		{2, "0002_user_status.cql", 1},
		{3, "0003_user_activity.cql", 1},
		{4, "0004_user_status_compaction.cql", 1},
		{5, "0005_history_rollups.cql", 6},
		{6, "0006_user_sessions_microseconds.cql", 2},
		{7, "0007_point_in_time.cql", 4},
		{8, "0008_shard_progress.cql", 1},
		{9, "0009_uniques_shown.cql", 1},
		{10, "0010_user_activity_custom.cql", 1},
		{11, "0011_user_status_custom.cql", 1},
		{12, "0012_user_status_groups.cql", 1},
		{13, "0013_retention.cql", 6},
		{14, "0014_shard_progress_provisional.cql", 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("migrations = %+v, want %+v", got, want)
	}
}

func TestStatementErrorMessage(t *testing.T) {
	err := &StatementError{
		File:      "0002_user_status.cql",
		Index:     2,
		Statement: "CREATE TABLE pulse.x (\n  a int PRIMARY KEY\n)",
		Err:       errors.New("line 1:7 no viable alternative"),
	}
	want := "0002_user_status.cql: statement 2 failed: line 1:7 no viable alternative\n  CREATE TABLE pulse.x (\n    a int PRIMARY KEY\n  )"
	if err.Error() != want {
		t.Fatalf("Error() =\n%s\nwant\n%s", err.Error(), want)
	}
	if !errors.Is(err, err.Err) {
		t.Fatal("StatementError does not unwrap to the server error")
	}
}

// TestAppliedMigrationsKeepTheirBytes pins the checksum of every released migration:
// pulsectl migrate refuses a keyspace where a file it applied has changed since, so an
// edit — a comment included — must be a new migration instead.
func TestAppliedMigrationsKeepTheirBytes(t *testing.T) {
	ms, err := Load(os.DirFS("../../../migrations"))
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	// The first 16 hex digits of each file's SHA-256.
	released := map[string]string{
		"0001_keyspace.cql":                   "d45710e7d052d7f9",
		"0002_user_status.cql":                "087475c28efdcdb6",
		"0003_user_activity.cql":              "91dca481973672da",
		"0004_user_status_compaction.cql":     "b5211f39dea220d9",
		"0005_history_rollups.cql":            "8c95e4b42df3aa87",
		"0006_user_sessions_microseconds.cql": "dda070e003629bbb",
		"0007_point_in_time.cql":              "9575f798456f2fe6",
		"0008_shard_progress.cql":             "ece9f9fb6b9dae02",
		"0009_uniques_shown.cql":              "725d1a0e3436f2b1",
		"0010_user_activity_custom.cql":       "fed44f71c867bd74",
		"0011_user_status_custom.cql":         "125dc15d142d9641",
		"0012_user_status_groups.cql":         "53884348552a90ff",
	}
	for _, m := range ms {
		want, ok := released[m.File]
		if !ok {
			continue // a new migration: pin it here once it is released
		}
		if got := m.Checksum[:16]; got != want {
			t.Errorf("%s changed (checksum %s…, released as %s…): add a new migration instead", m.File, got, want)
		}
	}
}
