package feed

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

// BenchmarkFanOut measures delivery to 10,000 subscribers through kfake: each watches
// 10 users of 10,000 (a change reaches ~10 subscribers), or 1 of 100 (~100). b.N
// changes are produced as fast as the producer can (throughput) or at a fixed rate
// (latency), and each subscriber drains its session as a connection's writer would,
// without the network. It reports messages delivered per second and the p50/p99 of
// now − changed_at at delivery, which includes the produce and the hub's fetch.
//
//	go test -run '^$' -bench FanOut -benchtime 20000x ./services/query/feed/
func BenchmarkFanOut(b *testing.B) {
	for _, tc := range []struct{ subscribers, perSub, users, rate int }{
		{10_000, 10, 10_000, 0},
		{10_000, 10, 10_000, 2_000},
		{10_000, 1, 100, 0}, // hot users: each change reaches ~100 subscribers
		{10_000, 1, 100, 500},
	} {
		rate := "max"
		if tc.rate > 0 {
			rate = fmt.Sprint(tc.rate)
		}
		b.Run(fmt.Sprintf("subs=%d/watch=%d/users=%d/changes_per_s=%s", tc.subscribers, tc.perSub, tc.users, rate), func(b *testing.B) {
			benchFanOut(b, tc.subscribers, tc.perSub, tc.users, tc.rate)
		})
	}
}

// benchFanOut produces b.N changes, at rate per second (0: as fast as possible).
func benchFanOut(b *testing.B, subscribers, perSub, users, rate int) {
	h := newHarness(b, 4, func(c *Config) { c.ReplayBuffer = 4096; c.MaxUsers = perSub })
	h.start()
	rng := rand.New(rand.NewPCG(1, 2))
	ids := make([]string, users)
	for i := range ids {
		ids[i] = fmt.Sprintf("user-%d", i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var delivered, kicked atomic.Int64
	delays := make([][]time.Duration, subscribers)
	ready := make(chan struct{}, subscribers)
	subsOf := make(map[string]int64)
	for i := range subscribers {
		watch := make([]string, perSub)
		for j := range watch {
			watch[j] = ids[rng.IntN(users)]
		}
		for _, id := range dedupe(watch) {
			subsOf[id]++
		}
		s, err := h.hub.Open(context.Background(), Options{UserIDs: watch})
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			defer s.Close()
			first := true
			for {
				m, err := s.Next(ctx)
				if err != nil {
					if err == ErrSlowConsumer {
						kicked.Add(1)
					}
					return
				}
				if first {
					first = false
					ready <- struct{}{}
					continue
				}
				delays[i] = append(delays[i], time.Since(m.at))
				delivered.Add(1)
			}
		})
	}
	for range subscribers {
		<-ready
	}
	statuses := []presence.Status{presence.Online, presence.Idle, presence.Offline}
	b.ResetTimer()
	start := time.Now()
	batch, tick := 500, time.Duration(0)
	if rate > 0 {
		batch, tick = max(1, rate/50), 20*time.Millisecond
	}
	next := time.Now()
	changes := make([]*pulsev1.Change, 0, batch)
	var want int64
	for i := range b.N {
		c := h.change(ids[rng.IntN(users)], statuses[i%len(statuses)])
		c.ChangedAtUs = time.Now().UnixMicro()
		if c.Previous != c.Current {
			changes = append(changes, c)
			want += subsOf[c.UserId]
		}
		if (i+1)%batch == 0 || i == b.N-1 {
			if tick > 0 {
				next = next.Add(tick)
				time.Sleep(time.Until(next))
				for _, c := range changes {
					c.ChangedAtUs = time.Now().UnixMicro()
				}
			}
			h.produce(changes...)
			changes = changes[:0]
		}
	}
	// Done when every change reached every subscriber of its user.
	deadline := time.Now().Add(2 * time.Minute)
	for delivered.Load()+kicked.Load() < want && time.Now().Before(deadline) && kicked.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	wg.Wait()
	var all []time.Duration
	for _, d := range delays {
		all = append(all, d...)
	}
	slices.Sort(all)
	p := func(q float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[int(q*float64(len(all)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(delivered.Load())/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(p(0.5), "p50-ms")
	b.ReportMetric(p(0.99), "p99-ms")
	b.ReportMetric(float64(kicked.Load()), "slow-kicks")
	b.ReportMetric(0, "ns/op")
}
