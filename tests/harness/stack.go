package harness

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

// EnvOr returns the environment variable key, or def when it is unset or empty.
func EnvOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Local-stack addresses: the services' own variables when set, else the stack's ports
// (which deploy/local/stack.sh also reads, so a stack on other ports is found too).
func KafkaBrokers() []string {
	return strings.Split(EnvOr("PULSE_KAFKA_BROKERS", "127.0.0.1:"+EnvOr("PULSE_KAFKA_PORT", strconv.Itoa(ports.Kafka))), ",")
}

func RedisAddr() string {
	return EnvOr("PULSE_REDIS_ADDR", "127.0.0.1:"+EnvOr("PULSE_REDIS_PORT", strconv.Itoa(ports.Redis)))
}

func CassandraHost() string { return EnvOr("PULSE_CASSANDRA_HOSTS", "127.0.0.1") }
func CassandraPort() string { return EnvOr("PULSE_CASSANDRA_PORT", strconv.Itoa(ports.Cassandra)) }

// BrokerReplication, given as a new topic's replication factor, takes the brokers'
// default.replication.factor: 1 on the single stack, 3 on the cluster topology, whose
// min.insync.replicas of 2 refuses acks=all writes to a topic of one replica.
const BrokerReplication = -1

// Partitions is what the stack created its topics with (PULSE_PARTITIONS, default 16).
func Partitions(t *testing.T) int {
	t.Helper()
	n, err := strconv.Atoi(EnvOr("PULSE_PARTITIONS", "16"))
	if err != nil {
		t.Fatalf("PULSE_PARTITIONS: %v", err)
	}
	return n
}

// FreePort returns a loopback port nobody listens on right now.
func FreePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// StackEnv is the environment a service needs to reach the local stack.
func StackEnv() map[string]string {
	env := map[string]string{
		"PULSE_KAFKA_BROKERS":   strings.Join(KafkaBrokers(), ","),
		"PULSE_REDIS_ADDR":      RedisAddr(),
		"PULSE_CASSANDRA_HOSTS": CassandraHost(),
		"PULSE_CASSANDRA_PORT":  CassandraPort(),
		"PULSE_LOG_FORMAT":      "text",
	}
	for k, v := range authEnv() {
		env[k] = v
	}
	return env
}

func KafkaAdmin(t *testing.T) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(KafkaBrokers()...), kgo.DialTimeout(3*time.Second), kgo.RetryTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}
