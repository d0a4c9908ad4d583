package main

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// BenchmarkDecodeBatch is the decoding and validation of one POST /v1/events body of
// 100 mixed events: ingest's CPU work per request apart from producing.
func BenchmarkDecodeBatch(b *testing.B) {
	now := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	events := make([]map[string]any, 100)
	kinds := []string{"status", "heartbeat", "activity"}
	for i := range events {
		e := map[string]any{"userId": fmt.Sprintf("0f8fad5b-d9cb-469f-a165-%012d", i), "kind": kinds[i%3],
			"deviceId": "phone", "occurredAt": now.Add(-time.Duration(i) * time.Millisecond)}
		if kinds[i%3] == "status" {
			e["status"] = "online"
		}
		events[i] = e
	}
	body, err := json.Marshal(map[string]any{"events": events})
	if err != nil {
		b.Fatal(err)
	}
	r := newRules(now, 5*time.Minute)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeBatch(body, r, 1000); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(100*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
