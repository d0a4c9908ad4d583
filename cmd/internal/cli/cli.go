// Package cli is what Pulse's load tools, cmd/bench and cmd/loadgen, share as
// commands: how a Ctrl-C ends them and how their flags are checked.
package cli

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

// Main runs run and exits 1 when it fails. The first SIGINT or SIGTERM cancels run's
// context, so a tool stops its load and still reports what it measured; a second one
// ends the process, the signals' default action being back by then.
func Main(name string, run func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	err := run(ctx)
	stop()
	// -h printed the usage it asked for: nothing failed.
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// FlagSet is a tool's flag set, printing its errors and its usage (about, then every
// flag) to stderr; its Parse returns errors rather than exiting.
func FlagSet(name, about string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s [flags]\n\n%s\n\nflags:\n", name, about)
		fs.PrintDefaults()
	}
	return fs
}

// Parse parses args into fs's flags; the tools take no other arguments.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return nil
}

// Values is every flag's final value by name, so a report records how it was made.
func Values(fs *flag.FlagSet) map[string]string {
	v := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { v[f.Name] = f.Value.String() })
	return v
}

// Problems collects what is wrong with a command line, so one attempt names all of it.
type Problems []error

// Check records the problem format describes when bad holds.
func (p *Problems) Check(bad bool, format string, a ...any) {
	if bad {
		*p = append(*p, fmt.Errorf(format, a...))
	}
}

// Err is every problem at once, nil for none.
func (p Problems) Err() error { return errors.Join(p...) }
