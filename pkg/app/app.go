// Package app is the process frame every Pulse service runs in: a structured logger
// from PULSE_LOG_LEVEL and PULSE_LOG_FORMAT, a context cancelled on SIGINT or SIGTERM,
// a Prometheus registry, and an exit code.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/pulse-presence/pulse/pkg/config"
	"github.com/pulse-presence/pulse/pkg/logging"
)

// RunFunc is a service's body. It returns nil after a clean shutdown once ctx ends.
type RunFunc func(ctx context.Context, logger *slog.Logger, env *config.Env) error

// Main runs run until it returns, cancelling its context on the first SIGINT or
// SIGTERM; a second signal kills the process the default way. Main exits the process.
func Main(service string, run RunFunc) {
	env := config.NewEnv(nil)
	logger, err := logging.New(os.Stderr, env.String("PULSE_LOG_LEVEL", "info"), env.String("PULSE_LOG_FORMAT", "json"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "pulse-%s: %v\n", service, err)
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

// NewRegistry returns a registry with the Go runtime and process collectors, which
// /metrics serves; services register their own metrics on it.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
