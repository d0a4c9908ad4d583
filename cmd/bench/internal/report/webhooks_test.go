package report

import (
	"strings"
	"testing"
)

// sampleWebhooks is a webhooks phase whose 1 s endpoint missed a change and got one
// twice.
func sampleWebhooks() *WebhooksResult {
	return &WebhooksResult{OfferedEventsPerSec: 5000, RateSource: "-webhooks-rate: no batched steps ran in this run", AcceptedEventsPerSec: 4990,
		LoadSeconds: 30, ReloadSeconds: 7.25, Changes: 60_000, ChangeIDs: 60_000, SettleSeconds: 1.5, NotifierCores: 0.31, NotifierCPUMicrosPerChange: 95.5,
		Endpoints: []WebhookEndpoint{
			{ID: "bench-100ms", View: "public", MaxChanges: 100, MaxWaitSeconds: 0.1, Expected: 40_000, Delivered: 40_000, Requests: 1200, ChangesPerRequest: 33.3,
				LatencyMs: Quantiles{Count: 40_000, P50: 120, P99: 480, Max: 900}, NotifierP50Ms: 110, NotifierP99Ms: 450,
				ProducedPerSec: 1300, DeliveredPerSec: 1290, LastDeliverySeconds: 0.4},
			{ID: "bench-1s", View: "public", MaxChanges: 100, MaxWaitSeconds: 1, Expected: 40_000, Delivered: 39_999, Missing: 1, MissingIDs: []string{"3:1234"},
				Duplicates: 1, Outside: 12, Requests: 420, ChangesPerRequest: 95.2, InvalidSignatures: 0,
				LatencyMs: Quantiles{Count: 39_999, P50: 700, P99: 2100, Max: 2500}, ProducedPerSec: 1300, DeliveredPerSec: 1250, LastDeliverySeconds: 1.2},
		}}
}

func TestWebhooksTargets(t *testing.T) {
	ts := webhooksTargets(sampleWebhooks())
	for _, tt := range []struct {
		id     string
		value  float64
		met    bool
		margin float64
	}{
		{"webhook-p99-bench-100ms", 480, true, (1100 - 480) / 1100.0},
		{"webhook-p99-bench-1s", 2100, false, -0.05},
		{"webhook-delivered", 79_999, false, -1 / 80_000.0},
	} {
		got := target(t, ts, tt.id)
		if !got.Measured || got.Met != tt.met || abs(got.Value-tt.value) > 1e-9 || abs(got.Margin-tt.margin) > 1e-9 {
			t.Errorf("%s = %+v; want value %v, met %v, margin %v", tt.id, got, tt.value, tt.met, tt.margin)
		}
	}
	if n := target(t, ts, "webhook-p99-bench-100ms").Note; n != "p50 120.0 ms, max 900.0 ms; 1,290 changes/s delivered of 1,300 produced in its public view; batched load at 5,000 events/s for 30 s" {
		t.Errorf("p99 note %q", n)
	}
	if n := target(t, ts, "webhook-delivered").Note; n != "bench-100ms 40,000 of 40,000 (0 duplicates, 0 invalid signatures); bench-1s 39,999 of 40,000 (1 duplicates, 0 invalid signatures)" {
		t.Errorf("delivered note %q", n)
	}
	for _, x := range webhooksTargets(nil) {
		if x.Measured {
			t.Errorf("%s measured without the phase: %+v", x.ID, x)
		}
	}
	if len(webhooksTargets(nil)) != 3 {
		t.Error("the targets are not listed without the phase")
	}
}

func TestWebhooksMarkdown(t *testing.T) {
	r := &Results{Webhooks: sampleWebhooks()}
	r.Targets = evaluate(r, 10_000_000)
	md := markdownOf(r, "go run ./cmd/bench -phases webhooks")
	for _, want := range []string{
		"## Webhooks",
		"to 2 endpoints served by bench",
		"under batched ingest at 5,000 events/s (-webhooks-rate: no batched steps ran in this run) for 30 s: 4,990 accepted. The endpoints file took 7.2 s to be reloaded.",
		"Expected are the 60,000 records of presence.changes from just before the load until the aggregator had folded it (1.5 s after its end; 60,000 distinct change ids, 0 undecodable)",
		"| | bench-100ms | bench-1s |\n|---|---|---|\n",
		"| view; batch | public; ≤ 100 changes or 100ms | public; ≤ 100 changes or 1s |",
		"| delivery latency p50 / p99 / max | **120.0 ms / 480.0 ms** / 900.0 ms | **700.0 ms / 2.10 s** / 2.50 s |",
		"| notifier's own latency p50 / p99 (to its 2xx, bucket bounded) | 110.0 ms / 450.0 ms | – |",
		"| changes/s delivered during the load (produced in the view) | **1,290** (1,300) | **1,250** (1,300) |",
		"| changes expected / delivered / missing | 40,000 / 40,000 / 0 | 40,000 / 39,999 / 1 |",
		"| duplicates; received from outside the window | 0; 0 | 1; 12 |",
		"| requests (changes per request) | 1,200 (33.3) | 420 (95.2) |",
		"| invalid signatures; malformed | 0; 0 | 0; 0 |",
		"| last change of the window first received, after the load's end | 0.40 s | 1.20 s |",
		"The notifier used 0.31 cores from the load's start",
		"95.5 µs of CPU per change delivered.",
		"bench-1s never got 1 changes, among them 3:1234.",
		"| changes of the load delivered to the webhook endpoints, each in its view (distinct ids, both endpoints; required: every one expected) | ≥ 80,000 changes | 79,999 changes | −0.0013% | **not met** |",
		"| webhook delivery p99, batches of ≤ 100 changes or 1s (bench's own bound, maxWait + 1s: no target is stated) | ≤ 2.00 s | 2.10 s | −5% | **not met** |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(md)
	}
}
