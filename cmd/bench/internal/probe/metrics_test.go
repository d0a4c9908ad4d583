package probe

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const samplePage = `# HELP pulse_history_rows_written_total Rows written (inserted or updated) in Cassandra, by table.
# TYPE pulse_history_rows_written_total counter
pulse_history_rows_written_total{table="user_activity"} 1500
pulse_history_rows_written_total{table="user_status"} 700
pulse_ingest_events_accepted_total{kind="status"} 10
pulse_ingest_events_accepted_total{kind="heartbeat"} 30
go_goroutines 42
odd_labels{a="x,y",b="say \"hi\"\\"} 1.5e3 1700000000000
# TYPE pulse_history_commit_lag_seconds histogram
pulse_history_commit_lag_seconds_bucket{topic="presence.events",le="0.1"} 10
pulse_history_commit_lag_seconds_bucket{topic="presence.events",le="1"} 90
pulse_history_commit_lag_seconds_bucket{topic="presence.events",le="+Inf"} 100
pulse_history_commit_lag_seconds_bucket{topic="presence.changes",le="0.1"} 0
pulse_history_commit_lag_seconds_bucket{topic="presence.changes",le="1"} 0
pulse_history_commit_lag_seconds_bucket{topic="presence.changes",le="+Inf"} 0
pulse_history_commit_lag_seconds_sum{topic="presence.events"} 40
pulse_history_commit_lag_seconds_count{topic="presence.events"} 100
`

func TestParseMetrics(t *testing.T) {
	m, err := ParseMetrics(strings.NewReader(samplePage))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		want []string
		v    float64
	}{
		{"pulse_history_rows_written_total", nil, 2200},
		{"pulse_history_rows_written_total", []string{"table", "user_status"}, 700},
		{"pulse_ingest_events_accepted_total", nil, 40},
		{"go_goroutines", nil, 42},
		{"odd_labels", []string{"a", "x,y", "b", `say "hi"\`}, 1500},
		{"missing", nil, 0},
	} {
		if got := m.Sum(tt.name, tt.want...); got != tt.v {
			t.Errorf("sum(%s, %q) = %v, want %v", tt.name, tt.want, got, tt.v)
		}
	}
}

func TestParseMetricsErrors(t *testing.T) {
	for _, page := range []string{"novalue\n", `x{a="1"`, `x{a=1} 2`, "x notanumber\n"} {
		if _, err := ParseMetrics(strings.NewReader(page)); err == nil {
			t.Errorf("ParseMetrics(%q) succeeded", page)
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	m, err := ParseMetrics(strings.NewReader(samplePage))
	if err != nil {
		t.Fatal(err)
	}
	bs := m.Buckets("pulse_history_commit_lag_seconds")
	if len(bs) != 3 || bs[0].le != 0.1 || bs[0].count != 10 || !math.IsInf(bs[2].le, 1) || bs[2].count != 100 {
		t.Fatalf("buckets = %+v", bs)
	}
	for _, tt := range []struct{ q, want float64 }{
		{0.05, 0.05}, // half-way through the first Bucket, from 0
		{0.5, 0.55},  // rank 50: 40 of the 80 in (0.1, 1]
		{0.9, 1},
		{0.99, 1}, // in +Inf: the highest finite bound
	} {
		if got := Quantile(bs, tt.q); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if got := Quantile(nil, 0.5); !math.IsNaN(got) {
		t.Errorf("quantile of nothing = %v, want NaN", got)
	}
}

func TestBucketDelta(t *testing.T) {
	start := []Bucket{{0.1, 10}, {1, 90}, {math.Inf(1), 100}}
	end := []Bucket{{0.1, 10}, {1, 190}, {math.Inf(1), 300}}
	d := BucketDelta(start, end)
	want := []Bucket{{0.1, 0}, {1, 100}, {math.Inf(1), 200}}
	for i := range want {
		if d[i] != want[i] {
			t.Fatalf("BucketDelta = %+v, want %+v", d, want)
		}
	}
	// Rank 50 of the step's 200 batches is half-way through (0.1, 1].
	if got := Quantile(d, 0.25); got != 0.55 {
		t.Errorf("p25 of the delta = %v, want 0.55", got)
	}
}

func TestScrape(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, samplePage)
	}))
	defer srv.Close()
	m, err := Scrape(context.Background(), srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Sum("pulse_history_rows_written_total"); got != 2200 {
		t.Fatalf("scraped rows %v, want 2200", got)
	}
}
