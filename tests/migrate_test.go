package tests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/pulse-presence/pulse/internal/platform/cassx"
	"github.com/pulse-presence/pulse/internal/platform/migrate"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
	"github.com/pulse-presence/pulse/tests/harness"
)

// These tests run the migrator against the local stack's real Cassandra. Each test
// migrates its own fresh keyspace and drops it at the end. They run in parallel with
// one another (go test starts them once every test that is not parallel has run):
// each has a keyspace and migrators of its own, and a migration spends most of its
// time waiting for the nodes to agree on each schema change (about half a second a
// statement on the cluster topology's two nodes), which overlaps.

// migCassandra connects to the local stack's Cassandra, failing the test when it is not
// there: a silently skipped integration test proves nothing.
func migCassandra(t *testing.T) *gocql.Session {
	t.Helper()
	hosts := harness.CassandraHost()
	port, err := strconv.Atoi(harness.CassandraPort())
	if err != nil {
		t.Fatalf("PULSE_CASSANDRA_PORT: %v", err)
	}
	cfg := cassx.Config{
		Hosts:   strings.Split(hosts, ","),
		Port:    port,
		Timeout: 30 * time.Second, // schema changes are slow on a small machine
	}
	session, err := cassx.NewSession(cfg)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = cassx.Ping(ctx, session)
		cancel()
		if err != nil {
			session.Close()
		}
	}
	if err != nil {
		t.Fatalf("Cassandra of the local stack is not reachable (%s port %d): %v\nstart the local stack with `make up`", hosts, port, err)
	}
	t.Cleanup(session.Close)
	return session
}

// migKeyspace returns a new keyspace name and drops that keyspace when the test ends.
func migKeyspace(t *testing.T, session *gocql.Session) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	ks := "pulse_it_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := session.Query("DROP KEYSPACE IF EXISTS " + ks).ExecContext(ctx); err != nil {
			t.Errorf("dropping keyspace %s: %v", ks, err)
		}
	})
	return ks
}

// migratedKeyspace connects to the local stack's Cassandra and migrates a fresh
// keyspace of the repository's migrations, dropped when the test ends.
func migratedKeyspace(t *testing.T) (*gocql.Session, string) {
	t.Helper()
	session := migCassandra(t)
	ks := migKeyspace(t, session)
	m, _ := migNew(t, session, ks, migFiles(t))
	if _, err := m.Apply(migCtx(t)); err != nil {
		t.Fatalf("migrating %s: %v", ks, err)
	}
	return session, ks
}

// historyStoreOn opens a history store on keyspace ks of the local stack's
// Cassandra, closed when the test ends.
func historyStoreOn(t *testing.T, ks string) *historystore.Store {
	t.Helper()
	port, _ := strconv.Atoi(harness.CassandraPort())
	store, err := historystore.Open(cassx.Config{Hosts: strings.Split(harness.CassandraHost(), ","), Port: port, Keyspace: ks,
		Consistency: "ONE", Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	return store
}

// migFiles returns the repository's migrations as a MapFS, to which a test can add or
// change files.
func migFiles(t *testing.T) fstest.MapFS {
	t.Helper()
	dir := os.DirFS("../migrations")
	names, err := fs.Glob(dir, "*.cql")
	if err != nil {
		t.Fatal(err)
	}
	files := fstest.MapFS{}
	for _, n := range names {
		data, err := fs.ReadFile(dir, n)
		if err != nil {
			t.Fatal(err)
		}
		files[n] = &fstest.MapFile{Data: data}
	}
	return files
}

func migNew(t *testing.T, session *gocql.Session, ks string, files fs.FS) (*migrate.Migrator, []migrate.Migration) {
	t.Helper()
	migrations, err := migrate.Load(files)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	m, err := migrate.New(session, migrate.Options{Keyspace: ks, Migrations: migrations, StatementTimeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m, migrations
}

func migCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func versionsOf(ms []migrate.Migration) []int {
	var vs []int
	for _, m := range ms {
		vs = append(vs, m.Version)
	}
	return vs
}

// column is one row of system_schema.columns, as far as the schema contract goes.
type column struct {
	Kind     string // partition_key, clustering or regular
	Position int    // order within the partition key or clustering key; -1 for regular
	Order    string // clustering order: asc, desc or none
	Type     string
}

func migColumns(t *testing.T, session *gocql.Session, ks string, tables ...string) map[string]column {
	t.Helper()
	got := map[string]column{}
	for _, table := range tables {
		iter := session.Query(`SELECT column_name, kind, position, clustering_order, type FROM system_schema.columns WHERE keyspace_name = ? AND table_name = ?`, ks, table).Iter()
		var (
			name string
			c    column
		)
		for iter.Scan(&name, &c.Kind, &c.Position, &c.Order, &c.Type) {
			got[table+"."+name] = c
		}
		if err := iter.Close(); err != nil {
			t.Fatalf("reading columns of %s.%s: %v", ks, table, err)
		}
	}
	return got
}

func migTables(t *testing.T, session *gocql.Session, ks string) []string {
	t.Helper()
	iter := session.Query(`SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?`, ks).Iter()
	var (
		name   string
		tables []string
	)
	for iter.Scan(&name) {
		tables = append(tables, name)
	}
	if err := iter.Close(); err != nil {
		t.Fatalf("listing tables of %s: %v", ks, err)
	}
	sort.Strings(tables)
	return tables
}

// migRow is one row of schema_migrations.
type migRow struct {
	Version   int
	Name      string
	Checksum  string
	AppliedAt time.Time
}

func migRecords(t *testing.T, session *gocql.Session, ks string) []migRow {
	t.Helper()
	iter := session.Query(`SELECT version, name, checksum, applied_at FROM ` + ks + `.schema_migrations`).Iter()
	var (
		r    migRow
		rows []migRow
	)
	for iter.Scan(&r.Version, &r.Name, &r.Checksum, &r.AppliedAt) {
		rows = append(rows, r)
	}
	if err := iter.Close(); err != nil {
		t.Fatalf("reading %s.schema_migrations: %v", ks, err)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Version < rows[j].Version })
	return rows
}

// assertRecorded checks that schema_migrations holds exactly the given migrations, with
// their names and checksums, applied after since.
func assertRecorded(t *testing.T, session *gocql.Session, ks string, want []migrate.Migration, since time.Time) []migRow {
	t.Helper()
	rows := migRecords(t, session, ks)
	if len(rows) != len(want) {
		t.Fatalf("schema_migrations has versions %v, want %v", rowVersions(rows), versionsOf(want))
	}
	for i, r := range rows {
		w := want[i]
		if r.Version != w.Version || r.Name != w.Name || r.Checksum != w.Checksum {
			t.Errorf("schema_migrations row %d = {%d %s %s}, want {%d %s %s}", i, r.Version, r.Name, r.Checksum, w.Version, w.Name, w.Checksum)
		}
		if r.AppliedAt.Before(since.Add(-time.Second)) || r.AppliedAt.After(time.Now().Add(time.Second)) {
			t.Errorf("schema_migrations version %d applied_at = %v, want between %v and now", r.Version, r.AppliedAt, since)
		}
	}
	return rows
}

func rowVersions(rows []migRow) []int {
	var vs []int
	for _, r := range rows {
		vs = append(vs, r.Version)
	}
	return vs
}

// wantColumns is the schema contract of the history tables (docs/design.md, History).
var wantColumns = map[string]column{
	"user_status.user_id":          {"partition_key", 0, "none", "text"},
	"user_status.status":           {"regular", -1, "none", "text"},
	"user_status.last_updated":     {"regular", -1, "none", "timestamp"},
	"user_status.last_active":      {"regular", -1, "none", "timestamp"},
	"user_status.last_seen":        {"regular", -1, "none", "timestamp"},
	"user_status.last_event_id":    {"regular", -1, "none", "text"},
	"user_status.custom_text":      {"regular", -1, "none", "text"},
	"user_status.custom_emoji":     {"regular", -1, "none", "text"},
	"user_status.custom_until_us":  {"regular", -1, "none", "bigint"},
	"user_status.custom_set_at_us": {"regular", -1, "none", "bigint"},
	"user_status.groups":           {"regular", -1, "none", "set<text>"},

	"user_activity.user_id":         {"partition_key", 0, "none", "text"},
	"user_activity.bucket":          {"partition_key", 1, "none", "date"},
	"user_activity.occurred_at":     {"clustering", 0, "desc", "timestamp"},
	"user_activity.entry_id":        {"clustering", 1, "desc", "text"},
	"user_activity.entry_type":      {"regular", -1, "none", "text"},
	"user_activity.kind":            {"regular", -1, "none", "text"},
	"user_activity.status":          {"regular", -1, "none", "text"},
	"user_activity.previous_status": {"regular", -1, "none", "text"},
	"user_activity.device_id":       {"regular", -1, "none", "text"},
	"user_activity.source":          {"regular", -1, "none", "text"},
	"user_activity.cause":           {"regular", -1, "none", "text"},
	"user_activity.received_at":     {"regular", -1, "none", "timestamp"},
	"user_activity.stale":           {"regular", -1, "none", "boolean"},
	"user_activity.log_partition":   {"regular", -1, "none", "int"},
	"user_activity.log_offset":      {"regular", -1, "none", "bigint"},
	"user_activity.custom":          {"regular", -1, "none", "boolean"},
	"user_activity.custom_text":     {"regular", -1, "none", "text"},
	"user_activity.custom_emoji":    {"regular", -1, "none", "text"},
	"user_activity.custom_until":    {"regular", -1, "none", "timestamp"},
}

func assertColumns(t *testing.T, got map[string]column) {
	t.Helper()
	for k, w := range wantColumns {
		if g, ok := got[k]; !ok {
			t.Errorf("column %s missing", k)
		} else if g != w {
			t.Errorf("column %s = %+v, want %+v", k, g, w)
		}
	}
	for k, g := range got {
		if _, ok := wantColumns[k]; !ok {
			t.Errorf("unexpected column %s %+v", k, g)
		}
	}
}

// repoVersions are the versions of the repository's migrations/, in order.
var repoVersions = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}

func TestMigrateCreatesSchema(t *testing.T) {
	t.Parallel()
	session := migCassandra(t)
	ks := migKeyspace(t, session)
	ctx := migCtx(t)
	m, migrations := migNew(t, session, ks, os.DirFS("../migrations"))

	pending, err := m.Pending(ctx)
	if err != nil {
		t.Fatalf("Pending before Apply: %v", err)
	}
	if got := versionsOf(pending); !reflect.DeepEqual(got, repoVersions) {
		t.Fatalf("Pending before Apply = %v, want %v", got, repoVersions)
	}

	start := time.Now()
	applied, err := m.Apply(ctx)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if got := versionsOf(applied); !reflect.DeepEqual(got, repoVersions) {
		t.Fatalf("Apply applied %v, want %v", got, repoVersions)
	}

	assertColumns(t, migColumns(t, session, ks, "user_status", "user_activity"))
	assertRecorded(t, session, ks, migrations, start)
	if got, want := migTables(t, session, ks), []string{"concurrency", "daily_users", "rollup_checkpoints", "schema_migrations", "schema_migrations_lock", "shard_changes", "shard_progress", "shard_snapshots", "shard_users", "uniques", "user_activity", "user_daily", "user_indexes", "user_sessions", "user_status"}; !reflect.DeepEqual(got, want) {
		t.Errorf("tables = %v, want %v", got, want)
	}

	var replication map[string]string
	if err := session.Query(`SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = ?`, ks).Scan(&replication); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"class": "org.apache.cassandra.locator.SimpleStrategy", "replication_factor": "1"}; !reflect.DeepEqual(replication, want) {
		t.Errorf("replication = %v, want %v", replication, want)
	}

	compaction := map[string]map[string]string{}
	for _, table := range []string{"user_status", "user_activity"} {
		var c map[string]string
		if err := session.Query(`SELECT compaction FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?`, ks, table).Scan(&c); err != nil {
			t.Fatal(err)
		}
		compaction[table] = c
	}
	if got := compaction["user_status"]["class"]; got != "org.apache.cassandra.db.compaction.UnifiedCompactionStrategy" {
		t.Errorf("user_status compaction class = %q, want UnifiedCompactionStrategy (migration 0004)", got)
	}
	ua := compaction["user_activity"]
	if ua["class"] != "org.apache.cassandra.db.compaction.TimeWindowCompactionStrategy" || ua["compaction_window_unit"] != "DAYS" || ua["compaction_window_size"] != "1" {
		t.Errorf("user_activity compaction = %v, want TimeWindowCompactionStrategy with 1-DAYS windows", ua)
	}

	var locks int
	if err := session.Query(`SELECT count(*) FROM ` + ks + `.schema_migrations_lock`).Scan(&locks); err != nil {
		t.Fatal(err)
	}
	if locks != 0 {
		t.Errorf("lock rows after Apply = %d, want 0 (released)", locks)
	}

	// The tables take the rows the history service writes, newest first.
	day := time.Date(2025, 11, 22, 0, 0, 0, 0, time.UTC)
	for i, id := range []string{"e1", "e2", "e3"} {
		if err := session.Query(`INSERT INTO `+ks+`.user_activity (user_id, bucket, occurred_at, entry_id, entry_type, kind, status) VALUES (?, ?, ?, ?, 'event', 'status', 'online')`,
			"u1", day, day.Add(time.Duration(i)*time.Minute), id).ExecContext(ctx); err != nil {
			t.Fatalf("inserting into user_activity: %v", err)
		}
	}
	iter := session.Query(`SELECT entry_id FROM `+ks+`.user_activity WHERE user_id = ? AND bucket = ?`, "u1", day).IterContext(ctx)
	var (
		id  string
		ids []string
	)
	for iter.Scan(&id) {
		ids = append(ids, id)
	}
	if err := iter.Close(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"e3", "e2", "e1"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("user_activity partition order = %v, want %v (newest first)", ids, want)
	}
}

func TestMigrateSecondApplyChangesNothing(t *testing.T) {
	t.Parallel()
	session := migCassandra(t)
	ks := migKeyspace(t, session)
	ctx := migCtx(t)
	m, _ := migNew(t, session, ks, os.DirFS("../migrations"))
	if _, err := m.Apply(ctx); err != nil {
		t.Fatalf("first Apply: %v", err)
	}
	tableIDs := func() map[string]gocql.UUID {
		ids := map[string]gocql.UUID{}
		iter := session.Query(`SELECT table_name, id FROM system_schema.tables WHERE keyspace_name = ?`, ks).Iter()
		var (
			name string
			id   gocql.UUID
		)
		for iter.Scan(&name, &id) {
			ids[name] = id
		}
		if err := iter.Close(); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	all := []string{"user_status", "user_activity", "schema_migrations", "schema_migrations_lock"}
	rows, cols, ids := migRecords(t, session, ks), migColumns(t, session, ks, all...), tableIDs()

	// A new Migrator, as a second pulsectl run would have.
	again, _ := migNew(t, session, ks, os.DirFS("../migrations"))
	applied, err := again.Apply(ctx)
	if err != nil {
		t.Fatalf("second Apply: %v", err)
	}
	if len(applied) != 0 {
		t.Fatalf("second Apply applied %v, want nothing", versionsOf(applied))
	}
	pending, err := again.Pending(ctx)
	if err != nil || len(pending) != 0 {
		t.Fatalf("Pending after Apply = %v, %v; want none", versionsOf(pending), err)
	}
	if got := migRecords(t, session, ks); !reflect.DeepEqual(got, rows) {
		t.Errorf("schema_migrations changed:\n%+v\nwas\n%+v", got, rows)
	}
	if got := migColumns(t, session, ks, all...); !reflect.DeepEqual(got, cols) {
		t.Errorf("columns changed:\n%+v\nwere\n%+v", got, cols)
	}
	if got := tableIDs(); !reflect.DeepEqual(got, ids) {
		t.Errorf("table ids changed (tables recreated?):\n%v\nwere\n%v", got, ids)
	}
}

func TestMigrateBrokenStatement(t *testing.T) {
	t.Parallel()
	session := migCassandra(t)
	ks := migKeyspace(t, session)
	ctx := migCtx(t)
	files := migFiles(t)
	files["9001_broken.cql"] = &fstest.MapFile{Data: []byte(`-- the first statement works, the second names a type that does not exist
CREATE TABLE IF NOT EXISTS {{keyspace}}.broken_ok (id text PRIMARY KEY);
CREATE TABLE IF NOT EXISTS {{keyspace}}.broken (
  id text PRIMARY KEY,
  value no_such_type
);
CREATE TABLE IF NOT EXISTS {{keyspace}}.never_reached (id text PRIMARY KEY);
`)}
	m, migrations := migNew(t, session, ks, files)

	start := time.Now()
	applied, err := m.Apply(ctx)
	var se *migrate.StatementError
	if !errors.As(err, &se) {
		t.Fatalf("Apply error = %v, want *migrate.StatementError", err)
	}
	if got := versionsOf(applied); !reflect.DeepEqual(got, repoVersions) {
		t.Errorf("Apply applied %v before failing, want %v", got, repoVersions)
	}
	wantStmt := "CREATE TABLE IF NOT EXISTS " + ks + ".broken (\n  id text PRIMARY KEY,\n  value no_such_type\n)"
	if se.File != "9001_broken.cql" || se.Index != 2 || se.Statement != wantStmt {
		t.Errorf("StatementError = {File: %q, Index: %d, Statement: %q}, want {9001_broken.cql, 2, %q}", se.File, se.Index, se.Statement, wantStmt)
	}
	var reqErr gocql.RequestError
	if !errors.As(se.Err, &reqErr) || reqErr.Code() != gocql.ErrCodeInvalid || !strings.Contains(reqErr.Message(), "no_such_type") {
		t.Errorf("StatementError.Err = %#v, want the server's invalid-request error naming no_such_type", se.Err)
	}
	wantMsg := "9001_broken.cql: statement 2 failed: " + se.Err.Error() + "\n  CREATE TABLE IF NOT EXISTS " + ks + ".broken (\n    id text PRIMARY KEY,\n    value no_such_type\n  )"
	if err.Error() != wantMsg {
		t.Errorf("error text =\n%s\nwant\n%s", err.Error(), wantMsg)
	}

	// The repository's stay recorded, 9001 is not; Cassandra has no transactional DDL, so
	// the statement before the failing one stays applied and the one after never ran.
	assertRecorded(t, session, ks, migrations[:len(repoVersions)], start)
	if got, want := migTables(t, session, ks), []string{"broken_ok", "concurrency", "daily_users", "rollup_checkpoints", "schema_migrations", "schema_migrations_lock", "shard_changes", "shard_progress", "shard_snapshots", "shard_users", "uniques", "user_activity", "user_daily", "user_indexes", "user_sessions", "user_status"}; !reflect.DeepEqual(got, want) {
		t.Errorf("tables = %v, want %v", got, want)
	}
	pending, err := m.Pending(ctx)
	if err != nil || !reflect.DeepEqual(versionsOf(pending), []int{9001}) {
		t.Errorf("Pending after the failure = %v, %v; want [9001]", versionsOf(pending), err)
	}
}

func TestMigrateRefusesChangedChecksum(t *testing.T) {
	t.Parallel()
	session := migCassandra(t)
	ks := migKeyspace(t, session)
	ctx := migCtx(t)
	m, migrations := migNew(t, session, ks, os.DirFS("../migrations"))
	start := time.Now()
	if _, err := m.Apply(ctx); err != nil {
		t.Fatalf("Apply: %v", err)
	}

	files := migFiles(t)
	edited := append([]byte("-- an innocent-looking edit\n"), files["0002_user_status.cql"].Data...)
	files["0002_user_status.cql"] = &fstest.MapFile{Data: edited}
	files["9001_more.cql"] = &fstest.MapFile{Data: []byte("CREATE TABLE IF NOT EXISTS {{keyspace}}.more (id text PRIMARY KEY);")}
	m2, migrations2 := migNew(t, session, ks, files)

	want := &migrate.ChecksumError{File: "0002_user_status.cql", Recorded: migrations[1].Checksum, Current: migrations2[1].Checksum}
	for name, call := range map[string]func() ([]migrate.Migration, error){
		"Apply":   func() ([]migrate.Migration, error) { return m2.Apply(ctx) },
		"Pending": func() ([]migrate.Migration, error) { return m2.Pending(ctx) },
	} {
		got, err := call()
		var ce *migrate.ChecksumError
		if !errors.As(err, &ce) {
			t.Fatalf("%s error = %v, want *migrate.ChecksumError", name, err)
		}
		if len(got) != 0 || ce.File != want.File || ce.Recorded != want.Recorded || ce.Current != want.Current || ce.AppliedAt.Before(start.Add(-time.Second)) {
			t.Errorf("%s = %v, %+v; want nothing and %+v", name, versionsOf(got), ce, want)
		}
		if !strings.HasPrefix(err.Error(), "0002_user_status.cql: file changed after it was applied") {
			t.Errorf("%s error text = %q, want it to name the file", name, err.Error())
		}
	}

	// Nothing was applied: not the pending 9001, and 0002 was not re-applied.
	assertRecorded(t, session, ks, migrations, start)
	if got, want := migTables(t, session, ks), []string{"concurrency", "daily_users", "rollup_checkpoints", "schema_migrations", "schema_migrations_lock", "shard_changes", "shard_progress", "shard_snapshots", "shard_users", "uniques", "user_activity", "user_daily", "user_indexes", "user_sessions", "user_status"}; !reflect.DeepEqual(got, want) {
		t.Errorf("tables = %v, want %v", got, want)
	}
}

// TestMigrateConcurrent runs two migrators at once on a new keyspace: the lock must let
// each migration be applied and recorded exactly once.
func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	session := migCassandra(t)
	ks := migKeyspace(t, session)
	ctx := migCtx(t)
	a, migrations := migNew(t, session, ks, os.DirFS("../migrations"))
	b, _ := migNew(t, session, ks, os.DirFS("../migrations"))

	start := time.Now()
	var (
		wg      sync.WaitGroup
		applied [2][]migrate.Migration
		errs    [2]error
	)
	for i, m := range []*migrate.Migrator{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			applied[i], errs[i] = m.Apply(ctx)
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("Apply errors: %v, %v", errs[0], errs[1])
	}
	t.Logf("migrator a applied %v, b applied %v", versionsOf(applied[0]), versionsOf(applied[1]))
	all := append(versionsOf(applied[0]), versionsOf(applied[1])...)
	sort.Ints(all)
	if !reflect.DeepEqual(all, repoVersions) {
		t.Errorf("applied by the two migrators: %v and %v, want each of %v once in all", versionsOf(applied[0]), versionsOf(applied[1]), repoVersions)
	}
	assertRecorded(t, session, ks, migrations, start)
	assertColumns(t, migColumns(t, session, ks, "user_status", "user_activity"))
}
