// Package steps is the ingest phases: batch and single step their rate up until a step
// falls behind, half runs reads and freshness at half the highest batched rate.
package steps

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/pulse-presence/pulse/cmd/bench/internal/harness"
	"github.com/pulse-presence/pulse/cmd/bench/internal/probe"
	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
	"github.com/pulse-presence/pulse/cmd/internal/loadreport"
)

// snapshot is everything read around a step: CPU times and the services' metrics.
type snapshot struct {
	at      time.Time
	cpu     probe.CPU
	metrics map[string]probe.Metrics // by service; absent when the scrape failed
}

func snap(ctx context.Context, env *harness.Env) snapshot {
	s := snapshot{at: time.Now(), cpu: env.CPU(), metrics: map[string]probe.Metrics{}}
	for _, name := range []string{"ingest", "aggregator", "history"} {
		if name == "history" && env.HistoryPaused {
			continue
		}
		if m, err := probe.Scrape(ctx, env.HTTP, env.Stack.URL(name)); err == nil {
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
	return math.Max(0, mz.Sum(name, want...)-ma.Sum(name, want...)), true
}

// settleThreshold is the lag that counts as caught up after a step at offered
// events/s: a fifth of a second of events, about two windows' worth, or the floor.
func settleThreshold(offered float64) int64 {
	return int64(math.Max(report.LagGrowthFloor, offered*0.2))
}

// stepSpec is one step to run.
type stepSpec struct {
	mode     string // batched, single or half
	offered  float64
	workload string // loadgen's name for the ingest workload: batch or single
	load     harness.Load
	during   func(ctx context.Context, from time.Time) // runs beside the load, e.g. profiles
}

// runStep runs one loadgen at one rate and measures the pipeline around it.
func runStep(ctx context.Context, env *harness.Env, sp stepSpec) (report.StepResult, error) {
	if err := env.Stack.Alive(ctx); err != nil {
		return report.StepResult{}, err
	}
	r := report.StepResult{Mode: sp.mode, OfferedEventsPerSec: sp.offered, CPU: map[string]report.ProcCPU{},
		Raw: filepath.Join("raw", sp.load.Name+".json")}
	before := snap(ctx, env)
	finishLag := env.Lag.SampleEvery(ctx, env.Cfg.LagEvery)
	var wg sync.WaitGroup
	if sp.during != nil {
		wg.Go(func() { sp.during(ctx, time.Now().Add(sp.load.Warmup)) })
	}
	lr, err := env.RunLoad(ctx, sp.load)
	samples, lagErrs := finishLag()
	if err != nil {
		wg.Wait()
		return r, err
	}
	settleFor, settled := env.Settle(ctx, settleThreshold(sp.offered), env.Cfg.Settle)
	wg.Wait()
	after := snap(ctx, env)
	r.SettleSeconds, r.Settled = settleFor.Seconds(), settled

	readReport(&r, lr.Report, sp.workload)
	// Lag over the measured window: after the warm-up, until the load's scheduled end.
	to := lr.From.Add(sp.load.Duration).Add(env.Cfg.LagEvery / 2)
	r.AggregatorLag = probe.Summarize(samples, lr.From, to, func(s probe.LagSample) int64 { return s.Aggregator })
	hist := probe.Summarize(samples, lr.From, to, func(s probe.LagSample) int64 { return s.HistoryEvents + s.HistoryChanges })
	r.History.LagRecordsStart, r.History.LagRecords, r.History.MaxLagRecords = hist.Start, hist.End, hist.Max
	if lagErrs > 0 {
		env.Note("%s step at %.0f events/s: %d consumer-lag reads failed", sp.mode, sp.offered, lagErrs)
	}
	// Without ingest's metrics, the events are what loadgen saw accepted, warm-up included.
	fallback := lr.Report.AcceptedEventsPerSec * (lr.Report.MeasuredSeconds + sp.load.Warmup.Seconds())
	readCPU(&r, before, after, lr.CPUSeconds, fallback)
	if n := env.Res.Machine.CPUs; n > 0 {
		r.LoadgenMachineShare = r.CPU["loadgen"].Cores / float64(n)
	}
	readServices(&r, before, after)
	report.Decide(&r, env.Cfg.Crit)
	return r, ctx.Err()
}

// readReport takes what loadgen measured: the ingest workload's, the freshness
// probes' and the readers'.
func readReport(r *report.StepResult, rep loadreport.Report, workload string) {
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
		r.Freshness = report.Freshness{Probes: f.Probes, Seen: f.Seen, Timeouts: f.Timeouts, Ms: f.Ms}
	}
	for _, w := range rep.Workloads {
		switch w.Name {
		case "read", "batch-read", "count", "detail", "filter":
			r.Reads = append(r.Reads, report.ReadResult{Name: w.Name, Endpoint: w.Endpoint, TargetRate: w.TargetRate,
				AchievedRate: w.AchievedRate, OK: w.OK, Failed: w.Failed(), Ms: w.LatencyMs})
		}
	}
}

// readCPU divides each process's CPU time between two snapshots by the events ingest
// accepted meanwhile (fallback when its metrics are missing).
func readCPU(r *report.StepResult, before, after snapshot, loadgenSeconds, fallback float64) {
	window := after.at.Sub(before.at).Seconds()
	r.CPUWindowSeconds = window
	events, ok := counterDelta(before, after, "ingest", "pulse_ingest_events_accepted_total")
	if !ok || events == 0 {
		events = fallback
	}
	r.EventsInWindow = events
	cpu := probe.Delta(before.cpu, after.cpu)
	cpu["loadgen"] = loadgenSeconds
	r.Machine = probe.MachineOver(cpu, window)
	delete(cpu, probe.Machine)
	delete(cpu, probe.Steal)
	for name, sec := range cpu {
		pc := report.ProcCPU{Seconds: sec}
		if window > 0 {
			pc.Cores = sec / window
		}
		if events > 0 {
			pc.SecondsPerEvent = sec / events
		}
		r.CPU[name] = pc
	}
}

// readServices reads the services' own metrics over the CPU window: the aggregator's
// folded events, history's rows and commit lag, and the internal histograms.
func readServices(r *report.StepResult, before, after snapshot) {
	window := r.CPUWindowSeconds
	if d, ok := counterDelta(before, after, "aggregator", "pulse_aggregator_events_total"); ok && window > 0 {
		r.AggregatorEventsPerSec = d / window
	}
	if _, ok := after.metrics["history"]; ok && window > 0 {
		r.History.RowsByTable = map[string]float64{}
		for _, table := range report.HistoryTables {
			d, _ := counterDelta(before, after, "history", "pulse_history_rows_written_total", "table", table)
			r.History.RowsByTable[table] = d / window
		}
		total, _ := counterDelta(before, after, "history", "pulse_history_rows_written_total")
		r.History.RowsPerSec = total / window
		bd := probe.BucketDelta(before.metrics["history"].Buckets("pulse_history_commit_lag_seconds"),
			after.metrics["history"].Buckets("pulse_history_commit_lag_seconds"))
		if p99 := probe.Quantile(bd, 0.99); !math.IsNaN(p99) {
			r.History.CommitLagKnown = true
			r.History.CommitLagP50Seconds = probe.Quantile(bd, 0.5)
			r.History.CommitLagP99Seconds = p99
		}
	}
	r.Internals = internals(before, after)
}

// internals reads p50 and p99 of each internal histogram over a step.
func internals(before, after snapshot) map[string]float64 {
	out := map[string]float64{}
	for _, h := range report.Internals {
		a, ok1 := before.metrics[h.Service]
		z, ok2 := after.metrics[h.Service]
		if !ok1 || !ok2 {
			continue
		}
		d := probe.BucketDelta(a.Buckets(h.Metric), z.Buckets(h.Metric))
		if p50, p99 := probe.Quantile(d, 0.5), probe.Quantile(d, 0.99); !math.IsNaN(p50) && !math.IsNaN(p99) {
			out[h.Key+"P50"], out[h.Key+"P99"] = p50, p99
		}
	}
	return out
}

func printStep(env *harness.Env, r report.StepResult) {
	fmt.Fprintf(env.Out, "    %-7s %7.0f ev/s offered, %7.0f accepted, ingest p99 %s, fresh p99 %s, agg lag %d→%d, history %.0f rows/s (lag %d→%d): %s\n",
		r.Mode, r.OfferedEventsPerSec, r.AcceptedEventsPerSec, report.FmtMs(r.IngestMs.P99, r.IngestMs.Count),
		report.FmtMs(r.Freshness.Ms.P99, r.Freshness.Ms.Count), r.AggregatorLag.Start, r.AggregatorLag.End,
		r.History.RowsPerSec, r.History.LagRecordsStart, r.History.LagRecords,
		map[bool]string{true: "kept up", false: "FELL BEHIND"}[r.KeptUp])
	for _, why := range r.Reasons {
		fmt.Fprintf(env.Out, "            %s\n", why)
	}
}

// stepMode runs the steps of one ingest mode until one falls behind.
func stepMode(ctx context.Context, env *harness.Env, mode string) (*report.ModeResult, error) {
	m := &report.ModeResult{Mode: mode}
	rs, dur, workload := env.Cfg.BatchRates, env.Cfg.StepTime, "batch"
	if mode == "single" {
		rs, dur, workload = env.Cfg.SingleRates, env.Cfg.SingleTime, "single"
	} else {
		m.BatchSize = env.Cfg.BatchSize
	}
	for i, rate := range rs {
		args := []string{
			"-read-rate", ff(env.Cfg.StepReads), "-fresh-rate", ff(env.Cfg.FreshRate), "-fresh-poll", env.Cfg.FreshPoll.String(),
			"-seed", strconv.Itoa(i + 1),
		}
		if mode == "single" {
			args = append(args, "-single-rate", ff(rate))
		} else {
			args = append(args, batchArgs(env, rate)...)
		}
		r, err := runStep(ctx, env, stepSpec{
			mode: mode, offered: rate, workload: workload,
			load: harness.Load{Name: fmt.Sprintf("%s-%03d-%.0f", mode, i+1, rate), Duration: dur, Warmup: env.Cfg.Warmup, Args: args},
		})
		if err != nil {
			return m, err
		}
		printStep(env, r)
		m.Steps = append(m.Steps, r)
		if !r.KeptUp {
			break
		}
		if i == len(rs)-1 {
			env.Note("%s: every step kept up, the highest rate (%.0f events/s) is a floor, not the maximum; add higher -%s-rates", mode, rate, workload)
		}
	}
	m.MaxOfferedEventsPerSec, m.MaxAcceptedEventsPerSec = report.MaxKeptUp(m.Steps)
	return m, nil
}

func ff(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// batchArgs are loadgen's flags for batched ingest at rate events/s.
func batchArgs(env *harness.Env, rate float64) []string {
	return []string{"-batch-rate", ff(rate / float64(env.Cfg.BatchSize)), "-batch-size", strconv.Itoa(env.Cfg.BatchSize)}
}

// halfMax runs reads and freshness at half the highest batched rate that kept up.
func halfMax(ctx context.Context, env *harness.Env) (*report.StepResult, error) {
	rate := 0.0
	if m := env.Res.Batched; m != nil {
		rate = m.MaxOfferedEventsPerSec / 2
		if rate == 0 && len(m.Steps) > 0 {
			rate = m.Steps[0].OfferedEventsPerSec / 2
			env.Note("half-max phase: no batched step kept up; ran at half the first step's rate, %.0f events/s", rate)
		}
	}
	if rate == 0 {
		rate = env.Cfg.BatchRates[0] / 2
		env.Note("half-max phase: batched steps did not run; ran at half the first -batch-rates, %.0f events/s", rate)
	}
	args := append(batchArgs(env, rate),
		"-read-rate", ff(env.Cfg.HalfReads), "-batch-read-rate", ff(env.Cfg.HalfBatchReads),
		"-read-batch-size", strconv.Itoa(env.Cfg.ReadBatch), "-count-rate", ff(env.Cfg.HalfCounts),
		"-fresh-rate", ff(env.Cfg.HalfFresh), "-fresh-poll", env.Cfg.FreshPoll.String(), "-seed", "1000",
	)
	sp := stepSpec{
		mode: "half", offered: rate, workload: "batch",
		load: harness.Load{Name: fmt.Sprintf("half-%.0f", rate), Duration: env.Cfg.HalfTime, Warmup: env.Cfg.Warmup, Args: args},
	}
	if env.Cfg.Profile {
		sp.during = func(ctx context.Context, from time.Time) { profiles(ctx, env, from) }
	}
	r, err := runStep(ctx, env, sp)
	if err != nil {
		return nil, err
	}
	printStep(env, r)
	for _, rd := range r.Reads {
		fmt.Fprintf(env.Out, "            %-10s %6.0f/s of %6.0f/s, p50 %s p99 %s, failed %d\n", rd.Name, rd.AchievedRate, rd.TargetRate,
			report.FmtMs(rd.Ms.P50, rd.Ms.Count), report.FmtMs(rd.Ms.P99, rd.Ms.Count), rd.Failed)
	}
	return &r, nil
}

// profiles takes CPU profiles of the aggregator, ingest and query through /debug/pprof,
// starting a second after the warm-up; services without the endpoint are noted.
func profiles(ctx context.Context, env *harness.Env, from time.Time) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Until(from.Add(time.Second))):
	}
	secs := max(1, int(env.Cfg.ProfileTime.Seconds()))
	if max := int((env.Cfg.HalfTime - time.Second).Seconds()); secs > max && max > 0 {
		secs = max
	}
	dir := filepath.Join(env.Dir, "profiles")
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, name := range []string{"aggregator", "ingest", "query"} {
		wg.Go(func() {
			path, err := profile(ctx, env, name, secs, dir)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				env.Note("no CPU profile of %s: %v", name, err)
				return
			}
			rel, _ := filepath.Rel(env.Dir, path)
			env.Res.Profiles = append(env.Res.Profiles, rel)
		})
	}
	wg.Wait()
}

func profile(ctx context.Context, env *harness.Env, name string, secs int, dir string) (string, error) {
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", env.Stack.URL(name), secs)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	// Ingest and query serve profiles to operator keys only.
	if key := harness.OperatorKey(env.Cfg.Home, os.Getenv); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	c := &http.Client{Timeout: time.Duration(secs+30) * time.Second, Transport: env.Cfg.Transport()}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s answered HTTP %d (the service serves /debug/pprof only with PULSE_PPROF=1)", url, resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", url, err)
	}
	path := filepath.Join(dir, name+".cpu.pprof")
	return path, errors.Join(os.MkdirAll(dir, 0o755), os.WriteFile(path, b, 0o644))
}
