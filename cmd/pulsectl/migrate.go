package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/pulse-presence/pulse/internal/platform/cassx"
	"github.com/pulse-presence/pulse/internal/platform/migrate"
)

// migrateFlags are pulsectl migrate's settings.
type migrateFlags struct {
	cass        cassx.Config
	keyspace    string
	replication string
	dir         string
	timeout     time.Duration
	dryRun      bool
}

func parseMigrateFlags(args []string, getenv func(string) string) (migrateFlags, error) {
	var f migrateFlags
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	cf := addCassandraFlags(fs, "keyspace to migrate, substituted for {{keyspace}}")
	fs.StringVar(&f.replication, "replication", migrate.DefaultReplication, "CQL replication map for a new keyspace, substituted for {{replication}}")
	fs.StringVar(&f.dir, "dir", "migrations", "directory holding the NNNN_name.cql files")
	fs.BoolVar(&f.dryRun, "dry-run", false, "list the pending migrations without applying them")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("migrate: unexpected arguments %q", fs.Args())
	}
	var err error
	f.cass, err = cf.config("migrate", getenv)
	f.keyspace, f.timeout = cf.keyspace, cf.timeout
	return f, err
}

// runMigrate applies the pending Cassandra migrations, printing one line per migration.
func runMigrate(ctx context.Context, args []string, stdout io.Writer) error {
	f, err := parseMigrateFlags(args, os.Getenv)
	if err != nil {
		return err
	}
	migrations, err := migrate.Load(os.DirFS(f.dir))
	if err != nil {
		return fmt.Errorf("loading migrations from %s: %w", f.dir, err)
	}
	if len(migrations) == 0 {
		return fmt.Errorf("no NNNN_name.cql files in %s", f.dir)
	}

	// No keyspace on the session: the first migration is the one that creates it.
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

	m, err := migrate.New(session, migrate.Options{
		Keyspace:         f.keyspace,
		Replication:      f.replication,
		Migrations:       migrations,
		StatementTimeout: f.timeout,
		// Progress goes to stdout below; the log only carries warnings (a lock to wait
		// for, a recorded version with no file) and goes to stderr.
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		OnApplied: func(mig migrate.Migration, took time.Duration) {
			fmt.Fprintf(stdout, "applied %s (%s) in %v\n", mig.File, statements(len(mig.Statements)), took.Round(time.Millisecond))
		},
	})
	if err != nil {
		return err
	}

	if f.dryRun {
		pending, err := m.Pending(ctx)
		if err != nil {
			return fmt.Errorf("keyspace %s: %w", f.keyspace, err)
		}
		if len(pending) == 0 {
			return upToDate(ctx, m, stdout)
		}
		for _, mig := range pending {
			fmt.Fprintf(stdout, "pending %s (%s)\n", mig.File, statements(len(mig.Statements)))
		}
		return nil
	}

	applied, err := m.Apply(ctx)
	if err != nil {
		var se *migrate.StatementError
		if errors.As(err, &se) {
			return fmt.Errorf("keyspace %s: %w\nthe statements before it stay applied and %s is not recorded: fix the file, keeping every statement safe to re-run, and run migrate again", f.keyspace, err, se.File)
		}
		return fmt.Errorf("keyspace %s: %w", f.keyspace, err)
	}
	if len(applied) == 0 {
		return upToDate(ctx, m, stdout)
	}
	fmt.Fprintf(stdout, "schema at version %d\n", applied[len(applied)-1].Version)
	return nil
}

func upToDate(ctx context.Context, m *migrate.Migrator, stdout io.Writer) error {
	records, err := m.Applied(ctx)
	if err != nil {
		return err
	}
	version := 0
	if len(records) > 0 {
		version = records[len(records)-1].Version
	}
	fmt.Fprintf(stdout, "schema up to date (version %d)\n", version)
	return nil
}

func statements(n int) string {
	if n == 1 {
		return "1 statement"
	}
	return fmt.Sprintf("%d statements", n)
}
