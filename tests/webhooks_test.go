package tests

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/deadletter"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/tests/harness"
)

// receiver is a webhook endpoint: it checks every request's signature itself (HMAC-
// SHA256 over "<t>.<body>", computed here, not with Pulse's code), answers as told,
// and records the changes of every batch it took.
type receiver struct {
	secret string
	srv    *httptest.Server

	mu         sync.Mutex
	failNext   int // answer 500 to this many requests first, asking for retryAfter
	retryAfter time.Duration
	// attempts are the times each batch (Pulse-Batch) was posted at.
	attempts map[string][]time.Time
	dead     bool          // answer 503 to every request
	delay    time.Duration // answer after this long
	requests int
	refused  int
	badSigs  int
	order    map[string][]string  // user -> change ids in order of first arrival
	seen     map[string]int       // change id -> deliveries
	arrived  map[string]time.Time // change id -> first arrival
	status   map[string]string    // change id -> status as delivered
}

func newReceiver(t *testing.T) *receiver {
	rv := &receiver{secret: harness.RandomID(t) + harness.RandomID(t) + harness.RandomID(t),
		order: map[string][]string{}, attempts: map[string][]time.Time{}, seen: map[string]int{}, arrived: map[string]time.Time{}, status: map[string]string{}}
	rv.srv = httptest.NewServer(http.HandlerFunc(rv.serve))
	t.Cleanup(rv.srv.Close)
	return rv
}

func (rv *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	rv.mu.Lock()
	delay := rv.delay
	rv.requests++
	rv.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	now := time.Now()
	rv.mu.Lock()
	defer rv.mu.Unlock()
	if !validSignature(r.Header.Get("Pulse-Signature"), body, rv.secret) {
		rv.badSigs++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	batch := r.Header.Get("Pulse-Batch")
	rv.attempts[batch] = append(rv.attempts[batch], now)
	if rv.failNext > 0 {
		rv.failNext--
		rv.refused++
		if rv.retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(rv.retryAfter/time.Second)))
		}
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	if rv.dead {
		rv.refused++
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	var b struct {
		ID      string `json:"id"`
		Changes []struct {
			ID     string `json:"id"`
			UserID string `json:"userId"`
			Status string `json:"status"`
		} `json:"changes"`
	}
	if err := json.Unmarshal(body, &b); err != nil || b.ID == "" || r.Header.Get("Pulse-Batch") != b.ID {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	for _, c := range b.Changes {
		if rv.seen[c.ID] == 0 {
			rv.order[c.UserID] = append(rv.order[c.UserID], c.ID)
			rv.arrived[c.ID] = now
			rv.status[c.ID] = c.Status
		}
		rv.seen[c.ID]++
	}
	w.WriteHeader(http.StatusNoContent)
}

func validSignature(header string, body []byte, secret string) bool {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(unix, 0)).Abs() > 5*time.Minute {
		return false
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "." + string(body)))
	want := hex.EncodeToString(m.Sum(nil))
	return hmac.Equal([]byte(sig), []byte(want))
}

// duplicates is how many deliveries repeated a change already delivered.
func (rv *receiver) duplicates() int {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	n := 0
	for _, k := range rv.seen {
		n += k - 1
	}
	return n
}

// wantChange is a change as an endpoint of one view must receive it.
type wantChange struct {
	id, user, status string
	produced         time.Time
}

// expectedChanges reads presence.changes, the pipeline's record of what changed, and
// returns each user's changes in log order as a view shows them: the public view
// skips what it cannot see (invisible and offline look alike).
func expectedChanges(t *testing.T, topic string, operator bool) (map[string][]wantChange, int) {
	t.Helper()
	out, n := map[string][]wantChange{}, 0
	seen := map[string]bool{}
	for _, recs := range harness.ReadTopic(t, topic) {
		for _, r := range recs {
			var c pulsev1.Change
			if err := proto.Unmarshal(r.Value, &c); err != nil {
				t.Fatalf("change at %d/%d: %v", r.Partition, r.Offset, err)
			}
			prev, cur := presence.StatusFromPB(c.GetPrevious()), presence.StatusFromPB(c.GetCurrent())
			if !operator {
				prev, cur = prev.Public(), cur.Public()
			}
			id := fmt.Sprintf("%d:%d", c.GetSourcePartition(), c.GetSourceOffset())
			if prev == cur || seen[id] {
				continue
			}
			seen[id] = true
			out[c.GetUserId()] = append(out[c.GetUserId()], wantChange{id: id, user: c.GetUserId(), status: cur.String(), produced: r.Timestamp})
			n++
		}
	}
	return out, n
}

// mismatch says how rv's changes differ from want: a missing or unexpected change, a
// user's changes out of order, a wrong status. "" when they are the same.
func (rv *receiver) mismatch(want map[string][]wantChange) string {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	total := 0
	for user, list := range want {
		got := rv.order[user]
		ids := make([]string, len(list))
		for i, c := range list {
			ids[i] = c.id
			if s, ok := rv.status[c.id]; ok && s != c.status {
				return fmt.Sprintf("change %s of %s delivered as %s, want %s", c.id, user, s, c.status)
			}
		}
		if !slices.Equal(got, ids) {
			return fmt.Sprintf("%s: changes %v delivered in this order, want %v", user, got, ids)
		}
		total += len(ids)
	}
	if len(rv.seen) != total {
		return fmt.Sprintf("%d distinct changes delivered, want %d", len(rv.seen), total)
	}
	return ""
}

// deadLettered is the change ids of the batches of endpoint in the dead-letter topic.
func deadLettered(t *testing.T, topic, endpoint string) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for _, recs := range harness.ReadTopic(t, topic) {
		for _, r := range recs {
			l, err := deadletter.Parse(r)
			if err != nil {
				t.Fatalf("dead letter %d/%d: %v", r.Partition, r.Offset, err)
			}
			if string(l.Key) != endpoint || l.Service != "notifier" {
				t.Fatalf("dead letter %d/%d of %q by %q, want endpoint %q by notifier", r.Partition, r.Offset, l.Key, l.Service, endpoint)
			}
			var b struct {
				Changes []struct {
					ID string `json:"id"`
				} `json:"changes"`
			}
			if err := json.Unmarshal(l.Value, &b); err != nil {
				t.Fatalf("dead letter %d/%d: %v", r.Partition, r.Offset, err)
			}
			for _, c := range b.Changes {
				ids[c.ID] = true
			}
		}
	}
	return ids
}

// Webhooks carry every change to every endpoint, signed, in order per user: an
// endpoint that fails then recovers gets everything; a dead one's batches go to the
// dead-letter topic and a replay delivers them; a slow one (5 s a request) does not
// hold back a fast one; a SIGKILLed notifier loses nothing (duplicates counted).
func TestWebhooksDeliverEveryChange(t *testing.T) {
	const partitions = 4
	p := harness.NewTopics(t, partitions)
	for _, name := range []string{"aggregator", "ingest"} {
		p.Start(t, name)
	}
	webhooks := p.Webhooks

	fast, flaky, dead, slow := newReceiver(t), newReceiver(t), newReceiver(t), newReceiver(t)
	flaky.failNext, flaky.retryAfter = 3, time.Second
	dead.dead = true
	slow.delay = 5 * time.Second
	endpoints := []map[string]any{
		{"id": "fast", "url": fast.srv.URL, "secret": fast.secret, "batch": map[string]any{"maxWait": "200ms"}},
		{"id": "flaky", "url": flaky.srv.URL, "secret": flaky.secret, "view": "operator",
			"batch": map[string]any{"maxChanges": 7, "maxWait": "100ms"},
			"retry": map[string]any{"attempts": 10, "initialBackoff": "50ms", "maxBackoff": "2s"}},
		{"id": "dead", "url": dead.srv.URL, "secret": dead.secret, "batch": map[string]any{"maxChanges": 20, "maxWait": "100ms"},
			"retry": map[string]any{"attempts": 3, "initialBackoff": "20ms", "maxBackoff": "50ms"}},
		{"id": "slow", "url": slow.srv.URL, "secret": slow.secret, "batch": map[string]any{"maxChanges": 1000, "maxWait": "100ms"}},
	}
	file := filepath.Join(t.TempDir(), "endpoints.json")
	writeEndpoints(t, file, endpoints)
	env := map[string]string{}
	for k, v := range p.Env {
		env[k] = v
	}
	env["PULSE_NOTIFIER_ENDPOINTS_FILE"] = file
	env["PULSE_NOTIFIER_ENDPOINTS_RELOAD"] = "300ms"
	env["PULSE_NOTIFIER_COMMIT_INTERVAL"] = "200ms"
	notifier := startNotifier(t, env)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 29))
	users := make([]string, 24)
	for i := range users {
		users[i] = fmt.Sprintf("%s-wh-%02d", p.Run, i)
	}
	statuses := []string{"online", "idle", "invisible", "offline"}
	round := func() {
		events := make([]harness.WireEvent, len(users))
		for i, u := range users {
			events[i] = harness.WireEvent{UserID: u, Kind: "status", Status: statuses[rng.IntN(len(statuses))], DeviceID: "d1"}
		}
		if code, body := harness.PostJSON(t, p.Svc["ingest"].URL+"/v1/events", map[string]any{"events": events}); code != http.StatusAccepted {
			t.Fatalf("POST /v1/events = %d %s", code, body)
		}
	}
	for range 5 {
		round()
		time.Sleep(150 * time.Millisecond)
	}

	// Every change reaches the endpoints that take it, in order per user.
	var public, operator map[string][]wantChange
	settle := func(what string, rvs map[*receiver]bool) {
		t.Helper()
		harness.Eventually(t, 90*time.Second, func() string {
			var n int
			public, n = expectedChanges(t, p.Changes, false)
			operator, _ = expectedChanges(t, p.Changes, true)
			if n == 0 {
				return "no change in " + p.Changes + " yet"
			}
			for rv, op := range rvs {
				want := public
				if op {
					want = operator
				}
				if m := rv.mismatch(want); m != "" {
					return what + ": " + m
				}
			}
			return ""
		})
	}
	settle("first rounds", map[*receiver]bool{fast: false, flaky: true})

	// The slow endpoint answers after 5 s; the fast one got each change within its
	// batching wait and the time to post, far below the slow one's 5 s.
	fast.mu.Lock()
	var worst time.Duration
	for _, list := range public {
		for _, c := range list {
			worst = max(worst, fast.arrived[c.id].Sub(c.produced))
		}
	}
	fast.mu.Unlock()
	if worst > 2500*time.Millisecond {
		t.Errorf("the fast endpoint got a change %v after it was produced, while the slow one took 5 s a request", worst)
	}
	t.Logf("fast endpoint: slowest change arrived %v after it was produced", worst.Round(time.Millisecond))
	settle("slow endpoint", map[*receiver]bool{slow: false})
	flaky.mu.Lock()
	if flaky.refused != 3 {
		t.Errorf("flaky endpoint refused %d requests, want 3", flaky.refused)
	}
	// Each refusal asked for a second's wait (Retry-After: 1), longer than the
	// backoff's 50 ms; the batch's next attempt honoured it.
	retried := 0
	for batch, at := range flaky.attempts {
		for i := 1; i < len(at); i++ {
			retried++
			if gap := at[i].Sub(at[i-1]); gap < 950*time.Millisecond {
				t.Errorf("batch %s was posted again %v after a refusal asking for 1 s", batch, gap)
			}
		}
	}
	if retried != 3 {
		t.Errorf("%d retried posts of the flaky endpoint, want 3", retried)
	}
	flaky.mu.Unlock()

	// The dead endpoint's batches are all in the dead-letter topic.
	harness.Eventually(t, 60*time.Second, func() string {
		got := deadLettered(t, deadletter.Topic(webhooks), "dead")
		for _, list := range public {
			for _, c := range list {
				if !got[c.id] {
					return "change " + c.id + " not dead-lettered yet"
				}
			}
		}
		return ""
	})

	// A notifier SIGKILLed while changes flow loses none of them.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 10 {
			round()
			time.Sleep(150 * time.Millisecond)
		}
	}()
	time.Sleep(700 * time.Millisecond)
	_ = notifier.Cmd.Process.Signal(syscall.SIGKILL)
	<-notifier.Done
	<-done
	notifier = startNotifier(t, env)
	settle("after a SIGKILL", map[*receiver]bool{fast: false, flaky: true, slow: false})
	t.Logf("after the SIGKILL: %d, %d and %d duplicate deliveries to the fast, flaky and slow endpoints", fast.duplicates(), flaky.duplicates(), slow.duplicates())

	// The dead endpoint comes back; replaying its dead letters delivers every change.
	harness.Eventually(t, 60*time.Second, func() string {
		got := deadLettered(t, deadletter.Topic(webhooks), "dead")
		for _, list := range public {
			for _, c := range list {
				if !got[c.id] {
					return "change " + c.id + " not dead-lettered yet"
				}
			}
		}
		return ""
	})
	dead.mu.Lock()
	dead.dead = false
	dead.mu.Unlock()
	out, err := exec.Command(harness.Binary("pulsectl"), "dlq", "replay", "-brokers", strings.Join(harness.KafkaBrokers(), ","),
		"-topic", deadletter.Topic(webhooks), "-all").CombinedOutput()
	if err != nil {
		t.Fatalf("pulsectl dlq replay: %v\n%s", err, out)
	}
	settle("dead endpoint after the replay", map[*receiver]bool{dead: false})

	for name, rv := range map[string]*receiver{"fast": fast, "flaky": flaky, "dead": dead, "slow": slow} {
		rv.mu.Lock()
		if rv.badSigs != 0 {
			t.Errorf("%s endpoint: %d requests with a bad signature", name, rv.badSigs)
		}
		rv.mu.Unlock()
	}

	// A reload removes an endpoint: it gets nothing more, and its series go.
	writeEndpoints(t, file, endpoints[:3])
	harness.Eventually(t, 20*time.Second, func() string {
		_, m := harness.Get(t, notifier.URL+"/metrics")
		if !strings.Contains(m, "\npulse_notifier_endpoints 3\n") {
			return "pulse_notifier_endpoints is not 3 yet"
		}
		if strings.Contains(m, `endpoint="slow"`) {
			return "the slow endpoint's series are still there"
		}
		return ""
	})
	slow.mu.Lock()
	slowBefore := len(slow.seen)
	slow.mu.Unlock()
	round()
	settle("after the reload", map[*receiver]bool{fast: false, flaky: true})
	slow.mu.Lock()
	if len(slow.seen) != slowBefore {
		t.Errorf("the removed endpoint got %d more changes", len(slow.seen)-slowBefore)
	}
	slow.mu.Unlock()
	// The receivers count a batch before the notifier hears their answer.
	harness.Eventually(t, 10*time.Second, func() string {
		_, m := harness.Get(t, notifier.URL+"/metrics")
		for _, line := range []string{`pulse_notifier_backlog_changes{endpoint="fast"} 0`, `pulse_notifier_backlog_changes{endpoint="flaky"} 0`} {
			if !strings.Contains(m, line+"\n") {
				return fmt.Sprintf("metrics lack %q:\n%s", line, strings.Join(grepLines(m, "pulse_notifier_backlog"), "\n"))
			}
		}
		return ""
	})
}

func startNotifier(t *testing.T, env map[string]string) *harness.Service {
	t.Helper()
	s := harness.StartService(t, "notifier", env)
	harness.Eventually(t, 30*time.Second, func() string {
		if code, body := harness.Get(t, s.URL+"/readyz"); code != http.StatusOK {
			return fmt.Sprintf("notifier /readyz = %d %s", code, body)
		}
		return ""
	})
	return s
}

// writeEndpoints replaces the endpoints file at once, as an operator's tool would.
func writeEndpoints(t *testing.T, path string, endpoints []map[string]any) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"endpoints": endpoints})
	if err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
