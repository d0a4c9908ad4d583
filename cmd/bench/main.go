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
//	present -present-sockets present WebSockets (GET /v1/watch?present=) on a query
//	        instance of the phase's own: memory per socket, CPU per heartbeat,
//	        heartbeats/s into Kafka, offline events/s when all close at once
//	groups  a group of -groups-members members (-groups-online of them online) among
//	        -groups-users registered users bulk-loaded under a prefix of the phase's
//	        own, its membership written through query's PATCH and folded by an
//	        aggregator of the phase's own: count and page-of-100 latency, Redis bytes
//	        per member, member events/s; then -groups-rooms small rooms; optionally
//	        Centrifugo's presence_stats at the same size (-groups-centrifugo)
//	webhooks
//	        the stack's notifier delivering presence.changes to two endpoints served
//	        by bench (batches of 100 changes or 100 ms, and of 100 or 1 s), written
//	        into the stack's endpoints file for the phase: under batched load at half
//	        the highest batched rate that kept up (-webhooks-rate without batched
//	        steps), each endpoint's delivery latency from the change's record in
//	        presence.changes, changes/s, and whether it got every change of the load
//	        in its view, each request signed (duplicates counted)
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
// (`make bench` runs `stack.sh up` first). A run of phases that start their own Pulse
// processes only (groups) uses none of the stack's services: no warm-up, no waits for
// their consumers.
//
// main parses the flags, opens the harness (internal/harness) and runs the enabled
// phases in order, each a harness.Phase of its own package (internal/steps, rebuild,
// limits, scaleout, scale, present, groups, webhooks) recording into one report.Results; internal/report and
// internal/plot write the folder, internal/probe samples CPU, lag and /metrics.
//
// Usage:
//
//	go run ./cmd/bench [-quick] [flags]
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/pulse-presence/pulse/cmd/bench/internal/groups"
	"github.com/pulse-presence/pulse/cmd/bench/internal/harness"
	"github.com/pulse-presence/pulse/cmd/bench/internal/limits"
	"github.com/pulse-presence/pulse/cmd/bench/internal/present"
	"github.com/pulse-presence/pulse/cmd/bench/internal/rebuild"
	"github.com/pulse-presence/pulse/cmd/bench/internal/scale"
	"github.com/pulse-presence/pulse/cmd/bench/internal/scaleout"
	"github.com/pulse-presence/pulse/cmd/bench/internal/steps"
	"github.com/pulse-presence/pulse/cmd/bench/internal/webhooks"
	"github.com/pulse-presence/pulse/cmd/internal/cli"
)

// phaseList is the phases in the order they run; allPhases names them for -phases.
var (
	phaseList = []harness.Phase{steps.Batch, steps.Single, steps.Half, rebuild.Phase, limits.Phase, scaleout.Phase, scale.Phase, present.Phase, groups.Phase, webhooks.Phase}
	allPhases []string
)

func init() {
	for _, p := range phaseList {
		allPhases = append(allPhases, p.Name)
	}
}

func main() {
	cli.Main("bench", func(ctx context.Context) error { return run(ctx, os.Args[1:]) })
}

// run is the whole benchmark. The results are written also after a failed phase or a
// Ctrl-C, with what was measured.
func run(ctx context.Context, args []string) error {
	cfg, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	env, err := harness.Open(ctx, cfg, os.Stdout)
	if err != nil {
		return err
	}
	defer env.Close()
	phaseErr := runPhases(ctx, env)
	if phaseErr != nil {
		env.Note("the run stopped early: %v", phaseErr)
	}
	if err := env.Finish("go run ./cmd/bench " + strings.Join(args, " ")); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	return phaseErr
}

// needServices says whether any phase turned on in on runs on the stack's services.
func needServices(phases []harness.Phase, on map[string]bool) bool {
	for _, p := range phases {
		if on[p.Name] && !p.OwnProcesses {
			return true
		}
	}
	return false
}

// runPhases warms up, then runs the phases asked for. Every phase starts by waiting
// for caught-up consumers: a step that fell behind leaves a backlog whose catching up
// would otherwise load the next phase. Without the stack's services there is nothing
// to warm up or wait for.
func runPhases(ctx context.Context, env *harness.Env) error {
	if env.Cfg.Services && env.Cfg.WarmupRun > 0 {
		if err := steps.WarmUp(ctx, env); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	for _, p := range phaseList {
		if !env.Cfg.Phases[p.Name] {
			continue
		}
		if env.Cfg.Services {
			env.Idle(ctx, p.Before, false)
		}
		fmt.Fprintln(env.Out, "==> "+p.Title)
		if err := p.Run(ctx, env); err != nil {
			return fmt.Errorf("%s phase: %w", p.Name, err)
		}
	}
	return nil
}
