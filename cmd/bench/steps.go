package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/pulse-presence/pulse/cmd/internal/loadreport"
)

// bench holds what every phase uses.
type bench struct {
	cfg    config
	st     *stack
	lag    *lagReader
	http   *http.Client
	ticks  float64
	dir    string // the results folder
	rawDir string
	out    io.Writer
	res    *Results
	// historyPaused: history is stopped (SIGSTOP) and is neither scraped nor judged.
	historyPaused bool
}

func (b *bench) note(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	b.res.Notes = append(b.res.Notes, msg)
	fmt.Fprintln(b.out, "    note:", msg)
}

// snapshot is everything read around a step: CPU times and the services' metrics.
type snapshot struct {
	at      time.Time
	cpu     cpuSnapshot
	metrics map[string]metrics // by service; absent when the scrape failed
}

func (b *bench) snapshot(ctx context.Context) snapshot {
	s := snapshot{at: time.Now(), cpu: b.st.cpu(b.ticks), metrics: map[string]metrics{}}
	for _, name := range []string{"ingest", "aggregator", "history"} {
		if name == "history" && b.historyPaused {
			continue
		}
		if m, err := scrape(ctx, b.http, b.st.url(name)); err == nil {
			s.metrics[name] = m
		}
	}
	return s
}

// counterDelta is a counter's growth between two snapshots; false when either
// scrape is missing.
func counterDelta(a, z snapshot, service, name string, want ...string) (float64, bool) {
	ma, ok1 := a.metrics[service]
	mz, ok2 := z.metrics[service]
	if !ok1 || !ok2 {
		return 0, false
	}
	return math.Max(0, mz.sum(name, want...)-ma.sum(name, want...)), true
}

// settle waits until the aggregator's lag is at most threshold records, for at most
// limit; it reports how long that took and whether it happened.
func (b *bench) settle(ctx context.Context, threshold int64, limit time.Duration) (time.Duration, bool) {
	start := time.Now()
	for {
		s, err := b.lag.sample(ctx)
		if err == nil && s.Aggregator <= threshold {
			return time.Since(start), true
		}
		if time.Since(start) >= limit || ctx.Err() != nil {
			return time.Since(start), false
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// settleThreshold is the lag that counts as caught up after a step at offered
// events/s: a fifth of a second of events, about two windows' worth, or the floor.
func settleThreshold(offered float64) int64 {
	return int64(math.Max(lagGrowthFloor, offered*0.2))
}

// stepSpec is one step to run.
type stepSpec struct {
	mode     string // batched, single or half
	offered  float64
	workload string // loadgen's name for the ingest workload: batch or single
	load     load
	during   func(ctx context.Context, from time.Time) // runs beside the load, e.g. profiles
}

// runStep runs one loadgen at one rate and measures the pipeline around it.
func (b *bench) runStep(ctx context.Context, sp stepSpec) (StepResult, error) {
	if err := b.st.alive(ctx); err != nil {
		return StepResult{}, err
	}
	r := StepResult{Mode: sp.mode, OfferedEventsPerSec: sp.offered, CPU: map[string]ProcCPU{},
		Raw: filepath.Join("raw", sp.load.name+".json")}
	before := b.snapshot(ctx)
	finishLag := sampleLag(ctx, b.lag, b.cfg.lagEvery)
	var wg sync.WaitGroup
	if sp.during != nil {
		wg.Go(func() { sp.during(ctx, time.Now().Add(sp.load.warmup)) })
	}
	lr, err := b.runLoad(ctx, sp.load)
	samples, lagErrs := finishLag()
	if err != nil {
		wg.Wait()
		return r, err
	}
	settleFor, settled := b.settle(ctx, settleThreshold(sp.offered), b.cfg.settle)
	wg.Wait()
	after := b.snapshot(ctx)
	r.SettleSeconds, r.Settled = settleFor.Seconds(), settled

	r.readReport(lr.report, sp.workload)
	// Lag over the measured window: after the warm-up, until the load's scheduled end.
	to := lr.from.Add(sp.load.duration).Add(b.cfg.lagEvery / 2)
	r.AggregatorLag = summarize(samples, lr.from, to, func(s lagSample) int64 { return s.Aggregator })
	hist := summarize(samples, lr.from, to, func(s lagSample) int64 { return s.HistoryEvents + s.HistoryChanges })
	r.History.LagRecordsStart, r.History.LagRecords, r.History.MaxLagRecords = hist.Start, hist.End, hist.Max
	if lagErrs > 0 {
		b.note("%s step at %.0f events/s: %d consumer-lag reads failed", sp.mode, sp.offered, lagErrs)
	}
	// Without ingest's metrics, the events are what loadgen saw accepted, warm-up included.
	fallback := lr.report.AcceptedEventsPerSec * (lr.report.MeasuredSeconds + sp.load.warmup.Seconds())
	r.readCPU(before, after, lr.cpuSeconds, fallback)
	if n := b.res.Machine.CPUs; n > 0 {
		r.LoadgenMachineShare = r.CPU["loadgen"].Cores / float64(n)
	}
	r.readServices(before, after)
	r.judge(b.cfg.crit)
	return r, ctx.Err()
}

// readReport takes what loadgen measured: the ingest workload's, the freshness
// probes' and the readers'.
func (r *StepResult) readReport(rep loadreport.Report, workload string) {
	r.MeasuredSeconds = rep.MeasuredSeconds
	if w, ok := rep.Workload(workload); ok {
		r.AcceptedEventsPerSec = w.EventsPerSec
		r.Requests, r.FailedRequests = w.Scheduled, w.Failed()
		if w.Scheduled > 0 {
			r.FailedFraction = float64(r.FailedRequests) / float64(w.Scheduled)
		}
		r.IngestMs = w.LatencyMs
	}
	if f := rep.Freshness; f != nil {
		r.Freshness = Freshness{Probes: f.Probes, Seen: f.Seen, Timeouts: f.Timeouts, Ms: f.Ms}
	}
	for _, w := range rep.Workloads {
		switch w.Name {
		case "read", "batch-read", "count", "detail", "filter":
			r.Reads = append(r.Reads, ReadResult{Name: w.Name, Endpoint: w.Endpoint, TargetRate: w.TargetRate,
				AchievedRate: w.AchievedRate, OK: w.OK, Failed: w.Failed(), Ms: w.LatencyMs})
		}
	}
}

// readCPU divides each process's CPU time between two snapshots by the events ingest
// accepted meanwhile (fallback when its metrics are missing).
func (r *StepResult) readCPU(before, after snapshot, loadgenSeconds, fallback float64) {
	window := after.at.Sub(before.at).Seconds()
	r.CPUWindowSeconds = window
	events, ok := counterDelta(before, after, "ingest", "pulse_ingest_events_accepted_total")
	if !ok || events == 0 {
		events = fallback
	}
	r.EventsInWindow = events
	cpu := cpuDelta(before.cpu, after.cpu)
	cpu["loadgen"] = loadgenSeconds
	r.Machine = machineOver(cpu, window)
	delete(cpu, machineKey)
	delete(cpu, stealKey)
	for name, sec := range cpu {
		pc := ProcCPU{Seconds: sec}
		if window > 0 {
			pc.Cores = sec / window
		}
		if events > 0 {
			pc.SecondsPerEvent = sec / events
		}
		r.CPU[name] = pc
	}
}

// historyTables are the tables history writes, as its rows metric labels them.
var historyTables = []string{"user_activity", "user_status", "user_sessions", "user_daily", "daily_users",
	"concurrency", "uniques", "rollup_checkpoints"}

// readServices reads the services' own metrics over the CPU window: the aggregator's
// folded events, history's rows and commit lag, and the internal histograms.
func (r *StepResult) readServices(before, after snapshot) {
	window := r.CPUWindowSeconds
	if d, ok := counterDelta(before, after, "aggregator", "pulse_aggregator_events_total"); ok && window > 0 {
		r.AggregatorEventsPerSec = d / window
	}
	if _, ok := after.metrics["history"]; ok && window > 0 {
		r.History.RowsByTable = map[string]float64{}
		for _, table := range historyTables {
			d, _ := counterDelta(before, after, "history", "pulse_history_rows_written_total", "table", table)
			r.History.RowsByTable[table] = d / window
		}
		total, _ := counterDelta(before, after, "history", "pulse_history_rows_written_total")
		r.History.RowsPerSec = total / window
		bd := bucketDelta(before.metrics["history"].buckets("pulse_history_commit_lag_seconds"),
			after.metrics["history"].buckets("pulse_history_commit_lag_seconds"))
		if p99 := quantile(bd, 0.99); !math.IsNaN(p99) {
			r.History.CommitLagKnown = true
			r.History.CommitLagP50Seconds = quantile(bd, 0.5)
			r.History.CommitLagP99Seconds = p99
		}
	}
	r.Internals = internals(before, after)
}

// judge decides whether the step kept up.
func (r *StepResult) judge(c criteria) {
	v := decide(stepObservation{
		Offered: r.OfferedEventsPerSec, Accepted: r.AcceptedEventsPerSec,
		Scheduled: r.Requests, Failed: r.FailedRequests,
		LagKnown: r.AggregatorLag.Known, LagStart: r.AggregatorLag.Start, LagEnd: r.AggregatorLag.End,
		FreshProbes: r.Freshness.Probes, FreshSeen: r.Freshness.Seen, FreshTimeouts: r.Freshness.Timeouts,
		FreshP99: time.Duration(r.Freshness.Ms.P99 * float64(time.Millisecond)),
	}, c)
	r.KeptUp, r.Reasons = v.KeptUp, v.Reasons
	if !r.AggregatorLag.Known {
		r.Reasons = append(r.Reasons, "(aggregator lag not judged: too few lag samples)")
	}
}

// internalHistograms are the services' histograms whose step quantiles bench keeps:
// (service, metric, labels…) by the name results.json gives their quantiles.
var internalHistograms = []struct {
	key, service, metric string
	labels               []string
}{
	{"ingestProduceSeconds", "ingest", "pulse_ingest_produce_duration_seconds", nil},
	{"aggregatorFlushSeconds", "aggregator", "pulse_aggregator_flush_seconds", nil},
	{"historyWriteSeconds", "history", "pulse_history_write_duration_seconds", nil},
}

// internals reads p50 and p99 of each internal histogram over a step.
func internals(before, after snapshot) map[string]float64 {
	out := map[string]float64{}
	for _, h := range internalHistograms {
		a, ok1 := before.metrics[h.service]
		z, ok2 := after.metrics[h.service]
		if !ok1 || !ok2 {
			continue
		}
		d := bucketDelta(a.buckets(h.metric, h.labels...), z.buckets(h.metric, h.labels...))
		if p50, p99 := quantile(d, 0.5), quantile(d, 0.99); !math.IsNaN(p50) && !math.IsNaN(p99) {
			out[h.key+"P50"], out[h.key+"P99"] = p50, p99
		}
	}
	return out
}

// machineOver turns a CPU delta over window seconds into the machine's use: busy,
// stolen, and busy in processes the delta does not name — other work on the machine.
func machineOver(cpu map[string]float64, window float64) MachineCPU {
	busy, ok := cpu[machineKey]
	if !ok || window <= 0 {
		return MachineCPU{}
	}
	watched := 0.0
	for name, sec := range cpu {
		if name != machineKey && name != stealKey {
			watched += sec
		}
	}
	return MachineCPU{Known: true, BusyCores: busy / window, StolenCores: cpu[stealKey] / window,
		OtherCores: max(0, busy-watched) / window}
}

func (b *bench) printStep(r StepResult) {
	state := "kept up"
	if !r.KeptUp {
		state = "FELL BEHIND"
	}
	fmt.Fprintf(b.out, "    %-7s %7.0f ev/s offered, %7.0f accepted, ingest p99 %s, fresh p99 %s, agg lag %d→%d, history %.0f rows/s (lag %d→%d): %s\n",
		r.Mode, r.OfferedEventsPerSec, r.AcceptedEventsPerSec, fmtMs(r.IngestMs.P99, r.IngestMs.Count),
		fmtMs(r.Freshness.Ms.P99, r.Freshness.Ms.Count), r.AggregatorLag.Start, r.AggregatorLag.End,
		r.History.RowsPerSec, r.History.LagRecordsStart, r.History.LagRecords, state)
	for _, why := range r.Reasons {
		fmt.Fprintf(b.out, "            %s\n", why)
	}
}

// stepMode runs the steps of one ingest mode until one falls behind.
func (b *bench) stepMode(ctx context.Context, mode string) (*ModeResult, error) {
	m := &ModeResult{Mode: mode}
	rs, dur, workload := b.cfg.batchRates, b.cfg.stepTime, "batch"
	if mode == "single" {
		rs, dur, workload = b.cfg.singleRates, b.cfg.singleTime, "single"
	} else {
		m.BatchSize = b.cfg.batchSize
	}
	for i, rate := range rs {
		args := []string{
			"-read-rate", ff(b.cfg.stepReads), "-fresh-rate", ff(b.cfg.freshRate), "-fresh-poll", b.cfg.freshPoll.String(),
			"-seed", strconv.Itoa(i + 1),
		}
		if mode == "single" {
			args = append(args, "-single-rate", ff(rate))
		} else {
			args = append(args, b.batchArgs(rate)...)
		}
		r, err := b.runStep(ctx, stepSpec{
			mode: mode, offered: rate, workload: workload,
			load: load{name: fmt.Sprintf("%s-%03d-%.0f", mode, i+1, rate), duration: dur, warmup: b.cfg.warmup, args: args},
		})
		if err != nil {
			return m, err
		}
		b.printStep(r)
		m.Steps = append(m.Steps, r)
		if !r.KeptUp {
			break
		}
		if i == len(rs)-1 {
			b.note("%s: every step kept up, the highest rate (%.0f events/s) is a floor, not the maximum; add higher -%s-rates", mode, rate, workload)
		}
	}
	m.MaxOfferedEventsPerSec, m.MaxAcceptedEventsPerSec = maxKeptUp(m.Steps)
	return m, nil
}

func ff(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// batchArgs are loadgen's flags for batched ingest at rate events/s.
func (b *bench) batchArgs(rate float64) []string {
	return []string{"-batch-rate", ff(rate / float64(b.cfg.batchSize)), "-batch-size", strconv.Itoa(b.cfg.batchSize)}
}

// halfMax runs reads and freshness at half the highest batched rate that kept up.
func (b *bench) halfMax(ctx context.Context) (*StepResult, error) {
	rate := 0.0
	if m := b.res.Batched; m != nil {
		rate = m.MaxOfferedEventsPerSec / 2
		if rate == 0 && len(m.Steps) > 0 {
			rate = m.Steps[0].OfferedEventsPerSec / 2
			b.note("half-max phase: no batched step kept up; ran at half the first step's rate, %.0f events/s", rate)
		}
	}
	if rate == 0 {
		rate = b.cfg.batchRates[0] / 2
		b.note("half-max phase: batched steps did not run; ran at half the first -batch-rates, %.0f events/s", rate)
	}
	args := append(b.batchArgs(rate),
		"-read-rate", ff(b.cfg.halfReads), "-batch-read-rate", ff(b.cfg.halfBatchReads),
		"-read-batch-size", strconv.Itoa(b.cfg.readBatch), "-count-rate", ff(b.cfg.halfCounts),
		"-fresh-rate", ff(b.cfg.halfFresh), "-fresh-poll", b.cfg.freshPoll.String(), "-seed", "1000",
	)
	sp := stepSpec{
		mode: "half", offered: rate, workload: "batch",
		load: load{name: fmt.Sprintf("half-%.0f", rate), duration: b.cfg.halfTime, warmup: b.cfg.warmup, args: args},
	}
	if b.cfg.profile {
		sp.during = b.profiles
	}
	r, err := b.runStep(ctx, sp)
	if err != nil {
		return nil, err
	}
	b.printStep(r)
	for _, rd := range r.Reads {
		fmt.Fprintf(b.out, "            %-10s %6.0f/s of %6.0f/s, p50 %s p99 %s, failed %d\n", rd.Name, rd.AchievedRate, rd.TargetRate,
			fmtMs(rd.Ms.P50, rd.Ms.Count), fmtMs(rd.Ms.P99, rd.Ms.Count), rd.Failed)
	}
	return &r, nil
}

// profiles takes CPU profiles of the aggregator, ingest and query through /debug/pprof,
// starting a second after the warm-up; services without the endpoint are noted.
func (b *bench) profiles(ctx context.Context, from time.Time) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Until(from.Add(time.Second))):
	}
	secs := max(1, int(b.cfg.profileTime.Seconds()))
	if max := int((b.cfg.halfTime - time.Second).Seconds()); secs > max && max > 0 {
		secs = max
	}
	dir := filepath.Join(b.dir, "profiles")
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, name := range []string{"aggregator", "ingest", "query"} {
		wg.Go(func() {
			path, err := b.profile(ctx, name, secs, dir)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				b.note("no CPU profile of %s: %v", name, err)
				return
			}
			rel, _ := filepath.Rel(b.dir, path)
			b.res.Profiles = append(b.res.Profiles, rel)
		})
	}
	wg.Wait()
}

func (b *bench) profile(ctx context.Context, name string, secs int, dir string) (string, error) {
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", b.st.url(name), secs)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	// Ingest and query serve profiles to operator keys only.
	if key := operatorKey(b.cfg.home, os.Getenv); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	c := &http.Client{Timeout: time.Duration(secs+30) * time.Second, Transport: b.cfg.transport()}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s answered HTTP %d (the service serves /debug/pprof only with PULSE_PPROF=1)", url, resp.StatusCode)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name+".cpu.pprof")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		return "", fmt.Errorf("reading %s: %w", url, err)
	}
	return path, f.Close()
}
