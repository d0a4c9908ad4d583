package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/pkg/presence"
)

// docs/design.md guarantee 10: Redis loses everything (FLUSHALL on a private server)
// under a running pipeline. Reads must turn 503 with Retry-After ("rebuilding") and
// /readyz fail, never an empty state with 200; the aggregator rebuilds every shard
// from the log without anyone acting, and the counts and statuses then equal the
// model again — including for users whose last event came before the flush, in a
// partition that gets no event after it.
func TestRedisFlushHealsItself(t *testing.T) {
	addr, _ := startRedis(t, freePort(t))
	p := newTopics(t, 2)
	p.env["PULSE_REDIS_ADDR"] = addr
	p.env["PULSE_AGGREGATOR_STATE_CHECK_INTERVAL"] = "1s"
	p.start(t, "aggregator")
	p.start(t, "query")
	q := p.svc["query"].url

	prod, err := kgo.NewClient(kgo.SeedBrokers(kafkaBrokers()...), kgo.DefaultProduceTopic(p.events))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	statuses := []presence.Status{presence.Online, presence.Idle, presence.Offline, presence.Online}
	want := map[string]presence.Status{}
	var recs []*kgo.Record
	now := time.Now().UTC()
	for u := range 300 {
		user := fmt.Sprintf("heal-%s-%03d", p.run, u)
		for k := range 1 + u%3 {
			st := statuses[(u+k)%len(statuses)]
			at := now.Add(time.Duration(k) * time.Millisecond)
			e := presence.Event{ID: fmt.Sprintf("%s-%d", user, k), UserID: user, DeviceID: "phone", Source: presence.SourceAPI,
				Kind: presence.KindStatus, Status: st, OccurredAt: at, ReceivedAt: at}
			b, err := proto.Marshal(e.ToPB())
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, &kgo.Record{Key: []byte(user), Value: b,
				Headers: []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaEvent)}}})
			want[user] = st
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var wantOnline, wantIdle int
	for _, st := range want {
		switch st {
		case presence.Online:
			wantOnline++
		case presence.Idle:
			wantIdle++
		}
	}
	// correct says whether the count and every user's status equal the model.
	correct := func() string {
		code, body := get(t, q+"/v1/online/count")
		if code != http.StatusOK {
			return fmt.Sprintf("count: %d %s", code, body)
		}
		var c struct {
			ByStatus map[string]int `json:"byStatus"`
		}
		if err := json.Unmarshal([]byte(body), &c); err != nil {
			t.Fatal(err)
		}
		if c.ByStatus["online"] != wantOnline || c.ByStatus["idle"] != wantIdle {
			return fmt.Sprintf("count %v, model online %d idle %d", c.ByStatus, wantOnline, wantIdle)
		}
		ids := make([]string, 0, len(want))
		for id := range want {
			ids = append(ids, id)
		}
		code, b := postJSON(t, q+"/statuses", map[string]any{"userIds": ids})
		if code != http.StatusOK {
			return fmt.Sprintf("statuses: %d %s", code, b)
		}
		var res struct {
			Statuses []struct{ UserID, Status string } `json:"statuses"`
		}
		if err := json.Unmarshal(b, &res); err != nil {
			t.Fatal(err)
		}
		for _, s := range res.Statuses {
			if s.Status != want[s.UserID].String() {
				return fmt.Sprintf("%s is %s, model %s", s.UserID, s.Status, want[s.UserID])
			}
		}
		return ""
	}
	eventually(t, 30*time.Second, correct)

	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	flushed := time.Now()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	// No 200 may show a wrong answer from here on: every read is either the model's
	// answer or a 503 with Retry-After.
	var detected, healed time.Duration
	unavailable := 0
	deadline := time.Now().Add(60 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		code, body := get(t, q+"/v1/online/count")
		switch {
		case code == http.StatusServiceUnavailable:
			unavailable++
			if detected == 0 {
				detected = time.Since(flushed)
				if !strings.Contains(body, "rebuil") {
					t.Errorf("503 while rebuilding says %s, want it to say the state is being rebuilt", body)
				}
				if code, body := get(t, q+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "state") {
					t.Errorf("query /readyz while rebuilding = %d %s, want 503 naming state", code, body)
				}
			}
		case code == http.StatusOK:
			if bad := correct(); bad != "" {
				if strings.Contains(bad, ": 503 ") {
					unavailable++
					if detected == 0 {
						detected = time.Since(flushed)
						if !strings.Contains(bad, "rebuil") {
							t.Errorf("503 while rebuilding says %s, want it to say the state is being rebuilt", bad)
						}
					}
					continue
				}
				t.Fatalf("%v after the flush, a read answered 200 with a wrong state: %s", time.Since(flushed).Round(time.Millisecond), bad)
			}
			healed = time.Since(flushed)
		default:
			t.Fatalf("count after the flush = %d %s", code, body)
		}
		if healed > 0 {
			break
		}
	}
	if healed == 0 {
		t.Fatalf("the state was not correct again within 60 s of the flush; the aggregator's output ends:\n%s", lastLines(p.svc["aggregator"].out.String(), 20))
	}
	if detected == 0 {
		t.Fatalf("no read answered 503 between the flush and the repair (healed after %v)", healed)
	}
	if out := p.svc["aggregator"].out.String(); !strings.Contains(out, "shard rebuilt from the log") {
		t.Fatalf("the aggregator did not log a rebuild; its output ends:\n%s", lastLines(out, 20))
	}
	t.Logf("FLUSHALL: detected (first 503) after %v, correct again after %v, %d reads answered 503 meanwhile",
		detected.Round(time.Millisecond), healed.Round(time.Millisecond), unavailable)

	// On demand: pulsectl rebuild has every shard rebuilt from the log again, and
	// follows it to the end.
	start := time.Now()
	out, err := exec.Command(binary("pulsectl"), "rebuild", "-redis", addr, "-prefix", p.env["PULSE_REDIS_PREFIX"],
		"-brokers", strings.Join(kafkaBrokers(), ","), "-topic", p.events, "-timeout", "60s").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "2/2 shards done") || !strings.Contains(string(out), "rebuilt in") {
		t.Fatalf("pulsectl rebuild: %v\n%s", err, out)
	}
	eventually(t, 10*time.Second, correct)
	t.Logf("pulsectl rebuild of 2 shards (%d records) took %v:\n%s", len(recs), time.Since(start).Round(time.Millisecond), out)
}
