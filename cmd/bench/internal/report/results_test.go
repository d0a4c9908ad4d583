package report

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/cmd/internal/loadreport"
)

func q(p50, p99 float64) Quantiles {
	return Quantiles{Count: 100, P50: p50, P90: p99 * 0.8, P99: p99, P999: p99 * 1.5, Max: p99 * 2}
}

// sampleResults is a run in which some targets are met and some are not.
func sampleResults() *Results {
	step := func(mode string, rate, accepted, fresh99 float64, kept bool) StepResult {
		s := StepResult{Mode: mode, OfferedEventsPerSec: rate, AcceptedEventsPerSec: accepted, MeasuredSeconds: 20,
			Requests: 1000, IngestMs: q(2, 9), Freshness: Freshness{Probes: 400, Seen: 400, Ms: q(40, fresh99)},
			Reads:         []ReadResult{{Name: "read", Endpoint: "GET /status/{id}", TargetRate: 200, AchievedRate: 200, OK: 4000, Ms: q(0.4, 1.1)}},
			AggregatorLag: LagSummary{Known: true, Start: 100, End: 300, Max: 900},
			History:       HistoryObs{RowsPerSec: rate * 1.6, LagRecords: 1234, CommitLagKnown: true, CommitLagP99Seconds: 2.5},
			CPU: map[string]ProcCPU{
				"ingest": {Seconds: 4, Cores: 0.2, SecondsPerEvent: 4e-6}, "kafka": {Seconds: 2, Cores: 0.1, SecondsPerEvent: 2e-6},
				"loadgen": {Seconds: 1, Cores: 0.05, SecondsPerEvent: 1e-6},
			},
			KeptUp: kept, Settled: true,
		}
		if !kept {
			s.Reasons = []string{"aggregator lag grew by 90000 records over the step (0 → 90000; allowed 40000)"}
		}
		return s
	}
	half := step("half", 10000, 9990, 120, true)
	half.Reads = append(half.Reads, ReadResult{Name: "batch-read", Endpoint: "POST /statuses", TargetRate: 100, AchievedRate: 99, Ms: q(1, 3)})
	half.Freshness.Ms = q(45, 120)
	return &Results{
		Version: 1, StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), FinishedAt: time.Date(2026, 1, 2, 3, 19, 5, 0, time.UTC),
		Machine: Machine{CPUs: 2, MemoryBytes: 24 << 30, GoVersion: "go1.26", GitCommit: "abc1234", RedisAOF: "yes"},
		Batched: &ModeResult{Mode: "batched", BatchSize: 200, MaxOfferedEventsPerSec: 20000, MaxAcceptedEventsPerSec: 19950,
			Steps: []StepResult{step("batched", 5000, 5000, 60, true), step("batched", 20000, 19950, 90, true), step("batched", 40000, 30000, 2000, false)}},
		BatchedWithoutHistory: &ModeResult{Mode: "batched", BatchSize: 200, MaxOfferedEventsPerSec: 20000, MaxAcceptedEventsPerSec: 24937.5,
			Steps: []StepResult{step("batched", 5000, 5000, 60, true), step("batched", 25000, 24937.5, 90, true), step("batched", 40000, 32000, 2000, false)}},
		Single: &ModeResult{Mode: "single", MaxOfferedEventsPerSec: 5000, MaxAcceptedEventsPerSec: 4990,
			Steps: []StepResult{step("single", 1000, 1000, 50, true), step("single", 5000, 4990, 70, true), step("single", 10000, 6000, 900, false)}},
		Half: &half,
		Scale: &ScaleResult{Users: 1_000_000, Online: 300_000, OnlineFraction: 0.3, Shards: 16,
			Pulse: Layout{UsedMemoryBytes: 200 << 20, BytesPerRegisteredUser: 209.7, OnlineStructureBytes: 130000, BytesPerOnlineUser: 0.43,
				Parts: map[string]int64{"onlineBitmaps": 130000}, CountsCall: "Counts", CountsMs: q(0.2, 0.5)},
			Baseline: Layout{UsedMemoryBytes: 150 << 20, BytesPerRegisteredUser: 157.3, OnlineStructureBytes: 30 << 20, BytesPerOnlineUser: 104.9,
				Parts: map[string]int64{"onlineSortedSet": 30 << 20}, CountsCall: "ZCOUNT", CountsMs: q(0.1, 0.3)},
			CountsP50Speedup: 0.5, CountsP99Speedup: 0.6, OnlineMemoryRatio: 104.9 / 0.43, RegisteredMemoryRatio: 157.3 / 209.7},
		Profiles: []string{}, Notes: []string{"a note"},
	}
}

func target(t *testing.T, ts []Target, id string) Target {
	t.Helper()
	for _, x := range ts {
		if x.ID == id {
			return x
		}
	}
	t.Fatalf("no target %s", id)
	return Target{}
}

func TestEvaluate(t *testing.T) {
	r := sampleResults()
	r.History = historyCheck(r.Batched, 50000)
	ts := evaluate(r, 10_000_000)
	if len(ts) != 21 {
		t.Fatalf("%d targets, want 21", len(ts))
	}
	// No limits, groups or webhooks phase ran: the targets stated against the limits,
	// the groups' and the webhooks' are not measured.
	for _, id := range []string{"batched-vs-kafka", "single-vs-echo", "history-vs-gocql", "group-count-p99", "group-page-p99", "group-count-vs-centrifugo",
		"webhook-p99-bench-100ms", "webhook-p99-bench-1s", "webhook-delivered"} {
		if got := target(t, ts, id); got.Measured {
			t.Errorf("%s measured without the limits phase: %+v", id, got)
		}
	}
	for _, tt := range []struct {
		id     string
		value  float64
		met    bool
		margin float64
	}{
		{"batched-throughput", 19950, false, -0.8005},
		{"single-throughput", 4990, false, -0.7505},
		{"freshness-p50", 45, true, 0.25},
		{"freshness-p99", 120, true, 0.2},
		{"status-read-p99", 1.1, true, 0.45},
		{"counts-p99", 0.5, true, 0.75},
		{"counts-speedup", 0.5, false, -0.95},
		{"online-memory-ratio", 104.9 / 0.43, true, (104.9/0.43 - 20) / 20},
		{"registered-memory-ratio", 157.3 / 209.7, false, (157.3/209.7 - 2) / 2},
		{"history-rows", 64000, true, 2.2}, // the 40k step is the closest to 50k
		{"history-lag", 2.5, true, 0.5},
		{"live-with-history", 0.8, true, 0}, // 19,950 ÷ 24,937.5
	} {
		got := target(t, ts, tt.id)
		if !got.Measured || got.Met != tt.met || abs(got.Value-tt.value) > 1e-9 || abs(got.Margin-tt.margin) > 1e-9 {
			t.Errorf("%s = %+v; want value %v, met %v, margin %v", tt.id, got, tt.value, tt.met, tt.margin)
		}
	}
	if n := target(t, ts, "counts-p99").Note; !strings.Contains(n, "stated at 10,000,000") {
		t.Errorf("counts note %q does not say the run was below the stated scale", n)
	}
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

func TestEvaluateNothingMeasured(t *testing.T) {
	ts := evaluate(&Results{}, 10_000_000)
	for _, x := range ts {
		if x.Measured || x.Met || x.Value != 0 {
			t.Errorf("%s measured without data: %+v", x.ID, x)
		}
	}
	// JSON has no NaN: every unmeasured value must still encode.
	if _, err := json.Marshal(ts); err != nil {
		t.Fatal(err)
	}
}

func TestHistoryCheckFallback(t *testing.T) {
	m := &ModeResult{Steps: []StepResult{{OfferedEventsPerSec: 50000, AcceptedEventsPerSec: 40000, History: HistoryObs{LagRecords: 200000}}}}
	h := historyCheck(m, 50000)
	if !h.LagKnown || h.LagSeconds != 5 || !strings.Contains(h.LagSource, "records behind") {
		t.Fatalf("historyCheck = %+v, want 5 s from records behind", h)
	}
	if historyCheck(nil, 50000) != nil || historyCheck(&ModeResult{}, 50000) != nil {
		t.Fatal("historyCheck without steps is not nil")
	}
}

func TestMarkdown(t *testing.T) {
	r := sampleResults()
	r.History = historyCheck(r.Batched, 50000)
	r.Targets = evaluate(r, 10_000_000)
	md := markdownOf(r, "go run ./cmd/bench -quick")
	for _, want := range []string{
		"# Pulse benchmark, 2026-01-02 03:04 UTC",
		"Command: `go run ./cmd/bench -quick`",
		"| events/s through ingest→Kafka→aggregator→Redis, batched POSTs | ≥ 100,000 events/s | 19,950 events/s | −80% | **not met** |",
		"| freshness p99 at half the max rate | ≤ 150.0 ms | 120.0 ms | +20% | met |",
		"| baseline sorted set ÷ Pulse bitmaps, bytes per online user | ≥ 20× | 244× | +1120% | met |",
		"Highest rate that kept up: **20,000 events/s offered, 19,950 accepted**.",
		"**fell behind**: aggregator lag grew by 90000 records",
		"| POST /statuses | 99 of 100 /s | 1.00 ms | 3.00 ms | 4.50 ms | 0 |",
		"| batched 5,000 ev/s | 4 (0.20) | – | – | – | 2 (0.10) | – | – | 1 (0.05) | – | 6 |",
		"| per online user | 0.43 B | 105 B | 244 |",
		"- a note",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(md)
	}
}

func TestResultsJSON(t *testing.T) {
	dir := t.TempDir()
	r := sampleResults()
	r.History = historyCheck(r.Batched, 50000)
	r.Targets = evaluate(r, 10_000_000)
	if err := loadreport.WriteJSON(filepath.Join(dir, "results.json"), r); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"batched", "single", "half", "history", "scale", "targets", "machine"} {
		if _, ok := back[key]; !ok {
			t.Errorf("results.json lacks %q", key)
		}
	}
	steps := back["batched"].(map[string]any)["steps"].([]any)
	if got := steps[0].(map[string]any)["offeredEventsPerSec"]; got != 5000.0 {
		t.Errorf("batched.steps[0].offeredEventsPerSec = %v", got)
	}
}

func TestFmtMargin(t *testing.T) {
	for _, tt := range []struct {
		t    Target
		v    float64
		want string
	}{
		{Target{Op: ">=", Threshold: 100}, 125, "+25%"},
		{Target{Op: ">=", Threshold: 100}, 20, "−80%"},
		{Target{Op: "<=", Threshold: 2}, 1.5, "+25%"},
		{Target{Op: "<=", Threshold: 2}, 19, "−850%"},
		{Target{Op: "<=", Threshold: 2}, 3000, "1,500× the limit"},
		{Target{Op: "<=", Threshold: 150}, 9930, "66.2× the limit"},
		{Target{Op: ">=", Threshold: 80000}, 79999, "−0.0013%"},
		{Target{Op: ">=", Threshold: 80000}, 80000, "+0%"},
	} {
		if got := fmtMargin(tt.t.judge(tt.v, "")); got != tt.want {
			t.Errorf("margin of %v against %s %v = %q, want %q", tt.v, tt.t.Op, tt.t.Threshold, got, tt.want)
		}
	}
	if got := fmtMargin(Target{Op: "<="}); got != "–" {
		t.Errorf("unmeasured margin %q", got)
	}
}

func TestFormatting(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{Num(0), "0"}, {Num(999), "999"}, {Num(1000), "1,000"}, {Num(125000.4), "125,000"}, {Num(-1234567), "−1,234,567"},
		{FmtMs(0.25, 1), "250 µs"}, {FmtMs(0.0042, 1), "4.2 µs"}, {FmtMs(0.00012, 1), "120 ns"}, {FmtMs(1.234, 1), "1.23 ms"}, {FmtMs(150, 1), "150.0 ms"}, {FmtMs(2500, 1), "2.50 s"}, {FmtMs(3, 0), "–"},
		{bytesOf(512), "512 B"}, {bytesOf(3 << 20), "3.0 MiB"}, {bytesOf(5 << 30), "5.0 GiB"},
		{Sig(0.4321), "0.432"}, {Sig(244.0), "244"}, {Sig(12345), "12,345"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestQuantilesOf(t *testing.T) {
	var d []time.Duration
	for i := 1000; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Microsecond)
	}
	got := QuantilesOf(d)
	want := Quantiles{Count: 1000, Mean: 0.5005, P50: 0.5, P90: 0.9, P99: 0.99, P999: 0.999, Max: 1}
	if got != want {
		t.Fatalf("QuantilesOf = %+v, want %+v", got, want)
	}
	if QuantilesOf(nil) != (Quantiles{}) {
		t.Fatal("QuantilesOf(nil) is not zero")
	}
}
