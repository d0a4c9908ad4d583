package report

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pulse-presence/pulse/cmd/internal/loadreport"
)

// FmtMs is the latency format bench shares with loadgen's table.
var FmtMs = loadreport.FmtMs

// num prints v rounded to a whole number with thousands separators: 125,000.
func Num(v float64) string {
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
func Sig(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "–"
	case v == 0:
		return "0"
	case math.Abs(v) >= 1000:
		return Num(v)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// fmtValue prints a target's value in its unit.
func fmtValue(v float64, unit string) string {
	switch unit {
	case "ms":
		return FmtMs(v, 1)
	case "×":
		return Sig(v) + "×"
	case "s":
		return Sig(v) + " s"
	case "ratio":
		return Pct(v)
	}
	return Num(v) + " " + unit
}

func fmtMargin(t Target) string {
	if !t.Measured {
		return "–"
	}
	if t.Op == "<=" && t.Value > 10*t.Threshold {
		// A percentage of the limit stops meaning anything this far out.
		return Sig(t.Value/t.Threshold) + "× the limit"
	}
	sign := "+"
	if t.Margin < 0 {
		sign = "−"
	}
	if pct := math.Abs(100 * t.Margin); pct != 0 && pct < 0.5 {
		// A miss this narrow (one change of many) must not read as 0%.
		return fmt.Sprintf("%s%.2g%%", sign, pct)
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

// pipelineCPU sums the CPU seconds per event of the stack's seven processes.
func pipelineCPU(c map[string]ProcCPU) float64 {
	var t float64
	for _, n := range cpuOrder[:7] {
		t += c[n].SecondsPerEvent
	}
	return t
}

// markdown is results.md as it is written.
type markdown struct{ strings.Builder }

func (m *markdown) p(format string, a ...any) { fmt.Fprintf(m, format, a...) }

// markdownOf is results.md: r rendered for people, targets first, then each phase's
// table.
func markdownOf(r *Results, command string) string {
	var m markdown
	m.header(r, command)
	m.targets(r.Targets)
	for _, mode := range []*ModeResult{r.Batched, r.BatchedWithoutHistory, r.Single} {
		if mode != nil {
			m.steps(mode, mode == r.BatchedWithoutHistory)
		}
	}
	if r.Half != nil {
		m.half(r.Half)
	}
	if all := AllSteps(r); len(all) > 0 {
		m.cpu(all)
		m.internals(all)
	}
	if r.History != nil {
		m.history(r.History)
	}
	if r.Present != nil {
		m.present(r.Present)
	}
	if r.Rebuild != nil {
		m.rebuild(r.Rebuild)
	}
	if r.Limits != nil || len(r.Ratios) > 0 {
		m.limits(r)
	}
	if r.ScaleOut != nil {
		m.scaleOut(r.ScaleOut)
	}
	if r.Scale != nil {
		m.scale(r.Scale)
	}
	if r.Groups != nil {
		m.groups(r.Groups)
	}
	if r.Webhooks != nil {
		m.webhooks(r.Webhooks)
	}
	m.list("Profiles", r.Profiles, func(f string) string { return fmt.Sprintf("`%s` (`go tool pprof -top %s`)", f, f) })
	m.list("Notes", r.Notes, func(n string) string { return n })
	m.p("Files: `results.json` (every number), `latency.png`, `raw/` (each loadgen run's report and table).\n")
	return m.String()
}

// list is a section of one bullet per item, absent without items.
func (m *markdown) list(title string, items []string, bullet func(string) string) {
	if len(items) == 0 {
		return
	}
	m.p("## %s\n\n", title)
	for _, x := range items {
		m.p("- %s\n", bullet(x))
	}
	m.p("\n")
}

// AllSteps is every measured step: the batched and single ones, then the half-max run.
func AllSteps(r *Results) []StepResult {
	var all []StepResult
	for _, m := range []*ModeResult{r.Batched, r.BatchedWithoutHistory, r.Single} {
		if m != nil {
			all = append(all, m.Steps...)
		}
	}
	if r.Half != nil {
		all = append(all, *r.Half)
	}
	return all
}

func (m *markdown) header(r *Results, command string) {
	kind := "full run"
	if r.Quick {
		kind = "quick run (-quick: fewer, shorter steps and fewer users than the targets are stated for)"
	}
	m.p("# Pulse benchmark, %s\n\n", r.StartedAt.Format("2006-01-02 15:04 UTC"))
	dirty := ""
	if r.Machine.GitDirty {
		dirty = " with local changes"
	}
	m.p("%s, %.1f minutes. Machine: %d CPUs, %s memory, %s, commit %s%s, Redis appendonly %s.\n\n",
		kind, r.FinishedAt.Sub(r.StartedAt).Minutes(), r.Machine.CPUs, bytesOf(int64(r.Machine.MemoryBytes)),
		r.Machine.GoVersion, r.Machine.GitCommit, dirty, r.Machine.RedisAOF)
	m.p("Command: `%s`\n\n", command)
	m.p("Every process of the stack, the load generator and bench share these %d CPUs, so each number is what the whole pipeline does on one small machine, load generation included.\n\n", r.Machine.CPUs)
}

func (m *markdown) targets(ts []Target) {
	m.p("## Targets\n\n")
	m.p("Margin is the distance from the threshold as a share of it, positive on the good side.\n\n")
	m.p("| target | required | measured | margin | result | context |\n|---|---|---|---|---|---|\n")
	for _, t := range ts {
		val := "–"
		if t.Measured {
			val = fmtValue(t.Value, t.Unit)
		}
		op := "≥"
		if t.Op == "<=" {
			op = "≤"
		}
		m.p("| %s | %s %s | %s | %s | %s | %s |\n", t.What, op, fmtValue(t.Threshold, t.Unit), val, fmtMargin(t), fmtResult(t), t.Note)
	}
	m.p("\n")
}

func (m *markdown) steps(mode *ModeResult, withoutHistory bool) {
	if withoutHistory {
		m.p("## Ingest steps: batched, history paused\n\n")
		m.p("The batched steps again with history stopped (SIGSTOP): the live path's capacity when nothing writes to Cassandra.\n\n")
	} else if mode.Mode == "batched" {
		m.p("## Ingest steps: batched POST /v1/events (%d events each)\n\n", mode.BatchSize)
	} else {
		m.p("## Ingest steps: one event per POST /status\n\n")
	}
	if mode.MaxOfferedEventsPerSec > 0 {
		m.p("Highest rate that kept up: **%s events/s offered, %s accepted**.\n\n", Num(mode.MaxOfferedEventsPerSec), Num(mode.MaxAcceptedEventsPerSec))
	} else if len(mode.Steps) > 0 {
		m.p("No step kept up: the first, at %s events/s, fell behind.\n\n", Num(mode.Steps[0].OfferedEventsPerSec))
	}
	m.p("| offered ev/s | accepted ev/s | failed | ingest p50 | ingest p99 | fresh p50 | fresh p99 | GET /status p99 | aggregator lag (records) | aggregator ev/s | history rows/s | history behind (records) | result |\n")
	m.p("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range mode.Steps {
		rd, _ := s.StatusRead()
		read := FmtMs(rd.Ms.P99, rd.Ms.Count)
		res := "kept up"
		if !s.KeptUp {
			res = "**fell behind**: " + strings.Join(s.Reasons, "; ")
		}
		m.p("| %s | %s | %.2f%% | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			Num(s.OfferedEventsPerSec), Num(s.AcceptedEventsPerSec), 100*s.FailedFraction,
			FmtMs(s.IngestMs.P50, s.IngestMs.Count), FmtMs(s.IngestMs.P99, s.IngestMs.Count),
			FmtMs(s.Freshness.Ms.P50, s.Freshness.Ms.Count), FmtMs(s.Freshness.Ms.P99, s.Freshness.Ms.Count), read,
			lagText(s.AggregatorLag), Num(s.AggregatorEventsPerSec), Num(s.History.RowsPerSec),
			Num(float64(s.History.LagRecordsStart))+" → "+Num(float64(s.History.LagRecords)), res)
	}
	m.p("\n")
}

func (m *markdown) half(h *StepResult) {
	m.p("## At half the highest batched rate: %s events/s\n\n", Num(h.OfferedEventsPerSec))
	m.p("| measure | rate (achieved of target) | p50 | p99 | p99.9 | failed |\n|---|---|---|---|---|---|\n")
	f := h.Freshness
	m.p("| freshness (2xx of a status write → first read showing it) | %d probes, %d seen, %d timed out | %s | %s | %s | – |\n",
		f.Probes, f.Seen, f.Timeouts, FmtMs(f.Ms.P50, f.Ms.Count), FmtMs(f.Ms.P99, f.Ms.Count), FmtMs(f.Ms.P999, f.Ms.Count))
	m.p("| ingest POST /v1/events | %s of %s events/s | %s | %s | %s | %d |\n", Num(h.AcceptedEventsPerSec), Num(h.OfferedEventsPerSec),
		FmtMs(h.IngestMs.P50, h.IngestMs.Count), FmtMs(h.IngestMs.P99, h.IngestMs.Count), FmtMs(h.IngestMs.P999, h.IngestMs.Count), h.FailedRequests)
	for _, rd := range h.Reads {
		m.p("| %s | %s of %s /s | %s | %s | %s | %d |\n", rd.Endpoint, Num(rd.AchievedRate), Num(rd.TargetRate),
			FmtMs(rd.Ms.P50, rd.Ms.Count), FmtMs(rd.Ms.P99, rd.Ms.Count), FmtMs(rd.Ms.P999, rd.Ms.Count), rd.Failed)
	}
	m.p("\nAggregator lag over the window: %s. History: %s rows/s, %s records behind at the end.\n\n",
		lagText(h.AggregatorLag), Num(h.History.RowsPerSec), Num(float64(h.History.LagRecords)))
}

func (m *markdown) cpu(all []StepResult) {
	m.p("## CPU per event\n\n")
	m.p("Microseconds of CPU (user + system, all threads, from /proc/<pid>/stat) per event ingest accepted, from the start of each load until the aggregator caught up; in parentheses the cores the process kept busy meanwhile. *pipeline* sums the stack's seven processes.\n\n")
	m.p("*machine* is every core's busy time over the window, in cores; *others* the part no watched process used (other work on the machine), *stolen* what the hypervisor withheld.\n\n")
	m.p("*loadgen share* is the load generator's CPU as a share of all the machine's cores: the harness's part, not the pipeline's.\n\n")
	m.p("| step | %s | pipeline | machine busy / others / stolen (cores) | loadgen share |\n|---|%s---|---|---|\n", strings.Join(cpuOrder, " | "), strings.Repeat("---|", len(cpuOrder)))
	for _, s := range all {
		m.p("| %s %s ev/s |", s.Mode, Num(s.OfferedEventsPerSec))
		for _, n := range cpuOrder {
			c, ok := s.CPU[n]
			if !ok {
				m.p(" – |")
				continue
			}
			m.p(" %s (%.2f) |", Sig(c.SecondsPerEvent*1e6), c.Cores)
		}
		m.p(" %s | %s | %s |\n", Sig(pipelineCPU(s.CPU)*1e6), machineText(s.Machine), Pct(s.LoadgenMachineShare))
	}
	m.p("\n")
}

func (m *markdown) internals(all []StepResult) {
	m.p("## Inside the services\n\n")
	m.p("p50 / p99 of the services' own histograms over each step (bucket-bounded): ingest's wait for Kafka's acknowledgement per request, the aggregator's time to make one window durable (state read, Redis write, changes produced, offsets committed), one Cassandra write of history.\n\n")
	m.p("| step | ingest produce | aggregator flush | history write |\n|---|---|---|---|\n")
	for _, s := range all {
		m.p("| %s %s ev/s |", s.Mode, Num(s.OfferedEventsPerSec))
		for _, h := range Internals {
			p50, ok1 := s.Internals[h.Key+"P50"]
			p99, ok2 := s.Internals[h.Key+"P99"]
			if !ok1 || !ok2 {
				m.p(" – |")
				continue
			}
			m.p(" %s / %s |", FmtMs(p50*1000, 1), FmtMs(p99*1000, 1))
		}
		m.p("\n")
	}
	m.p("\n")
}

func (m *markdown) history(h *HistoryCheck) {
	m.p("## History (Cassandra)\n\n")
	lag := "not measured"
	if h.LagKnown {
		lag = Sig(h.LagSeconds) + " s (" + h.LagSource + ")"
	}
	m.p("At the batched step of %s events/s (%s accepted): **%s rows/s** written, lag %s, %s records behind at the step's end.\n\n",
		Num(h.AtOfferedEventsPerSec), Num(h.AcceptedEventsPerSec), Num(h.RowsPerSec), lag, Num(float64(h.LagRecords)))
	m.p("CPU per accepted event: history %s µs, Cassandra %s µs.\n\n", Sig(h.HistoryCPUPerEvent*1e6), Sig(h.CassandraCPUPerEvent*1e6))
	if len(h.RowsByTable) > 0 {
		m.p("| table | rows/s |\n|---|---|\n")
		for _, t := range HistoryTables {
			if v, ok := h.RowsByTable[t]; ok {
				m.p("| %s | %s |\n", t, Num(v))
			}
		}
		m.p("\n")
	}
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
	return fmt.Sprintf("%s → %s records (max %s)", Num(float64(l.Start)), Num(float64(l.End)), Num(float64(l.Max)))
}

func (m *markdown) scale(s *ScaleResult) {
	m.p("## Redis memory and counts at scale\n\n")
	m.p("%s registered users, %s online (%.0f%%), %d shards, bulk-loaded into the stack's Redis: first in Pulse's layout through `statestore` (minimal states), then, after deleting it, in the seed's direct layout. Ratios are baseline ÷ Pulse.\n\n",
		Num(float64(s.Users)), Num(float64(s.Online)), 100*s.OnlineFraction, s.Shards)
	m.p("| | Pulse (bitmaps) | baseline (seed) | baseline ÷ Pulse |\n|---|---|---|---|\n")
	m.p("| bulk load | %.1f s | %.1f s | |\n", s.Pulse.LoadSeconds, s.Baseline.LoadSeconds)
	m.p("| Redis memory (used_memory growth) | %s | %s | %s |\n", bytesOf(s.Pulse.UsedMemoryBytes), bytesOf(s.Baseline.UsedMemoryBytes),
		Sig(Ratio(float64(s.Baseline.UsedMemoryBytes), float64(s.Pulse.UsedMemoryBytes))))
	m.p("| per registered user | %s B | %s B | %s |\n", Sig(s.Pulse.BytesPerRegisteredUser), Sig(s.Baseline.BytesPerRegisteredUser), Sig(s.RegisteredMemoryRatio))
	m.p("| online structure (bitmaps / sorted set) | %s | %s | |\n", bytesOf(s.Pulse.OnlineStructureBytes), bytesOf(s.Baseline.OnlineStructureBytes))
	m.p("| per online user | %s B | %s B | %s |\n", Sig(s.Pulse.BytesPerOnlineUser), Sig(s.Baseline.BytesPerOnlineUser), Sig(s.OnlineMemoryRatio))
	pc, bc := s.Pulse.CountsMs, s.Baseline.CountsMs
	m.p("| counts p50 | %s | %s | %s |\n", FmtMs(pc.P50, pc.Count), FmtMs(bc.P50, bc.Count), Sig(s.CountsP50Speedup))
	m.p("| counts p99 | %s | %s | %s |\n", FmtMs(pc.P99, pc.Count), FmtMs(bc.P99, bc.Count), Sig(s.CountsP99Speedup))
	m.p("| counts p99.9 | %s | %s | |\n", FmtMs(pc.P999, pc.Count), FmtMs(bc.P999, bc.Count))
	m.p("| counts read | %s | %s | |\n", s.Pulse.CountsCall, s.Baseline.CountsCall)
	if rc := s.Pulse.RedisCountsMs; rc.Count > 0 {
		m.p("| Redis read behind Pulse's count p50 / p99 | %s / %s | | %s (p50) |\n", FmtMs(rc.P50, rc.Count),
			FmtMs(rc.P99, rc.Count), Sig(Ratio(bc.P50, rc.P50)))
		m.p("| what that read is | %s | | |\n", s.Pulse.RedisCountsCall)
	}
	m.p("| machine while timing counts: busy / others / stolen (cores) | %s | %s | |\n\n", machineText(s.Pulse.CountsMachine), machineText(s.Baseline.CountsMachine))
	for _, l := range []struct {
		name string
		l    Layout
	}{{"Pulse", s.Pulse}, {"baseline", s.Baseline}} {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(l.l.Parts)) {
			parts = append(parts, fmt.Sprintf("%s %s", k, bytesOf(l.l.Parts[k])))
		}
		m.p("%s memory by key family: %s.\n\n", l.name, strings.Join(parts, ", "))
	}
}

// limits renders the limits phase and Pulse ÷ limit for each stage.
func (m *markdown) limits(r *Results) {
	m.p("## Pulse against the engines' own limits\n\n")
	m.p("Each limit is the engine alone, on the same servers in the same run, doing work of the same shape as Pulse's stage. The machine is shared by everything, so a limit is what the engine did beside the rest of the stack at rest, not on a machine of its own.\n\n")
	if len(r.Ratios) > 0 {
		m.p("| stage | Pulse | limit | Pulse ÷ limit | Pulse's figure | the limit |\n|---|---|---|---|---|---|\n")
		for _, x := range r.Ratios {
			pv, lv, ratio := "not measured", "not measured", "not measured"
			if x.PulseValue > 0 {
				pv = Num(x.PulseValue) + " " + x.Unit
			}
			if x.LimitValue > 0 {
				lv = Num(x.LimitValue) + " " + x.Unit
			}
			if x.Measured {
				ratio = "**" + Pct(x.Ratio) + "**"
			}
			what := x.Pulse
			if x.Note != "" {
				what += " (" + x.Note + ")"
			}
			m.p("| %s | %s | %s | %s | %s | %s |\n", x.Stage, pv, lv, ratio, what, x.Limit)
		}
		m.p("\n")
	}
	l := r.Limits
	if l == nil {
		return
	}
	if k := l.Kafka; k != nil {
		m.p("**Kafka**: `org.apache.kafka.tools.ProducerPerformance` (%s), unthrottled, %s B per record (a presence.events record's key, schema header and %s B protobuf value), %d partitions × %d replicas, `%s`: **%s records/s, %.2f MB/s**, average latency %s, max %s, over %d report windows (%.1f s) after %d of warm-up. Keys: %s. Kafka's CPU meanwhile: %.2f cores; the tool's JVM: %.1f CPU seconds. Output: `%s`.\n\n",
			k.Tool, Sig(k.RecordBytes), Sig(k.ValueBytes), k.Partitions, k.Replicas, strings.Join(k.Props[1:], " "), Num(k.RecordsPerSec), k.MBPerSec,
			FmtMs(k.AvgLatencyMs, 1), FmtMs(k.MaxLatencyMs, 1), k.Windows, k.Seconds, PerfWarmWindows, k.Keys, k.KafkaCPUCores, k.CPUSeconds, k.Raw)
	}
	if x := l.Redis; x != nil {
		m.p("**Redis**: windows of %d users of one shard (%d shards, %d writers, %s B states), as the aggregator writes them. Minimal pipelined go-redis loop (%s): **%s users/s** (%s users in %.1f s, Redis %.2f cores). The same windows through `statestore.WriteWindow` (one Lua script call, guarded by the shard's offset): %s users/s (%s users in %.1f s, Redis %.2f cores).\n\n",
			x.UsersPerWindow, x.Shards, x.Writers, Sig(x.StateBytes), x.Commands, Num(x.Loop.UsersPerSec), Num(float64(x.Loop.Users)), x.Loop.Seconds, x.Loop.RedisCPUCore,
			Num(x.WriteWindow.UsersPerSec), Num(float64(x.WriteWindow.Users)), x.WriteWindow.Seconds, x.WriteWindow.RedisCPUCore)
	}
	if c := l.Cassandra; c != nil {
		m.p("**Cassandra**: a minimal gocql writer of history's user_activity inserts and user_status updates (internal/stores/historystore's statements, heartbeats without an activity row as history's default), %d users under `%s` in keyspace %s, packed as history packs them (≤ %d statements and ≤ %d partition keys per unlogged batch), %d requests in flight: **%s rows/s** (%s user_activity, %s user_status rows in %.1f s; %d requests, %d failed; request p50 %s, p99 %s; Cassandra %.2f cores, bench %.2f).\n\n",
			c.Users, c.UserPrefix, c.Keyspace, c.MaxStatements, c.MaxKeys, c.Concurrency, Num(c.RowsPerSec), Num(float64(c.RowsByTable["user_activity"])),
			Num(float64(c.RowsByTable["user_status"])), c.Seconds, c.Requests, c.Failed, FmtMs(c.WriteMs.P50, c.WriteMs.Count), FmtMs(c.WriteMs.P99, c.WriteMs.Count),
			c.CPU["cassandra"], c.CPU["bench"])
		if c.Deleted {
			m.p("Every partition it wrote was deleted afterwards.\n\n")
		}
	}
	if e := l.Echo; e != nil {
		m.p("**Bare Echo handler** (decodes the POST /status body, answers 202; in bench's process), under loadgen's single-event load:\n\n")
		m.p("| offered ev/s | accepted ev/s | failed | p50 | p99 | loadgen cores | loadgen share of the machine | bench cores (handler) | result |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, s := range e.Steps {
			res := "kept up"
			if !s.KeptUp {
				res = "**fell behind**"
			}
			m.p("| %s | %s | %.2f%% | %s | %s | %.2f | %s | %.2f | %s |\n", Num(s.OfferedEventsPerSec), Num(s.AcceptedEventsPerSec), 100*s.FailedFraction,
				FmtMs(s.Ms.P50, s.Ms.Count), FmtMs(s.Ms.P99, s.Ms.Count), s.LoadgenCores, Pct(s.LoadgenMachineShare), s.BenchCores, res)
		}
		if last := e.Steps[len(e.Steps)-1]; last.KeptUp {
			m.p("\nEvery step kept up: %s events/s is a floor of the handler's rate, and Pulse ÷ it a ceiling of the ratio.\n", Num(e.MaxAcceptedEventsPerSec))
		}
		m.p("\n")
	}
}

func (m *markdown) present(r *PresentResult) {
	m.p("## Present sockets\n\n")
	m.p("%s WebSockets opened with `?present=` on one query instance of the phase's own, each a device of its own user, pinged every %.0f s (`PULSE_PRESENT_HEARTBEAT`); each answered ping is a heartbeat event acknowledged by Kafka. Memory is query's after the sockets opened less before, per socket; CPU is query's over %.0f s of steady state ÷ the heartbeats acknowledged in it. Then every client closes its socket at once: one offline event each.\n\n",
		Num(float64(r.Sockets)), r.HeartbeatSeconds, r.WindowSeconds)
	m.p("| sockets | opened in | resident / socket | Go heap / socket | heartbeats/s (expected) | CPU / heartbeat | query cores | ack p50 / p99 | refused | offline events/s |\n|---|---|---|---|---|---|---|---|---|---|\n")
	m.p("| %s | %.1f s | %.1f KiB | %.1f KiB | %s (%s) | %.1f µs | %.2f | %.1f / %.1f ms | %d | %s |\n\n", Num(float64(r.Sockets)), r.OpenSeconds,
		r.RSSBytesPerSocket/1024, r.HeapBytesPerSocket/1024, Num(r.HeartbeatsPerSecond), Num(r.ExpectedPerSecond), r.CPUMicrosPerHeartbeat,
		r.QueryCores, r.AckP50Ms, r.AckP99Ms, r.Refused, Num(r.OfflinePerSecond))
}

func (m *markdown) rebuild(r *RebuildResult) {
	m.p("## Rebuild from the log\n\n")
	m.p("Every shard's bookkeeping deleted at once (what `pulsectl rebuild` does, and what a flushed Redis looks like to the aggregators), timed until the last shard was whole again, polled every 50 ms.\n\n")
	m.p("| shards | records folded | users registered (before → after) | time | users/s into Redis | records/s |\n|---|---|---|---|---|---|\n")
	m.p("| %d | %s | %s → %s | %.2f s | %s | %s |\n\n", r.Shards, Num(float64(r.Records)), Num(float64(r.RegisteredBefore)),
		Num(float64(r.RegisteredAfter)), r.Seconds, Num(r.UsersPerSecond), Num(r.RecordsPerSecond))
}

func (m *markdown) scaleOut(r *ScaleOutResult) {
	m.p("## Scale-out: one aggregator, then two\n\n")
	m.p("%s events of %s users (loadgen's mix) produced straight into a topic of the phase's own, then folded from its start by one aggregator and by two sharing a consumer group, alternately, each run with a group and an empty Redis prefix of its own; events/s is the events ÷ the time from the aggregators' start to the last record folded (the shards' bookkeeping in Redis, polled every 50 ms), start-up and the group's join included. Everything shares this machine's cores, aggregators and servers alike.\n\n",
		Num(float64(r.Events)), Num(float64(r.Users)))
	m.p("| topology | partitions × replicas | Redis nodes | aggregators | events/s | first window | all folded | aggregator cores | machine cores busy | two ÷ one |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, t := range r.Topologies {
		for i, run := range t.Runs {
			speedup := ""
			if i == len(t.Runs)-1 && t.Speedup > 0 {
				speedup = fmt.Sprintf("%.2f× (means)", t.Speedup)
			}
			m.p("| %s | %d × %d | %d | %d | %s | %.1f s | %.1f s | %.2f | %.2f | %s |\n", t.Topology, t.Partitions, t.Replication,
				t.RedisNodes, run.Aggregators, Num(run.EventsPerSec), run.FirstWriteSeconds, run.Seconds, run.AggregatorCores, run.MachineBusyCores, speedup)
		}
	}
	m.p("\n")
}

// groups renders the groups phase: the large group and the small rooms side by side,
// then Centrifugo's presence_stats when it was compared.
func (m *markdown) groups(g *GroupsResult) {
	m.p("## Groups\n\n")
	m.p("%s registered users (%s online) in %d shards, %s in %.1f s; memberships written through query's API as member events and folded by an aggregator of the phase's own (its start, reading every online user's state: %.1f s). Counts are never cached: each is one read of the group's counts per shard.\n\n",
		Num(float64(g.Users)), Num(float64(g.OnlineUsers)), g.Shards, g.Seeding, g.LoadSeconds, g.AggregatorStartSeconds)
	cases := []*GroupCase{&g.Large}
	head := "| | large group |"
	if g.Small != nil {
		cases = append(cases, g.Small)
		head += " small rooms |"
	}
	m.p("%s\n|---|%s\n", head, strings.Repeat("---|", len(cases)))
	row := func(name string, cell func(c *GroupCase) string) {
		m.p("| %s |", name)
		for _, c := range cases {
			m.p(" %s |", cell(c))
		}
		m.p("\n")
	}
	row("groups × members", func(c *GroupCase) string {
		return fmt.Sprintf("%s × %s (%s online)", Num(float64(c.Groups)), Num(float64(c.MembersPerGroup)), Num(float64(c.OnlineMembers)))
	})
	row("written as", func(c *GroupCase) string {
		return fmt.Sprintf("%s: %s of ≤ %s ids, %d in flight", c.Write, plural(c.Requests, "request"), Num(float64(c.IDsPerRequest)), c.Writers)
	})
	row("write request p50 / p99", func(c *GroupCase) string { return msPair(c.WriteMs) })
	row("member events/s acknowledged (all 202s)", func(c *GroupCase) string {
		return fmt.Sprintf("**%s** (%.2f s)", Num(c.AckedEventsPerSec), c.AckedSeconds)
	})
	row("member events/s folded (all readable)", func(c *GroupCase) string {
		return fmt.Sprintf("**%s** (%.2f s)", Num(c.FoldedEventsPerSec), c.FoldedSeconds)
	})
	row("CPU per member event: query / aggregator", func(c *GroupCase) string {
		return fmt.Sprintf("%s µs / %s µs", Sig(c.QueryCPUMicrosPerEvent), Sig(c.AggregatorCPUMicrosPerEvent))
	})
	row("Redis bytes per member (bitmaps + count hashes)", func(c *GroupCase) string {
		return fmt.Sprintf("**%s B** (%s + %s)", Sig(c.BytesPerMember), bytesOf(c.BitmapBytes), bytesOf(c.CountHashBytes))
	})
	row("used_memory growth per member (clients' buffers left out)", func(c *GroupCase) string {
		return fmt.Sprintf("%s B (%s)", Sig(c.UsedBytesPerMember), bytesOf(c.UsedMemoryBytes))
	})
	row("aggregator live heap growth per member", func(c *GroupCase) string { return Sig(c.AggregatorHeapBytesPerMember) + " B" })
	row("count p50 / p99 (HTTP, sequential)", func(c *GroupCase) string { return "**" + msPair(c.CountMs) + "**" })
	row("count, concurrent readers", func(c *GroupCase) string {
		cc := c.CountConcurrent
		if cc.Calls == 0 {
			return "–"
		}
		return fmt.Sprintf("%d readers: %s calls/s, p50 / p99 %s", cc.Readers, Num(cc.CallsPerSec), msPair(cc.Ms))
	})
	row("Redis read behind a count p50 / p99 (statestore.GroupCounts)", func(c *GroupCase) string { return msPair(c.StoreCountMs) })
	row("machine while timing the reads: busy / others / stolen (cores)", func(c *GroupCase) string { return machineText(c.ReadsMachine) })
	if l := g.Large; l.PageMs.Count > 0 {
		m.p("| page of %d online members p50 / p99 | **%s** (%s, %s users, %s) |", l.PageLimit, msPair(l.PageMs),
			plural(int(l.PageMs.Count), "page"), Num(float64(l.PageUsers)), plural(l.Walks, "whole walk"))
		if g.Small != nil {
			m.p(" |")
		}
		m.p("\n")
	}
	m.p("\n")
	if c := g.Centrifugo; c != nil {
		m.p("**Centrifugo** %s (`%s`), Redis engine on %s (%s): server API `presence_stats` on a channel of %s presence entries written into its Redis keys in its own format, one untimed call then %d timed: p50 %s, p99 %s (num_clients %s, num_users %s); **%s× the group's count at p50, %s× at p99**. Its presence keys take %s in Redis, %s B per entry.\n\n",
			c.Version, c.Binary, c.Redis, c.Setup, Num(float64(c.Entries)), c.Ms.Count, FmtMs(c.Ms.P50, c.Ms.Count), FmtMs(c.Ms.P99, c.Ms.Count),
			Num(float64(c.NumClients)), Num(float64(c.NumUsers)), Sig(g.CentrifugoP50Speedup), Sig(g.CentrifugoP99Speedup), bytesOf(c.RedisBytes), Sig(c.BytesPerEntry))
	}
}

// plural prints n things: "1 request", "2 requests", "10,000 requests".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return Num(float64(n)) + " " + thing + "s"
}

// msPair prints a latency's p50 / p99.
func msPair(q Quantiles) string {
	return FmtMs(q.P50, q.Count) + " / " + FmtMs(q.P99, q.Count)
}

// webhooks renders the webhooks phase: one column per endpoint.
func (m *markdown) webhooks(w *WebhooksResult) {
	m.p("## Webhooks\n\n")
	m.p("The stack's notifier delivering presence.changes to %s served by bench (net/http on loopback, every request's `Pulse-Signature` verified with the endpoint's secret), under batched ingest at %s events/s (%s) for %.0f s: %s accepted. The endpoints file took %.1f s to be reloaded. ",
		plural(len(w.Endpoints), "endpoint"), Num(w.OfferedEventsPerSec), w.RateSource, w.LoadSeconds, Num(w.AcceptedEventsPerSec), w.ReloadSeconds)
	m.p("Expected are the %s records of presence.changes from just before the load until the aggregator had folded it (%.1f s after its end; %s distinct change ids, %s undecodable), in each endpoint's view; latency is from a change's record timestamp to its receiver's first receipt of it.\n\n",
		Num(float64(w.Changes)), w.SettleSeconds, Num(float64(w.ChangeIDs)), Num(float64(w.Undecodable)))
	if len(w.Endpoints) == 0 {
		return
	}
	m.p("| |")
	for _, e := range w.Endpoints {
		m.p(" %s |", e.ID)
	}
	m.p("\n|---|%s\n", strings.Repeat("---|", len(w.Endpoints)))
	row := func(name string, cell func(e WebhookEndpoint) string) {
		m.p("| %s |", name)
		for _, e := range w.Endpoints {
			m.p(" %s |", cell(e))
		}
		m.p("\n")
	}
	row("view; batch", func(e WebhookEndpoint) string {
		return fmt.Sprintf("%s; ≤ %d changes or %v", e.View, e.MaxChanges, time.Duration(e.MaxWaitSeconds*float64(time.Second)))
	})
	row("delivery latency p50 / p99 / max", func(e WebhookEndpoint) string {
		l := e.LatencyMs
		return fmt.Sprintf("**%s / %s** / %s", FmtMs(l.P50, l.Count), FmtMs(l.P99, l.Count), FmtMs(l.Max, l.Count))
	})
	row("notifier's own latency p50 / p99 (to its 2xx, bucket bounded)", func(e WebhookEndpoint) string {
		if e.NotifierP99Ms == 0 {
			return "–"
		}
		return FmtMs(e.NotifierP50Ms, 1) + " / " + FmtMs(e.NotifierP99Ms, 1)
	})
	row("changes/s delivered during the load (produced in the view)", func(e WebhookEndpoint) string {
		return fmt.Sprintf("**%s** (%s)", Num(e.DeliveredPerSec), Num(e.ProducedPerSec))
	})
	row("changes expected / delivered / missing", func(e WebhookEndpoint) string {
		return fmt.Sprintf("%s / %s / %s", Num(float64(e.Expected)), Num(float64(e.Delivered)), Num(float64(e.Missing)))
	})
	row("duplicates; received from outside the window", func(e WebhookEndpoint) string {
		return fmt.Sprintf("%s; %s", Num(float64(e.Duplicates)), Num(float64(e.Outside)))
	})
	row("requests (changes per request)", func(e WebhookEndpoint) string {
		return fmt.Sprintf("%s (%.1f)", Num(float64(e.Requests)), e.ChangesPerRequest)
	})
	row("invalid signatures; malformed", func(e WebhookEndpoint) string {
		return fmt.Sprintf("%d; %d", e.InvalidSignatures, e.Malformed)
	})
	row("last change of the window first received, after the load's end", func(e WebhookEndpoint) string { return fmt.Sprintf("%.2f s", e.LastDeliverySeconds) })
	m.p("\n")
	if w.NotifierCores > 0 {
		m.p("The notifier used %.2f cores from the load's start until bench had seen every change delivered (or stopped waiting), %s µs of CPU per change delivered.\n\n", w.NotifierCores, Sig(w.NotifierCPUMicrosPerChange))
	}
	for _, e := range w.Endpoints {
		if len(e.MissingIDs) > 0 {
			m.p("%s never got %s changes, among them %s.\n\n", e.ID, Num(float64(e.Missing)), strings.Join(e.MissingIDs, ", "))
		}
	}
}
