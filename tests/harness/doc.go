// Package harness is what Pulse's integration tests share: the local stack's
// addresses and topics (stack.go), the service binaries built once per run and
// started as real processes (process.go), the test keys and the HTTP clients that
// carry them (keys.go), a pipeline of the four services on topics of its own with
// its reads (pipeline.go, reads.go), and the independent model of presence that the
// tests compare the pipeline with (model.go), written apart from internal/domain so
// a mistake there cannot hide in both.
package harness
