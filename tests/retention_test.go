package tests

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/pulse-presence/pulse/internal/platform/migrate"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
	"github.com/pulse-presence/pulse/tests/harness"
)

const retentionDay = 24 * 60 * 60 // seconds

// wantRetention is the default_time_to_live, in seconds, of every table of a freshly
// migrated keyspace: what the migrations declare (0005–0007, 0013_retention.cql) and
// docs/privacy.md lists. A new table needs its retention in all three places.
var wantRetention = map[string]int{
	"user_activity":      90 * retentionDay,
	"user_status":        400 * retentionDay,
	"user_sessions":      400 * retentionDay,
	"user_daily":         400 * retentionDay,
	"daily_users":        400 * retentionDay,
	"concurrency":        90 * retentionDay,
	"uniques":            400 * retentionDay,
	"shard_snapshots":    30 * retentionDay, // rows: USING TTL of PULSE_HISTORY_SNAPSHOT_RETENTION
	"shard_changes":      30 * retentionDay, // rows: USING TTL of PULSE_HISTORY_SHARD_CHANGES_RETENTION
	"shard_users":        400 * retentionDay,
	"user_indexes":       400 * retentionDay,
	"shard_progress":     400 * retentionDay,
	"rollup_checkpoints": 400 * retentionDay,
}

// retentionExempt are the only tables allowed to keep rows forever: the migrations' own
// bookkeeping, which pulsectl migrate creates itself rather than through a migration.
// Neither holds user data: schema_migrations holds one row per migration file (version,
// name, checksum, time), and must never expire, or migrate would apply every migration
// again, 0006's DROP TABLE included; schema_migrations_lock holds at most one row, the
// lock of the migrate run in progress, written with a TTL of its own.
var retentionExempt = []string{migrate.HistoryTable, migrate.LockTable}

// retentions reads every table of ks with its default_time_to_live, as DESCRIBE TABLE
// would show it, from system_schema.tables.
func retentions(t *testing.T, session *gocql.Session, ks string) map[string]int {
	t.Helper()
	iter := session.Query(`SELECT table_name, default_time_to_live FROM system_schema.tables WHERE keyspace_name = ?`, ks).Iter()
	got := map[string]int{}
	var (
		name string
		ttl  int
	)
	for iter.Scan(&name, &ttl) {
		got[name] = ttl
	}
	if err := iter.Close(); err != nil {
		t.Fatalf("reading the tables of %s: %v", ks, err)
	}
	return got
}

// TestEveryHistoryTableHasARetention migrates a fresh keyspace and checks that no table
// but the migrations' bookkeeping keeps rows forever, that each table's retention is
// the documented one (here and in docs/privacy.md), that a write without USING TTL
// takes it, and that pulsectl retention lists it and changes it, and refuses bad input
// without changing anything.
func TestEveryHistoryTableHasARetention(t *testing.T) {
	session := migCassandra(t)
	ks := migKeyspace(t, session)
	ctx := migCtx(t)
	m, _ := migNew(t, session, ks, migFiles(t))
	if _, err := m.Apply(ctx); err != nil {
		t.Fatalf("Apply: %v", err)
	}

	got := retentions(t, session, ks)
	var forever []string
	for table, ttl := range got {
		if ttl == 0 && !slices.Contains(retentionExempt, table) {
			forever = append(forever, table)
		}
	}
	slices.Sort(forever)
	if len(forever) > 0 {
		t.Errorf("tables whose rows never expire (default_time_to_live 0): %s; give each a retention in a new migration, wantRetention and docs/privacy.md",
			strings.Join(forever, ", "))
	}
	for _, table := range retentionExempt {
		if ttl, ok := got[table]; !ok || ttl != 0 {
			t.Errorf("%s: default_time_to_live = %d (present: %v), want 0: the migrations' record must never expire", table, ttl, ok)
		}
	}
	for table, ttl := range got {
		want, ok := wantRetention[table]
		switch {
		case slices.Contains(retentionExempt, table):
		case !ok:
			t.Errorf("table %s (default_time_to_live %d s) has no documented retention: add it to wantRetention and docs/privacy.md", table, ttl)
		case ttl != want:
			t.Errorf("%s: default_time_to_live = %d s, want %d s (%d days)", table, ttl, want, want/retentionDay)
		}
	}
	for table := range wantRetention {
		if _, ok := got[table]; !ok {
			t.Errorf("table %s is documented but the migrations create no such table", table)
		}
	}

	t.Run("docs/privacy.md says the same", func(t *testing.T) {
		doc, err := os.ReadFile("../docs/privacy.md")
		if err != nil {
			t.Fatal(err)
		}
		for _, table := range slices.Sorted(maps.Keys(wantRetention)) {
			days := fmt.Sprintf("| %d days", wantRetention[table]/retentionDay)
			// A row may name several tables that share a retention: | `a`, `b` | … |
			row := regexp.MustCompile("(?m)^\\| [^|]*`" + table + "`[^|]*\\|.*$").Find(doc)
			if row == nil {
				t.Errorf("docs/privacy.md has no row naming `%s` in its table of Cassandra tables", table)
			} else if !strings.Contains(string(row), days) {
				t.Errorf("docs/privacy.md: the row of %s does not say %q:\n%s", table, days+" …", row)
			}
		}
	})

	t.Run("a write without USING TTL takes the table's", func(t *testing.T) {
		// As history writes a user's row (historystore): a timestamp from the log, no TTL.
		if err := session.Query(`UPDATE `+ks+`.user_status USING TIMESTAMP ? SET last_seen = ? WHERE user_id = ?`,
			time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro(), time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), "u1").ExecContext(ctx); err != nil {
			t.Fatal(err)
		}
		var ttl int
		if err := session.Query(`SELECT TTL(last_seen) FROM `+ks+`.user_status WHERE user_id = ?`, "u1").ScanContext(ctx, &ttl); err != nil {
			t.Fatal(err)
		}
		// Counted from the write, not from its timestamp a year before.
		if want := wantRetention["user_status"]; ttl > want || ttl < want-60 {
			t.Errorf("TTL(last_seen) of a row just written = %d s, want about %d s", ttl, want)
		}
	})

	t.Run("pulsectl retention", func(t *testing.T) {
		pulsectl := func(args ...string) (string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			args = append(args, "-hosts", harness.CassandraHost(), "-port", harness.CassandraPort(), "-keyspace", ks)
			out, err := exec.CommandContext(ctx, harness.Binary("pulsectl"), append([]string{"retention"}, args...)...).CombinedOutput()
			return string(out), err
		}

		out, err := pulsectl()
		if err != nil {
			t.Fatalf("pulsectl retention: %v\n%s", err, out)
		}
		for _, line := range []string{
			`(?m)^user_activity +90d +\(7776000 s\)$`,
			`(?m)^user_status +400d +\(34560000 s\)$`,
			`(?m)^schema_migrations +none +\(0 s\) +the migrations' own bookkeeping, no user data$`,
			`(?m)^shard_snapshots +30d +\(2592000 s\) +history writes its rows USING TTL of PULSE_HISTORY_SNAPSHOT_RETENTION$`,
		} {
			if !regexp.MustCompile(line).MatchString(out) {
				t.Errorf("pulsectl retention prints no line matching %s:\n%s", line, out)
			}
		}

		out, err = pulsectl("set", "user_activity", "30d")
		if err != nil {
			t.Fatalf("pulsectl retention set user_activity 30d: %v\n%s", err, out)
		}
		if want := ks + ".user_activity keeps rows 30d (2592000 s), was 90d (7776000 s)"; !strings.Contains(out, want) {
			t.Errorf("pulsectl retention set user_activity 30d printed\n%s\nwant it to say %q", out, want)
		}
		want := maps.Clone(got)
		want["user_activity"] = 30 * retentionDay
		if after := retentions(t, session, ks); !reflect.DeepEqual(after, want) {
			t.Fatalf("after set user_activity 30d, retentions =\n%v\nwant\n%v", after, want)
		}

		out, err = pulsectl("set", "user_activity", "2592000")
		if err != nil || !strings.Contains(out, "keeps rows 30d (2592000 s) already; nothing changed") {
			t.Errorf("pulsectl retention set user_activity 2592000 (the same) = %v\n%s", err, out)
		}

		for _, bad := range []struct {
			args []string
			want string
		}{
			{[]string{"set", "no_such_table", "30d"}, `keyspace ` + ks + ` has no table "no_such_table"; its tables: concurrency, daily_users,`},
			{[]string{"set", "user_activity", "30m"}, `duration "30m" is shorter than 1h`},
			{[]string{"set", "user_activity", "0"}, `duration "0": must be positive`},
			{[]string{"set", "user_activity", "1.5s"}, `not a whole number of seconds`},
			{[]string{"set", "user_activity", "7301d"}, `longer than Cassandra's longest TTL`},
			{[]string{"set", "user_activity;", "30d"}, `"user_activity;" is not a table name`},
			{[]string{"set", "schema_migrations", "30d"}, `schema_migrations keeps no retention: it is the migrations' own record`},
			{[]string{"set", "shard_snapshots", "10d"}, `set that variable on history instead`},
			{[]string{"set", "user_activity"}, `want TABLE and DURATION, got 1 arguments`},
		} {
			out, err := pulsectl(bad.args...)
			if err == nil || !strings.Contains(out, bad.want) {
				t.Errorf("pulsectl retention %s = %v\n%s\nwant a failure saying %q", strings.Join(bad.args, " "), err, out, bad.want)
			}
		}
		if after := retentions(t, session, ks); !reflect.DeepEqual(after, want) {
			t.Errorf("bad input changed the retentions:\n%v\nwant\n%v", after, want)
		}

		// Rows written from now on take the new retention.
		day := time.Now().UTC().Truncate(24 * time.Hour)
		if err := session.Query(`INSERT INTO `+ks+`.user_activity (user_id, bucket, occurred_at, entry_id, entry_type) VALUES (?, ?, ?, ?, 'event')`,
			"u1", day, day, "e1").ExecContext(ctx); err != nil {
			t.Fatal(err)
		}
		var ttl int
		if err := session.Query(`SELECT TTL(entry_type) FROM `+ks+`.user_activity WHERE user_id = ? AND bucket = ?`, "u1", day).ScanContext(ctx, &ttl); err != nil {
			t.Fatal(err)
		}
		if ttl > 30*retentionDay || ttl < 30*retentionDay-60 {
			t.Errorf("TTL(entry_type) of a user_activity row written after set 30d = %d s, want about %d s", ttl, 30*retentionDay)
		}
	})
}

// TestShardUsersOutliveAnExpiredBlock: with shard_users' retention a block can empty
// while later ones hold users (every user of indexes 0–4095 silent for 400 days);
// reading a shard's users for a rebuild of Redis from history must find the later
// blocks all the same.
func TestShardUsersOutliveAnExpiredBlock(t *testing.T) {
	session := migCassandra(t)
	ks := migKeyspace(t, session)
	m, _ := migNew(t, session, ks, migFiles(t))
	ctx := migCtx(t)
	if _, err := m.Apply(ctx); err != nil {
		t.Fatalf("migrating %s: %v", ks, err)
	}
	rows := []struct {
		shard, index int
		user         string
	}{{2, 4096, "b"}, {2, 3*historystore.ShardUsersBlock + 5, "c"}, {3, 0, "x"}}
	for _, r := range rows {
		if err := session.Query("INSERT INTO "+ks+".shard_users (shard, block, user_index, user_id) VALUES (?, ?, ?, ?)",
			r.shard, r.index/historystore.ShardUsersBlock, r.index, r.user).ExecContext(ctx); err != nil {
			t.Fatal(err)
		}
	}
	store := historyStoreOn(t, ks)
	got, err := store.ShardUsers(ctx, 2)
	if err != nil || !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("users of shard 2, whose block 0 is empty = %v, %v; want [b c]", got, err)
	}
}
