// Package webhooks is the webhooks phase: the stack's notifier (services/notifier)
// delivering presence.changes to two endpoints whose receivers run in bench, under
// batched ingest load. It measures each endpoint's delivery latency (from a change's
// record in presence.changes to its receiver's first receipt), the changes/s delivered,
// and that every change of the load reached each endpoint in its view, every request
// signed with the endpoint's secret.
package webhooks

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/pulse-presence/pulse/cmd/bench/internal/harness"
	"github.com/pulse-presence/pulse/cmd/bench/internal/probe"
	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
)

// Phase points the stack's notifier at two receivers of bench's own, through the
// stack's endpoints file (restored afterwards), and drives batched ingest through it.
var Phase = harness.Phase{Name: "webhooks", Before: "the webhooks phase", Title: "webhooks: changes delivered to two endpoints",
	Run: func(ctx context.Context, env *harness.Env) (err error) {
		env.Res.Webhooks, err = run(ctx, env)
		return err
	}}

// The notifier's metrics the phase reads.
const (
	endpointsMetric = "pulse_notifier_endpoints"
	latencyMetric   = "pulse_notifier_latency_seconds"
)

// pickRate is the load's offered events/s and where it comes from: half the highest
// batched step that kept up in this run, the rate the half phase runs at (or half the
// first step's when none kept up); without batched steps, fixed (-webhooks-rate).
func pickRate(batched *report.ModeResult, fixed float64) (float64, string) {
	if m := batched; m != nil {
		if m.MaxOfferedEventsPerSec > 0 {
			return m.MaxOfferedEventsPerSec / 2, fmt.Sprintf("half the highest batched step that kept up in this run (%s events/s), as the half phase", report.Num(m.MaxOfferedEventsPerSec))
		}
		if len(m.Steps) > 0 {
			r := m.Steps[0].OfferedEventsPerSec
			return r / 2, fmt.Sprintf("half the first batched step's rate (%s events/s): no step kept up", report.Num(r))
		}
	}
	return fixed, "-webhooks-rate: no batched steps ran in this run"
}

func run(ctx context.Context, env *harness.Env) (*report.WebhooksResult, error) {
	wc := env.Cfg.Webhooks
	res := &report.WebhooksResult{LoadSeconds: wc.Time.Seconds()}
	res.OfferedEventsPerSec, res.RateSource = pickRate(env.Res.Batched, wc.Rate)

	if err := env.Stack.UseService(ctx, "notifier"); err != nil {
		return nil, err
	}
	notifier := env.Stack.URL("notifier")
	file := locateEndpointsFile(env.Stack.PID("notifier"), env.Cfg.Home)
	fmt.Fprintf(env.Out, "    notifier at %s, endpoints file %s\n", notifier, file.path)

	// An older backlog of presence.changes, read before the phase's endpoints are in
	// force, is neither delivered to them nor queued before the load's changes.
	if lag, err := awaitNotifierIdle(ctx, env, wc.NotifierGroup, env.Cfg.IdleWait); err != nil {
		env.Note("webhooks: the notifier's lag on %s before the phase: %v", env.Cfg.Changes, err)
	} else if lag > report.LagGrowthFloor {
		env.Note("webhooks: the notifier was still %d records behind on %s before the phase (after %s)", lag, env.Cfg.Changes, env.Cfg.IdleWait)
	}

	specs := make([]endpointSpec, len(report.WebhookEndpoints))
	recv := make([]*receiver, len(specs))
	for i, e := range report.WebhookEndpoints {
		specs[i] = endpointSpec{id: e.ID, view: wc.View, maxChanges: report.WebhookMaxChanges, maxWait: e.MaxWait}
		r, err := startReceiver(e.ID)
		if err != nil {
			return nil, err
		}
		defer r.close()
		specs[i].url, specs[i].secret, recv[i] = r.url, r.secret, r
	}

	// The stack's file is replaced for the phase and put back whatever happens; the
	// notifier then has its own endpoints again after its next reload.
	before, err := file.save()
	if err != nil {
		return nil, err
	}
	written := time.Now()
	if err := file.write(endpointsJSON(specs)); err != nil {
		return nil, err
	}
	defer env.Cleanup(ctx, wc.Reload*3+10*time.Second, "restoring the notifier's endpoints file", func(ctx context.Context) error {
		if err := file.restore(before); err != nil {
			return err
		}
		if _, err := awaitEndpoints(ctx, env, notifier, float64(before.endpoints), wc.Reload*3+5*time.Second); err != nil {
			return fmt.Errorf("restored %s, but the notifier did not show its %d endpoints again: %w", file.path, before.endpoints, err)
		}
		return nil
	})
	if before.endpoints > 0 {
		env.Note("webhooks: the stack's %d endpoints were replaced by the phase's for its length (and restored after)", before.endpoints)
	}
	fmt.Fprintf(env.Out, "    receivers %s (%s) and %s (%s); waiting for the notifier to reload\n", specs[0].id, specs[0].url, specs[1].id, specs[1].url)
	if _, err := awaitEndpoints(ctx, env, notifier, float64(len(specs)), wc.Reload*3+10*time.Second); err != nil {
		return nil, fmt.Errorf("the notifier did not take the phase's endpoints: %w", err)
	}
	res.ReloadSeconds = time.Since(written).Seconds()
	fmt.Fprintf(env.Out, "    the notifier has the phase's endpoints after %.1f s\n", res.ReloadSeconds)

	start, err := endOffsets(ctx, env)
	if err != nil {
		return nil, err
	}
	m0, err := probe.Scrape(ctx, env.HTTP, notifier)
	if err != nil {
		return nil, err
	}
	cpu0, t0 := env.CPU(), time.Now()
	fmt.Fprintf(env.Out, "    batched load at %s events/s for %s\n", report.Num(res.OfferedEventsPerSec), wc.Time)
	lr, err := env.RunLoad(ctx, harness.Load{Name: fmt.Sprintf("webhooks-%.0f", res.OfferedEventsPerSec), Duration: wc.Time,
		Args: []string{"-batch-rate", ff(res.OfferedEventsPerSec / float64(env.Cfg.BatchSize)), "-batch-size", strconv.Itoa(env.Cfg.BatchSize), "-seed", "3000"}})
	if err != nil {
		return res, err
	}
	if w, ok := lr.Report.Workload("batch"); ok {
		res.AcceptedEventsPerSec = w.EventsPerSec
	}
	// The load's window is loadgen's schedule, from its start (no warm-up).
	loadStart := lr.From
	loadEnd := loadStart.Add(wc.Time)
	// Every event of the load folded (its lag 0), the window's end holds all its
	// changes; what comes later (a timeout of a load's user, say) is outside.
	settled, ok := env.Settle(ctx, 0, env.Cfg.Settle)
	res.SettleSeconds = settled.Seconds()
	if !ok {
		env.Note("webhooks: the aggregator had not folded every event %s after the load; the changes it wrote later are outside the window", env.Cfg.Settle)
	}
	end, err := endOffsets(ctx, env)
	if err != nil {
		return res, err
	}
	changes, err := readChanges(ctx, env, start, end)
	if err != nil {
		return res, err
	}
	res.Changes, res.Undecodable = int64(len(changes.all)+changes.undecodable), int64(changes.undecodable)
	res.ChangeIDs = int64(len(expected(changes.all, true)))
	fmt.Fprintf(env.Out, "    %s records of %s in the window (%s undecodable); waiting up to %s for every endpoint to have its changes\n",
		report.Num(float64(res.Changes)), env.Cfg.Changes, report.Num(float64(res.Undecodable)), wc.Wait)

	want := make([]map[string]time.Time, len(specs))
	for i, s := range specs {
		want[i] = expected(changes.all, s.view == "operator")
	}
	waited := time.Now()
	if awaitDelivered(ctx, recv, want, waited.Add(wc.Wait)) {
		fmt.Fprintf(env.Out, "    every change delivered %.1f s into the wait\n", time.Since(waited).Seconds())
	}
	cpu1, t1 := env.CPU(), time.Now()
	m1, err := probe.Scrape(ctx, env.HTTP, notifier)
	if err != nil {
		env.Note("webhooks: the notifier's metrics after the load: %v", err)
	}
	window := window{from: loadStart, to: loadEnd}
	var deliveredAll int64
	for i, s := range specs {
		ep := summarize(s, want[i], recv[i].snapshot(), window)
		if m0 != nil && m1 != nil {
			d := probe.BucketDelta(m0.Buckets(latencyMetric, "endpoint", s.id), m1.Buckets(latencyMetric, "endpoint", s.id))
			ep.NotifierP50Ms, ep.NotifierP99Ms = msOrZero(probe.Quantile(d, 0.5)), msOrZero(probe.Quantile(d, 0.99))
		}
		deliveredAll += ep.Delivered
		res.Endpoints = append(res.Endpoints, ep)
		printEndpoint(env, ep)
		if ep.Missing > 0 {
			env.Note("webhooks: %s got %d of %d changes after waiting %s; missing e.g. %v", ep.ID, ep.Delivered, ep.Expected, wc.Wait, ep.MissingIDs)
		}
		if ep.InvalidSignatures > 0 || ep.Malformed > 0 {
			env.Note("webhooks: %s refused %d requests with an invalid signature and %d malformed", ep.ID, ep.InvalidSignatures, ep.Malformed)
		}
	}
	if secs := probe.Delta(cpu0, cpu1)["notifier"]; env.Stack.PID("notifier") != 0 {
		res.NotifierCores = secs / t1.Sub(t0).Seconds()
		if deliveredAll > 0 {
			res.NotifierCPUMicrosPerChange = 1e6 * secs / float64(deliveredAll)
		}
	}
	// A change never delivered is the webhook-delivered target's verdict, with the
	// notes above saying which; the run goes on like any other target missed.
	return res, ctx.Err()
}

func ff(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// msOrZero is seconds in ms, 0 for NaN (no observation).
func msOrZero(sec float64) float64 {
	if math.IsNaN(sec) {
		return 0
	}
	return 1000 * sec
}

func printEndpoint(env *harness.Env, e report.WebhookEndpoint) {
	l := e.LatencyMs
	fmt.Fprintf(env.Out, "    %-12s latency p50 %s p99 %s max %s; %s changes/s delivered (%s produced); %s of %s delivered, %d duplicates, %d outside, %d bad signatures\n",
		e.ID, report.FmtMs(l.P50, l.Count), report.FmtMs(l.P99, l.Count), report.FmtMs(l.Max, l.Count), report.Num(e.DeliveredPerSec), report.Num(e.ProducedPerSec),
		report.Num(float64(e.Delivered)), report.Num(float64(e.Expected)), e.Duplicates, e.Outside, e.InvalidSignatures)
}

// awaitEndpoints polls the notifier's /metrics until pulse_notifier_endpoints is n,
// for at most limit, and answers how long that took.
func awaitEndpoints(ctx context.Context, env *harness.Env, notifier string, n float64, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	var last error
	for {
		m, err := probe.Scrape(ctx, env.HTTP, notifier)
		switch {
		case err != nil:
			last = err
		case m[endpointsMetric] == nil:
			last = fmt.Errorf("%s/metrics has no %s", notifier, endpointsMetric)
		case m.Sum(endpointsMetric) == n:
			return time.Since(start), nil
		default:
			last = fmt.Errorf("%s is %v, want %v", endpointsMetric, m.Sum(endpointsMetric), n)
		}
		if time.Since(start) > limit {
			return 0, fmt.Errorf("after %s: %w", limit.Round(time.Second), last)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// awaitNotifierIdle waits, for at most limit, until the notifier's group has at most
// a few windows of presence.changes to read, so that the load's changes do not queue
// behind an older backlog; it answers the last lag read.
func awaitNotifierIdle(ctx context.Context, env *harness.Env, group string, limit time.Duration) (int64, error) {
	start := time.Now()
	for {
		lag, err := groupLag(ctx, env, group)
		if err != nil || lag <= report.LagGrowthFloor || time.Since(start) > limit {
			return lag, err
		}
		select {
		case <-ctx.Done():
			return lag, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func groupLag(ctx context.Context, env *harness.Env, group string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lags, err := env.Lag.Adm.Lag(ctx, group)
	if err != nil {
		return 0, err
	}
	d, ok := lags[group]
	if !ok {
		return 0, fmt.Errorf("consumer group %s: not found", group)
	}
	if err := d.Error(); err != nil {
		return 0, fmt.Errorf("consumer group %s: %w", group, err)
	}
	var t int64
	for _, p := range d.Lag[env.Cfg.Changes] {
		t += max(p.Lag, 0)
	}
	return t, nil
}

// awaitDelivered polls the receivers until each has every change of its want, or
// deadline passes; it answers whether they all had them.
func awaitDelivered(ctx context.Context, recv []*receiver, want []map[string]time.Time, deadline time.Time) bool {
	done := make([]bool, len(recv))
	for {
		all := true
		for i, r := range recv {
			done[i] = done[i] || r.hasAll(want[i])
			all = all && done[i]
		}
		if all || time.Now().After(deadline) || ctx.Err() != nil {
			return all
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}
