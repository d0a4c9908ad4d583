// Package tests holds Pulse's integration and end-to-end tests. They run against the
// real Kafka, Cassandra and Redis of the local stack (make up; make test-integration
// starts it) and against the service binaries built from this tree.
//
// Addresses come from the same variables the services read (PULSE_KAFKA_BROKERS,
// PULSE_REDIS_ADDR, PULSE_CASSANDRA_HOSTS, PULSE_CASSANDRA_PORT), defaulting to the
// local stack's ports. A missing server fails the tests; it never skips them.
package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// binDir holds the service binaries TestMain builds once for the whole package.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pulse-it-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := func() int {
		defer os.RemoveAll(dir)
		if err := buildBinaries(dir); err != nil {
			fmt.Fprintln(os.Stderr, "building binaries:", err)
			return 1
		}
		if err := writeKeysFile(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

func buildBinaries(dir string) error {
	const mod = "github.com/pulse-presence/pulse"
	// faulttest builds in the aggregator's crash point (services/aggregator/crash.go),
	// which production binaries do not have.
	cmd := exec.Command("go", "build", "-tags", "faulttest", "-o", dir+string(filepath.Separator),
		mod+"/services/ingest", mod+"/services/aggregator", mod+"/services/history",
		mod+"/services/query", mod+"/cmd/pulsectl")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

// binary is the path of a built command: ingest, aggregator, history, query, pulsectl.
func binary(name string) string {
	return filepath.Join(binDir, name)
}
