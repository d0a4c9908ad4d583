// Command bench measures Pulse end to end on the local stack and writes what it found
// into a folder of its own: results.json (every number, stable names), results.md (the
// tables, with each target met or not and by how much) and latency.png.
//
// It runs in phases, each of which can be turned off with -phases:
//
//	batch   stepped ingest with batched POST /v1/events at increasing rates, with
//	        freshness probes and readers at a modest rate, until a step falls behind
//	single  the same with one event per POST /status
//	half    at half the highest batched rate that kept up: freshness, and reads
//	        (GET /status at 5,000/s, POST /statuses, counts) under that ingest
//	rebuild every shard of the state rebuilt from the log by the running aggregators, as
//	        after Redis lost it: users/s into Redis and records/s folded
//	limits  the engines alone, on the same servers, for work of Pulse's shape: Kafka's
//	        ProducerPerformance with Pulse's record size and acks=all, a minimal
//	        go-redis loop writing aggregator windows (beside statestore.WriteWindow), a
//	        minimal gocql writer of history's rows, a bare Echo handler under loadgen's
//	        single-event load; results.md and results.json give Pulse ÷ each limit
//	scaleout
//	        the same records folded by one aggregator, then by two in one group, on
//	        the single topology and on the cluster one (started for the phase when
//	        it is not up, stopped after): events/s each, and two ÷ one
//	scale   counts and memory with -scale-users registered users bulk-loaded into
//	        Redis in Pulse's layout, then in the seed's direct layout (a sorted set of
//	        online users and a hash per user) as the baseline, on the same Redis
//
// A step falls behind when ingest accepted less than 95% of the offered events, more
// than 1% of its requests failed or were dropped, the aggregator's consumer lag grew
// by more than a second of offered events over the step, or the freshness p99 passed
// 1 s. Stepping stops after the first step that fell behind; the highest rate is the
// last step that kept up.
//
// Load comes from cmd/loadgen, run once per step; bench samples around each run the
// CPU time of every process of the stack (/proc/<pid>/stat), the consumer lag of the
// aggregator's and history's groups (Kafka's admin API), and the services' /metrics.
//
// bench uses the services of a running `make run` when they answer, and otherwise has
// deploy/local/stack.sh start them (`stack.sh services`) and stop them at the end; it
// finds the processes it measures with `stack.sh pids`. The stack's servers must be up
// (`make bench` runs `stack.sh up` first).
//
// Usage:
//
//	go run ./cmd/bench [-quick] [flags]
package main

import (
	"context"
	"os"

	"github.com/pulse-presence/pulse/cmd/internal/cli"
)

func main() {
	cli.Main("bench", func(ctx context.Context) error { return run(ctx, os.Args[1:]) })
}
