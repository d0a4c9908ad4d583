//go:build faulttest

package main

import (
	"log/slog"
	"os"
	"sync/atomic"

	"github.com/pulse-presence/pulse/internal/platform/config"
)

// The crash point the fault tests use (tests/faultload_test.go), built only with
// -tags faulttest, as the tests build the services: a production binary neither reads
// the variable nor holds a way to exit mid-window.

// crashVars declares PULSE_AGGREGATOR_CRASH_AFTER_WRITE.
func crashVars(n *int) []*config.Var {
	return []*config.Var{config.Int(n, "PULSE_AGGREGATOR_CRASH_AFTER_WRITE", 0,
		"fault testing only: exit (code 3) right after the N-th window reached Redis, before its changes are produced and its offset committed; 0: never",
		config.NotNegative)}
}

// crashAfter is the crash point of PULSE_AGGREGATOR_CRASH_AFTER_WRITE: a function that
// ends the process at its n-th call, over all partitions; nil when n is 0.
func crashAfter(n int, logger *slog.Logger) func() {
	if n == 0 {
		return nil
	}
	logger.Warn("fault testing: the aggregator exits after a window write", "windows", n)
	var calls atomic.Int64
	return func() {
		if calls.Add(1) == int64(n) {
			logger.Error("fault testing: exiting between a window's Redis write and its changes and commit", "windows", n)
			os.Exit(3)
		}
	}
}
