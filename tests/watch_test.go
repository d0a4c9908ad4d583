package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/pulse-presence/pulse/tests/harness"
)

// watchToken is the operator key of the change feed tests.
var watchToken = harness.TestKeys.Operator

// watchMsg is a change feed message as a client decodes it.
type watchMsg struct {
	Type     string    `json:"type"`
	UserID   string    `json:"userId"`
	Status   string    `json:"status"`
	Previous string    `json:"previous"`
	At       time.Time `json:"at"`
	Cause    string    `json:"cause"`
	Cursor   string    `json:"cursor"`
	Code     string    `json:"code"`
	// Data is a change's custom status as sent ("null": none).
	Data     json.RawMessage `json:"data"`
	Statuses []struct {
		UserID      string     `json:"userId"`
		Status      string     `json:"status"`
		LastUpdated *time.Time `json:"lastUpdated"`
	} `json:"statuses"`
	// A group watcher's: the group of a snapshot or member message, the members of
	// its snapshot, and whether a member message's user joined.
	GroupID string   `json:"groupId"`
	Members []string `json:"members"`
	Joined  bool     `json:"joined"`
}

// watchLog is what one watcher received: changes per user in arrival order.
type watchLog struct {
	mu        sync.Mutex
	changes   map[string][]watchMsg
	n         int
	snapshots []watchMsg
	errors    []watchMsg
	cursor    string // of the last message with one
}

func newWatchLog() *watchLog { return &watchLog{changes: map[string][]watchMsg{}} }

func (l *watchLog) add(m watchMsg) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch m.Type {
	case "change":
		l.changes[m.UserID] = append(l.changes[m.UserID], m)
		l.n++
	case "snapshot":
		l.snapshots = append(l.snapshots, m)
	default:
		l.errors = append(l.errors, m)
	}
	if m.Cursor != "" {
		l.cursor = m.Cursor
	}
}

func (l *watchLog) counts() (changes, snapshots int, cursor string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n, len(l.snapshots), l.cursor
}

// watchWS is a WebSocket watcher writing what it receives to log until ctx ends or
// the server closes; done is closed when it stops.
type watchWS struct {
	conn *websocket.Conn
	done chan struct{}
	err  error
}

func watchURL(base, path string, q url.Values) string {
	return strings.Replace(base, "http", "ws", 1) + path + "?" + q.Encode()
}

// watchDialWS connects, retrying while the feed is not ready (503), and reads.
func watchDialWS(t *testing.T, ctx context.Context, u string, log *watchLog) *watchWS {
	t.Helper()
	var conn *websocket.Conn
	harness.Eventually(t, 20*time.Second, func() string {
		c, res, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: harness.KeyedClient})
		if err != nil {
			if res != nil && res.StatusCode == http.StatusServiceUnavailable {
				return "feed not ready: " + err.Error()
			}
			t.Fatalf("dial %.120s: %v", u, err)
		}
		conn = c
		return ""
	})
	conn.SetReadLimit(64 << 20)
	w := &watchWS{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			_, b, err := conn.Read(ctx)
			if err != nil {
				w.err = err
				return
			}
			var m watchMsg
			if err := json.Unmarshal(b, &m); err != nil {
				w.err = fmt.Errorf("message %.200s: %w", b, err)
				return
			}
			log.add(m)
		}
	}()
	t.Cleanup(func() { _ = conn.CloseNow(); <-w.done })
	return w
}

// watchSSE reads the SSE stream of u into log, checking that every event's id is its
// data's cursor and its name its type.
func watchSSE(t *testing.T, ctx context.Context, u string, log *watchLog) {
	t.Helper()
	var res *http.Response
	harness.Eventually(t, 20*time.Second, func() string {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		r, err := harness.KeyedClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if r.StatusCode == http.StatusServiceUnavailable {
			r.Body.Close()
			return "feed not ready"
		}
		if r.StatusCode != http.StatusOK {
			t.Fatalf("GET %.120s = %d", u, r.StatusCode)
		}
		res = r
		return ""
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		rd := bufio.NewReaderSize(res.Body, 1<<20)
		var event, id, data string
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case strings.HasPrefix(line, "event: "):
				event = line[7:]
			case strings.HasPrefix(line, "id: "):
				id = line[4:]
			case strings.HasPrefix(line, "data: "):
				data = line[6:]
			case line == "" && data != "":
				var m watchMsg
				if err := json.Unmarshal([]byte(data), &m); err != nil || m.Type != event || m.Cursor != id {
					log.add(watchMsg{Type: "error", Code: fmt.Sprintf("bad SSE event %q id %q data %.100s", event, id, data)})
				} else {
					log.add(m)
				}
				event, id, data = "", "", ""
			}
		}
	}()
	t.Cleanup(func() { res.Body.Close(); <-done })
}

// watchExpect is the model's changes per user as a reader sees them: public, or as
// they are for an operator.
func watchExpect(m *harness.Model, users []string, operator bool) (map[string][]harness.ModelChange, int) {
	out := map[string][]harness.ModelChange{}
	n := 0
	for _, id := range users {
		for _, c := range m.Users[id].Changes {
			if !operator {
				c.Previous, c.Current = harness.Public(c.Previous), harness.Public(c.Current)
				if c.Previous == c.Current {
					continue
				}
				c.At = c.PublicAt
			}
			out[id] = append(out[id], c)
			n++
		}
	}
	return out, n
}

// watchDiff compares what a watcher got with what the model expects, exactly.
func watchDiff(name string, l *watchLog, want map[string][]harness.ModelChange) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var diffs []string
	for _, e := range l.errors {
		diffs = append(diffs, fmt.Sprintf("%s: error message %+v", name, e))
	}
	for id, got := range l.changes {
		if _, ok := want[id]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: %d changes for %s, who should have none", name, len(got), id))
		}
	}
	for id, w := range want {
		g := l.changes[id]
		if len(g) != len(w) {
			diffs = append(diffs, fmt.Sprintf("%s: %s has %d changes, want %d", name, id, len(g), len(w)))
			continue
		}
		for i := range w {
			if g[i].Previous != w[i].Previous || g[i].Status != w[i].Current || !g[i].At.Equal(w[i].At) || g[i].Cause != "event" || g[i].Cursor == "" {
				diffs = append(diffs, fmt.Sprintf("%s: %s change %d = %s>%s at %v (%s), want %s>%s at %v", name, id, i,
					g[i].Previous, g[i].Status, g[i].At, g[i].Cause, w[i].Previous, w[i].Current, w[i].At))
				break
			}
		}
	}
	slices.Sort(diffs)
	return diffs
}

// TestWatchDeliversTheModelsChanges: watchers of 500 users — by query parameter, by
// subscribe command, over SSE, and one that disconnects mid-stream and resumes with
// its cursor — each receive exactly the public changes the model predicts for 10,000
// events, and an operator's firehose exactly every change as it is. The query
// service keeps few changes in memory, so the resume reads Kafka.
func TestWatchDeliversTheModelsChanges(t *testing.T) {
	p := harness.NewPipeline(t, 4, map[string]string{
		"PULSE_FEED_REPLAY_BUFFER": "200",
		// This test checks what each watcher receives, not the slow-consumer rule: on a
		// machine busy with a cold Cassandra the test's readers can fall a thousand
		// changes behind, which the default queue would end as a slow consumer.
		"PULSE_FEED_QUEUE_SIZE": "65536",
	})
	w := generate(p.Run, 500, 20, 7)
	base := p.Svc["query"].URL
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	ids := url.Values{"userIds": {strings.Join(w.users, ",")}}
	byParam, byCommand, sse, resumed, firehose := newWatchLog(), newWatchLog(), newWatchLog(), newWatchLog(), newWatchLog()
	paramConn := watchDialWS(t, ctx, watchURL(base, "/v1/watch", ids), byParam)
	cmd := watchDialWS(t, ctx, watchURL(base, "/v1/watch", nil), byCommand)
	sub, _ := json.Marshal(map[string]any{"op": "subscribe", "userIds": w.users})
	if err := cmd.conn.Write(ctx, websocket.MessageText, sub); err != nil {
		t.Fatal(err)
	}
	watchSSE(t, ctx, base+"/v1/watch/sse?"+ids.Encode(), sse)
	first := watchDialWS(t, ctx, watchURL(base, "/v1/watch", ids), resumed)
	fh := url.Values{"firehose": {"true"}, "view": {"operator"}}
	// The firehose needs the token: a header the WebSocket handshake carries.
	var fconn *websocket.Conn
	harness.Eventually(t, 20*time.Second, func() string {
		c, res, err := websocket.Dial(ctx, watchURL(base, "/v1/watch", fh), &websocket.DialOptions{
			HTTPClient: harness.KeyedClient, HTTPHeader: http.Header{"Authorization": {"Bearer " + watchToken}}})
		if err != nil {
			return fmt.Sprintf("firehose dial: %v (%v)", err, res)
		}
		fconn = c
		return ""
	})
	fconn.SetReadLimit(64 << 20)
	fdone := make(chan struct{})
	go func() {
		defer close(fdone)
		for {
			_, b, err := fconn.Read(ctx)
			if err != nil {
				return
			}
			var m watchMsg
			_ = json.Unmarshal(b, &m)
			firehose.add(m)
		}
	}()
	t.Cleanup(func() { _ = fconn.CloseNow(); <-fdone })

	// Every watcher is registered once it has its snapshot(s).
	harness.Eventually(t, 20*time.Second, func() string {
		for name, l := range map[string]*watchLog{"param": byParam, "sse": sse, "resumed": resumed, "firehose": firehose} {
			if _, s, _ := l.counts(); s != 1 {
				return name + " has no snapshot yet"
			}
		}
		if _, s, _ := byCommand.counts(); s != 2 {
			return "the subscribe command got no snapshot yet"
		}
		return ""
	})
	for _, s := range byParam.snapshots[0].Statuses {
		if s.Status != "offline" || s.LastUpdated != nil {
			t.Fatalf("snapshot of a new user: %+v, want offline and lastUpdated null", s)
		}
	}
	if n := len(byParam.snapshots[0].Statuses); n != len(w.users) || len(byCommand.snapshots[1].Statuses) != n {
		t.Fatalf("snapshots list %d and %d users, want %d", n, len(byCommand.snapshots[1].Statuses), len(w.users))
	}

	// The resumed watcher drops its connection once it has 300 changes, while the
	// first half of the events still flows, and comes back with its last cursor after
	// the second half: more changes than the query service keeps in memory, so the
	// resume reads them from Kafka.
	half := len(w.events) / 2
	start := time.Now()
	post(p, t, w, w.events[:half], 100, 4)
	harness.Eventually(t, 60*time.Second, func() string {
		if n, _, _ := resumed.counts(); n < 300 {
			got := []string{}
			for name, l := range map[string]*watchLog{"param": byParam, "resumed": resumed, "firehose": firehose} {
				n, _, _ := l.counts()
				got = append(got, fmt.Sprintf("%s %d", name, n))
			}
			return "changes received: " + strings.Join(got, ", ")
		}
		return ""
	})
	_ = first.conn.CloseNow()
	<-first.done
	cut, _, cursor := resumed.counts()
	post(p, t, w, w.events[half:], 100, 4)
	t.Logf("posted %d events in %v", len(w.events), time.Since(start).Round(time.Millisecond))

	m := harness.BuildModel(t, p.Events)
	want, n := watchExpect(m, w.users, false)
	wantOp, nOp := watchExpect(m, w.users, true)
	t.Logf("model: %d users, %d changes, %d of them public; the resumed watcher left after %d", len(m.Users), nOp, n, cut)
	if cut+200 >= n {
		t.Fatalf("the resumed watcher left after %d of %d changes: not mid-stream, or too late to need the log", cut, n)
	}
	// Reconnect once the feed has every change, so the resume surely starts before
	// what the instance holds in memory.
	harness.Eventually(t, 90*time.Second, func() string {
		if got, _, _ := byParam.counts(); got < n {
			select {
			case <-paramConn.done:
				byParam.mu.Lock()
				defer byParam.mu.Unlock()
				t.Fatalf("param's connection ended after %d of %d changes: %v (error messages %+v)", got, n, paramConn.err, byParam.errors)
			default:
			}
			return fmt.Sprintf("param has %d of %d changes", got, n)
		}
		return ""
	})
	watchDialWS(t, ctx, watchURL(base, "/v1/watch", url.Values{"userIds": ids["userIds"], "cursor": {cursor}}), resumed)

	logs := map[string]*watchLog{"param": byParam, "command": byCommand, "sse": sse, "resumed": resumed}
	harness.Eventually(t, 90*time.Second, func() string {
		for name, l := range logs {
			if got, _, _ := l.counts(); got < n {
				return fmt.Sprintf("%s has %d of %d changes", name, got, n)
			}
		}
		if got, _, _ := firehose.counts(); got < nOp {
			return fmt.Sprintf("firehose has %d of %d changes", got, nOp)
		}
		return ""
	})
	time.Sleep(time.Second) // anything extra would arrive now
	for name, l := range logs {
		if d := watchDiff(name, l, want); len(d) > 0 {
			t.Errorf("%s differs from the model:\n%s", name, harness.FirstLines(d, 10))
		}
	}
	// Beyond matching the model: SSE carries exactly the WebSocket's messages, cursors
	// included, and the resumed watcher ends with the same sequence per user as the
	// one that never left.
	if d := watchSame(byParam, sse, true); d != "" {
		t.Errorf("SSE differs from WebSocket: %s", d)
	}
	if d := watchSame(byParam, resumed, false); d != "" {
		t.Errorf("the resumed watcher differs from the one that stayed: %s", d)
	}
	if d := watchDiff("firehose", firehose, wantOp); len(d) > 0 {
		t.Errorf("the operator firehose differs from the model:\n%s", harness.FirstLines(d, 10))
	}
	if len(resumed.snapshots) != 1 {
		t.Errorf("the resumed watcher got %d snapshots, want only the first connection's", len(resumed.snapshots))
	}
	// The resume did read the log: the query service counted it.
	if _, body := harness.Get(t, base+"/metrics"); !strings.Contains(body, `pulse_feed_resumes_total{source="log"} 1`) {
		t.Errorf("metrics do not count one resume from the log:\n%s", watchMetricLines(body))
	}
}

// watchSame compares two watchers' changes per user (and their cursors).
func watchSame(a, b *watchLog, cursors bool) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(a.changes) != len(b.changes) {
		return fmt.Sprintf("changes for %d and %d users", len(a.changes), len(b.changes))
	}
	for id, ca := range a.changes {
		cb := b.changes[id]
		if len(ca) != len(cb) {
			return fmt.Sprintf("%s: %d and %d changes", id, len(ca), len(cb))
		}
		for i := range ca {
			x, y := ca[i], cb[i]
			if !cursors {
				x.Cursor, y.Cursor = "", ""
			}
			if x.Previous != y.Previous || x.Status != y.Status || !x.At.Equal(y.At) || x.Cause != y.Cause || x.Cursor != y.Cursor {
				return fmt.Sprintf("%s change %d: %+v and %+v", id, i, x, y)
			}
		}
	}
	return ""
}

func watchMetricLines(body string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "pulse_feed_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The firehose is for operators: with the reader key it is a 403 before any
// upgrade, over WebSocket and SSE alike, with an unknown key a 401; bad parameters
// are 400s.
func TestWatchRefusesWithoutOperatorToken(t *testing.T) {
	env := harness.StackEnv()
	env["PULSE_REDIS_PREFIX"] = "it-" + harness.RandomID(t)
	q := harness.StartService(t, "query", env)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name, url string
		status    int
	}{
		{"websocket firehose", watchURL(q.URL, "/v1/watch", url.Values{"firehose": {"true"}}), http.StatusForbidden},
		{"websocket firehose, wrong token", watchURL(q.URL, "/v1/watch", url.Values{"firehose": {"true"}}) + "#wrong", http.StatusUnauthorized},
		{"websocket bad cursor", watchURL(q.URL, "/v1/watch", url.Values{"userIds": {"a"}, "cursor": {"nope"}}), http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := &websocket.DialOptions{HTTPClient: harness.KeyedClient}
			if strings.HasSuffix(tc.url, "#wrong") {
				opts.HTTPHeader = http.Header{"Authorization": {"Bearer not-the-token-at-all"}}
			}
			_, res, err := websocket.Dial(ctx, strings.TrimSuffix(tc.url, "#wrong"), opts)
			if err == nil || res == nil || res.StatusCode != tc.status {
				t.Fatalf("dial = %v, %v; want HTTP %d", res, err, tc.status)
			}
		})
	}
	code, body := harness.Get(t, q.URL+"/v1/watch/sse?firehose=true")
	if code != http.StatusForbidden || !strings.Contains(body, `"code":"forbidden"`) {
		t.Errorf("SSE firehose without the token = %d %s, want 403", code, body)
	}
}
