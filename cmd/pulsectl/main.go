// Command pulsectl runs Pulse's operational chores against real servers: waiting for
// the local stack to become ready, creating the Kafka topics, applying the Cassandra
// migrations and changing the tables' retention. deploy/local/stack.sh drives it;
// operators can run it against any cluster.
// For analysts, history, sessions and stats print what the query service's history
// routes answer (docs/analytics.md); export prints everything Pulse holds about one
// user; groups writes and reads groups' members.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// command is one pulsectl subcommand. It parses its own flags from args and writes
// progress for people to stdout.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout io.Writer) error
}

func commands() []command {
	return []command{
		{"wait", "wait until Kafka, Cassandra or Redis answers real requests", runWait},
		{"topics", "create Pulse's Kafka topics (idempotent)", runTopics},
		{"migrate", "apply pending Cassandra migrations", runMigrate},
		{"retention", "how long Cassandra keeps each table's rows, or set one's (retention set TABLE DURATION)", runRetention},
		{"history", "a user's timeline (history user ID) or daily totals (history daily ID)", runHistory},
		{"sessions", "a user's sessions (sessions ID)", runSessions},
		{"export", "everything Pulse holds about one user, for an operator (export ID [-json])", runExport},
		{"stats", "concurrency, unique users or every user's daily totals (stats concurrency|uniques|daily)", runStats},
		{"online", "who is online, now or at an instant of the past (online -at TIME [-count])", runOnline},
		{"forget", "erase a user everywhere, as an event in the log (forget USER; needs PULSE_OPERATOR_KEY)", runForget},
		{"groups", "a group's members and who of them is online (groups set|add|remove|delete|show|online GROUP)", runGroups},
		{"dlq", "list dead letters, or replay them to their topic (dlq list|replay)", runDLQ},
		{"rebuild", "have the aggregators rebuild the state in Redis from the log, with progress (rebuild [-shard N])", runRebuild},
		{"keys", "make a new API key and its line for PULSE_API_KEYS_FILE (keys new -scope write)", runKeys},
		{"token", "mint a user token for the configured HS256 verifier (token -user ID [-watch a,b] [-ttl 1h])", runToken},
		{"demo", "serve the demo chat page and the JavaScript client (demo [-addr 127.0.0.1:18090])", runDemo},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "pulsectl:", err)
		}
		os.Exit(1)
	}
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		return flag.ErrHelp
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout)
		}
	}
	usage(stderr)
	return fmt.Errorf("unknown command %q", args[0])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: pulsectl <command> [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'pulsectl <command> -h' for a command's flags.")
}
