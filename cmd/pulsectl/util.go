package main

import (
	"flag"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pulse-presence/pulse/internal/platform/cassx"
	"github.com/pulse-presence/pulse/internal/platform/kafkax"
	"github.com/pulse-presence/pulse/internal/platform/ports"
)

// kafkaConfig is the Kafka client of a pulsectl command that talks to the brokers in
// the comma-separated list brokers, retrying for at most retry.
func kafkaConfig(brokers string, retry time.Duration) kafkax.Config {
	return kafkax.Config{Brokers: strings.Split(brokers, ","), ClientID: "pulsectl",
		DialTimeout: 5 * time.Second, RequestTimeout: 10 * time.Second, RetryTimeout: retry}
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("%q: bad port", addr)
	}
	return host, port, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// passwordEnv names the variable the Cassandra password is read from: a flag would show
// it in ps and in shell history.
const passwordEnv = "PULSE_CASSANDRA_PASSWORD"

// cassandraFlags are the flags of the commands that speak CQL to Cassandra (migrate,
// retention): where the nodes are, who connects, the keyspace, and the deadline of
// each statement.
type cassandraFlags struct {
	hosts    string
	cass     cassx.Config
	keyspace string
	timeout  time.Duration
}

// addCassandraFlags declares the Cassandra flags on fs; keyspaceUsage says what the
// command does with -keyspace.
func addCassandraFlags(fs *flag.FlagSet, keyspaceUsage string) *cassandraFlags {
	c := &cassandraFlags{}
	fs.StringVar(&c.hosts, "hosts", "127.0.0.1", "comma-separated Cassandra contact points")
	fs.IntVar(&c.cass.Port, "port", ports.Cassandra, "Cassandra CQL port (the default is the local stack's)")
	fs.StringVar(&c.cass.Username, "username", "", "Cassandra user, if authentication is on (password from $"+passwordEnv+")")
	fs.StringVar(&c.cass.Consistency, "consistency", cassx.DefaultConsistency, "consistency of the command's reads and writes")
	fs.StringVar(&c.keyspace, "keyspace", "pulse", keyspaceUsage)
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "deadline of each statement (schema changes wait for every node to agree)")
	return c
}

// config checks the parsed flags and returns the session's configuration, without a
// keyspace (statements name it); cmd prefixes the errors.
func (c *cassandraFlags) config(cmd string, getenv func(string) string) (cassx.Config, error) {
	cfg := c.cass
	for _, h := range strings.Split(c.hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			cfg.Hosts = append(cfg.Hosts, h)
		}
	}
	if c.timeout <= 0 {
		return cfg, fmt.Errorf("%s -timeout: %v must be positive", cmd, c.timeout)
	}
	// The driver's own request timeout must not cut a statement short of -timeout.
	cfg.Timeout = c.timeout
	cfg.ConnectTimeout = 10 * time.Second
	cfg.Password = getenv(passwordEnv)
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	if !cassx.ValidKeyspace(c.keyspace) {
		return cfg, fmt.Errorf("%s -keyspace: %q is not a valid keyspace name (lower-case letter, then up to 47 lower-case letters, digits or underscores)", cmd, c.keyspace)
	}
	return cfg, nil
}
