package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// fmtMs prints a latency in milliseconds with about three significant digits; "–"
// when nothing was measured (n = 0).
func fmtMs(v float64, n uint64) string {
	switch {
	case n == 0 || math.IsNaN(v):
		return "–"
	case v < 0.001:
		return fmt.Sprintf("%.0f ns", v*1e6)
	case v < 0.01:
		return fmt.Sprintf("%.1f µs", v*1000)
	case v < 1:
		return fmt.Sprintf("%.0f µs", v*1000)
	case v < 10:
		return fmt.Sprintf("%.2f ms", v)
	case v < 1000:
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.2f s", v/1000)
}

// num prints v rounded to a whole number with thousands separators: 125,000.
func num(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	s := strconv.FormatInt(int64(math.Round(math.Abs(v))), 10)
	var b strings.Builder
	if v < 0 && s != "0" {
		b.WriteString("−")
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// bytesOf prints a byte count in binary units.
func bytesOf(n int64) string {
	v := float64(n)
	for _, u := range []string{"B", "KiB", "MiB", "GiB"} {
		if math.Abs(v) < 1024 || u == "GiB" {
			if u == "B" {
				return fmt.Sprintf("%d B", n)
			}
			return fmt.Sprintf("%.1f %s", v, u)
		}
		v /= 1024
	}
	return ""
}

// sig prints v with three significant digits.
func sig(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "–"
	case v == 0:
		return "0"
	case math.Abs(v) >= 1000:
		return num(v)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// fmtValue prints a target's value in its unit.
func fmtValue(v float64, unit string) string {
	switch unit {
	case "ms":
		return fmtMs(v, 1)
	case "×":
		return sig(v) + "×"
	case "s":
		return sig(v) + " s"
	}
	return num(v) + " " + unit
}

func fmtMargin(t Target) string {
	if !t.Measured {
		return "–"
	}
	if t.Op == "<=" && t.Value > 10*t.Threshold {
		// A percentage of the limit stops meaning anything this far out.
		return sig(t.Value/t.Threshold) + "× the limit"
	}
	sign := "+"
	if t.Margin < 0 {
		sign = "−"
	}
	return fmt.Sprintf("%s%.0f%%", sign, math.Abs(100*t.Margin))
}

func fmtResult(t Target) string {
	switch {
	case !t.Measured:
		return "not measured"
	case t.Met:
		return "met"
	}
	return "**not met**"
}

// cpuOrder is the order of processes in the CPU tables: the pipeline first, then the
// load generator and bench, which share the machine but are not Pulse.
var cpuOrder = []string{"ingest", "aggregator", "history", "query", "kafka", "redis", "cassandra", "loadgen", "bench"}

// pipelineCPU sums the CPU seconds per event of the stack's processes.
func pipelineCPU(c map[string]ProcCPU) float64 {
	var t float64
	for _, n := range append(slices.Clone(serverNames), serviceNames...) {
		t += c[n].SecondsPerEvent
	}
	return t
}

// writeMarkdown renders r for people: targets first, then each phase's table.
func writeMarkdown(w io.Writer, r *Results, command string) error {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	kind := "full run"
	if r.Quick {
		kind = "quick run (-quick: fewer, shorter steps and fewer users than the targets are stated for)"
	}
	p("# Pulse benchmark, %s\n\n", r.StartedAt.Format("2006-01-02 15:04 UTC"))
	dirty := ""
	if r.Machine.GitDirty {
		dirty = " with local changes"
	}
	p("%s, %.1f minutes. Machine: %d CPUs, %s memory, %s, commit %s%s, Redis appendonly %s.\n\n",
		kind, r.FinishedAt.Sub(r.StartedAt).Minutes(), r.Machine.CPUs, bytesOf(int64(r.Machine.MemoryBytes)),
		r.Machine.GoVersion, r.Machine.GitCommit, dirty, r.Machine.RedisAOF)
	p("Command: `%s`\n\n", command)
	p("Every process of the stack, the load generator and bench share these %d CPUs, so each number is what the whole pipeline does on one small machine, load generation included.\n\n", r.Machine.CPUs)

	p("## Targets\n\n")
	p("Margin is the distance from the threshold as a share of it, positive on the good side.\n\n")
	p("| target | required | measured | margin | result | context |\n|---|---|---|---|---|---|\n")
	for _, t := range r.Targets {
		val := "–"
		if t.Measured {
			val = fmtValue(t.Value, t.Unit)
		}
		op := "≥"
		if t.Op == "<=" {
			op = "≤"
		}
		p("| %s | %s %s | %s | %s | %s | %s |\n", t.What, op, fmtValue(t.Threshold, t.Unit), val, fmtMargin(t), fmtResult(t), t.Note)
	}
	p("\n")

	for _, m := range []*ModeResult{r.Batched, r.Single} {
		if m == nil {
			continue
		}
		if m.Mode == "batched" {
			p("## Ingest steps: batched POST /v1/events (%d events each)\n\n", m.BatchSize)
		} else {
			p("## Ingest steps: one event per POST /status\n\n")
		}
		if m.MaxOfferedEventsPerSec > 0 {
			p("Highest rate that kept up: **%s events/s offered, %s accepted**.\n\n", num(m.MaxOfferedEventsPerSec), num(m.MaxAcceptedEventsPerSec))
		} else if len(m.Steps) > 0 {
			p("No step kept up: the first, at %s events/s, fell behind.\n\n", num(m.Steps[0].OfferedEventsPerSec))
		}
		stepTable(&b, m.Steps)
	}
	if h := r.Half; h != nil {
		p("## At half the highest batched rate: %s events/s\n\n", num(h.OfferedEventsPerSec))
		p("| measure | rate (achieved of target) | p50 | p99 | p99.9 | failed |\n|---|---|---|---|---|---|\n")
		f := h.Freshness
		p("| freshness (2xx of a status write → first read showing it) | %d probes, %d seen, %d timed out | %s | %s | %s | – |\n",
			f.Probes, f.Seen, f.Timeouts, fmtMs(f.Ms.P50, f.Ms.Count), fmtMs(f.Ms.P99, f.Ms.Count), fmtMs(f.Ms.P999, f.Ms.Count))
		p("| ingest POST /v1/events | %s of %s events/s | %s | %s | %s | %d |\n", num(h.AcceptedEventsPerSec), num(h.OfferedEventsPerSec),
			fmtMs(h.IngestMs.P50, h.IngestMs.Count), fmtMs(h.IngestMs.P99, h.IngestMs.Count), fmtMs(h.IngestMs.P999, h.IngestMs.Count), h.FailedRequests)
		for _, rd := range h.Reads {
			p("| %s | %s of %s /s | %s | %s | %s | %d |\n", rd.Endpoint, num(rd.AchievedRate), num(rd.TargetRate),
				fmtMs(rd.Ms.P50, rd.Ms.Count), fmtMs(rd.Ms.P99, rd.Ms.Count), fmtMs(rd.Ms.P999, rd.Ms.Count), rd.Failed)
		}
		p("\nAggregator lag over the window: %s. History: %s rows/s, %s records behind at the end.\n\n",
			lagText(h.AggregatorLag), num(h.History.RowsPerSec), num(float64(h.History.LagRecords)))
	}

	var all []StepResult
	for _, m := range []*ModeResult{r.Batched, r.Single} {
		if m != nil {
			all = append(all, m.Steps...)
		}
	}
	if r.Half != nil {
		all = append(all, *r.Half)
	}
	if len(all) > 0 {
		p("## CPU per event\n\n")
		p("Microseconds of CPU (user + system, all threads, from /proc/<pid>/stat) per event ingest accepted, from the start of each load until the aggregator caught up; in parentheses the cores the process kept busy meanwhile. *pipeline* sums the stack's seven processes.\n\n")
		p("*machine* is every core's busy time over the window, in cores; *others* the part no watched process used (other work on the machine), *stolen* what the hypervisor withheld.\n\n")
		p("| step | %s | pipeline | machine busy / others / stolen (cores) |\n|---|%s---|---|\n", strings.Join(cpuOrder, " | "), strings.Repeat("---|", len(cpuOrder)))
		for _, s := range all {
			p("| %s %s ev/s |", s.Mode, num(s.OfferedEventsPerSec))
			for _, n := range cpuOrder {
				c, ok := s.CPU[n]
				if !ok {
					p(" – |")
					continue
				}
				p(" %s (%.2f) |", sig(c.SecondsPerEvent*1e6), c.Cores)
			}
			p(" %s | %s |\n", sig(pipelineCPU(s.CPU)*1e6), machineText(s.Machine))
		}
		p("\n")
	}

	if len(all) > 0 {
		p("## Inside the services\n\n")
		p("p50 / p99 of the services' own histograms over each step (bucket-bounded): ingest's wait for Kafka's acknowledgement per request, the aggregator's time to make one window durable (state read, Redis write, changes produced, offsets committed), one Cassandra write of history.\n\n")
		p("| step | ingest produce | aggregator flush | history write |\n|---|---|---|---|\n")
		for _, s := range all {
			p("| %s %s ev/s |", s.Mode, num(s.OfferedEventsPerSec))
			for _, k := range []string{"ingestProduceSeconds", "aggregatorFlushSeconds", "historyWriteSeconds"} {
				p50, ok1 := s.Internals[k+"P50"]
				p99, ok2 := s.Internals[k+"P99"]
				if !ok1 || !ok2 {
					p(" – |")
					continue
				}
				p(" %s / %s |", fmtMs(p50*1000, 1), fmtMs(p99*1000, 1))
			}
			p("\n")
		}
		p("\n")
	}

	if h := r.History; h != nil {
		p("## History (Cassandra)\n\n")
		lag := "not measured"
		if h.LagKnown {
			lag = sig(h.LagSeconds) + " s (" + h.LagSource + ")"
		}
		p("At the batched step of %s events/s (%s accepted): **%s rows/s** written, lag %s, %s records behind at the step's end.\n\n",
			num(h.AtOfferedEventsPerSec), num(h.AcceptedEventsPerSec), num(h.RowsPerSec), lag, num(float64(h.LagRecords)))
	}

	if s := r.Scale; s != nil {
		scaleTables(&b, s)
	}
	if len(r.Profiles) > 0 {
		p("## Profiles\n\n")
		for _, f := range r.Profiles {
			p("- `%s` (`go tool pprof -top %s`)\n", f, f)
		}
		p("\n")
	}
	if len(r.Notes) > 0 {
		p("## Notes\n\n")
		for _, n := range r.Notes {
			p("- %s\n", n)
		}
		p("\n")
	}
	p("Files: `results.json` (every number), `latency.png`, `raw/` (each loadgen run's report and table).\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func machineText(m MachineCPU) string {
	if !m.Known {
		return "–"
	}
	return fmt.Sprintf("%.2f / %.2f / %.2f", m.BusyCores, m.OtherCores, m.StolenCores)
}

func lagText(l LagSummary) string {
	if !l.Known {
		return "not measured"
	}
	return fmt.Sprintf("%s → %s records (max %s)", num(float64(l.Start)), num(float64(l.End)), num(float64(l.Max)))
}

func historyBehind(h HistoryObs) string {
	return num(float64(h.LagRecordsStart)) + " → " + num(float64(h.LagRecords))
}

func stepTable(b *strings.Builder, steps []StepResult) {
	fmt.Fprintf(b, "| offered ev/s | accepted ev/s | failed | ingest p50 | ingest p99 | fresh p50 | fresh p99 | GET /status p99 | aggregator lag (records) | aggregator ev/s | history rows/s | history behind (records) | result |\n")
	fmt.Fprintf(b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range steps {
		read := "–"
		for _, rd := range s.Reads {
			if rd.Name == "read" {
				read = fmtMs(rd.Ms.P99, rd.Ms.Count)
			}
		}
		res := "kept up"
		if !s.KeptUp {
			res = "**fell behind**: " + strings.Join(s.Reasons, "; ")
		}
		fmt.Fprintf(b, "| %s | %s | %.2f%% | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			num(s.OfferedEventsPerSec), num(s.AcceptedEventsPerSec), 100*s.FailedFraction,
			fmtMs(s.IngestMs.P50, s.IngestMs.Count), fmtMs(s.IngestMs.P99, s.IngestMs.Count),
			fmtMs(s.Freshness.Ms.P50, s.Freshness.Ms.Count), fmtMs(s.Freshness.Ms.P99, s.Freshness.Ms.Count), read,
			lagText(s.AggregatorLag), num(s.AggregatorEventsPerSec), num(s.History.RowsPerSec),
			historyBehind(s.History), res)
	}
	fmt.Fprintln(b)
}

func scaleTables(b *strings.Builder, s *ScaleResult) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## Redis memory and counts at scale\n\n")
	p("%s registered users, %s online (%.0f%%), %d shards, bulk-loaded into the stack's Redis: first in Pulse's layout through `statestore` (minimal states), then, after deleting it, in the seed's direct layout. Ratios are baseline ÷ Pulse.\n\n",
		num(float64(s.Users)), num(float64(s.Online)), 100*s.OnlineFraction, s.Shards)
	p("| | Pulse (bitmaps) | baseline (seed) | baseline ÷ Pulse |\n|---|---|---|---|\n")
	p("| bulk load | %.1f s | %.1f s | |\n", s.Pulse.LoadSeconds, s.Baseline.LoadSeconds)
	p("| Redis memory (used_memory growth) | %s | %s | %s |\n", bytesOf(s.Pulse.UsedMemoryBytes), bytesOf(s.Baseline.UsedMemoryBytes),
		sig(ratio(float64(s.Baseline.UsedMemoryBytes), float64(s.Pulse.UsedMemoryBytes))))
	p("| per registered user | %s B | %s B | %s |\n", sig(s.Pulse.BytesPerRegisteredUser), sig(s.Baseline.BytesPerRegisteredUser), sig(s.RegisteredMemoryRatio))
	p("| online structure (bitmaps / sorted set) | %s | %s | |\n", bytesOf(s.Pulse.OnlineStructureBytes), bytesOf(s.Baseline.OnlineStructureBytes))
	p("| per online user | %s B | %s B | %s |\n", sig(s.Pulse.BytesPerOnlineUser), sig(s.Baseline.BytesPerOnlineUser), sig(s.OnlineMemoryRatio))
	p("| counts p50 | %s | %s | %s |\n", fmtMs(s.Pulse.CountsMs.P50, s.Pulse.CountsMs.Count), fmtMs(s.Baseline.CountsMs.P50, s.Baseline.CountsMs.Count), sig(s.CountsP50Speedup))
	p("| counts p99 | %s | %s | %s |\n", fmtMs(s.Pulse.CountsMs.P99, s.Pulse.CountsMs.Count), fmtMs(s.Baseline.CountsMs.P99, s.Baseline.CountsMs.Count), sig(s.CountsP99Speedup))
	p("| counts p99.9 | %s | %s | |\n", fmtMs(s.Pulse.CountsMs.P999, s.Pulse.CountsMs.Count), fmtMs(s.Baseline.CountsMs.P999, s.Baseline.CountsMs.Count))
	p("| counts read | %s | %s | |\n", s.Pulse.CountsCall, s.Baseline.CountsCall)
	if s.Pulse.RedisCountsMs.Count > 0 {
		p("| Redis read behind Pulse's count p50 / p99 | %s / %s | | %s (p50) |\n", fmtMs(s.Pulse.RedisCountsMs.P50, s.Pulse.RedisCountsMs.Count),
			fmtMs(s.Pulse.RedisCountsMs.P99, s.Pulse.RedisCountsMs.Count), sig(ratio(s.Baseline.CountsMs.P50, s.Pulse.RedisCountsMs.P50)))
		p("| what that read is | %s | | |\n", s.Pulse.RedisCountsCall)
	}
	p("| machine while timing counts: busy / others / stolen (cores) | %s | %s | |\n\n", machineText(s.Pulse.CountsMachine), machineText(s.Baseline.CountsMachine))
	for _, l := range []struct {
		name string
		l    Layout
	}{{"Pulse", s.Pulse}, {"baseline", s.Baseline}} {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(l.l.Parts)) {
			parts = append(parts, fmt.Sprintf("%s %s", k, bytesOf(l.l.Parts[k])))
		}
		p("%s memory by key family: %s.\n\n", l.name, strings.Join(parts, ", "))
	}
}
