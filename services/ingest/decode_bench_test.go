package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
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

// BenchmarkPostStatus is one POST /status through the whole server (middleware,
// authentication off, decoding, rate limits, metrics, the answer) and the producer,
// against an in-process Kafka, from many goroutines at once as clients send them:
// ingest's CPU and allocations per single-event request, without the sockets.
func BenchmarkPostStatus(b *testing.B) {
	hs := newHarness(b, nil)
	b.ReportAllocs()
	var next atomic.Int64
	b.SetParallelism(64)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := next.Add(1)
			body := `{"userId":"user-` + strconv.FormatInt(n%100_000, 10) + `","status":"online"}`
			req := httptest.NewRequest(http.MethodPost, "/status", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			hs.srv.Echo.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Fatalf("POST /status: %d %s", rec.Code, rec.Body)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s")
}
