package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/records"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/pkg/webhook"
)

const secret = "0123456789abcdef0123"

func TestParseEndpointsDefaultsAndFilters(t *testing.T) {
	list, err := ParseEndpoints([]byte(`{"endpoints":[
		{"id":"a","url":"https://x.example/h?token=t","secret":"` + secret + `"},
		{"id":"b.2","url":"http://127.0.0.1:9/h","secret":"` + secret + `","view":"operator",
		 "filter":{"users":["alice"],"statuses":["invisible"],"types":["status"]},
		 "batch":{"maxChanges":5,"maxWait":"0s"},"retry":{"attempts":2,"initialBackoff":"20ms","maxBackoff":"40ms"},"timeout":"2s"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := list[0], list[1]
	if a.Operator || a.MaxChanges != 100 || a.MaxWait != time.Second || a.Attempts != 8 || a.InitialBackoff != time.Second ||
		a.MaxBackoff != time.Minute || a.Timeout != 10*time.Second || a.Filter.Users != nil {
		t.Errorf("defaults: %+v", a)
	}
	if !b.Operator || b.MaxChanges != 5 || b.MaxWait != 0 || b.Attempts != 2 || b.Timeout != 2*time.Second ||
		!b.Filter.Users["alice"] || !b.Filter.Statuses[presence.Invisible] || !b.Filter.Types["status"] {
		t.Errorf("settings: %+v", b)
	}
}

func TestParseEndpointsNamesEveryFlaw(t *testing.T) {
	_, err := ParseEndpoints([]byte(`{"endpoints":[
		{"id":"a b","url":"ftp://x/?token=hidden","secret":"short","view":"all",
		 "filter":{"statuses":["invisible","away"],"causes":["clock"]},
		 "batch":{"maxChanges":0,"maxWait":"2m"},"retry":{"attempts":0,"initialBackoff":"1s","maxBackoff":"1ms"},"timeout":"1h"},
		{"id":"ok","url":"https://x","secret":"` + secret + `"},
		{"id":"ok","url":"https://y","secret":"` + secret + `"}]}`))
	if err == nil {
		t.Fatal("a bad file was accepted")
	}
	for _, want := range []string{"endpoint 1 (\"a b\"): id:", "url: want an absolute http or https URL", "secret: want at least 16 bytes",
		`view "all"`, "invisible: only an operator view", `"away"`, `filter.causes: "clock"`, "batch.maxChanges 0", "batch.maxWait 2m0s",
		"retry.attempts 0", "retry: want", "timeout 1h0m0s", `endpoint 3 ("ok"): id used by an earlier endpoint`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "hidden") {
		t.Errorf("error quotes the URL's credential: %v", err)
	}
	for _, raw := range []string{`{"endpoints":[{"id":"a","url":"https://x","secret":"` + secret + `","extra":1}]}`, `[]`, `{"endpoints":[]} {}`,
		`{"endpoints":[{"id":"a","url":"https://x","secret":"` + secret + `","timeout":5}]}`} {
		if _, err := ParseEndpoints([]byte(raw)); err == nil {
			t.Errorf("%s was accepted", raw)
		}
	}
}

// changeRecord is a presence.changes record as the aggregator writes it.
func changeRecord(t *testing.T, offset int64, user string, prev, cur pulsev1.Status, groups ...string) *kgo.Record {
	t.Helper()
	r, err := records.Change("presence.changes", &pulsev1.Change{UserId: user, Previous: prev, Current: cur,
		ChangedAtUs: 1764214867000000 + offset, SourcePartition: 2, SourceOffset: 100 + offset, Groups: groups})
	if err != nil {
		t.Fatal(err)
	}
	r.Partition, r.Offset, r.Timestamp = 2, offset, time.Now()
	return r
}

func TestFiltersAndViews(t *testing.T) {
	on, off, inv := pulsev1.Status_STATUS_ONLINE, pulsev1.Status_STATUS_OFFLINE, pulsev1.Status_STATUS_INVISIBLE
	toInvisible, err := decodeChange(changeRecord(t, 1, "alice", on, inv, "team-a"))
	if err != nil {
		t.Fatal(err)
	}
	hidden, _ := decodeChange(changeRecord(t, 2, "alice", inv, off))
	if !toInvisible.visible(false) || hidden.visible(false) || !hidden.visible(true) {
		t.Error("the public view must see online→invisible (as offline) and not invisible→offline; the operator view both")
	}
	var pub, op webhook.Change
	_ = json.Unmarshal(toInvisible.json(false, time.Now()), &pub)
	_ = json.Unmarshal(toInvisible.json(true, time.Now()), &op)
	if pub.ID != "2:101" || pub.Status != "offline" || op.Status != "invisible" || pub.Type != "change" || pub.Cause != "event" || pub.Groups[0] != "team-a" {
		t.Errorf("views: public %+v, operator %+v", pub, op)
	}
	f := Filter{Groups: map[string]bool{"team-a": true}, Statuses: map[presence.Status]bool{presence.Offline: true}}
	if !f.matches(toInvisible, toInvisible.status(false)) || f.matches(toInvisible, toInvisible.status(true)) {
		t.Error("a filter on offline must match the change in the public view only")
	}
	if f.matches(hidden, hidden.status(false)) {
		t.Error("a group filter matched a change of a user outside the group")
	}
	if (Filter{Causes: map[string]bool{"timeout": true}}).matches(toInvisible, presence.Offline) {
		t.Error("a cause filter on timeout matched an event's change")
	}
}

// A worker delivers every change in order, batches them, retries a failing endpoint
// without holding back another, and commits only what both delivered.
func TestWorkerDeliversInOrderAndCommitsWhatWasDelivered(t *testing.T) {
	var mu sync.Mutex
	got := map[string][]string{}
	fails := 2
	var blocked chan struct{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ep := strings.TrimPrefix(r.URL.Path, "/")
		if err := webhook.Verify(r.Header.Get(webhook.SignatureHeader), body, time.Minute, time.Now(), []byte(secret)); err != nil {
			t.Errorf("%s: %v", ep, err)
		}
		mu.Lock()
		if ep == "flaky" && fails > 0 {
			fails--
			mu.Unlock()
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		b := blocked
		mu.Unlock()
		if ep == "stuck" && b != nil {
			<-b
		}
		batch, err := webhook.Decode(body)
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		for _, c := range batch.Changes {
			got[ep] = append(got[ep], c.ID)
		}
		mu.Unlock()
	}))
	defer srv.Close()
	eps, err := ParseEndpoints([]byte(`{"endpoints":[
		{"id":"flaky","url":"` + srv.URL + `/flaky","secret":"` + secret + `","view":"operator","batch":{"maxChanges":2,"maxWait":"10ms"},"retry":{"attempts":5,"initialBackoff":"10ms","maxBackoff":"20ms"}},
		{"id":"stuck","url":"` + srv.URL + `/stuck","secret":"` + secret + `","view":"operator","batch":{"maxChanges":100,"maxWait":"10ms"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var commits []int64
	n := &notifier{cfg: Config{CommitInterval: 20 * time.Millisecond, MaxBacklog: 1000, RevokeTimeout: 4 * time.Second}, logger: slog.New(slog.DiscardHandler)}
	n.m = newMetrics(prometheus.NewRegistry(), n)
	n.sender = newSender(n.logger, n.m)
	n.setEndpoints(eps)
	n.commit = func(_ context.Context, _ string, _ int32, next int64) error {
		mu.Lock()
		commits = append(commits, next)
		mu.Unlock()
		return nil
	}
	w := &worker{n: n, topic: "presence.changes", partition: 2, logger: n.logger}
	recs := make(chan []*kgo.Record, 4)
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background(), recs) }()

	on, idle := pulsev1.Status_STATUS_ONLINE, pulsev1.Status_STATUS_IDLE
	mu.Lock()
	blocked = make(chan struct{})
	mu.Unlock()
	recs <- []*kgo.Record{changeRecord(t, 0, "alice", idle, on), changeRecord(t, 1, "bob", idle, on), changeRecord(t, 2, "alice", on, idle)}
	want := []string{"2:100", "2:101", "2:102"}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got["flaky"]) == 3 })
	// The stuck endpoint holds its batch: flaky got everything, and nothing is committed.
	mu.Lock()
	if strings.Join(got["flaky"], ",") != strings.Join(want, ",") || len(got["stuck"]) != 0 {
		t.Errorf("flaky got %v, stuck %v; want %v and nothing", got["flaky"], got["stuck"], want)
	}
	mu.Unlock()
	time.Sleep(150 * time.Millisecond) // several commit ticks
	mu.Lock()
	if len(commits) != 0 {
		t.Errorf("committed %v while the stuck endpoint held every change", commits)
	}
	close(blocked)
	mu.Unlock()
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got["stuck"]) == 3 })
	close(recs)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got["stuck"], ",") != strings.Join(want, ",") || len(commits) == 0 || commits[len(commits)-1] != 3 {
		t.Errorf("stuck got %v, commits %v; want %v and a last commit of 3", got["stuck"], commits, want)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{"7": 7 * time.Second, "Fri, 27 Nov 2026 04:00:30 GMT": 30 * time.Second, "Fri, 27 Nov 2026 03:00:00 GMT": 0} {
		if d, ok := retryAfter(v, now); !ok || d != want {
			t.Errorf("retryAfter(%q) = %v, %v; want %v", v, d, ok, want)
		}
	}
	for _, v := range []string{"", "-1", "soon"} {
		if _, ok := retryAfter(v, now); ok {
			t.Errorf("retryAfter(%q) accepted", v)
		}
	}
}

// Past PULSE_NOTIFIER_MAX_BACKLOG, a stuck endpoint's oldest changes go to the
// dead-letter topic, keyed by the endpoint, and the partition keeps moving.
func TestBacklogPastTheLimitIsDeadLettered(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	eps, err := ParseEndpoints([]byte(`{"endpoints":[{"id":"stuck","url":"` + srv.URL + `","secret":"` + secret + `","view":"operator","batch":{"maxChanges":2,"maxWait":"0s"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var dead []*kgo.Record
	n := &notifier{cfg: Config{CommitInterval: time.Hour, MaxBacklog: 3, RevokeTimeout: time.Second, WebhooksTopic: "presence.webhooks"}, logger: slog.New(slog.DiscardHandler)}
	n.m = newMetrics(prometheus.NewRegistry(), n)
	n.sender = newSender(n.logger, n.m)
	n.setEndpoints(eps)
	n.produce = func(_ context.Context, recs ...*kgo.Record) error {
		mu.Lock()
		defer mu.Unlock()
		dead = append(dead, recs...)
		return nil
	}
	w := &worker{n: n, topic: "presence.changes", partition: 2, logger: n.logger, lanes: map[string]*lane{}, last: -1, committed: -1}
	w.sync(context.Background())
	on, idle := pulsev1.Status_STATUS_ONLINE, pulsev1.Status_STATUS_IDLE
	w.route(context.Background(), changeRecord(t, 0, "alice", idle, on))
	waitFor(t, func() bool { l := w.lanes["stuck"]; l.mu.Lock(); defer l.mu.Unlock(); return len(l.sending) == 1 })
	for i := int64(1); i <= 4; i++ {
		w.route(context.Background(), changeRecord(t, i, "alice", []pulsev1.Status{idle, on}[i%2], []pulsev1.Status{on, idle}[i%2]))
	}
	// One change is being sent; of the four queued behind it, the oldest two went to
	// the dead-letter topic when the backlog passed three.
	mu.Lock()
	defer mu.Unlock()
	if len(dead) != 1 || string(dead[0].Key) != "stuck" || dead[0].Topic != "presence.webhooks.dlq" {
		t.Fatalf("dead letters %v, want one batch of the stuck endpoint on presence.webhooks.dlq", dead)
	}
	b, err := webhook.Decode(dead[0].Value)
	if err != nil || len(b.Changes) != 2 || b.Changes[0].ID != "2:101" || b.Changes[1].ID != "2:102" || b.ID != "2-1-2" {
		t.Fatalf("dead batch %+v (%v), want changes 2:101 and 2:102 as batch 2-1-2", b, err)
	}
	if _, n, _, _ := w.lanes["stuck"].pending(); n != 3 {
		t.Errorf("%d changes pending, want 3", n)
	}
	w.lanes["stuck"].cancel()
}
