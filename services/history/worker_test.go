package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/kafkax"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

// fakeStore records successful writes and fails the ones fail picks.
type fakeStore struct {
	mu       sync.Mutex
	fail     func(b *historystore.Batch) error
	delay    time.Duration
	written  []string
	stmts    []historystore.Write
	inFlight int
	maxIn    int
	// scrub is what ErasedIndexRows answers; scrubbed records each call's arguments.
	scrub    historystore.Scrub
	scrubbed [][]any
}

// ErasedIndexRows records its arguments and answers s.scrub.
func (s *fakeStore) ErasedIndexRows(_ context.Context, userID string, shard int32, index uint32, at, held time.Time, ts int64) (historystore.Scrub, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scrubbed = append(s.scrubbed, []any{userID, shard, index, at, held, ts})
	return s.scrub, nil
}

func (s *fakeStore) Write(ctx context.Context, b *historystore.Batch) error {
	s.mu.Lock()
	s.inFlight++
	s.maxIn = max(s.maxIn, s.inFlight)
	fail := s.fail
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	if s.delay > 0 {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail != nil {
		if err := fail(b); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range b.Writes {
		s.written = append(s.written, describe(st))
		s.stmts = append(s.stmts, st)
	}
	return nil
}

// LoadCheckpoint reads back the checkpoint statements written, as Cassandra would
// keep them: the last write of each chunk. The header's chunks are those of its
// generation, in chunk order.
func (s *fakeStore) LoadCheckpoint(_ context.Context, grp string, partition int32) (historystore.Checkpoint, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	type chunk struct {
		gen  int64
		data []byte
	}
	chunks := map[int32]chunk{}
	var header *historystore.Checkpoint
	var count int32
	for _, st := range s.stmts {
		v := st.Values()
		if st.Table() != historystore.TableCheckpoints || v[0] != grp || v[1] != partition {
			continue
		}
		if st.Statement() == historystore.InsertCheckpointHeader {
			header = &historystore.Checkpoint{Generation: v[2].(int64), Offset: v[3].(int64)}
			count = v[4].(int32)
			continue
		}
		chunks[v[2].(int32)] = chunk{v[3].(int64), v[4].([]byte)}
	}
	if header == nil {
		return historystore.Checkpoint{}, false, nil
	}
	var found int32
	for _, n := range slices.Sorted(maps.Keys(chunks)) {
		if c := chunks[n]; c.gen == header.Generation && found < count {
			header.Data = append(header.Data, c.data...)
			found++
		}
	}
	if found != count {
		return historystore.Checkpoint{}, false, fmt.Errorf("%d chunks of generation %d missing", count-found, header.Generation)
	}
	return *header, true, nil
}

func (s *fakeStore) rows() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.written)
}

// harness runs one worker against fakes.
type harness struct {
	t       *testing.T
	h       *history
	store   *fakeStore
	mu      sync.Mutex
	commits []int64 // committed offsets
	// writtenAtCommit is how many statements were written when each commit happened.
	writtenAtCommit []int
	log             []*kgo.Record // what readRange serves
	reads           []string      // readRange calls
	deadLetters     []*kgo.Record // produced to the dead-letter topic
}

func newHarness(t *testing.T, mod func(*Config)) *harness {
	cfg := Config{
		Kafka:              kafkax.Config{EventsTopic: "ev", ChangesTopic: "ch", RetryTimeout: 5 * time.Second},
		Horizon:            10 * time.Minute,
		MaxSkew:            5 * time.Minute,
		WriteConcurrency:   8,
		MaxBatchStatements: 100,
		RebuildTimeout:     time.Minute,
		CheckpointInterval: time.Minute,
	}
	cfg.Cassandra.Timeout = time.Second
	if mod != nil {
		mod(&cfg)
	}
	hs := &harness{t: t, store: &fakeStore{}}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := newMetrics(prometheus.NewRegistry())
	hs.h = &history{
		cfg:    cfg,
		writer: newWriter(hs.store, cfg.Cassandra.Timeout, cfg.WriteConcurrency, logger, m),
		commit: func(_ context.Context, r *kgo.Record) error {
			hs.mu.Lock()
			defer hs.mu.Unlock()
			hs.commits = append(hs.commits, r.Offset)
			hs.writtenAtCommit = append(hs.writtenAtCommit, len(hs.store.rows()))
			return nil
		},
		checkpoints: hs.store,
		scrubs:      hs.store,
		produce: func(_ context.Context, recs ...*kgo.Record) error {
			hs.mu.Lock()
			defer hs.mu.Unlock()
			hs.deadLetters = append(hs.deadLetters, recs...)
			return nil
		},
		readRange: func(_ context.Context, topic string, p int32, since time.Time, end int64, fn func(*kgo.Record) error) error {
			hs.mu.Lock()
			hs.reads = append(hs.reads, fmt.Sprintf("%s/%d since=%s end=%d", topic, p, since.Format(time.TimeOnly), end))
			hs.mu.Unlock()
			for _, r := range hs.log {
				if r.Offset < end && !r.Timestamp.Before(since) {
					if err := fn(r); err != nil {
						return err
					}
				}
			}
			return nil
		},
		logger: logger,
		m:      m,
	}
	return hs
}

// start runs a worker for topic/partition; stop closes its channel (a revoke) and
// returns Run's error.
func (hs *harness) start(ctx context.Context, topic string) (recs chan []*kgo.Record, done chan error) {
	w := hs.h.newWorker(topic, 3)
	recs = make(chan []*kgo.Record, 4)
	done = make(chan error, 1)
	go func() { done <- w.Run(ctx, recs) }()
	return recs, done
}

func (hs *harness) committed() ([]int64, []int) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return slices.Clone(hs.commits), slices.Clone(hs.writtenAtCommit)
}

// wbase is before the fake clock of synctest bubbles (2000-01-01 UTC), as records from
// the past are.
var wbase = time.Date(1999, 12, 31, 23, 30, 0, 0, time.UTC)

func sec(n int) time.Time { return wbase.Add(time.Duration(n) * time.Second) }

// rowIDs names the user_activity and user_status rows written.
func rowIDs(rows []string) []string {
	var ids []string
	for _, r := range rows {
		f := strings.Fields(r)
		if slices.Contains(rollupTables, f[0]) {
			continue
		}
		var id, stale string
		for _, kv := range f {
			if v, ok := strings.CutPrefix(kv, "id="); ok {
				id = v
			}
			if v, ok := strings.CutPrefix(kv, "stale="); ok && v == "true" {
				stale = "(stale)"
			}
			if v, ok := strings.CutPrefix(kv, "event="); ok {
				id = f[0] + ":" + v
			}
			if v, ok := strings.CutPrefix(kv, "status="); ok && f[0] == "status" {
				id = "status:" + v
			}
		}
		ids = append(ids, id+stale)
	}
	slices.Sort(ids)
	return ids
}

func TestEventsWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hs := newHarness(t, nil)
		ctx := t.Context()
		recs, done := hs.start(ctx, "ev")

		poison := eventRecord(12, event("p", "u1", "phone", presence.KindStatus, sec(1), sec(1)))
		poison.Headers = nil
		recs <- []*kgo.Record{
			eventRecord(10, event("e1", "u1", "phone", presence.KindStatus, sec(10), sec(11))),
			eventRecord(11, event("e1", "u1", "phone", presence.KindStatus, sec(10), sec(12))), // duplicate
			poison,
			eventRecord(13, event("e3", "u1", "phone", presence.KindStatus, sec(5), sec(13))),     // stale
			eventRecord(14, event("e4", "u2", "phone", presence.KindHeartbeat, sec(1), sec(14))),  // other user
			eventRecord(15, event("e5", "u1", "laptop", presence.KindStatus, sec(2), sec(15))),    // other device
			eventRecord(16, event("e8", "u3", "laptop", presence.KindActivity, sec(16), sec(16))), // activity
		}
		synctest.Wait()
		// u1's user_status gets the newest of its fresh active events only (e1 at 10s;
		// e5 at 2s would lose to it in Cassandra anyway).
		// Heartbeats and activity are no user_activity rows by default (e4 only moves
		// last_seen, e8 last_seen and last_active).
		want := []string{"active:e1", "active:e8", "e:e1", "e:e3(stale)", "e:e5", "seen:e4"}
		if got := rowIDs(hs.store.rows()); !reflect.DeepEqual(got, want) {
			t.Fatalf("rows %v, want %v", got, want)
		}
		if commits, at := hs.committed(); !reflect.DeepEqual(commits, []int64{16}) || at[0] != len(want) {
			t.Fatalf("commits %v (after %v writes), want [16] after %d", commits, at, len(want))
		}
		m := hs.h.m
		if d, u, s := testutil.ToFloat64(m.skipped.WithLabelValues(skipDuplicate)), testutil.ToFloat64(m.skipped.WithLabelValues(skipUndecodable)), testutil.ToFloat64(m.stale); d != 1 || u != 1 || s != 1 {
			t.Errorf("skipped duplicate=%v undecodable=%v stale=%v, want 1 each", d, u, s)
		}
		if rows := testutil.ToFloat64(m.rows.WithLabelValues(historystore.TableActivity)); rows != 3 {
			t.Errorf("activity rows metric = %v, want 3", rows)
		}

		// Within the horizon the id is still known and the device's newest time too.
		time.Sleep(time.Minute)
		recs <- []*kgo.Record{
			eventRecord(17, event("e1", "u1", "phone", presence.KindStatus, sec(10), sec(70))),    // duplicate
			eventRecord(18, event("e6", "u1", "phone", presence.KindHeartbeat, sec(9), sec(71))),  // stale
			eventRecord(19, event("e7", "u1", "phone", presence.KindHeartbeat, sec(10), sec(72))), // as new as the newest: fresh
		}
		close(recs)
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}
		want = append(want, "seen:e7")
		slices.Sort(want)
		if got := rowIDs(hs.store.rows()); !reflect.DeepEqual(got, want) {
			t.Fatalf("rows %v, want %v", got, want)
		}
		if commits, _ := hs.committed(); !reflect.DeepEqual(commits, []int64{16, 19}) {
			t.Fatalf("commits %v, want [16 19]", commits)
		}
		if len(hs.reads) != 1 || hs.reads[0] != "ev/3 since=23:19:11 end=10" {
			t.Errorf("horizon reads %v, want one ending at the first offset, 10m+1m before its timestamp", hs.reads)
		}
	})
}

// After a restart the horizon re-read from the log decides duplicates and staleness
// as if the worker had never stopped.
func TestRebuildFromLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hs := newHarness(t, nil)
		hs.log = []*kgo.Record{
			eventRecord(0, event("old", "u1", "phone", presence.KindStatus, wbase.Add(-time.Hour), wbase.Add(-time.Hour))), // before the horizon
			eventRecord(1, event("x", "u1", "phone", presence.KindStatus, sec(30), sec(1))),
			eventRecord(2, event("y", "u2", "phone", presence.KindStatus, sec(2), sec(2))),
		}
		recs, done := hs.start(t.Context(), "ev")
		recs <- []*kgo.Record{
			eventRecord(3, event("x", "u1", "phone", presence.KindStatus, sec(30), sec(3))),      // duplicate of offset 1
			eventRecord(4, event("z", "u1", "phone", presence.KindHeartbeat, sec(20), sec(4))),   // stale behind offset 1
			eventRecord(5, event("old", "u1", "tablet", presence.KindHeartbeat, sec(5), sec(5))), // id out of the horizon: new
			eventRecord(6, event("w", "u2", "phone", presence.KindHeartbeat, sec(2), sec(6))),    // equal time: fresh
		}
		close(recs)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// The horizon's fresh events plan their user_status rows again (a crashed
		// process may have held them unwritten): x and y, newer than or tied with the
		// batch's events, which Cassandra would rank below them anyway.
		want := []string{"active:x", "active:y"}
		if got := rowIDs(hs.store.rows()); !reflect.DeepEqual(got, want) {
			t.Fatalf("rows %v, want %v", got, want)
		}
		// x is a duplicate, z stale; old (its id out of the horizon) and w are fresh.
		m := hs.h.m
		if d, s := testutil.ToFloat64(m.skipped.WithLabelValues(skipDuplicate)), testutil.ToFloat64(m.stale); d != 1 || s != 1 {
			t.Errorf("duplicates %v, stale %v; want 1 each", d, s)
		}
		if got := testutil.ToFloat64(hs.h.m.rebuilt); got != 2 {
			t.Errorf("records replayed = %v, want 2 (offset 0 is before the horizon)", got)
		}
	})
}

// A failing write is retried with backoff until it succeeds; nothing is committed
// before, and nothing after it is skipped.
func TestRetryUntilWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hs := newHarness(t, nil)
		failures := 0
		var succeeded time.Time
		hs.store.fail = func(b *historystore.Batch) error {
			if b.Writes[0].Table() == historystore.TableStatus {
				if failures < 4 {
					failures++
					return errors.New("timeout")
				}
				succeeded = time.Now()
			}
			return nil
		}
		recs, done := hs.start(t.Context(), "ev")
		start := time.Now()
		recs <- []*kgo.Record{eventRecord(7, event("e1", "u1", "phone", presence.KindStatus, sec(1), sec(1)))}
		synctest.Wait()
		if c, _ := hs.committed(); len(c) != 0 {
			t.Fatalf("committed %v while a write was failing", c)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		// Backoffs of 100ms, 200ms, 400ms, 800ms, each jittered to [b/2, b].
		if d := succeeded.Sub(start); d < 750*time.Millisecond || d > 1500*time.Millisecond {
			t.Errorf("retries took %v, want 0.75s..1.5s", d)
		}
		commits, at := hs.committed()
		if !reflect.DeepEqual(commits, []int64{7}) || at[0] != 2 {
			t.Fatalf("commits %v after %v writes, want [7] after both", commits, at)
		}
		m := hs.h.m
		if r, up := testutil.ToFloat64(m.retries), testutil.ToFloat64(m.cassandraUp); r != 4 || up != 1 {
			t.Errorf("retries=%v cassandra_up=%v, want 4 and 1", r, up)
		}
		close(recs)
		<-done
	})
}

// A partition lost while its writes fail: the worker returns without committing.
func TestLostWhileRetrying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hs := newHarness(t, nil)
		hs.store.fail = func(*historystore.Batch) error { return errors.New("unavailable") }
		ctx, cancel := context.WithCancel(t.Context())
		recs, done := hs.start(ctx, "ev")
		recs <- []*kgo.Record{eventRecord(7, event("e1", "u1", "phone", presence.KindStatus, sec(1), sec(1)))}
		time.Sleep(time.Minute)
		if up := testutil.ToFloat64(hs.h.m.cassandraUp); up != 0 {
			t.Errorf("cassandra_up = %v during the outage, want 0", up)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
		if commits, _ := hs.committed(); len(commits) != 0 {
			t.Fatalf("commits %v, want none", commits)
		}
	})
}

// Commits are spaced by CommitInterval; a revoke commits what is pending.
func TestCommitInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hs := newHarness(t, func(c *Config) { c.CommitInterval = time.Second })
		recs, done := hs.start(t.Context(), "ev")
		send := func(off int64) {
			recs <- []*kgo.Record{eventRecord(off, event(fmt.Sprint("e", off), "u1", "phone", presence.KindHeartbeat, time.Time{}, sec(int(off))))}
			synctest.Wait()
		}
		send(1) // first batch commits at once
		send(2)
		send(3)
		if c, _ := hs.committed(); !reflect.DeepEqual(c, []int64{1}) {
			t.Fatalf("commits %v, want [1] within the interval", c)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if c, _ := hs.committed(); !reflect.DeepEqual(c, []int64{1, 3}) {
			t.Fatalf("commits %v, want [1 3] once the interval passed", c)
		}
		send(4)
		close(recs)
		<-done
		if c, _ := hs.committed(); !reflect.DeepEqual(c, []int64{1, 3, 4}) {
			t.Fatalf("commits %v, want [1 3 4] after the revoke", c)
		}
	})
}

func TestChangesWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hs := newHarness(t, nil)
		recs, done := hs.start(t.Context(), "ch")
		c1 := goodChange()
		c2 := goodChange()
		c2.EventId, c2.Previous, c2.Current, c2.Cause, c2.ChangedAtUs = "e9", pulsev1.Status_STATUS_ONLINE, pulsev1.Status_STATUS_OFFLINE, pulsev1.Cause_CAUSE_TIMEOUT, presence.Micros(ms(9000))
		bad := changeRecord(2, goodChange())
		bad.Value = []byte("nope")
		recs <- []*kgo.Record{changeRecord(0, c1), changeRecord(1, c2), bad}
		close(recs)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// One user_status write per user and batch: the newest change (c2).
		want := []string{"c:e1", "c:e9", "status:offline"}
		if got := rowIDs(hs.store.rows()); !reflect.DeepEqual(got, want) {
			t.Fatalf("rows %v, want %v", got, want)
		}
		if len(hs.reads) != 0 {
			t.Errorf("a changes worker re-read the log: %v", hs.reads)
		}
		if c, _ := hs.committed(); !reflect.DeepEqual(c, []int64{2}) {
			t.Errorf("commits %v, want [2]: past the undecodable record", c)
		}
		if len(hs.deadLetters) != 1 || hs.deadLetters[0].Topic != "ch.dlq" || string(hs.deadLetters[0].Value) != "nope" {
			t.Errorf("dead letters %v, want the undecodable record on ch.dlq", hs.deadLetters)
		}
	})
}

// Writes run concurrently, never more than WriteConcurrency at once.
func TestWriteConcurrencyBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hs := newHarness(t, func(c *Config) { c.WriteConcurrency = 5; c.EventRows = eventRowsAll })
		hs.store.delay = 10 * time.Millisecond
		recs, done := hs.start(t.Context(), "ev")
		var batch []*kgo.Record
		for i := range 40 {
			batch = append(batch, eventRecord(int64(i), event(fmt.Sprint("e", i), fmt.Sprint("u", i), "d", presence.KindHeartbeat, time.Time{}, sec(i))))
		}
		start := time.Now()
		recs <- batch
		close(recs)
		<-done
		if got := len(hs.store.rows()); got != 80 {
			t.Fatalf("%d statements written, want 80", got)
		}
		if hs.store.maxIn != 5 {
			t.Errorf("at most %d writes in flight, want 5", hs.store.maxIn)
		}
		if d := time.Since(start); d != 16*10*time.Millisecond {
			t.Errorf("80 groups took %v, want 160ms (5 at a time, 10ms each)", d)
		}
	})
}

// Batches gathered within the flush interval are written together once it ends: one
// user_status write per user for all of them, and the commit only after the write.
func TestFlushInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hs := newHarness(t, func(c *Config) { c.FlushInterval, c.FlushStatements = time.Second, 1000 })
		recs, done := hs.start(t.Context(), "ev")
		send := func(off int64, kind presence.Kind) {
			recs <- []*kgo.Record{eventRecord(off, event(fmt.Sprint("e", off), "u1", "phone", kind, time.Time{}, sec(int(off))))}
			synctest.Wait()
		}
		send(1, presence.KindStatus)
		send(2, presence.KindHeartbeat)
		send(3, presence.KindStatus)
		if rows := hs.store.rows(); len(rows) != 0 {
			t.Fatalf("wrote %v within the flush interval", rows)
		}
		if c, _ := hs.committed(); len(c) != 0 {
			t.Fatalf("committed %v before anything was written", c)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		// Two status rows, one user_status update (the newest active event, e3).
		want := []string{"active:e3", "e:e1", "e:e3"}
		if got := rowIDs(hs.store.rows()); !reflect.DeepEqual(got, want) {
			t.Fatalf("rows %v, want %v", got, want)
		}
		if c, w := hs.committed(); !reflect.DeepEqual(c, []int64{3}) || w[0] != 3 {
			t.Fatalf("commits %v after %v statements, want [3] after 3", c, w)
		}
		send(4, presence.KindStatus)
		close(recs)
		<-done
		if c, _ := hs.committed(); !reflect.DeepEqual(c, []int64{3, 4}) {
			t.Fatalf("commits %v, want [3 4]: the revoke writes what was gathered", c)
		}
		if n := len(hs.store.rows()); n != 5 {
			t.Fatalf("%d statements after the revoke, want 5", n)
		}
	})
}

// A partition that gathers FlushStatements statements writes them without waiting.
func TestFlushStatements(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hs := newHarness(t, func(c *Config) { c.FlushInterval, c.FlushStatements = time.Hour, 4 })
		recs, done := hs.start(t.Context(), "ev")
		var batch []*kgo.Record
		for off := range int64(5) {
			batch = append(batch, eventRecord(off, event(fmt.Sprint("e", off), fmt.Sprint("u", off), "phone", presence.KindStatus, time.Time{}, sec(int(off)))))
		}
		recs <- batch // 5 user_activity rows (user_status rows do not count): more than 4
		synctest.Wait()
		if n := len(hs.store.rows()); n != 10 {
			t.Fatalf("%d statements written, want 10 (5 rows, 5 user_status) without waiting for the interval", n)
		}
		close(recs)
		<-done
	})
}

// An events partition holds user_status rows for StatusInterval across flushes and
// commits without waiting for them; a worker that takes the partition over after a
// crash plans them again from the horizon it re-reads.
func TestStatusHeldAcrossFlushes(t *testing.T) {
	held := []*kgo.Record{
		eventRecord(1, event("e1", "u1", "phone", presence.KindStatus, time.Time{}, sec(1))),
		eventRecord(2, event("e2", "u1", "phone", presence.KindHeartbeat, time.Time{}, sec(2))),
	}
	mod := func(c *Config) {
		c.FlushInterval, c.FlushStatements, c.StatusInterval = time.Second, 1000, 30*time.Second
	}
	synctest.Test(t, func(t *testing.T) {
		hs := newHarness(t, mod)
		recs, done := hs.start(t.Context(), "ev")
		recs <- held
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		if got, want := rowIDs(hs.store.rows()), []string{"e:e1"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("rows after one flush %v, want %v: user_status is held", got, want)
		}
		if c, _ := hs.committed(); !reflect.DeepEqual(c, []int64{2}) {
			t.Fatalf("commits %v, want [2]: the commit does not wait for held user_status rows", c)
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if got, want := rowIDs(hs.store.rows()), []string{"active:e1", "e:e1", "seen:e2"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("rows after the status interval %v, want %v", got, want)
		}
		close(recs)
		<-done
	})
	// The process died before the status interval: the next owner of the partition
	// starts after the commit (offset 3) and re-reads the held records as its horizon.
	synctest.Test(t, func(t *testing.T) {
		hs := newHarness(t, mod)
		hs.log = held
		recs, done := hs.start(t.Context(), "ev")
		recs <- []*kgo.Record{eventRecord(3, event("e3", "u2", "phone", presence.KindHeartbeat, time.Time{}, sec(3)))}
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		if got, want := rowIDs(hs.store.rows()), []string{"active:e1", "seen:e2", "seen:e3"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("rows %v, want %v: the horizon's user_status rows planned again", got, want)
		}
		close(recs)
		<-done
	})
}
