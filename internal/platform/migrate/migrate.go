// Package migrate applies Pulse's numbered CQL migrations to a Cassandra keyspace.
//
// A migrations directory holds files named NNNN_name.cql (see Load). Each file is applied
// once, in version order, and recorded in <keyspace>.schema_migrations with the checksum
// of its bytes. An applied file must never change: a checksum mismatch stops the
// migrator with an error naming the file, and the fix is a new migration.
//
// Cassandra has no transactional DDL, so a migration that fails half-way leaves its
// earlier statements applied and is not recorded. Migrations are therefore written with
// IF NOT EXISTS / IF EXISTS so that running the whole file again after a fix is safe.
//
// Every schema statement is followed by a wait for all nodes to agree on the schema
// (cassx.AwaitSchemaAgreement), since the next statement may be coordinated by another
// node.
//
// Concurrent migrators serialise on a lock row in <keyspace>.schema_migrations_lock,
// taken with a lightweight transaction (INSERT ... IF NOT EXISTS USING TTL) and renewed
// before every statement, so a crashed migrator's lock expires on its own. The one gap is
// the very first migration, which creates the keyspace the lock lives in: it runs
// unlocked, which is harmless because CREATE KEYSPACE IF NOT EXISTS is idempotent.
package migrate

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/pulse-presence/pulse/internal/platform/cassx"
)

// DefaultReplication suits a one-node development cluster. Production passes a
// NetworkTopologyStrategy map naming its data centres.
const DefaultReplication = "{'class': 'SimpleStrategy', 'replication_factor': 1}"

// Table names the migrator owns inside the target keyspace.
const (
	HistoryTable = "schema_migrations"
	LockTable    = "schema_migrations_lock"
)

// Defaults for zero fields of Options.
const (
	DefaultStatementTimeout = 30 * time.Second
	DefaultLockTTL          = 5 * time.Minute
	DefaultLockWait         = 2 * time.Minute
)

// Options configure a Migrator.
type Options struct {
	// Keyspace is the keyspace the migrations target, substituted for {{keyspace}}.
	Keyspace string
	// Replication is the CQL replication map substituted for {{replication}};
	// DefaultReplication when empty.
	Replication string
	// Migrations are the files to apply, usually from Load.
	Migrations []Migration
	// Logger receives progress; nil discards it.
	Logger *slog.Logger
	// StatementTimeout bounds each statement (default 30s: schema changes wait for
	// every node to agree, which is slow on a small machine).
	StatementTimeout time.Duration
	// LockTTL is how long the lock outlives a migrator that died holding it
	// (default 5m). The lock is renewed before each statement, so it is raised to twice
	// StatementTimeout when set lower.
	LockTTL time.Duration
	// LockWait is how long Apply waits for another migrator's lock (default 2m).
	LockWait time.Duration
	// OnApplied, when set, is called after each migration is applied and recorded.
	OnApplied func(m Migration, took time.Duration)
	// Now is the clock for applied_at; time.Now when nil.
	Now func() time.Time
}

// Record is one row of schema_migrations.
type Record struct {
	Version   int
	Name      string
	Checksum  string
	AppliedAt time.Time
}

// StatementError reports a statement the server refused.
type StatementError struct {
	File      string // the migration's file name
	Index     int    // 1-based position of the statement in the file
	Statement string // the statement as sent, placeholders substituted
	Err       error  // the server's (or driver's) error
}

func (e *StatementError) Error() string {
	return fmt.Sprintf("%s: statement %d failed: %v\n  %s", e.File, e.Index, e.Err, strings.ReplaceAll(e.Statement, "\n", "\n  "))
}

func (e *StatementError) Unwrap() error { return e.Err }

// ChecksumError reports an applied migration whose file has changed since.
type ChecksumError struct {
	File      string
	Recorded  string // checksum in schema_migrations
	Current   string // checksum of the file now
	AppliedAt time.Time
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("%s: file changed after it was applied at %s (recorded checksum %s, file now %s); applied migrations must not be edited, add a new migration instead",
		e.File, e.AppliedAt.UTC().Format(time.RFC3339), e.Recorded, e.Current)
}

// Migrator applies migrations to one keyspace.
type Migrator struct {
	session *gocql.Session
	opts    Options
	log     *slog.Logger
	owner   string // identifies this migrator in the lock row
}

// New checks opts and returns a Migrator using session. The session should have no
// keyspace set: the first migration usually creates the keyspace, and every statement
// names it through {{keyspace}}.
func New(session *gocql.Session, opts Options) (*Migrator, error) {
	if !cassx.ValidKeyspace(opts.Keyspace) {
		return nil, fmt.Errorf("migrate Keyspace: %q is not a valid keyspace name (lower-case letter, then up to 47 lower-case letters, digits or underscores)", opts.Keyspace)
	}
	if opts.Replication == "" {
		opts.Replication = DefaultReplication
	}
	if r := strings.TrimSpace(opts.Replication); !strings.HasPrefix(r, "{") || !strings.HasSuffix(r, "}") || strings.Contains(r, ";") {
		return nil, fmt.Errorf("migrate Replication: %q is not a CQL map like %s", opts.Replication, DefaultReplication)
	}
	if len(opts.Migrations) == 0 {
		return nil, errors.New("migrate Migrations: none given")
	}
	seen := map[int]bool{}
	for i, m := range opts.Migrations {
		if seen[m.Version] {
			return nil, fmt.Errorf("migrate Migrations: version %d given twice", m.Version)
		}
		seen[m.Version] = true
		if i > 0 && m.Version < opts.Migrations[i-1].Version {
			return nil, fmt.Errorf("migrate Migrations: not ordered by version (%s after %s)", m.File, opts.Migrations[i-1].File)
		}
		// Render now so a bad placeholder fails before anything is applied.
		if _, err := m.Render(opts.Keyspace, opts.Replication); err != nil {
			return nil, err
		}
	}
	if session == nil {
		return nil, errors.New("migrate: nil session")
	}
	if opts.StatementTimeout <= 0 {
		opts.StatementTimeout = DefaultStatementTimeout
	}
	if opts.LockTTL <= 0 {
		opts.LockTTL = DefaultLockTTL
	}
	if opts.LockTTL < 2*opts.StatementTimeout {
		opts.LockTTL = 2 * opts.StatementTimeout
	}
	if opts.LockWait <= 0 {
		opts.LockWait = DefaultLockWait
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Migrator{
		session: session,
		opts:    opts,
		log:     log.With("keyspace", opts.Keyspace),
		owner:   newOwner(),
	}, nil
}

func newOwner() string {
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// state is what the cluster says about the target keyspace.
type state struct {
	keyspaceExists bool
	tableExists    bool
	records        map[int]Record
}

// readState reads the keyspace's migration records. Before the first migration neither
// the keyspace nor the table exists, and querying the table would be an error, so the
// schema tables are asked first.
func (m *Migrator) readState(ctx context.Context) (state, error) {
	st := state{records: map[int]Record{}}
	ctx, cancel := context.WithTimeout(ctx, m.opts.StatementTimeout)
	defer cancel()

	var name string
	err := m.session.Query(`SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = ?`, m.opts.Keyspace).
		ScanContext(ctx, &name)
	switch {
	case errors.Is(err, gocql.ErrNotFound):
		return st, nil
	case err != nil:
		return st, fmt.Errorf("looking up keyspace %s: %w", m.opts.Keyspace, err)
	}
	st.keyspaceExists = true

	err = m.session.Query(`SELECT table_name FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?`, m.opts.Keyspace, HistoryTable).
		ScanContext(ctx, &name)
	switch {
	case errors.Is(err, gocql.ErrNotFound):
		return st, nil
	case err != nil:
		return st, fmt.Errorf("looking up table %s.%s: %w", m.opts.Keyspace, HistoryTable, err)
	}
	st.tableExists = true

	iter := m.session.Query(`SELECT version, name, checksum, applied_at FROM ` + m.opts.Keyspace + `.` + HistoryTable).
		IterContext(ctx)
	var r Record
	for iter.Scan(&r.Version, &r.Name, &r.Checksum, &r.AppliedAt) {
		st.records[r.Version] = r
	}
	if err := iter.Close(); err != nil {
		return st, fmt.Errorf("reading %s.%s: %w", m.opts.Keyspace, HistoryTable, err)
	}
	return st, nil
}

// pending checks the records against the files and returns the migrations not applied.
func (m *Migrator) pending(st state) ([]Migration, error) {
	var pending []Migration
	known := map[int]bool{}
	for _, mig := range m.opts.Migrations {
		known[mig.Version] = true
		r, ok := st.records[mig.Version]
		if !ok {
			pending = append(pending, mig)
			continue
		}
		if r.Checksum != mig.Checksum {
			return nil, &ChecksumError{File: mig.File, Recorded: r.Checksum, Current: mig.Checksum, AppliedAt: r.AppliedAt}
		}
	}
	for v, r := range st.records {
		if !known[v] {
			// A newer build applied it; this one's files predate it. Nothing to do for
			// it here, but an operator should know the schema is ahead of the files.
			m.log.Warn("applied migration has no file", "version", v, "name", r.Name)
		}
	}
	return pending, nil
}

// Pending returns the migrations not yet applied, in the order Apply would apply them.
// It fails with a *ChecksumError if an applied file has changed.
func (m *Migrator) Pending(ctx context.Context) ([]Migration, error) {
	st, err := m.readState(ctx)
	if err != nil {
		return nil, err
	}
	return m.pending(st)
}

// Applied returns the recorded migrations, ordered by version.
func (m *Migrator) Applied(ctx context.Context) ([]Record, error) {
	st, err := m.readState(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, len(st.records))
	for _, r := range st.records {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Record) int { return cmp.Compare(a.Version, b.Version) })
	return out, nil
}

// Apply applies the pending migrations in version order and returns those it applied.
// It stops at the first failure: a refused statement comes back as a *StatementError,
// an edited applied file as a *ChecksumError; migrations applied before the failure
// stay applied and recorded.
func (m *Migrator) Apply(ctx context.Context) (applied []Migration, err error) {
	var lk *lock
	defer func() {
		if lk == nil {
			return
		}
		// Release even when ctx is done, with a deadline of its own.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.opts.StatementTimeout)
		defer cancel()
		if rerr := lk.release(rctx); rerr != nil {
			m.log.Warn("releasing migration lock; it expires on its own", "ttl", m.opts.LockTTL, "err", rerr)
		}
	}()

	// Each round re-reads the records, so that what another migrator did before we took
	// the lock is seen and not done twice.
	for {
		st, err := m.readState(ctx)
		if err != nil {
			return applied, err
		}
		pending, err := m.pending(st)
		if err != nil {
			return applied, err
		}
		if len(pending) == 0 {
			return applied, nil
		}
		if st.keyspaceExists && lk == nil {
			if lk, err = m.acquire(ctx); err != nil {
				return applied, err
			}
			continue
		}

		next := pending[0]
		start := time.Now()
		if err := m.run(ctx, next, lk); err != nil {
			return applied, err
		}
		if lk == nil {
			// That was the migration that creates the keyspace: from here on, lock.
			if lk, err = m.acquire(ctx); err != nil {
				return applied, fmt.Errorf("after applying %s: %w", next.File, err)
			}
		}
		recorded, err := m.record(ctx, next, !st.tableExists)
		if err != nil {
			return applied, err
		}
		if !recorded {
			// Another migrator recorded it while we waited for the lock; our run of
			// the same idempotent statements changed nothing.
			m.log.Info("migration was recorded by another migrator", "file", next.File)
			continue
		}
		took := time.Since(start)
		m.log.Info("applied migration", "file", next.File, "statements", len(next.Statements), "took", took)
		applied = append(applied, next)
		if m.opts.OnApplied != nil {
			m.opts.OnApplied(next, took)
		}
	}
}

// run executes one migration's statements, renewing the lock (when held) before each.
func (m *Migrator) run(ctx context.Context, mig Migration, lk *lock) error {
	stmts, err := mig.Render(m.opts.Keyspace, m.opts.Replication)
	if err != nil {
		return err
	}
	for i, stmt := range stmts {
		if lk != nil {
			if err := lk.renew(ctx); err != nil {
				return fmt.Errorf("before %s statement %d: %w", mig.File, i+1, err)
			}
		}
		if err := m.exec(ctx, stmt); err != nil {
			return &StatementError{File: mig.File, Index: i + 1, Statement: stmt, Err: err}
		}
	}
	return nil
}

// exec runs one schema statement and waits until every node has the change, so that the
// next statement, which may go to another node, finds it. Each part has StatementTimeout.
func (m *Migrator) exec(ctx context.Context, stmt string) error {
	sctx, cancel := context.WithTimeout(ctx, m.opts.StatementTimeout)
	err := m.session.Query(stmt).ExecContext(sctx)
	cancel()
	if err != nil {
		return err
	}
	sctx, cancel = context.WithTimeout(ctx, m.opts.StatementTimeout)
	defer cancel()
	start := time.Now()
	if err := cassx.AwaitSchemaAgreement(sctx, m.session); err != nil {
		return err
	}
	if took := time.Since(start); took >= time.Second {
		m.log.Info("waited for the nodes to agree on the schema", "took", took.Round(time.Millisecond))
	}
	return nil
}

// record inserts the migration's row, creating the table first when it did not exist.
// It reports false when the row was already there.
func (m *Migrator) record(ctx context.Context, mig Migration, createTable bool) (bool, error) {
	if createTable {
		err := m.exec(ctx, `CREATE TABLE IF NOT EXISTS `+m.opts.Keyspace+`.`+HistoryTable+` (
  version int PRIMARY KEY,
  name text,
  checksum text,
  applied_at timestamp
) WITH comment = 'Pulse schema migrations applied to this keyspace (pulsectl migrate)'`)
		if err != nil {
			return false, fmt.Errorf("creating %s.%s: %w", m.opts.Keyspace, HistoryTable, err)
		}
	}
	// IF NOT EXISTS keeps the first applied_at when two migrators raced on the
	// keyspace-creating migration.
	ctx, cancel := context.WithTimeout(ctx, m.opts.StatementTimeout)
	defer cancel()
	applied, err := m.session.Query(`INSERT INTO `+m.opts.Keyspace+`.`+HistoryTable+` (version, name, checksum, applied_at) VALUES (?, ?, ?, ?) IF NOT EXISTS`,
		mig.Version, mig.Name, mig.Checksum, m.opts.Now().UTC().Truncate(time.Millisecond)).
		MapScanCASContext(ctx, map[string]any{})
	if err != nil {
		return false, fmt.Errorf("recording %s in %s.%s: %w", mig.File, m.opts.Keyspace, HistoryTable, err)
	}
	return applied, nil
}
