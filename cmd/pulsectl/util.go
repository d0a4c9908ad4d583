package main

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pulse-presence/pulse/internal/platform/kafkax"
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
