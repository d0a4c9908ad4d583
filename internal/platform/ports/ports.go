// Package ports holds the TCP ports of Pulse's services and of the local stack's Kafka,
// Cassandra and Redis. They are Pulse's own, away from the usual ones, so the stack never
// clashes with a developer's other servers. Every default address in Go code is built
// from these constants; the local stack's table (the single column of
// deploy/local/topologies) keeps the same numbers as its defaults (a test keeps them
// equal), and the Ports table of docs/configuration.md lists them.
package ports

import "strconv"

// Services' HTTP ports: the API, /healthz, /readyz and /metrics.
const (
	Ingest     = 18080
	Query      = 18081
	Aggregator = 18082
	History    = 18083
	Notifier   = 18084
	// Demo serves make run's demo chat page (pulsectl demo).
	Demo = 18090
)

// The local stack's servers.
const (
	Kafka            = 19092
	KafkaController  = 19093
	Cassandra        = 19042
	CassandraStorage = 17000
	Redis            = 16379
)

// ListenAddr is the address a server listens on at port, every interface: ":18080".
func ListenAddr(port int) string { return ":" + strconv.Itoa(port) }

// LocalAddr is the address of a server of this machine at port: "127.0.0.1:19092".
func LocalAddr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// LocalURL is the HTTP base URL of a service of this machine at port.
func LocalURL(port int) string { return "http://" + LocalAddr(port) }
