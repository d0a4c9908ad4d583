package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/pulse-presence/pulse/cmd/internal/loadreport"
)

// stats collects one workload's outcomes. Only requests intended to start inside the
// measured window [from, …) count in the report; done and failed count every request
// for the progress line, warm-up included.
type stats struct {
	from time.Time

	done   atomic.Uint64 // requests that ended, any class but dropped
	failed atomic.Uint64 // 4xx, 5xx, transport and dropped

	mu        sync.Mutex
	scheduled uint64                   // intended starts: sent or dropped
	byClass   [classAborted + 1]uint64 // requests by how they ended (classAborted is the last class)
	events    uint64
	codes     map[int]uint64 // status codes of the non-2xx answers
	lat       histogram      // 2xx latencies from the intended start

	probes FreshnessReport // the freshness probes' counts, Ms left to buildReport
	fresh  histogram
}

func newStats(from time.Time) *stats { return &stats{from: from, codes: map[int]uint64{}} }

// record adds the outcome of the request intended to start at intended.
func (s *stats) record(intended time.Time, o outcome) {
	if o.class != classDropped {
		s.done.Add(1)
	}
	if o.class != classOK && o.class != classAborted {
		s.failed.Add(1)
	}
	if intended.Before(s.from) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scheduled++
	s.byClass[o.class]++
	if o.class == classOK {
		s.events += uint64(o.events)
		s.lat.record(o.end.Sub(intended))
	}
	if o.class != classOK && o.code != 0 {
		s.codes[o.code]++
	}
	if r := o.fresh; r != nil {
		s.probes.Probes++
		s.probes.Polls += uint64(r.polls)
		s.probes.PollErrors += uint64(r.pollErrors)
		switch {
		case r.seen:
			s.probes.Seen++
			s.fresh.record(r.after)
		case r.timedOut:
			s.probes.Timeouts++
		case r.aborted:
			s.probes.Aborted++
		}
	}
}

// snapshot returns the p99 latency and p99 freshness so far, with their counts.
func (s *stats) snapshot() (p99 time.Duration, n uint64, fresh99 time.Duration, fn uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lat.quantile(0.99), s.lat.count(), s.fresh.quantile(0.99), s.fresh.count()
}

// The report's types live in cmd/internal/loadreport, which cmd/bench reads too.
type (
	Report          = loadreport.Report
	WorkloadReport  = loadreport.WorkloadReport
	ErrorCounts     = loadreport.ErrorCounts
	Quantiles       = loadreport.Quantiles
	FreshnessReport = loadreport.FreshnessReport
)

// fullReport is the document -json writes: loadreport's Report (which cmd/bench reads)
// with the whole run's ingest counts beside it, as "ingest" (absent without an ingest
// workload).
type fullReport struct {
	Report
	Ingest *IngestCounts `json:"ingest,omitempty"`
}

func quantiles(h *histogram) Quantiles {
	return loadreport.QuantilesOf(h.count(), h.mean(), h.quantile)
}

// buildReport turns the workloads' stats into the report.
func buildReport(cfg config, wls []*workload, st []*stats, started time.Time, measured time.Duration, interrupted bool) Report {
	secs := measured.Seconds()
	per := func(n float64) float64 {
		if secs <= 0 {
			return 0
		}
		return n / secs
	}
	r := Report{
		Version: loadreport.Version, StartedAt: started.UTC(), WarmupSeconds: cfg.warmup.Seconds(),
		MeasuredSeconds: secs, Interrupted: interrupted, Seed: cfg.seed, Config: cfg.flags,
		Workloads: []WorkloadReport{},
	}
	for i, w := range wls {
		s := st[i]
		s.mu.Lock()
		n := s.byClass
		codes := map[string]uint64{}
		for c, n := range s.codes {
			codes[strconv.Itoa(c)] = n
		}
		wr := WorkloadReport{
			Name: w.name, Endpoint: w.endpoint, TargetRate: w.rate,
			AchievedRate:       per(float64(n[classOK] + n[class4xx] + n[class5xx] + n[classTransport])),
			TargetEventsPerSec: w.rate * float64(w.perReq),
			EventsPerSec:       per(float64(s.events)),
			Scheduled:          s.scheduled, OK: n[classOK],
			Errors:      ErrorCounts{C4xx: n[class4xx], C5xx: n[class5xx], Transport: n[classTransport], Dropped: n[classDropped]},
			Aborted:     n[classAborted],
			StatusCodes: codes,
			Events:      s.events,
			LatencyMs:   quantiles(&s.lat),
		}
		if w.name == "fresh" {
			f := s.probes
			f.Ms = quantiles(&s.fresh)
			r.Freshness = &f
		}
		s.mu.Unlock()
		r.AcceptedEvents += wr.Events
		r.Workloads = append(r.Workloads, wr)
	}
	r.AcceptedEventsPerSec = per(float64(r.AcceptedEvents))
	return r
}

// writeTable prints the report for people, the whole run's ingest counts last.
func writeTable(w io.Writer, full fullReport) error {
	r := full.Report
	var b strings.Builder
	state := ""
	if r.Interrupted {
		state = ", interrupted"
	}
	fmt.Fprintf(&b, "pulse loadgen: %.1f s measured after %.1f s warm-up (seed %d%s)\n",
		r.MeasuredSeconds, r.WarmupSeconds, r.Seed, state)
	fmt.Fprintf(&b, "accepted events/s: %.1f (%d events)\n\n", r.AcceptedEventsPerSec, r.AcceptedEvents)

	// Right-aligned numbers; names padded to one width so they read left-aligned.
	width := len("workload")
	for _, x := range r.Workloads {
		width = max(width, len(x.Name))
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\t", width, "workload")
	fmt.Fprintln(tw, "target/s\tachieved/s\tevents/s\tok\t4xx\t5xx\ttransport\tdropped\tp50\tp90\tp99\tp99.9\tmax\t")
	for _, x := range r.Workloads {
		ev := "-"
		if x.TargetEventsPerSec > 0 {
			ev = fmt.Sprintf("%.0f", x.EventsPerSec)
		}
		l := x.LatencyMs
		fmt.Fprintf(tw, "%-*s\t%.1f\t%.1f\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t\n",
			width, x.Name, x.TargetRate, x.AchievedRate, ev, x.OK,
			x.Errors.C4xx, x.Errors.C5xx, x.Errors.Transport, x.Errors.Dropped,
			loadreport.FmtMs(l.P50, l.Count), loadreport.FmtMs(l.P90, l.Count), loadreport.FmtMs(l.P99, l.Count), loadreport.FmtMs(l.P999, l.Count), loadreport.FmtMs(l.Max, l.Count))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, x := range r.Workloads {
		if len(x.StatusCodes) == 0 && x.Aborted == 0 {
			continue
		}
		parts := codeCounts(x.StatusCodes)
		if x.Aborted > 0 {
			parts = append(parts, fmt.Sprintf("aborted at shutdown ×%d", x.Aborted))
		}
		fmt.Fprintf(&b, "%s: %s\n", x.Name, strings.Join(parts, ", "))
	}
	if f := r.Freshness; f != nil {
		q := f.Ms
		fmt.Fprintf(&b, "\nfreshness (write 2xx → first read showing it): probes %d, seen %d, timeouts %d, aborted %d; polls %d (%d failed)\n",
			f.Probes, f.Seen, f.Timeouts, f.Aborted, f.Polls, f.PollErrors)
		fmt.Fprintf(&b, "  p50 %s  p90 %s  p99 %s  p99.9 %s  max %s\n",
			loadreport.FmtMs(q.P50, q.Count), loadreport.FmtMs(q.P90, q.Count), loadreport.FmtMs(q.P99, q.Count), loadreport.FmtMs(q.P999, q.Count), loadreport.FmtMs(q.Max, q.Count))
	}
	writeIngestLine(&b, full.Ingest)
	_, err := io.WriteString(w, b.String())
	return err
}

// codeCounts lists counts by HTTP status code, in the codes' order: "HTTP 503 ×2".
func codeCounts(byCode map[string]uint64) []string {
	var parts []string
	for _, code := range slices.Sorted(maps.Keys(byCode)) {
		parts = append(parts, fmt.Sprintf("HTTP %s ×%d", code, byCode[code]))
	}
	return parts
}

// progress prints one line a second to w until stop is closed: per workload the
// rate of the last second and the p99 so far (measured window only), then the
// errors so far (warm-up included) and the freshness p99.
func progress(w io.Writer, stop <-chan struct{}, start, from time.Time, wls []*workload, st []*stats) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := make([]uint64, len(st))
	lastAt := start
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			var b strings.Builder
			phase := "run"
			if now.Before(from) {
				phase = "warm-up"
			}
			fmt.Fprintf(&b, "[%5.1fs %s]", now.Sub(start).Seconds(), phase)
			var failed uint64
			fresh := ""
			for i, w := range wls {
				done := st[i].done.Load()
				rate := float64(done-last[i]) / now.Sub(lastAt).Seconds()
				last[i] = done
				failed += st[i].failed.Load()
				p99, n, f99, fn := st[i].snapshot()
				fmt.Fprintf(&b, " %s %.0f/s p99 %s |", w.name, rate, loadreport.FmtMs(loadreport.Ms(p99), n))
				if w.name == "fresh" {
					fresh = " fresh p99 " + loadreport.FmtMs(loadreport.Ms(f99), fn)
				}
			}
			lastAt = now
			fmt.Fprintf(&b, " errors %d%s\n", failed, fresh)
			io.WriteString(w, b.String())
		}
	}
}
