// Package tests holds Pulse's integration and end-to-end tests. They run against the
// real Kafka, Cassandra and Redis of the local stack (make up; make test-integration
// starts it) and against the service binaries built from this tree.
//
// Addresses come from the same variables the services read (PULSE_KAFKA_BROKERS,
// PULSE_REDIS_ADDR, PULSE_CASSANDRA_HOSTS, PULSE_CASSANDRA_PORT), defaulting to the
// local stack's ports. A missing server fails the tests; it never skips them.
package tests

import (
	"os"
	"testing"

	"github.com/pulse-presence/pulse/tests/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.RunMain(m)) }
