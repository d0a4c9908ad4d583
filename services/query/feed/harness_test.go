package feed

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/kafkax"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testTopic = "changes"

// harness is a kfake cluster with a changes topic, a producer playing the
// aggregator, and a running hub.
type harness struct {
	t          testing.TB
	cluster    *kfake.Cluster
	cfg        Config
	prod       *kgo.Client
	state      *fakeState
	hub        *Hub
	reg        *prometheus.Registry
	partitions int
	cancel     context.CancelFunc
	done       chan error

	// The aggregator's side: per user its operator status and the last source offset.
	mu     sync.Mutex
	status map[string]presence.Status
	src    map[int32]int64
	clock  time.Time
}

func testConfig(brokers []string) Config {
	return Config{
		Kafka: kafkax.Config{
			Brokers: brokers, ClientID: "feed-test",
			DialTimeout: time.Second, RequestTimeout: 5 * time.Second, RetryTimeout: 5 * time.Second,
			EventsTopic: "events", ChangesTopic: testTopic,
		},
		QueueSize:                 1024,
		ReplayBuffer:              1024,
		DedupeLookback:            100,
		MaxUsers:                  100,
		SnapshotTimeout:           time.Second,
		CatchUpTimeout:            2 * time.Second,
		MaxLogReplays:             2,
		MaxLogReplaysPerPrincipal: 2,
		ReplayWait:                5 * time.Second,
		DrainTimeout:              5 * time.Second,
	}
}

func newHarness(t testing.TB, partitions int, mod func(*Config)) *harness {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(partitions), testTopic))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{
		t: t, cluster: c, cfg: testConfig(c.ListenAddrs()), state: &fakeState{users: map[string]*presence.User{}},
		partitions: partitions, status: map[string]presence.Status{}, src: map[int32]int64{},
		clock: time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond),
	}
	if mod != nil {
		mod(&h.cfg)
	}
	h.prod, err = kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(testTopic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.stop()
		h.prod.Close()
		c.Close()
	})
	return h
}

// start runs the hub and waits until it is ready.
func (h *harness) start() {
	h.t.Helper()
	h.reg = prometheus.NewRegistry()
	hub, err := NewHub(h.cfg, h.state, slog.New(slog.NewTextHandler(io.Discard, nil)), h.reg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.hub = hub
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan error, 1)
	go func() { h.done <- hub.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for !hub.Ready() {
		if time.Now().After(deadline) {
			h.t.Fatal("hub not ready after 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	if err := <-h.done; err != nil {
		h.t.Errorf("hub Run = %v", err)
	}
	h.cancel = nil
}

// partitionOf is the user's partition of both topics, as in Pulse.
func (h *harness) partitionOf(user string) int32 {
	f := fnv.New32a()
	_, _ = f.Write([]byte(user))
	return int32(f.Sum32() % uint32(h.partitions))
}

// change makes the user's next change to status, as the aggregator would.
func (h *harness) change(user string, to presence.Status) *pulsev1.Change {
	h.mu.Lock()
	defer h.mu.Unlock()
	from := h.status[user]
	if from == presence.StatusUnknown {
		from = presence.Offline
	}
	h.status[user] = to
	sp := h.partitionOf(user)
	h.src[sp] += 1 + int64(len(h.src)%3) // gaps: not every event changes anything
	h.clock = h.clock.Add(time.Millisecond)
	return &pulsev1.Change{
		UserId: user, EventId: user + "-" + h.clock.String(),
		Previous: presence.StatusToPB(from), Current: presence.StatusToPB(to),
		ChangedAtUs: h.clock.UnixMicro(), Cause: pulsev1.Cause_CAUSE_EVENT, DeviceId: "d",
		SourcePartition: sp, SourceOffset: h.src[sp],
	}
}

// produce writes changes to their users' partitions, in order.
func (h *harness) produce(changes ...*pulsev1.Change) {
	h.t.Helper()
	recs := make([]*kgo.Record, len(changes))
	for i, c := range changes {
		b, err := proto.Marshal(c)
		if err != nil {
			h.t.Fatal(err)
		}
		recs[i] = &kgo.Record{
			Key: []byte(c.UserId), Value: b, Partition: h.partitionOf(c.UserId),
			Headers: []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaChange)}},
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) open(o Options) *Session {
	h.t.Helper()
	s, err := h.hub.Open(context.Background(), o)
	if err != nil {
		h.t.Fatalf("Open(%+v): %v", o, err)
	}
	h.t.Cleanup(s.Close)
	return s
}

type fakeState struct {
	mu     sync.Mutex
	users  map[string]*presence.User
	groups map[string][]string
	err    error
}

func (f *fakeState) GroupMembers(_ context.Context, g string, max int) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	if len(f.groups[g]) > max {
		return nil, ErrGroupTooLarge
	}
	return slices.Clone(f.groups[g]), nil
}

func (f *fakeState) GetMany(_ context.Context, ids []string) ([]*presence.User, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	out := make([]*presence.User, len(ids))
	for i, id := range ids {
		if u, ok := f.users[id]; ok {
			c := *u
			out[i] = &c
		}
	}
	return out, nil
}

func (f *fakeState) set(id string, st presence.Status, offset int64, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	u := &presence.User{Status: st, Offset: offset, LastUpdated: at}
	u.ResetPublic()
	f.users[id] = u
}

// wire is a message as a client decodes it.
type wire struct {
	Type     string    `json:"type"`
	UserID   string    `json:"userId"`
	Status   string    `json:"status"`
	Previous string    `json:"previous"`
	At       time.Time `json:"at"`
	Cause    string    `json:"cause"`
	Cursor   string    `json:"cursor"`
	Code     string    `json:"code"`
	Statuses []Status  `json:"statuses"`
	// Data is the custom status as sent: "null" for none.
	Data json.RawMessage `json:"data"`
}

func (w wire) short() string {
	switch w.Type {
	case TypeChange:
		if w.Data != nil && string(w.Data) != "null" {
			return w.UserID + ":" + w.Previous + ">" + w.Status + " " + string(w.Data)
		}
		return w.UserID + ":" + w.Previous + ">" + w.Status
	case TypeError:
		return "error:" + w.Code
	}
	return w.Type
}

// next reads one message within timeout.
func next(t testing.TB, s *Session, timeout time.Duration) (wire, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	m, err := s.Next(ctx)
	if err != nil {
		return wire{}, err
	}
	s.Sent(m)
	var w wire
	if err := json.Unmarshal(m.Data, &w); err != nil {
		t.Fatalf("message %s: %v", m.Data, err)
	}
	if w.Type != m.Type || w.Cursor != m.Cursor {
		t.Fatalf("message %s: type/cursor differ from %q/%q", m.Data, m.Type, m.Cursor)
	}
	return w, nil
}

// read reads n messages, failing on any error.
func read(t testing.TB, s *Session, n int) []wire {
	t.Helper()
	out := make([]wire, 0, n)
	for range n {
		w, err := next(t, s, 15*time.Second)
		if err != nil {
			t.Fatalf("after %d of %d messages: %v (got %v)", len(out), n, err, shorts(out))
		}
		out = append(out, w)
	}
	return out
}

// quiet asserts no message comes within d.
func quiet(t testing.TB, s *Session, d time.Duration) {
	t.Helper()
	w, err := next(t, s, d)
	if err == nil {
		t.Fatalf("unexpected message %s", w.short())
	}
	if err != context.DeadlineExceeded {
		t.Fatalf("unexpected error %v", err)
	}
}

func shorts(ws []wire) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.short()
	}
	return out
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testutilCounter sums the samples of the named metric that have a label of value
// label ("" for any).
func testutilCounter(t testing.TB, h *harness, name, label string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					match = true
				}
			}
			if match {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}
