package report

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/pulse-presence/pulse/cmd/internal/loadreport"
)

const (
	// ScaleGoal is the registered-user count the counts target is stated at.
	ScaleGoal = 10_000_000
	// CountsInterval is the query service's default PULSE_QUERY_COUNTS_INTERVAL.
	CountsInterval = 100 * time.Millisecond
	// PerfWarmWindows are the first report windows of Kafka's ProducerPerformance left
	// out: the JVM compiles the producer's hot paths over the first 10–15 s.
	PerfWarmWindows = 3
)

// HistoryTables are the tables history writes, as its rows metric labels them.
var HistoryTables = []string{"user_activity", "user_status", "user_sessions", "user_daily", "daily_users",
	"concurrency", "uniques", "rollup_checkpoints"}

// Internals are the services' histograms whose step quantiles results.json keeps, by
// the key prefix of their p50 and p99.
var Internals = []struct{ Key, Service, Metric string }{
	{"ingestProduceSeconds", "ingest", "pulse_ingest_produce_duration_seconds"},
	{"aggregatorFlushSeconds", "aggregator", "pulse_aggregator_flush_seconds"},
	{"historyWriteSeconds", "history", "pulse_history_write_duration_seconds"},
}

// Finish derives what the phases' results add up to: history at -history-at, Pulse ÷
// each limit, and the targets.
func Finish(r *Results, historyAt float64) {
	r.History = historyCheck(r.Batched, historyAt)
	r.Ratios = limitRatios(r)
	r.Targets = evaluate(r, ScaleGoal)
}

// Write puts results.json and results.md into dir and prints the targets table.
func Write(dir string, r *Results, command string, out io.Writer) error {
	var targets markdown
	targets.targets(r.Targets)
	fmt.Fprint(out, "\n"+targets.String())
	return errors.Join(loadreport.WriteJSON(filepath.Join(dir, "results.json"), r),
		os.WriteFile(filepath.Join(dir, "results.md"), []byte(markdownOf(r, command)), 0o644))
}

// Ratio is a ÷ b, 0 when b is not above 0.
func Ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// Pct prints a fraction as a percentage: 0.5 → 50%.
func Pct(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	if v != 0 && math.Abs(v) < 0.01 {
		return fmt.Sprintf("%.2f%%", 100*v)
	}
	return fmt.Sprintf("%.0f%%", 100*v)
}
