// Package servertest decides what a unit test does when a server it needs does not
// answer. On a developer's machine without the local stack the test is skipped, so
// `go test ./...` works anywhere; where the servers are promised — CI (CI=true) or
// `make test`, which starts the stack first (PULSE_REQUIRE_SERVERS=1) — the test
// fails instead, because a server-backed test that silently skips proves nothing.
package servertest

import (
	"os"
	"strconv"
	"testing"
)

// Required reports whether the environment promises the servers: CI or
// PULSE_REQUIRE_SERVERS set to a true value.
func Required(lookup func(string) (string, bool)) bool {
	for _, key := range []string{"CI", "PULSE_REQUIRE_SERVERS"} {
		if v, ok := lookup(key); ok {
			if b, err := strconv.ParseBool(v); err == nil && b {
				return true
			}
		}
	}
	return false
}

// Unavailable ends tb because server did not answer with err: a failure where the
// servers are required, else a skip that says how to start them.
func Unavailable(tb testing.TB, server string, err error) {
	tb.Helper()
	if Required(os.LookupEnv) {
		tb.Fatalf("%s is required here (CI or PULSE_REQUIRE_SERVERS) but did not answer: %v", server, err)
	}
	tb.Skipf("no %s to test against (start the stack with make up): %v", server, err)
}
