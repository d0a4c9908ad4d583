package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/pulse-presence/pulse/internal/platform/cassx"
	"github.com/pulse-presence/pulse/internal/platform/migrate"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
)

// pulsectl retention: how long Cassandra keeps the rows of each table of the keyspace,
// its default_time_to_live (docs/privacy.md, docs/operations.md#retention). The
// migrations give every history table one (0013_retention.cql); set changes it.

const retentionUsage = "usage: pulsectl retention [-csv] | pulsectl retention set TABLE DURATION"

const retentionHelp = `retention lists every table of the keyspace with its default_time_to_live: how long
a row written from now on is kept ("none": forever).

retention set TABLE DURATION changes a table's default_time_to_live (ALTER TABLE). It
applies to rows written from then on; rows already written keep the TTL they were
written with. DURATION is a whole number of seconds from 1h to 20 years, written as
90d, 400d, 36h, 1d12h or 7776000 (seconds).`

const (
	// minRetention is the shortest retention set takes: below an hour, rows would expire
	// before the flushes that rewrite them (history holds a user's row and the rollups'
	// rows up to 30 s) and before point-in-time answers become final (10 minutes), and
	// such a value is far likelier a mistaken unit (90 meant as days) than a wish.
	minRetention = time.Hour
	// maxRetention is Cassandra's limit on a TTL (20 years).
	maxRetention = 630720000 * time.Second
)

// retentionSetElsewhere are the tables whose rows history writes USING TTL of its own
// setting (historystore.RollupRows), which wins over the table's default: setting the
// default would change nothing, so set refuses them and says what to change instead.
var retentionSetElsewhere = map[string]string{
	historystore.TableSnapshots: "history writes its rows USING TTL of PULSE_HISTORY_SNAPSHOT_RETENTION, which wins over the table's default: " +
		"set that variable on history instead, and PULSE_QUERY_AT_RETENTION on query to match",
	historystore.TableShardChanges: "history writes its rows USING TTL of PULSE_HISTORY_SHARD_CHANGES_RETENTION, which wins over the table's default: " +
		"set that variable on history instead (at least PULSE_HISTORY_SNAPSHOT_RETENTION)",
}

// retentionNever are the migrations' own tables, which hold no user data and must not
// expire: were schema_migrations' rows to expire, migrate would apply every migration
// again, dropping and recreating tables on the way (0006).
var retentionNever = map[string]string{
	migrate.HistoryTable: "it is the migrations' own record (pulsectl migrate), holds no user data and must never expire: " +
		"migrate would apply every migration again",
	migrate.LockTable: "it holds the migrations' lock (pulsectl migrate), no user data, and its one row carries a TTL of its own",
}

// tableNameRE is an unquoted CQL table name as system_schema lists it. set puts the
// name into ALTER TABLE, where no bind marker can stand, so nothing else gets there.
var tableNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,47}$`)

// retentionFlags are pulsectl retention's settings.
type retentionFlags struct {
	cass     cassx.Config
	keyspace string
	timeout  time.Duration
	csv      bool
	// set: change table's default_time_to_live to ttl; else list the tables.
	set   bool
	table string
	ttl   time.Duration
}

func parseRetentionFlags(args []string, getenv func(string) string) (retentionFlags, error) {
	var f retentionFlags
	name, usage := "retention", retentionUsage
	if len(args) > 0 && args[0] == "set" {
		f.set, args = true, args[1:]
		name, usage = "retention set", "usage: pulsectl retention set TABLE DURATION [flags]"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	cf := addCassandraFlags(fs, "keyspace whose tables to list or change")
	if !f.set {
		fs.BoolVar(&f.csv, "csv", false, "print CSV (table, seconds) instead of an aligned table")
	}
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), usage)
		fs.PrintDefaults()
		fmt.Fprintln(fs.Output(), "\n"+retentionHelp)
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return f, err
	}
	switch {
	case !f.set && len(pos) > 0:
		return f, fmt.Errorf("retention: unexpected arguments %q; %s", pos, retentionUsage)
	case f.set && len(pos) != 2:
		return f, fmt.Errorf("retention set: want TABLE and DURATION, got %d arguments; %s", len(pos), usage)
	}
	if f.set {
		f.table = pos[0]
		if !tableNameRE.MatchString(f.table) {
			return f, fmt.Errorf("retention set: %q is not a table name (lower-case letter, then up to 47 lower-case letters, digits or underscores)", f.table)
		}
		if f.ttl, err = parseRetention(pos[1]); err != nil {
			return f, fmt.Errorf("retention set %s: %w", f.table, err)
		}
	}
	f.cass, err = cf.config(name, getenv)
	f.keyspace, f.timeout = cf.keyspace, cf.timeout
	return f, err
}

// parseRetention reads a retention: a Go duration that may begin with a number of
// days ("90d", "1d12h", "36h", "7776000s"), or a bare number of seconds, as the list
// prints them. It must be a whole number of seconds from minRetention to maxRetention.
func parseRetention(s string) (time.Duration, error) {
	want := fmt.Errorf("duration %q: want a duration such as 90d, 400d, 36h, 1d12h or 7776000 (seconds)", s)
	var d time.Duration
	switch days, rest, hasDays := strings.Cut(s, "d"); {
	case isDigits(s):
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n > int64(maxRetention/time.Second) {
			return 0, fmt.Errorf("duration %q is longer than Cassandra's longest TTL, 20 years (630720000 s)", s)
		}
		d = time.Duration(n) * time.Second
	case hasDays:
		if !isDigits(days) {
			return 0, want
		}
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n > int64(maxRetention/(24*time.Hour)) {
			return 0, fmt.Errorf("duration %q is longer than Cassandra's longest TTL, 20 years (630720000 s)", s)
		}
		d = time.Duration(n) * 24 * time.Hour
		if rest != "" {
			r, err := time.ParseDuration(rest)
			if err != nil || r < 0 || strings.HasPrefix(rest, "+") {
				return 0, want
			}
			d += r
		}
	default:
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, want
		}
	}
	switch {
	case d <= 0:
		return 0, fmt.Errorf("duration %q: must be positive", s)
	case d%time.Second != 0:
		return 0, fmt.Errorf("duration %q is not a whole number of seconds (Cassandra keeps a TTL in seconds)", s)
	case d < minRetention:
		return 0, fmt.Errorf("duration %q is shorter than %s, the shortest retention pulsectl sets", s, formatRetention(int(minRetention/time.Second)))
	case d > maxRetention:
		return 0, fmt.Errorf("duration %q is longer than Cassandra's longest TTL, 20 years (630720000 s)", s)
	}
	return d, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// formatRetention is a default_time_to_live for people: "90d", "1d12h", "36m" or "none"
// for 0, the table's rows never expiring. parseRetention reads it back.
func formatRetention(seconds int) string {
	if seconds <= 0 {
		return "none"
	}
	var b strings.Builder
	for _, u := range []struct {
		unit string
		secs int
	}{{"d", 86400}, {"h", 3600}, {"m", 60}, {"s", 1}} {
		if n := seconds / u.secs; n > 0 {
			b.WriteString(strconv.Itoa(n) + u.unit)
			seconds -= n * u.secs
		}
	}
	return b.String()
}

// checkRetentionTable says why set must not change table, given the keyspace's tables.
func checkRetentionTable(keyspace, table string, tables map[string]int) error {
	if _, ok := tables[table]; !ok {
		names := make([]string, 0, len(tables))
		for n := range tables {
			names = append(names, n)
		}
		slices.Sort(names)
		return fmt.Errorf("retention set: keyspace %s has no table %q; its tables: %s", keyspace, table, strings.Join(names, ", "))
	}
	if why, ok := retentionNever[table]; ok {
		return fmt.Errorf("retention set: %s keeps no retention: %s", table, why)
	}
	if why, ok := retentionSetElsewhere[table]; ok {
		return fmt.Errorf("retention set: %s: %s", table, why)
	}
	return nil
}

// printRetention prints tables (name → default_time_to_live in seconds) sorted by
// name: aligned for people with a note where the default is not the whole story, or
// as CSV.
func printRetention(w io.Writer, keyspace string, tables map[string]int, asCSV bool) error {
	names := make([]string, 0, len(tables))
	for n := range tables {
		names = append(names, n)
	}
	slices.Sort(names)
	t := &table{header: []string{"TABLE", "RETENTION", "", "NOTE"}}
	if asCSV {
		t.header = []string{"table", "default_time_to_live_seconds"}
	}
	for _, n := range names {
		s := tables[n]
		if asCSV {
			t.add(n, strconv.Itoa(s))
			continue
		}
		note := ""
		if _, ok := retentionNever[n]; ok {
			note = "the migrations' own bookkeeping, no user data"
		} else if why, ok := retentionSetElsewhere[n]; ok {
			note, _, _ = strings.Cut(why, ", which")
		}
		t.add(n, formatRetention(s), fmt.Sprintf("(%d s)", s), note)
	}
	if !asCSV {
		fmt.Fprintf(w, "keyspace %s\n", keyspace)
	}
	return t.print(w, asCSV)
}

// runRetention lists the keyspace's tables with their retention, or sets one's.
func runRetention(ctx context.Context, args []string, stdout io.Writer) error {
	f, err := parseRetentionFlags(args, os.Getenv)
	if err != nil {
		return err
	}
	session, err := cassx.NewSession(f.cass)
	if err != nil {
		return err
	}
	defer session.Close()
	pctx, cancel := context.WithTimeout(ctx, f.timeout)
	err = cassx.Ping(pctx, session)
	cancel()
	if err != nil {
		return err
	}
	tables, err := readRetention(ctx, session, f.keyspace, f.timeout)
	if err != nil {
		return err
	}
	if !f.set {
		return printRetention(stdout, f.keyspace, tables, f.csv)
	}
	if err := checkRetentionTable(f.keyspace, f.table, tables); err != nil {
		return err
	}
	secs, was := int(f.ttl/time.Second), tables[f.table]
	if secs == was {
		fmt.Fprintf(stdout, "%s.%s keeps rows %s (%d s) already; nothing changed\n", f.keyspace, f.table, formatRetention(secs), secs)
		return nil
	}
	// The names are checked (tableNameRE, cassx.ValidKeyspace) and the table is one the
	// keyspace has: nothing else can reach the statement.
	stmt := fmt.Sprintf("ALTER TABLE %s.%s WITH default_time_to_live = %d", f.keyspace, f.table, secs)
	sctx, cancel := context.WithTimeout(ctx, f.timeout)
	err = session.Query(stmt).ExecContext(sctx)
	cancel()
	if err != nil {
		return fmt.Errorf("%s: %w", stmt, err)
	}
	sctx, cancel = context.WithTimeout(ctx, f.timeout)
	err = cassx.AwaitSchemaAgreement(sctx, session)
	cancel()
	if err != nil {
		return fmt.Errorf("after %s: %w", stmt, err)
	}
	now, err := readRetention(ctx, session, f.keyspace, f.timeout)
	if err != nil {
		return err
	}
	if now[f.table] != secs {
		return fmt.Errorf("after %s: system_schema says %d s", stmt, now[f.table])
	}
	fmt.Fprintf(stdout, "%s.%s keeps rows %s (%d s), was %s (%d s): rows written from now on expire after it; rows already written keep the TTL they were written with\n",
		f.keyspace, f.table, formatRetention(secs), secs, formatRetention(was), was)
	return nil
}

// readRetention reads every table of keyspace with its default_time_to_live, in
// seconds, from system_schema.tables.
func readRetention(ctx context.Context, session *gocql.Session, keyspace string, timeout time.Duration) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	it := session.Query(`SELECT table_name, default_time_to_live FROM system_schema.tables WHERE keyspace_name = ?`, keyspace).IterContext(ctx)
	tables := map[string]int{}
	var (
		name string
		ttl  int
	)
	for it.Scan(&name, &ttl) {
		tables[name] = ttl
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("reading the tables of keyspace %s: %w", keyspace, err)
	}
	if len(tables) == 0 {
		return nil, errors.New("keyspace " + keyspace + " has no tables: is it the one pulsectl migrate made (-keyspace)?")
	}
	return tables, nil
}
