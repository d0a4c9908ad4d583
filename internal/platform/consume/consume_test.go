package consume

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/pulse-presence/pulse/internal/platform/kafkax"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	topic      = "events"
	partitions = 4
	group      = "g"
)

// seenRecord is one record as a worker processed it.
type seenRecord struct {
	p      int32
	offset int64
	value  string
	worker int
}

// recorder collects what every worker of a test did.
type recorder struct {
	mu        sync.Mutex
	seen      []seenRecord
	workers   map[int]string // worker id -> topic/partition
	cancelled []int          // workers whose context was cancelled
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func (r *recorder) snapshot() ([]seenRecord, map[int]string, []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := make(map[int]string, len(r.workers))
	for k, v := range r.workers {
		w[k] = v
	}
	return append([]seenRecord(nil), r.seen...), w, append([]int(nil), r.cancelled...)
}

// testWorker records every record and commits each batch after "writing" it.
type testWorker struct {
	id     int
	p      int32
	r      *recorder
	client func() *kgo.Client
	// failAt makes Run fail when it sees this value.
	failAt string
	// hang makes Run ignore the closing of recs and wait for its context.
	hang bool
}

func (w *testWorker) Run(ctx context.Context, recs <-chan []*kgo.Record) error {
	for {
		select {
		case batch, ok := <-recs:
			if !ok && w.hang {
				recs = nil // keep waiting for ctx: a sink that cannot flush
				continue
			}
			if !ok {
				return nil // every batch was committed as it was written
			}
			w.r.mu.Lock()
			for _, rec := range batch {
				if rec.Partition != w.p || rec.Topic != topic {
					w.r.mu.Unlock()
					return fmt.Errorf("worker of partition %d got %s/%d", w.p, rec.Topic, rec.Partition)
				}
				w.r.seen = append(w.r.seen, seenRecord{rec.Partition, rec.Offset, string(rec.Value), w.id})
			}
			w.r.mu.Unlock()
			for _, rec := range batch {
				if w.failAt != "" && string(rec.Value) == w.failAt {
					return errors.New("sink refused " + w.failAt)
				}
			}
			if err := w.client().CommitRecords(ctx, batch[len(batch)-1]); err != nil {
				if ctx.Err() != nil {
					// Cancelled while committing: on a busy machine the revoke
					// timeout can end a slow commit, which counts as cancelled too.
					w.r.mu.Lock()
					w.r.cancelled = append(w.r.cancelled, w.id)
					w.r.mu.Unlock()
					return ctx.Err()
				}
				return fmt.Errorf("committing: %w", err)
			}
		case <-ctx.Done():
			w.r.mu.Lock()
			w.r.cancelled = append(w.r.cancelled, w.id)
			w.r.mu.Unlock()
			return ctx.Err()
		}
	}
}

type fixture struct {
	t       *testing.T
	cluster *kfake.Cluster
	kcfg    kafkax.Config
	logger  *slog.Logger
	r       *recorder
	mu      sync.Mutex
	nextID  int
	failAt  string
	hang    bool
	revoke  time.Duration
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &fixture{
		t:       t,
		cluster: c,
		kcfg: kafkax.Config{
			Brokers: c.ListenAddrs(), ClientID: "consume-test",
			DialTimeout: time.Second, RequestTimeout: 5 * time.Second, RetryTimeout: 5 * time.Second,
		},
		logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		r:      &recorder{workers: map[int]string{}},
		revoke: 5 * time.Second,
	}
}

// consumer starts a group member running until the returned stop is called; stop
// returns Run's error.
func (f *fixture) consumer(reg prometheus.Registerer) (c *Consumer, stop func() error) {
	f.t.Helper()
	var cons *Consumer
	newWorker := func(tp string, p int32) Worker {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.nextID++
		f.r.mu.Lock()
		f.r.workers[f.nextID] = tp + "/" + strconv.Itoa(int(p))
		f.r.mu.Unlock()
		return &testWorker{id: f.nextID, p: p, r: f.r, client: func() *kgo.Client { return cons.Client() }, failAt: f.failAt, hang: f.hang}
	}
	cons, err := New(f.kcfg, Config{
		Group: group, Topics: []string{topic}, MaxPollRecords: 50, QueueBatches: 2, RevokeTimeout: f.revoke,
	}, newWorker, f.logger, reg,
		kgo.HeartbeatInterval(100*time.Millisecond), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- cons.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-errc:
			case <-time.After(30 * time.Second):
				f.t.Fatal("Run did not return within 30s of cancellation")
			}
		})
		return runErr
	}
	f.t.Cleanup(func() { _ = stop() })
	return cons, stop
}

// produce writes n records to each partition with values "p<partition>-<seq>", seq
// counting from from.
func (f *fixture) produce(from, n int) {
	f.t.Helper()
	cl, err := kafkax.NewClient(f.kcfg, f.logger, nil, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		f.t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := from; i < from+n; i++ {
		for p := range int32(partitions) {
			recs = append(recs, &kgo.Record{Partition: p, Value: []byte(fmt.Sprintf("p%d-%d", p, i))})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) waitFor(n int) {
	f.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for f.r.count() < n {
		if time.Now().After(deadline) {
			f.t.Fatalf("workers saw %d records, want %d", f.r.count(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// committed is the group's committed offset per partition.
func (f *fixture) committed() map[int32]int64 {
	f.t.Helper()
	cl, err := kafkax.NewClient(f.kcfg, f.logger, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) { out[o.Partition] = o.At })
	return out
}

// checkExactlyOnce asserts that every partition's records 0..n-1 were processed once
// each, in offset order within every worker.
func checkExactlyOnce(t *testing.T, seen []seenRecord, n int) {
	t.Helper()
	count := map[int32]map[int64]int{}
	lastByWorker := map[int]int64{}
	for _, s := range seen {
		if count[s.p] == nil {
			count[s.p] = map[int64]int{}
		}
		count[s.p][s.offset]++
		if want := fmt.Sprintf("p%d-%d", s.p, s.offset); s.value != want {
			t.Errorf("partition %d offset %d holds %q, want %q", s.p, s.offset, s.value, want)
		}
		if last, ok := lastByWorker[s.worker]; ok && s.offset != last+1 {
			t.Errorf("worker %d saw offset %d after %d", s.worker, s.offset, last)
		}
		lastByWorker[s.worker] = s.offset
	}
	for p := range int32(partitions) {
		for o := range int64(n) {
			if c := count[p][o]; c != 1 {
				t.Errorf("partition %d offset %d processed %d times, want once", p, o, c)
			}
		}
		if len(count[p]) != n {
			t.Errorf("partition %d: %d distinct offsets processed, want %d", p, len(count[p]), n)
		}
	}
}

func TestEveryRecordReachesOneWorkerInOrder(t *testing.T) {
	f := newFixture(t)
	f.produce(0, 100)
	reg := prometheus.NewRegistry()
	_, stop := f.consumer(reg)
	f.waitFor(4 * 100)
	f.produce(100, 50)
	f.waitFor(4 * 150)
	if err := stop(); err != nil {
		t.Fatalf("Run = %v, want nil after a clean shutdown", err)
	}

	seen, workers, cancelled := f.r.snapshot()
	checkExactlyOnce(t, seen, 150)
	if len(workers) != partitions || len(cancelled) != 0 {
		t.Errorf("workers %v, cancelled %v: want one per partition, none cancelled", workers, cancelled)
	}
	for p, off := range f.committed() {
		if off != 150 {
			t.Errorf("partition %d committed at %d, want 150", p, off)
		}
	}
	if got := sumMetric(t, reg, "pulse_consume_records_total"); got != 600 {
		t.Errorf("pulse_consume_records_total = %v, want 600", got)
	}
}

// sumMetric adds up every series of the named counter or gauge.
func sumMetric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
			return sum
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// A second member joining takes over some partitions exactly where the first one's
// revoke committed: nothing lost, nothing processed twice.
func TestRevokeCommitsAndHandsOver(t *testing.T) {
	f := newFixture(t)
	f.produce(0, 100)
	_, stopA := f.consumer(nil)
	f.waitFor(4 * 100)

	_, stopB := f.consumer(nil)
	// Produce while the group rebalances, so batches are in flight during the revoke.
	for i := range 10 {
		f.produce(100+i*20, 20)
		time.Sleep(50 * time.Millisecond)
	}
	f.waitFor(4 * 300)
	seen, workers, _ := f.r.snapshot()
	checkExactlyOnce(t, seen, 300)

	// Both members own partitions now: the first had all four, then gave some away.
	if len(workers) <= partitions {
		t.Errorf("workers %v: want more than %d (the second member took partitions over)", workers, partitions)
	}
	byWorker := map[int]bool{}
	for _, s := range seen {
		if s.offset >= 100 {
			byWorker[s.worker] = true
		}
	}
	if len(byWorker) < 2 {
		t.Errorf("records after the join were processed by workers %v, want at least two", byWorker)
	}

	if err := stopA(); err != nil {
		t.Fatalf("member A: %v", err)
	}
	f.produce(300, 10)
	f.waitFor(4 * 310) // B takes A's partitions over from A's last commit
	if err := stopB(); err != nil {
		t.Fatalf("member B: %v", err)
	}
	seen, _, cancelled := f.r.snapshot()
	checkExactlyOnce(t, seen, 310)
	if len(cancelled) != 0 {
		t.Errorf("workers %v were cancelled; every stop should have been a clean revoke", cancelled)
	}
	for p, off := range f.committed() {
		if off != 310 {
			t.Errorf("partition %d committed at %d, want 310", p, off)
		}
	}
}

// A worker that fails stops the consumer with its error; the others flush and commit.
func TestWorkerErrorStopsConsumer(t *testing.T) {
	f := newFixture(t)
	f.failAt = "p2-40"
	f.produce(0, 100)
	_, stop := f.consumer(nil)
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Run returns by itself once the worker failed; stop only collects the error.
		if f.r.count() >= 41 {
			time.Sleep(200 * time.Millisecond)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the failing record was never processed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	err = stop()
	if err == nil || !strings.Contains(err.Error(), "sink refused p2-40") || !strings.Contains(err.Error(), topic+"/2") {
		t.Fatalf("Run = %v, want the worker's error naming its partition", err)
	}
	committed := f.committed()
	if committed[2] > 40 {
		t.Errorf("partition 2 committed at %d, past the record that failed (40)", committed[2])
	}
}

// A lost partition (the group dropped this member) cancels its worker, which commits
// nothing more; the member rejoins and resumes from the last commit.
func TestLostCancelsWorkers(t *testing.T) {
	f := newFixture(t)
	f.produce(0, 20)
	_, stop := f.consumer(nil)
	f.waitFor(4 * 20)

	// The next heartbeat is answered "unknown member": the group forgot us.
	var once sync.Once
	f.cluster.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		handled := false
		once.Do(func() { handled = true })
		if !handled {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp, nil, true
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, _, cancelled := f.r.snapshot()
		if len(cancelled) == partitions {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workers cancelled: %v, want all %d", cancelled, partitions)
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.produce(20, 10)
	f.waitFor(4 * 30)
	if err := stop(); err != nil {
		t.Fatalf("Run = %v, want nil: losing partitions is not an error", err)
	}
	seen, workers, _ := f.r.snapshot()
	checkExactlyOnce(t, seen, 30) // every batch was committed before the loss
	if len(workers) != 2*partitions {
		t.Errorf("workers %v: want a second set after rejoining", workers)
	}
}

// A worker that cannot flush is cancelled after RevokeTimeout, so shutdown stays bounded.
func TestRevokeTimeoutCancels(t *testing.T) {
	f := newFixture(t)
	f.hang = true
	f.revoke = 300 * time.Millisecond
	f.produce(0, 10)
	reg := prometheus.NewRegistry()
	_, stop := f.consumer(reg)
	f.waitFor(4 * 10)
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("shutdown took %v with a 300ms revoke timeout", d)
	}
	if _, _, cancelled := f.r.snapshot(); len(cancelled) != partitions {
		t.Errorf("cancelled workers %v, want all %d", cancelled, partitions)
	}
	if got := sumMetric(t, reg, "pulse_consume_revoke_timeouts_total"); got != 1 {
		t.Errorf("pulse_consume_revoke_timeouts_total = %v, want 1", got)
	}
}

func TestConfigValidate(t *testing.T) {
	err := Config{MaxPollRecords: -1}.Validate()
	for _, want := range []string{"group", "topics", "max poll records", "queue batches", "revoke timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
	ok := Config{Group: "g", Topics: []string{"t"}, QueueBatches: 1, RevokeTimeout: time.Second}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v", ok, err)
	}
}
