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

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

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
			benchFanOut(b, tc.subscribers, tc.perSub, tc.users, tc.rate, 4096, 0)
		})
	}
}

// BenchmarkFanOutWhileSubscribing is BenchmarkFanOut while churn goroutines each
// loop over what connections do besides reading: a session unsubscribes its users
// and subscribes others (and reads their snapshot), a new session opens, takes its
// snapshot and closes, and a firehose session resumes from the previous one's
// cursor out of the ring (the production default of 65,536 changes) and closes. It
// reports churn-ops/s, loops of the three, besides what BenchmarkFanOut does.
//
//	go test -run '^$' -bench FanOutWhileSubscribing ./services/query/feed/
func BenchmarkFanOutWhileSubscribing(b *testing.B) {
	for _, rate := range []int{0, 2_000} {
		name := "max"
		if rate > 0 {
			name = fmt.Sprint(rate)
		}
		b.Run(fmt.Sprintf("subs=10000/watch=10/users=10000/changes_per_s=%s/churn=4", name), func(b *testing.B) {
			benchFanOut(b, 10_000, 10, 10_000, rate, 65536, 4)
		})
	}
}

// churn loops, until ctx ends, over a subscribe and an unsubscribe on one session,
// a session opened for its snapshot, and a firehose resume out of the ring; each
// loop adds one to ops.
func churn(b *testing.B, ctx context.Context, hub *Hub, ids []string, perSub int, seed uint64, ops *atomic.Int64) {
	rng := rand.New(rand.NewPCG(seed, 9))
	pick := func() []string {
		out := make([]string, perSub)
		for i := range out {
			out[i] = ids[rng.IntN(len(ids))]
		}
		return out
	}
	// untilSnapshot reads s's messages up to a snapshot, and returns it.
	untilSnapshot := func(s *Session) (Message, bool) {
		for {
			m, err := s.Next(ctx)
			if err != nil {
				return Message{}, false
			}
			if m.Type == TypeSnapshot {
				return m, true
			}
		}
	}
	long, err := hub.Open(ctx, Options{})
	if err != nil {
		b.Error(err)
		return
	}
	defer long.Close()
	if _, ok := untilSnapshot(long); !ok {
		return
	}
	var watched []string
	var from *Cursor
	for ctx.Err() == nil {
		if watched != nil {
			_ = long.Unsubscribe(watched)
		}
		watched = pick()
		_ = long.Subscribe(watched)
		if _, ok := untilSnapshot(long); !ok {
			return
		}
		fresh, err := hub.Open(ctx, Options{UserIDs: pick()})
		if err != nil {
			return
		}
		m, ok := untilSnapshot(fresh)
		fresh.Close()
		if !ok {
			return
		}
		c, err := DecodeCursor(m.Cursor)
		if err != nil {
			b.Error(err)
			return
		}
		if from != nil {
			r, err := hub.Open(ctx, Options{Firehose: true, Cursor: from})
			if err != nil {
				return
			}
			_, err = r.Next(ctx) // the first change after the cursor, out of the ring
			r.Close()
			if err != nil {
				return
			}
		}
		from = &c
		ops.Add(1)
	}
}

// benchFanOut produces b.N changes, at rate per second (0: as fast as possible), to a
// hub keeping ring changes for resumes, while churners goroutines run churn.
func benchFanOut(b *testing.B, subscribers, perSub, users, rate, ring, churners int) {
	h := newHarness(b, 4, func(c *Config) { c.ReplayBuffer = ring; c.MaxUsers = perSub })
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
	var ops atomic.Int64
	for g := range churners {
		wg.Go(func() { churn(b, ctx, h.hub, ids, perSub, uint64(g), &ops) })
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
	churned := ops.Load()
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
	if churners > 0 {
		b.ReportMetric(float64(churned)/elapsed.Seconds(), "churn-ops/s")
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkApplyWhileResuming measures the hub's tail alone, without Kafka in the
// loop: changes are applied in polls of 500, as Run does, and delivered to 1,000
// subscribers each watching 10 of 1,000 users, while churn goroutines each loop over
// resuming a session out of the ring (65,536 changes, the production default) from
// 25,000 changes back, and a subscribe and an unsubscribe on a session of their own.
// Queues are drained between polls, with the timer stopped. It reports the time per
// change applied and delivered (ns/op), and churn-ops/s.
//
//	go test -run '^$' -bench ApplyWhileResuming ./services/query/feed/
func BenchmarkApplyWhileResuming(b *testing.B) {
	for _, churners := range []int{0, 2} {
		b.Run(fmt.Sprintf("subs=1000/watch=10/users=1000/churn=%d", churners), func(b *testing.B) {
			benchApply(b, 1000, 10, 1000, churners)
		})
	}
}

func benchApply(b *testing.B, subscribers, perSub, users, churners int) {
	const partitions, poll, lag = 4, 500, 25_000
	h := newHarness(b, partitions, func(c *Config) { c.ReplayBuffer = 65536; c.MaxUsers = perSub })
	h.start()
	hub := h.hub
	rng := rand.New(rand.NewPCG(1, 2))
	ids := idList(users)
	pick := func(rng *rand.Rand) []string {
		out := make([]string, perSub)
		for i := range out {
			out[i] = ids[rng.IntN(users)]
		}
		return dedupe(out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var subs []*Session
	for range subscribers {
		s, err := hub.Open(ctx, Options{UserIDs: pick(rng)})
		if err != nil {
			b.Fatal(err)
		}
		if m, err := s.Next(ctx); err != nil || m.Type != TypeSnapshot {
			b.Fatalf("first message %v, %v", m.Type, err)
		}
		subs = append(subs, s)
	}
	// The polls of the log, made as the aggregator would, each with the position
	// after it.
	type pollOf struct {
		fs    kgo.Fetches
		after []int64
	}
	next := make([]int64, partitions)
	status := make(map[string]presence.Status)
	var src int64
	makePoll := func() pollOf {
		byPart := make([][]*kgo.Record, partitions)
		for range poll {
			user := ids[rng.IntN(users)]
			from := status[user]
			if from == presence.StatusUnknown {
				from = presence.Offline
			}
			to := presence.Online
			if from == presence.Online {
				to = presence.Offline
			}
			status[user] = to
			src++
			v, err := proto.Marshal(&pulsev1.Change{
				UserId: user, EventId: fmt.Sprint(src), Previous: presence.StatusToPB(from), Current: presence.StatusToPB(to),
				ChangedAtUs: time.Now().UnixMicro(), Cause: pulsev1.Cause_CAUSE_EVENT, DeviceId: "d",
				SourcePartition: 0, SourceOffset: src,
			})
			if err != nil {
				b.Fatal(err)
			}
			p := h.partitionOf(user)
			byPart[p] = append(byPart[p], &kgo.Record{
				Topic: testTopic, Partition: p, Offset: next[p], Key: []byte(user), Value: v,
				Headers: []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaChange)}},
			})
			next[p]++
		}
		var ft kgo.FetchTopic
		ft.Topic = testTopic
		for p, recs := range byPart {
			ft.Partitions = append(ft.Partitions, kgo.FetchPartition{Partition: int32(p), Records: recs})
		}
		return pollOf{kgo.Fetches{{Topics: []kgo.FetchTopic{ft}}}, slices.Clone(next)}
	}
	drain := func(ss []*Session) {
		for _, s := range ss {
			for _, ok := s.sub.q.pop(); ok; _, ok = s.sub.q.pop() {
			}
		}
	}
	var atMu sync.Mutex
	var at [][]int64 // the position after every poll applied
	apply := func(p pollOf) {
		hub.apply(p.fs)
		atMu.Lock()
		at = append(at, p.after)
		atMu.Unlock()
	}
	// Fill the ring before measuring, so that resumes walk a full one.
	for i := range 65536 / poll {
		apply(makePoll())
		if i%16 == 15 {
			drain(subs)
		}
	}
	drain(subs)
	var ops atomic.Int64
	var wg sync.WaitGroup
	own := make([]*Session, churners)
	for g := range churners {
		s, err := hub.Open(ctx, Options{UserIDs: pick(rng)})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Next(ctx); err != nil {
			b.Fatal(err)
		}
		own[g] = s
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			watched := []string(nil)
			for ctx.Err() == nil {
				atMu.Lock()
				from := at[max(0, len(at)-lag/poll)]
				atMu.Unlock()
				watch := pick(rng)
				c := Cursor{Topic: hub.fingerprint, Offsets: from}
				r, err := hub.Open(ctx, Options{UserIDs: watch, Cursor: &c})
				if err != nil {
					b.Error(err)
					return
				}
				if _, _, res, err := hub.attachAt(r.sub, watch, from); err != nil || res != attached {
					b.Errorf("resume from the ring: %v, %v", res, err)
				}
				r.Close()
				if watched != nil {
					hub.unsubscribe(s.sub, watched)
				}
				watched = pick(rng)
				hub.subscribe(s.sub, watched)
				ops.Add(1)
			}
		})
	}
	polls := make([]pollOf, 0, 16)
	left := (b.N + poll - 1) / poll
	b.ResetTimer()
	start := time.Now()
	for left > 0 {
		// Make the next polls, and drain every queue, outside the timer.
		b.StopTimer()
		polls = polls[:0]
		for range min(16, left) {
			polls = append(polls, makePoll())
		}
		drain(subs)
		drain(own)
		b.StartTimer()
		for _, p := range polls {
			apply(p)
		}
		left -= len(polls)
	}
	b.StopTimer()
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	for _, s := range subs {
		if err := context.Cause(s.sub.ctx); err != nil && err != errClosed {
			b.Fatalf("a subscriber was dropped: %v", err)
		}
		s.Close()
	}
	for _, s := range own {
		s.Close()
	}
	if churners > 0 {
		b.ReportMetric(float64(ops.Load())/elapsed.Seconds(), "churn-ops/s")
	}
}
