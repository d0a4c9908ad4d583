package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/internal/platform/deadletter"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

// Pipeline is the four services running against the stack with topics, consumer
// groups and a Redis prefix of their own, so tests never see each other's data.
type Pipeline struct {
	Run     string // unique id of this pipeline, also a prefix for user ids
	Events  string
	Changes string
	// Webhooks is the notifier's replay topic; its dead letters go to Webhooks+".dlq".
	Webhooks   string
	Partitions int
	Env        map[string]string
	Svc        map[string]*Service
}

func RandomID(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// NewPipeline creates the topics and starts the four services.
func NewPipeline(t *testing.T, partitions int, extraEnv map[string]string) *Pipeline {
	t.Helper()
	p := NewTopics(t, partitions)
	for k, v := range extraEnv {
		p.Env[k] = v
	}
	for _, name := range []string{"aggregator", "history", "ingest", "query"} {
		p.Start(t, name)
	}
	return p
}

// NewTopics creates a pipeline's topics and environment, and starts nothing.
func NewTopics(t *testing.T, partitions int) *Pipeline {
	t.Helper()
	run := RandomID(t)
	p := &Pipeline{
		Run:        run,
		Events:     "it." + run + ".events",
		Changes:    "it." + run + ".changes",
		Webhooks:   "it." + run + ".webhooks",
		Partitions: partitions,
		Svc:        map[string]*Service{},
	}
	adm := KafkaAdmin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics := []string{p.Events, p.Changes, p.Webhooks, deadletter.Topic(p.Events), deadletter.Topic(p.Changes), deadletter.Topic(p.Webhooks)}
	resp, err := adm.CreateTopics(ctx, int32(partitions), BrokerReplication, nil, topics...)
	if err != nil {
		t.Fatalf("creating topics: %v", err)
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil {
			t.Fatalf("creating topic %s: %v", r.Topic, r.Err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, topics...)
	})
	// A new topic reaches the broker's metadata a moment after it is created, and its
	// partitions take writes once each has a leader and, when replicated, every replica
	// in sync.
	Eventually(t, 30*time.Second, func() string {
		d, err := adm.ListTopics(ctx, p.Events, p.Changes)
		if err != nil {
			return err.Error()
		}
		for _, name := range []string{p.Events, p.Changes} {
			if td := d[name]; td.Err != nil || len(td.Partitions) != partitions {
				return fmt.Sprintf("topic %s: %d partitions, %v", name, len(td.Partitions), td.Err)
			}
			for _, pd := range d[name].Partitions {
				if pd.Err != nil || pd.Leader < 0 || len(pd.ISR) < len(pd.Replicas) {
					return fmt.Sprintf("topic %s partition %d: leader %d, in sync %v of %v, %v", name, pd.Partition, pd.Leader, pd.ISR, pd.Replicas, pd.Err)
				}
			}
		}
		return ""
	})
	p.Env = StackEnv()
	for k, v := range map[string]string{
		"PULSE_TOPIC_EVENTS":     p.Events,
		"PULSE_TOPIC_CHANGES":    p.Changes,
		"PULSE_AGGREGATOR_GROUP": "it-" + run + "-aggregator",
		"PULSE_HISTORY_GROUP":    "it-" + run + "-history",
		"PULSE_NOTIFIER_GROUP":   "it-" + run + "-notifier",
		"PULSE_TOPIC_WEBHOOKS":   p.Webhooks,
		"PULSE_REDIS_PREFIX":     "it-" + run,
		// Timeouts are tested on their own; elsewhere they would race the model.
		"PULSE_OFFLINE_AFTER": "24h",
		"PULSE_IDLE_AFTER":    "24h",
		// A killed member holds its partitions until its session times out.
		"PULSE_AGGREGATOR_SESSION_TIMEOUT": "6s",
		"PULSE_HISTORY_SESSION_TIMEOUT":    "6s",
		"PULSE_NOTIFIER_SESSION_TIMEOUT":   "6s",
	} {
		p.Env[k] = v
	}
	return p
}

func (p *Pipeline) Start(t *testing.T, name string) {
	t.Helper()
	s := StartService(t, name, p.Env)
	Eventually(t, 30*time.Second, func() string {
		if code, body := Get(t, s.URL+"/readyz"); code != http.StatusOK {
			return fmt.Sprintf("%s /readyz = %d %s", name, code, body)
		}
		return ""
	})
	p.Svc[name] = s
}

// Crash kills a service with SIGKILL, as a machine failure would, and starts it again.
func (p *Pipeline) Crash(t *testing.T, name string) {
	t.Helper()
	s := p.Svc[name]
	_ = s.Cmd.Process.Signal(syscall.SIGKILL)
	<-s.Done
	p.Start(t, name)
}

// WireEvent is one event of POST /v1/events.
type WireEvent struct {
	EventID    string     `json:"eventId,omitempty"`
	UserID     string     `json:"userId"`
	Kind       string     `json:"kind,omitempty"`
	Status     string     `json:"status,omitempty"`
	DeviceID   string     `json:"deviceId,omitempty"`
	OccurredAt *time.Time `json:"occurredAt,omitempty"`
	// Data is a status event's custom status as JSON; empty: none.
	Data json.RawMessage `json:"data,omitempty"`
}

// PostJSON posts body and returns the status code and response body.
func PostJSON(t *testing.T, url string, body any) (int, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return PostRaw(t, url, "application/json", b)
}

func PostRaw(t *testing.T, url, contentType string, body []byte) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	res, err := KeyedClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	return res.StatusCode, out
}

// ReadTopic reads every record of topic, partition by partition in offset order.
func ReadTopic(t *testing.T, topic string) map[int32][]*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm := KafkaAdmin(t)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	want := map[int32]int64{}
	total := int64(0)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
			total += o.Offset
		}
	})
	out := map[int32][]*kgo.Record{}
	if total == 0 {
		return out
	}
	offsets := map[string]map[int32]kgo.Offset{topic: {}}
	for p := range want {
		offsets[topic][p] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(KafkaBrokers()...), kgo.ConsumePartitions(offsets))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := int64(0)
	for got < total {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s: %d of %d records after 60s", topic, got, total)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("reading %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < want[r.Partition] {
				out[r.Partition] = append(out[r.Partition], r)
				got++
			}
		})
	}
	return out
}

// LoggedEvents decodes the events topic.
func LoggedEvents(t *testing.T, topic string) map[int32][]*pulsev1.Event {
	t.Helper()
	out := map[int32][]*pulsev1.Event{}
	for p, recs := range ReadTopic(t, topic) {
		for _, r := range recs {
			var e pulsev1.Event
			if err := proto.Unmarshal(r.Value, &e); err != nil {
				t.Fatalf("%s/%d@%d: %v", topic, p, r.Offset, err)
			}
			out[p] = append(out[p], &e)
		}
	}
	return out
}

// BuildModel folds the logged events.
func BuildModel(t *testing.T, topic string) *Model {
	t.Helper()
	m := NewModel()
	seen := map[string]bool{}
	for _, evs := range LoggedEvents(t, topic) {
		m.Fold(evs, seen)
	}
	return m
}

// SortedUsers is the model's user ids, sorted.
func (m *Model) SortedUsers() []string {
	ids := make([]string, 0, len(m.Users))
	for id := range m.Users {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func FirstLines(lines []string, n int) string {
	if len(lines) > n {
		return strings.Join(lines[:n], "\n") + fmt.Sprintf("\n… and %d more", len(lines)-n)
	}
	return strings.Join(lines, "\n")
}

// LastLines is the end of a service's output, for failure messages.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
