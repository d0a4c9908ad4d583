package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/services/query/online"
)

// BenchmarkOnline measures GET /v1/online and POST /v1/online/filter, handler and
// Redis round trips included (no network hop to the handler), over 1,000,000 online
// users in 16 shards among 2,000,000 registered, written the aggregator's way under a
// prefix of its own and deleted afterwards. It needs the Redis at PULSE_REDIS_ADDR
// (default the local stack's) and is skipped without it:
//
//	go test -run '^$' -bench BenchmarkOnline -benchtime 2000x ./services/query/
//
// Each sub-benchmark reports the median and 99th percentile latency beside the mean.
func BenchmarkOnline(b *testing.B) {
	store, _ := testStore(b)
	const shards, onlineUsers = 16, 1_000_000
	f := newFixture(b, store, shards)
	rng := rand.New(rand.NewPCG(1, 1))
	f.gap = func() uint32 { return uint32(rng.IntN(3)) } // on average one offline user between two online ones
	now := time.Now()
	users := make([]testUser, onlineUsers)
	for i := range users {
		users[i] = testUser{
			id:         fmt.Sprintf("bench-user-%07d", i),
			status:     presence.Online,
			lastActive: now.Add(-time.Duration(rng.Int64N(int64(2 * time.Hour)))),
		}
		if i%5 == 0 {
			users[i].status = presence.Idle
		}
	}
	start := time.Now()
	f.set(users, 10_000)
	b.Logf("wrote %d users in %v", onlineUsers, time.Since(start).Round(time.Millisecond))
	srv := newTestServer(b, store)

	list := func(query string) func(b *testing.B) {
		return func(b *testing.B) {
			cursor := ""
			measure(b, func() {
				target := "/v1/online?" + query
				if cursor != "" {
					target += "&cursor=" + cursor
				}
				r := call(b, srv, http.MethodGet, target, "", false)
				var res onlineList
				if r.code != http.StatusOK || json.Unmarshal([]byte(r.body), &res) != nil {
					b.Fatalf("GET %s = %d %.200s", target, r.code, r.body)
				}
				cursor = ""
				if res.NextCursor != nil {
					cursor = *res.NextCursor
				}
			})
		}
	}
	b.Run("list/limit=100", list("limit=100"))
	b.Run("list/limit=1000", list("limit=1000"))
	b.Run("list/status=idle/limit=100", list("status=idle&limit=100"))
	b.Run("list/activeWithin=15m/limit=100", list("activeWithin=15m&limit=100"))

	// 10,000 ids: 8,000 known users, 2,000 unknown, shuffled.
	ids := make([]string, 0, 10_000)
	for range 8000 {
		ids = append(ids, users[rng.IntN(onlineUsers)].id)
	}
	for i := range 2000 {
		ids = append(ids, fmt.Sprintf("bench-unknown-%d", i))
	}
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	body, _ := json.Marshal(map[string]any{"userIds": ids})
	filter := func(srv http.Handler) func(b *testing.B) {
		return func(b *testing.B) {
			measure(b, func() {
				r := callHandler(b, srv, http.MethodPost, "/v1/online/filter", string(body), false)
				if r.code != http.StatusOK || len(r.body) < 100_000 {
					b.Fatalf("POST /v1/online/filter = %d %.200s", r.code, r.body)
				}
			})
		}
	}
	b.Run("filter/10000ids/cached", filter(srv.Echo))
	// Without the cache every request loads every involved shard's bitmaps.
	uncached := echo.New()
	h := &onlineHandlers{api: &api{store: store, get: store.Get, timeout: 5 * time.Second, maxBody: 1 << 20, logger: slog.New(slog.DiscardHandler)},
		cache: online.NewBitmapCache(store, 0, time.Now), now: time.Now}
	uncached.POST("/v1/online/filter", h.filter)
	b.Run("filter/10000ids/uncached", filter(uncached))
}

// measure runs op b.N times and reports the latency percentiles.
func measure(b *testing.B, op func()) {
	b.Helper()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		op()
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
