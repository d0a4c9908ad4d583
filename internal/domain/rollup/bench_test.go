package rollup_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/rollup"
)

const benchUsers = 100_000

// benchShard is a shard of 100k users, all of them present, and a stream of further
// changes among them, one every 10 ms of log time.
type benchShard struct {
	f     *rollup.Fold
	ids   []string
	cur   []presence.Status
	next  []int32 // users in the order they change
	t     time.Time
	count int
	// heapPerUser is the fold's heap per present user (ids are the caller's).
	heapPerUser float64
}

func newBenchShard(b *testing.B) *benchShard {
	b.Helper()
	s := &benchShard{t: time.Date(2026, 3, 14, 8, 0, 0, 0, time.UTC)}
	rng := rand.New(rand.NewPCG(1, 2))
	for range benchUsers {
		s.ids = append(s.ids, fmt.Sprintf("%08x-user", rng.Uint32()))
		s.cur = append(s.cur, presence.Offline)
	}
	for range 1 << 20 {
		s.next = append(s.next, int32(rng.IntN(benchUsers)))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f, err := rollup.New(rollup.Config{Shard: 1})
	if err != nil {
		b.Fatal(err)
	}
	s.f = f
	for u := range benchUsers {
		s.change(u, presence.Online)
	}
	f.Advance(s.t)
	f.Flush()
	runtime.GC()
	runtime.ReadMemStats(&after)
	s.heapPerUser = float64(after.HeapAlloc-before.HeapAlloc) / benchUsers
	return s
}

func (s *benchShard) change(u int, to presence.Status) {
	s.t = s.t.Add(10 * time.Millisecond)
	s.f.Apply(rollup.Change{UserID: s.ids[u], Index: uint32(u), Previous: s.cur[u], Current: to, At: s.t})
	s.cur[u] = to
}

// step changes the next user: mostly between online and idle, sometimes offline and
// back, sometimes invisible.
func (s *benchShard) step() {
	u := int(s.next[s.count&(len(s.next)-1)])
	s.count++
	to := presence.Online
	switch s.cur[u] {
	case presence.Online:
		to = presence.Idle
		if s.count%5 == 0 {
			to = presence.Offline
		}
	case presence.Idle:
		if s.count%7 == 0 {
			to = presence.Invisible
		}
	}
	s.change(u, to)
}

// BenchmarkApply is the cost of one change in a shard of 100k users. In "apply" the
// watermark advances and rows are flushed every 4,096 changes outside the timer; in
// "apply+flush" every 1,024 changes (about a poll of the history service) inside it,
// so it includes making the rows: about two per change, its session and its day.
func BenchmarkApply(b *testing.B) {
	b.Run("apply", func(b *testing.B) {
		s := newBenchShard(b)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			s.step()
			if s.count%4096 == 0 {
				b.StopTimer()
				s.f.Advance(s.t)
				s.f.Flush()
				b.StartTimer()
			}
		}
		b.ReportMetric(s.heapPerUser, "heap-bytes/user")
	})
	b.Run("apply+flush", func(b *testing.B) {
		s := newBenchShard(b)
		rows := 0
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			s.step()
			if s.count%1024 == 0 {
				s.f.Advance(s.t)
				r := s.f.Flush()
				rows += r.Len()
			}
		}
		b.ReportMetric(float64(rows)/float64(b.N), "rows/op")
	})
}

// BenchmarkCheckpoint is a checkpoint of a shard of 100k present users: its size per
// user and the time to take and restore it.
func BenchmarkCheckpoint(b *testing.B) {
	s := newBenchShard(b)
	for range 10_000 {
		s.step()
	}
	s.f.Advance(s.t)
	s.f.Flush()
	snap, err := s.f.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("marshal", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.f.MarshalBinary(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(snap))/benchUsers, "bytes/user")
	})
	b.Run("unmarshal", func(b *testing.B) {
		for b.Loop() {
			f, _ := rollup.New(rollup.Config{Shard: 1})
			if err := f.UnmarshalBinary(snap); err != nil {
				b.Fatal(err)
			}
		}
	})
}
