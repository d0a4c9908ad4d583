package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// notifierMetrics is the notifier's /metrics at three reads: billing delivers, crm
// fails then recovers (and restarts before the third read), slow is behind.
var notifierMetrics = []string{`# HELP pulse_notifier_endpoints Endpoints configured.
# TYPE pulse_notifier_endpoints gauge
pulse_notifier_endpoints 3
# TYPE pulse_notifier_deliveries_total counter
pulse_notifier_deliveries_total{endpoint="billing",outcome="delivered"} 40
pulse_notifier_deliveries_total{endpoint="billing",outcome="failed"} 2
pulse_notifier_deliveries_total{endpoint="crm",outcome="dead"} 2
pulse_notifier_deliveries_total{endpoint="crm",outcome="delivered"} 10
pulse_notifier_deliveries_total{endpoint="crm",outcome="failed"} 30
pulse_notifier_deliveries_total{endpoint="slow",outcome="delivered"} 5
# TYPE pulse_notifier_changes_total counter
pulse_notifier_changes_total{endpoint="billing",outcome="delivered"} 400
pulse_notifier_changes_total{endpoint="crm",outcome="dead"} 20
pulse_notifier_changes_total{endpoint="crm",outcome="delivered"} 100
pulse_notifier_changes_total{endpoint="slow",outcome="delivered"} 50
# TYPE pulse_notifier_backlog_changes gauge
pulse_notifier_backlog_changes{endpoint="billing"} 0
pulse_notifier_backlog_changes{endpoint="crm"} 7
pulse_notifier_backlog_changes{endpoint="slow"} 120
# TYPE pulse_notifier_oldest_pending_seconds gauge
pulse_notifier_oldest_pending_seconds{endpoint="billing"} 0
pulse_notifier_oldest_pending_seconds{endpoint="crm"} 42.5
pulse_notifier_oldest_pending_seconds{endpoint="slow"} 420
# TYPE pulse_notifier_latency_seconds histogram
pulse_notifier_latency_seconds_bucket{endpoint="billing",le="0.1"} 300
pulse_notifier_latency_seconds_bucket{endpoint="billing",le="0.5"} 396
pulse_notifier_latency_seconds_bucket{endpoint="billing",le="1"} 400
pulse_notifier_latency_seconds_bucket{endpoint="billing",le="+Inf"} 400
pulse_notifier_latency_seconds_sum{endpoint="billing"} 40
pulse_notifier_latency_seconds_count{endpoint="billing"} 400
pulse_notifier_latency_seconds_bucket{endpoint="crm",le="0.1"} 0
pulse_notifier_latency_seconds_bucket{endpoint="crm",le="0.5"} 0
pulse_notifier_latency_seconds_bucket{endpoint="crm",le="1"} 50
pulse_notifier_latency_seconds_bucket{endpoint="crm",le="+Inf"} 100
pulse_notifier_latency_seconds_sum{endpoint="crm"} 150
pulse_notifier_latency_seconds_count{endpoint="crm"} 100
# TYPE pulse_consume_lag_records gauge
pulse_consume_lag_records{topic="presence.changes"} 12
`,
	// 70s later: billing's last 100 changes took longer than a second; crm's POSTs
	// succeed again; slow is still behind.
	`# TYPE pulse_notifier_endpoints gauge
pulse_notifier_endpoints 3
# TYPE pulse_notifier_deliveries_total counter
pulse_notifier_deliveries_total{endpoint="billing",outcome="delivered"} 50
pulse_notifier_deliveries_total{endpoint="billing",outcome="failed"} 2
pulse_notifier_deliveries_total{endpoint="crm",outcome="dead"} 2
pulse_notifier_deliveries_total{endpoint="crm",outcome="delivered"} 30
pulse_notifier_deliveries_total{endpoint="crm",outcome="failed"} 35
pulse_notifier_deliveries_total{endpoint="slow",outcome="delivered"} 6
# TYPE pulse_notifier_changes_total counter
pulse_notifier_changes_total{endpoint="billing",outcome="delivered"} 500
pulse_notifier_changes_total{endpoint="crm",outcome="dead"} 20
pulse_notifier_changes_total{endpoint="crm",outcome="delivered"} 300
pulse_notifier_changes_total{endpoint="slow",outcome="delivered"} 60
# TYPE pulse_notifier_backlog_changes gauge
pulse_notifier_backlog_changes{endpoint="billing"} 0
pulse_notifier_backlog_changes{endpoint="crm"} 0
pulse_notifier_backlog_changes{endpoint="slow"} 130
# TYPE pulse_notifier_oldest_pending_seconds gauge
pulse_notifier_oldest_pending_seconds{endpoint="billing"} 0
pulse_notifier_oldest_pending_seconds{endpoint="crm"} 0
pulse_notifier_oldest_pending_seconds{endpoint="slow"} 400
# TYPE pulse_notifier_latency_seconds histogram
pulse_notifier_latency_seconds_bucket{endpoint="billing",le="0.1"} 300
pulse_notifier_latency_seconds_bucket{endpoint="billing",le="0.5"} 396
pulse_notifier_latency_seconds_bucket{endpoint="billing",le="1"} 400
pulse_notifier_latency_seconds_bucket{endpoint="billing",le="+Inf"} 500
pulse_notifier_latency_seconds_sum{endpoint="billing"} 240
pulse_notifier_latency_seconds_count{endpoint="billing"} 500
pulse_notifier_latency_seconds_bucket{endpoint="crm",le="0.1"} 180
pulse_notifier_latency_seconds_bucket{endpoint="crm",le="0.5"} 298
pulse_notifier_latency_seconds_bucket{endpoint="crm",le="1"} 300
pulse_notifier_latency_seconds_bucket{endpoint="crm",le="+Inf"} 300
pulse_notifier_latency_seconds_sum{endpoint="crm"} 170
pulse_notifier_latency_seconds_count{endpoint="crm"} 300
`,
	// 5s later: crm's counters are back near zero (the notifier restarted, or another of
	// its pods answered), so its figures are since that start; billing's span 75s, from
	// the first read, and slow is gone from the metrics (and from the view).
	`# TYPE pulse_notifier_deliveries_total counter
pulse_notifier_deliveries_total{endpoint="billing",outcome="delivered"} 51
pulse_notifier_deliveries_total{endpoint="billing",outcome="failed"} 2
pulse_notifier_deliveries_total{endpoint="crm",outcome="delivered"} 3
pulse_notifier_deliveries_total{endpoint="crm",outcome="failed"} 4
# TYPE pulse_notifier_changes_total counter
pulse_notifier_changes_total{endpoint="billing",outcome="delivered"} 510
pulse_notifier_changes_total{endpoint="crm",outcome="delivered"} 3
# TYPE pulse_notifier_latency_seconds histogram
pulse_notifier_latency_seconds_bucket{endpoint="billing",le="0.1"} 300
pulse_notifier_latency_seconds_bucket{endpoint="billing",le="0.5"} 396
pulse_notifier_latency_seconds_bucket{endpoint="billing",le="1"} 400
pulse_notifier_latency_seconds_bucket{endpoint="billing",le="+Inf"} 500
pulse_notifier_latency_seconds_sum{endpoint="billing"} 240
pulse_notifier_latency_seconds_count{endpoint="billing"} 500
`,
}

func TestPipelineShowsWebhookEndpoints(t *testing.T) {
	var mu sync.Mutex
	read := 0
	notifier := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = io.WriteString(w, notifierMetrics[read])
	}))
	defer notifier.Close()
	p, err := NewPipeline(Config{Timeout: 5 * time.Second, Peers: []string{"notifier=" + notifier.URL + "/metrics"}},
		prometheus.NewRegistry(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for i, c := range []struct {
		after time.Duration
		want  string
	}{
		{0, `{
  "name": "notifier",
  "up": true,
  "lag": {"presence.changes": 12},
  "endpoints": [
    {"id": "billing", "state": "ok", "delivered": 400, "dead": 0, "backlog": 0, "oldestPendingSeconds": 0,
     "recent": {"attemptsDelivered": 40, "attemptsFailed": 2, "dead": 0, "latencyP99Seconds": 0.5, "latencyMeanSeconds": 0.1}},
    {"id": "crm", "state": "failing", "reason": "30 of 40 POSTs failed, 20 changes dead-lettered since the notifier started",
     "delivered": 100, "dead": 20, "backlog": 7, "oldestPendingSeconds": 42.5,
     "recent": {"attemptsDelivered": 10, "attemptsFailed": 30, "dead": 20, "latencyP99Seconds": 1, "latencyP99AboveBuckets": true, "latencyMeanSeconds": 1.5}},
    {"id": "slow", "state": "behind", "reason": "its oldest pending change is 420 s old (over 300 s)",
     "delivered": 50, "dead": 0, "backlog": 120, "oldestPendingSeconds": 420,
     "recent": {"attemptsDelivered": 5, "attemptsFailed": 0, "dead": 0}}
  ],
  "endpointsConfigured": 3
}`},
		{70 * time.Second, `{
  "name": "notifier",
  "up": true,
  "endpoints": [
    {"id": "billing", "state": "ok", "delivered": 500, "dead": 0, "backlog": 0, "oldestPendingSeconds": 0,
     "recent": {"windowSeconds": 70, "attemptsDelivered": 10, "attemptsFailed": 0, "dead": 0, "latencyP99Seconds": 1, "latencyP99AboveBuckets": true, "latencyMeanSeconds": 2}},
    {"id": "crm", "state": "ok", "delivered": 300, "dead": 20, "backlog": 0, "oldestPendingSeconds": 0,
     "recent": {"windowSeconds": 70, "attemptsDelivered": 20, "attemptsFailed": 5, "dead": 0, "latencyP99Seconds": 0.5, "latencyMeanSeconds": 0.1}},
    {"id": "slow", "state": "behind", "reason": "its oldest pending change is 400 s old (over 300 s)",
     "delivered": 60, "dead": 0, "backlog": 130, "oldestPendingSeconds": 400,
     "recent": {"windowSeconds": 70, "attemptsDelivered": 1, "attemptsFailed": 0, "dead": 0}}
  ],
  "endpointsConfigured": 3
}`},
		{75 * time.Second, `{
  "name": "notifier",
  "up": true,
  "endpoints": [
    {"id": "billing", "state": "ok", "delivered": 510, "dead": 0, "backlog": 0, "oldestPendingSeconds": 0,
     "recent": {"windowSeconds": 75, "attemptsDelivered": 11, "attemptsFailed": 0, "dead": 0, "latencyP99Seconds": 1, "latencyP99AboveBuckets": true, "latencyMeanSeconds": 2}},
    {"id": "crm", "state": "failing", "reason": "4 of 7 POSTs failed since the notifier started",
     "delivered": 3, "dead": 0, "backlog": 0, "oldestPendingSeconds": 0,
     "recent": {"attemptsDelivered": 3, "attemptsFailed": 4, "dead": 0}}
  ]
}`},
	} {
		mu.Lock()
		read = i
		mu.Unlock()
		p.now = func() time.Time { return start.Add(c.after) }
		h := p.Read(context.Background())
		if len(h.Services) != 2 || h.Services[0].Endpoints != nil || h.Services[0].EndpointsConfigured != nil {
			t.Fatalf("read %d: services %+v, want query without endpoints, then the notifier", i, h.Services)
		}
		s := h.Services[1]
		s.URL = ""
		got, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if compact(t, string(got)) != compact(t, c.want) {
			t.Errorf("read %d (+%v):\n got %s\nwant %s", i, c.after, got, compact(t, c.want))
		}
	}
	if n := len(p.endpointReads["notifier"]); n != 2 {
		t.Errorf("the pipeline keeps the reads of %d endpoints, want billing's and crm's", n)
	}
}

func compact(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%v: %s", err, s)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The recent span grows from the first read to recentWindow, then compares with a read
// between one and two windows old, however often the page asks.
func TestEndpointRecentSpan(t *testing.T) {
	notifier := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = io.WriteString(w, notifierMetrics[1])
	}))
	defer notifier.Close()
	p, err := NewPipeline(Config{Timeout: 5 * time.Second, Peers: []string{"notifier=" + notifier.URL + "/metrics"}},
		prometheus.NewRegistry(), nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	var got []string
	for _, after := range []int{0, 5, 30, 60, 65, 115, 120, 125, 400} {
		p.now = func() time.Time { return start.Add(time.Duration(after) * time.Second) }
		e := p.Read(context.Background()).Services[1].Endpoints[0]
		span := "start"
		if w := e.Recent.WindowSeconds; w != nil {
			span = fmt.Sprint(*w)
		}
		got = append(got, fmt.Sprintf("%d:%s", after, span))
	}
	if want := "0:start 5:5 30:30 60:60 65:65 115:115 120:60 125:65 400:280"; strings.Join(got, " ") != want {
		t.Errorf("spans %s, want %s", strings.Join(got, " "), want)
	}
}
