package tests

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/platform/ports"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// envOr returns the environment variable key, or def when it is unset or empty.
func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Local-stack addresses: the services' own variables when set, else the stack's ports
// (which deploy/local/stack.sh also reads, so a stack on other ports is found too).
func kafkaBrokers() []string {
	return strings.Split(envOr("PULSE_KAFKA_BROKERS", "127.0.0.1:"+envOr("PULSE_KAFKA_PORT", strconv.Itoa(ports.Kafka))), ",")
}

func redisAddr() string {
	return envOr("PULSE_REDIS_ADDR", "127.0.0.1:"+envOr("PULSE_REDIS_PORT", strconv.Itoa(ports.Redis)))
}

func cassandraHost() string { return envOr("PULSE_CASSANDRA_HOSTS", "127.0.0.1") }
func cassandraPort() string { return envOr("PULSE_CASSANDRA_PORT", strconv.Itoa(ports.Cassandra)) }

// brokerReplication, given as a new topic's replication factor, takes the brokers'
// default.replication.factor: 1 on the single stack, 3 on the cluster topology, whose
// min.insync.replicas of 2 refuses acks=all writes to a topic of one replica.
const brokerReplication = -1

// partitions is what the stack created its topics with (PULSE_PARTITIONS, default 16).
func partitions(t *testing.T) int {
	t.Helper()
	n, err := strconv.Atoi(envOr("PULSE_PARTITIONS", "16"))
	if err != nil {
		t.Fatalf("PULSE_PARTITIONS: %v", err)
	}
	return n
}

// freePort returns a loopback port nobody listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// stackEnv is the environment a service needs to reach the local stack.
func stackEnv() map[string]string {
	env := map[string]string{
		"PULSE_KAFKA_BROKERS":   strings.Join(kafkaBrokers(), ","),
		"PULSE_REDIS_ADDR":      redisAddr(),
		"PULSE_CASSANDRA_HOSTS": cassandraHost(),
		"PULSE_CASSANDRA_PORT":  cassandraPort(),
		"PULSE_LOG_FORMAT":      "text",
	}
	for k, v := range authEnv() {
		env[k] = v
	}
	return env
}

func kafkaAdmin(t *testing.T) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaBrokers()...), kgo.DialTimeout(3*time.Second), kgo.RetryTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}
