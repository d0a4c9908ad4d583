module github.com/pulse-presence/pulse/tests

go 1.26.0

require (
	github.com/apache/cassandra-gocql-driver/v2 v2.1.2
	github.com/pulse-presence/pulse/pkg v0.0.0-00010101000000-000000000000
	github.com/twmb/franz-go v1.22.2
	github.com/twmb/franz-go/pkg/kadm v1.19.0
)

require (
	github.com/coder/websocket v1.8.15 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.0 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
)

replace github.com/pulse-presence/pulse/pkg => ../pkg
