// Command loadgen drives open-loop load at Pulse's HTTP API and reports throughput,
// errors, latency and freshness.
//
// Open loop means every workload sends on a fixed timeline — request i of a workload
// running at R/s is due at i/R s — whether or not earlier requests have been answered,
// and latency is measured from that intended start, not from when the request went
// out. A server that stalls therefore shows its queueing delay in the percentiles
// instead of quietly slowing the load down (coordinated omission). Each workload runs
// at most -workers requests at once; a request due while all are busy is counted as
// dropped, never sent late.
//
// Usage:
//
//	loadgen [flags]
//
// Every workload has its own rate; 0 turns it off, and all that are on run at once:
//
//	-single-rate      POST /status, one status event per request
//	-batch-rate       POST /v1/events with -batch-size events of the -mix kinds
//	-heartbeat-rate   POST /v1/heartbeat
//	-read-rate        GET /status/{id}
//	-batch-read-rate  POST /statuses with -read-batch-size ids
//	-detail-rate      GET /v1/users/{id}/status
//	-count-rate       GET /v1/online/count
//	-filter-rate      POST /v1/online/filter with -read-batch-size ids (a 404 is an error)
//	-fresh-rate       freshness probes (20/s by default): flip a "lg-probe-<n>" user's
//	                  status with POST /v1/events, then poll GET /status/{id} every
//	                  -fresh-poll until it shows, for at most -fresh-timeout
//
// Users are "lg-0" … "lg-<users-1>" with -devices devices each, picked by a random
// stream that -seed makes reproducible; -user-prefix replaces "lg-" (probe users are
// then "<prefix>probe-<n>"). The run is -warmup (excluded from the numbers) and then
// -duration; a progress line goes to stderr every second, the table to stdout at the
// end, and with -json FILE the same numbers as JSON (see Report). Ctrl-C stops
// scheduling, gives in-flight requests up to -timeout to finish and prints the report;
// a second Ctrl-C exits at once.
//
// Whatever the load is for, the ingest workloads' events are also counted over the
// whole run, warm-up included: offered, acknowledged (2xx), refused (by status code)
// and unanswered (see IngestCounts; the table's "ingest events" line and the JSON's
// "ingest"). With -acked FILE every acknowledged event is written to FILE as one JSON
// line (see AckedEvent), so a fault test can check that each of them reached the log.
//
// Keys come from the environment, never from flags (which the process list shows):
// PULSE_PRODUCER_KEY is sent to ingest and PULSE_READER_KEY to query, as
// "Authorization: Bearer <key>"; `make run` prints both as export lines. https URLs
// are verified against the system's roots plus -ca (PULSE_TLS_CA_FILE), a private CA.
//
// Example, against `make run`:
//
//	go run ./cmd/loadgen -duration 20s -batch-rate 50 -single-rate 500 -read-rate 500 -json out.json
package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/pulse-presence/pulse/cmd/internal/cli"
	"github.com/pulse-presence/pulse/cmd/internal/eventgen"
	"github.com/pulse-presence/pulse/cmd/internal/loadreport"
	"github.com/pulse-presence/pulse/cmd/internal/trust"
	"github.com/pulse-presence/pulse/internal/platform/ports"
)

func main() {
	cli.Main("loadgen", func(ctx context.Context) error { return run(ctx, os.Args[1:], os.Stdout, os.Stderr) })
}

// config is the parsed command line.
type config struct {
	ingestURL, queryURL string
	// producerKey and readerKey are the API keys sent to ingest and query.
	producerKey, readerKey string
	duration, warmup       time.Duration
	timeout                time.Duration
	workers                int
	users, devices         int
	seed                   uint64
	// caFile is the PEM file of CA certificates trusted for https URLs besides the
	// system's.
	caFile string

	singleRate, batchRate, heartbeatRate                       float64
	readRate, batchReadRate, detailRate, countRate, filterRate float64
	batchSize, readBatchSize                                   int
	mix                                                        eventgen.Mix

	freshRate    float64
	freshPoll    time.Duration
	freshTimeout time.Duration
	probeUsers   int

	// userPrefix starts every generated user id.
	userPrefix string

	jsonPath  string
	ackedPath string
	quiet     bool
	flags     map[string]string // every flag's final value, for the JSON report
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var cfg config
	fs := cli.FlagSet("loadgen", "Drives open-loop load at Pulse's HTTP API; see `go doc ./cmd/loadgen`.", stderr)
	fs.StringVar(&cfg.ingestURL, "ingest", ports.LocalURL(ports.Ingest), "ingest API base `URL`")
	fs.StringVar(&cfg.queryURL, "query", ports.LocalURL(ports.Query), "query API base `URL`")
	fs.DurationVar(&cfg.duration, "duration", 30*time.Second, "length of the measured run, after the warm-up")
	fs.DurationVar(&cfg.warmup, "warmup", 3*time.Second, "load before the measured run, excluded from the numbers")
	fs.DurationVar(&cfg.timeout, "timeout", 5*time.Second, "deadline of every request")
	fs.IntVar(&cfg.workers, "workers", 2000, "most requests in flight per workload; a request due beyond it is dropped")
	fs.IntVar(&cfg.users, "users", 100000, "`number` of users: ids lg-0, lg-1, …")
	fs.IntVar(&cfg.devices, "devices", 2, "device ids per user")
	fs.StringVar(&cfg.userPrefix, "user-prefix", "lg-", "start of every user id: <prefix><n>, probes <prefix>probe-<n>")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the random choice of users, devices, statuses and kinds")
	fs.Float64Var(&cfg.singleRate, "single-rate", 0, "POST /status requests/s")
	fs.Float64Var(&cfg.batchRate, "batch-rate", 0, "POST /v1/events requests/s")
	fs.IntVar(&cfg.batchSize, "batch-size", 100, "events per POST /v1/events (1…1000)")
	mixFlag := fs.String("mix", eventgen.DefaultKinds, "weights of the event kinds in batches")
	fs.Float64Var(&cfg.heartbeatRate, "heartbeat-rate", 0, "POST /v1/heartbeat requests/s")
	fs.Float64Var(&cfg.readRate, "read-rate", 0, "GET /status/{id} requests/s")
	fs.Float64Var(&cfg.batchReadRate, "batch-read-rate", 0, "POST /statuses requests/s")
	fs.IntVar(&cfg.readBatchSize, "read-batch-size", 100, "user ids per POST /statuses and POST /v1/online/filter (1…1000)")
	fs.Float64Var(&cfg.detailRate, "detail-rate", 0, "GET /v1/users/{id}/status requests/s")
	fs.Float64Var(&cfg.countRate, "count-rate", 0, "GET /v1/online/count requests/s")
	fs.Float64Var(&cfg.filterRate, "filter-rate", 0, "POST /v1/online/filter requests/s (off by default: the endpoint may not exist)")
	fs.Float64Var(&cfg.freshRate, "fresh-rate", 20, "freshness probes/s")
	fs.DurationVar(&cfg.freshPoll, "fresh-poll", 2*time.Millisecond, "interval of a probe's status reads")
	fs.DurationVar(&cfg.freshTimeout, "fresh-timeout", 10*time.Second, "how long a probe waits to see its write")
	fs.IntVar(&cfg.probeUsers, "probe-users", 0, "probe users lg-probe-0 … (0: enough that each is reused every 30 s)")
	fs.StringVar(&cfg.jsonPath, "json", "", "also write the report as JSON to `FILE`")
	fs.StringVar(&cfg.ackedPath, "acked", "", "write every event ingest acknowledged (2xx), warm-up included, as JSON lines to `FILE`")
	fs.BoolVar(&cfg.quiet, "quiet", false, "no progress lines")
	caFile := trust.Flag(fs, os.Getenv)
	if err := cli.Parse(fs, args); err != nil {
		return cfg, err
	}
	m, err := eventgen.ParseMix(*mixFlag)
	if err != nil {
		return cfg, fmt.Errorf("-mix: %w", err)
	}
	cfg.mix = m
	cfg.caFile = *caFile
	cfg.producerKey, cfg.readerKey = os.Getenv("PULSE_PRODUCER_KEY"), os.Getenv("PULSE_READER_KEY")
	cfg.flags = cli.Values(fs)
	return cfg, cfg.validate()
}

// validate names every bad flag at once.
func (c config) validate() error {
	var p cli.Problems
	bad := p.Check
	for _, u := range []struct{ name, url string }{{"-ingest", c.ingestURL}, {"-query", c.queryURL}} {
		p, err := url.Parse(u.url)
		bad(err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "", "%s %q: want an http(s) URL", u.name, u.url)
	}
	bad(c.duration <= 0, "-duration must be above 0")
	bad(c.warmup < 0, "-warmup must not be negative")
	bad(c.timeout <= 0, "-timeout must be above 0")
	bad(c.workers < 1, "-workers must be at least 1")
	bad(c.users < 1, "-users must be at least 1")
	bad(c.devices < 1, "-devices must be at least 1")
	bad(c.userPrefix == "" || len(c.userPrefix) > 64 || strings.ContainsAny(c.userPrefix, ", \t\r\n/"),
		"-user-prefix must be 1…64 characters without commas, slashes or white space")
	bad(c.batchSize < 1 || c.batchSize > 1000, "-batch-size must be 1…1000")
	bad(c.readBatchSize < 1 || c.readBatchSize > 1000, "-read-batch-size must be 1…1000")
	bad(c.freshPoll <= 0, "-fresh-poll must be above 0")
	bad(c.freshTimeout <= 0, "-fresh-timeout must be above 0")
	bad(c.probeUsers < 0, "-probe-users must not be negative")
	on := false
	for _, r := range []struct {
		name string
		rate float64
	}{
		{"-single-rate", c.singleRate}, {"-batch-rate", c.batchRate}, {"-heartbeat-rate", c.heartbeatRate},
		{"-read-rate", c.readRate}, {"-batch-read-rate", c.batchReadRate}, {"-detail-rate", c.detailRate},
		{"-count-rate", c.countRate}, {"-filter-rate", c.filterRate}, {"-fresh-rate", c.freshRate},
	} {
		bad(!(r.rate >= 0) || math.IsInf(r.rate, 0), "%s must be a number ≥ 0", r.name)
		on = on || r.rate > 0
	}
	bad(!on, "every rate is 0: nothing to do")
	return p.Err()
}

// run generates the load, then prints the report.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	c, err := newClient(cfg)
	if err != nil {
		return err
	}
	defer c.http.CloseIdleConnections()
	if c.acks, err = newLedger(cfg.ackedPath); err != nil {
		return err
	}
	defer c.acks.close()
	wls, err := buildWorkloads(ctx, cfg, c)
	if err != nil {
		return err
	}

	start := time.Now()
	from := start.Add(cfg.warmup)
	end := from.Add(cfg.duration)
	// Requests outlive ctx: after a Ctrl-C the ones in flight may still finish.
	reqCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()

	st := make([]*stats, len(wls))
	pacers := make([]*pacer, len(wls))
	var scheduling sync.WaitGroup
	for i, w := range wls {
		st[i] = newStats(from)
		pacers[i] = newPacer(cfg, w, st[i], start)
		scheduling.Go(func() { pacers[i].run(ctx, reqCtx, end) })
	}
	stopProgress := make(chan struct{})
	var progressDone sync.WaitGroup
	if !cfg.quiet {
		progressDone.Go(func() { progress(stderr, stopProgress, start, from, wls, st) })
	}
	scheduling.Wait()
	stoppedAt := time.Now()
	interrupted := ctx.Err() != nil
	drain(ctx, cfg, pacers, interrupted, abort)
	close(stopProgress)
	progressDone.Wait()

	measured := cfg.duration
	if interrupted {
		measured = min(max(stoppedAt.Sub(from), 0), cfg.duration)
	}
	r := fullReport{Report: buildReport(cfg, wls, st, start, measured, interrupted), Ingest: c.acks.snapshot()}
	// The -acked file is complete before the report says how many lines it has.
	if err := c.acks.close(); err != nil {
		return err
	}
	if err := writeTable(stdout, r); err != nil {
		return fmt.Errorf("printing the report: %w", err)
	}
	if cfg.jsonPath != "" {
		return loadreport.WriteJSON(cfg.jsonPath, r)
	}
	return nil
}

// newPacer fires w's requests on its timeline from start and records them in s.
func newPacer(cfg config, w *workload, s *stats, start time.Time) *pacer {
	return &pacer{
		sched:   schedule{start: start, rate: w.rate},
		workers: cfg.workers,
		fire: func(ctx context.Context, seq uint64, intended time.Time) {
			s.record(intended, w.do(ctx, requestRand(cfg.seed, w.salt, seq), seq))
		},
		drop: func(_ uint64, intended time.Time) {
			s.record(intended, outcome{class: classDropped})
		},
	}
}

// drain waits for the requests in flight. After a normal end every request is bounded
// by its own deadlines (a probe by -timeout plus -fresh-timeout); after a Ctrl-C they
// get -timeout, and a Ctrl-C while draining aborts them at once.
func drain(ctx context.Context, cfg config, pacers []*pacer, interrupted bool, abort context.CancelFunc) {
	limit := cfg.timeout + cfg.freshTimeout + time.Second
	if interrupted {
		ctx, limit = context.Background(), cfg.timeout
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	drained := true
	for _, p := range pacers {
		drained = p.wait(ctx) && drained
	}
	if !drained {
		abort()
		for _, p := range pacers {
			p.wait(context.Background())
		}
	}
}
