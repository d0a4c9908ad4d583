package tests

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/deadletter"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/tests/harness"
)

// docs/design.md guarantee 11: poison records written straight to Kafka — bytes that
// are no event, an event without its schema header, an event that breaks the schema's
// rules, one keyed by another user, and a change that is no change — each go to the
// dead-letter topic with their origin and the reason, are counted, and the partition
// moves on: the good events around them are applied. pulsectl dlq lists them and
// replays one to its topic.
func TestPoisonRecordsGoToTheDeadLetterTopics(t *testing.T) {
	p := harness.NewTopics(t, 2)
	p.Start(t, "aggregator")
	p.Start(t, "history")
	p.Start(t, "query")
	prod, err := kgo.NewClient(kgo.SeedBrokers(harness.KafkaBrokers()...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	schema := []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaEvent)}}
	event := func(user, id string) []byte {
		now := time.Now().UTC()
		e := presence.Event{ID: id, UserID: user, DeviceID: "phone", Source: presence.SourceAPI,
			Kind: presence.KindStatus, Status: presence.Online, OccurredAt: now, ReceivedAt: now}
		b, err := proto.Marshal(e.ToPB())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	badRule := &pulsev1.Event{}
	if err := proto.Unmarshal(event("dl-"+p.Run+"-x", "x1"), badRule); err != nil {
		t.Fatal(err)
	}
	badRule.Status = pulsev1.Status(99)
	badRuleBytes, _ := proto.Marshal(badRule)
	good := []string{"dl-" + p.Run + "-a", "dl-" + p.Run + "-b"}
	poison := []*kgo.Record{
		{Topic: p.Events, Key: []byte("dl-" + p.Run + "-x"), Value: []byte("not a protobuf event"), Headers: schema},
		{Topic: p.Events, Key: []byte("dl-" + p.Run + "-x"), Value: event("dl-"+p.Run+"-x", "x0")},
		{Topic: p.Events, Key: []byte("dl-" + p.Run + "-x"), Value: badRuleBytes, Headers: schema},
		{Topic: p.Events, Key: []byte("dl-" + p.Run + "-y"), Value: event("dl-"+p.Run+"-x", "x2"), Headers: schema},
		{Topic: p.Changes, Key: []byte("dl-" + p.Run + "-x"), Value: []byte{0xff, 0xff, 0xff},
			Headers: []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaChange)}}},
	}
	recs := []*kgo.Record{{Topic: p.Events, Key: []byte(good[0]), Value: event(good[0], "a1"), Headers: schema}}
	recs = append(recs, poison...)
	recs = append(recs, &kgo.Record{Topic: p.Events, Key: []byte(good[1]), Value: event(good[1], "b1"), Headers: schema})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := prod.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	origin := map[string]bool{} // topic/partition/offset of each poison record
	for _, r := range res {
		if r.Record.Topic == p.Changes || !strings.HasSuffix(string(r.Record.Key), "-a") && !strings.HasSuffix(string(r.Record.Key), "-b") {
			origin[fmt.Sprintf("%s/%d/%d", r.Record.Topic, r.Record.Partition, r.Record.Offset)] = true
		}
	}

	// Every poison record is a dead letter with its origin, service and reason.
	var letters []deadletter.Letter
	harness.Eventually(t, 30*time.Second, func() string {
		letters = letters[:0]
		for _, topic := range []string{deadletter.Topic(p.Events), deadletter.Topic(p.Changes)} {
			for _, rs := range harness.ReadTopic(t, topic) {
				for _, r := range rs {
					l, err := deadletter.Parse(r)
					if err != nil {
						t.Fatalf("a record of %s is no dead letter: %v", topic, err)
					}
					letters = append(letters, l)
				}
			}
		}
		if len(letters) < len(poison) {
			return fmt.Sprintf("%d dead letters, want %d", len(letters), len(poison))
		}
		return ""
	})
	got := map[string]bool{}
	for _, l := range letters {
		key := fmt.Sprintf("%s/%d/%d", l.Topic, l.Partition, l.Offset)
		wantService := "aggregator"
		if l.Topic == p.Changes {
			wantService = "history"
		}
		if !origin[key] || l.Service != wantService || l.Reason == "" || time.Since(l.At) > time.Minute {
			t.Errorf("dead letter %s from %s (%q at %v): not a poison record of this test, or wrong service", key, l.Service, l.Reason, l.At)
		}
		got[key] = true
	}
	if len(got) != len(origin) || len(letters) != len(poison) {
		t.Fatalf("dead letters of %d origins (%d letters), want each of the %d poison records once", len(got), len(letters), len(poison))
	}
	// The good events on both sides of them were applied.
	harness.Eventually(t, 30*time.Second, func() string {
		for _, user := range good {
			code, body := harness.Get(t, p.Svc["query"].URL+"/status/"+user)
			if code != 200 || !strings.Contains(body, `"online"`) {
				return fmt.Sprintf("%s: %d %s", user, code, body)
			}
		}
		return ""
	})
	for _, m := range []struct{ svc, metric string }{{"aggregator", "pulse_aggregator_dead_letters_total 4"}, {"history", "pulse_history_dead_letters_total 1"}} {
		if _, body := harness.Get(t, p.Svc[m.svc].URL+"/metrics"); !strings.Contains(body, m.metric+"\n") {
			t.Errorf("%s /metrics lacks %q", m.svc, m.metric)
		}
	}

	// pulsectl lists the aggregator's dead letters and replays one.
	dlq := deadletter.Topic(p.Events)
	out, err := exec.Command(harness.Binary("pulsectl"), "dlq", "list", "-brokers", strings.Join(harness.KafkaBrokers(), ","), "-topic", dlq, "-csv").CombinedOutput()
	if err != nil {
		t.Fatalf("pulsectl dlq list: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var origins []string
	for _, line := range lines[1:] {
		f := strings.Split(line, ",")
		origins = append(origins, f[3])
	}
	sort.Strings(origins)
	var want []string
	for o := range origin {
		if strings.HasPrefix(o, p.Events+"/") {
			want = append(want, o)
		}
	}
	sort.Strings(want)
	if strings.Join(origins, " ") != strings.Join(want, " ") {
		t.Fatalf("pulsectl dlq list origins %v, want %v:\n%s", origins, want, out)
	}
	first := strings.Split(lines[1], ",")[0]
	out, err = exec.Command(harness.Binary("pulsectl"), "dlq", "replay", "-brokers", strings.Join(harness.KafkaBrokers(), ","), "-topic", dlq, "-offsets", first).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "replayed 1 dead letters") {
		t.Fatalf("pulsectl dlq replay: %v\n%s", err, out)
	}
	// Still poison: it comes back to the dead-letter topic, from its new offset.
	harness.Eventually(t, 30*time.Second, func() string {
		n := 0
		for _, rs := range harness.ReadTopic(t, dlq) {
			n += len(rs)
		}
		if n != 5 {
			return fmt.Sprintf("%d dead letters after the replay, want 5", n)
		}
		return ""
	})
}
