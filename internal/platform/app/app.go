// Package app is the process frame every Pulse service runs in: a structured logger
// from PULSE_LOG_LEVEL and PULSE_LOG_FORMAT, a context cancelled on SIGINT or SIGTERM,
// a Prometheus registry, `-help` from the service's configuration table, and an exit
// code.
package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/logging"
)

// RunFunc is a service's body. It returns nil after a clean shutdown once ctx ends.
type RunFunc func(ctx context.Context, logger *slog.Logger, env *config.Env) error

// Main runs run until it returns, cancelling its context on the first SIGINT or
// SIGTERM; a second signal kills the process the default way. Main exits the process.
//
// table is the service's configuration table, which run loads through env; Main uses
// it only to answer -help (print every variable, exit 0, connect to nothing) and, when
// the logging variables are bad, to name every bad variable at once.
func Main(service string, table []*config.Var, run RunFunc) {
	program := "pulse-" + service
	if wantsHelp(os.Args[1:]) {
		if err := Help(os.Stdout, service, table); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	env := config.NewEnv(nil)
	var logCfg logging.Config
	env.Load(logging.Vars(&logCfg)...)
	if env.Err() != nil {
		env.Load(table...) // no logger to report run's errors with: name them all here
		fmt.Fprintf(os.Stderr, "%s: configuration: %v\n", program, env.Err())
		os.Exit(2)
	}
	logger, err := logging.New(os.Stderr, logCfg.Level, logCfg.Format)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", program, err)
		os.Exit(2)
	}
	logger = logger.With("service", service)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // restore default handling: a second Ctrl-C ends a stuck shutdown
	}()
	err = run(ctx, logger, env)
	stop()
	if err != nil {
		logger.Error("service failed", "err", err)
		os.Exit(1)
	}
	logger.Info("service stopped")
}

// Help writes what `pulse-<service> -help` prints: every variable the service reads,
// the logging ones Main reads first, then table, with defaults and meanings.
func Help(w io.Writer, service string, table []*config.Var) error {
	var logCfg logging.Config
	return config.WriteHelp(w, "pulse-"+service, append(logging.Vars(&logCfg), table...))
}

// wantsHelp reports whether args ask for help the way Go's flag package spells it.
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--h", "--help":
			return true
		}
	}
	return false
}

// NewRegistry returns a registry with the Go runtime and process collectors, which
// /metrics serves; services register their own metrics on it.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
