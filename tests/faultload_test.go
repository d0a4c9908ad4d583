package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
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

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/tests/harness"
)

// Fault scenarios under steady load from cmd/loadgen (docs/design.md guarantees 7
// and 10, and ingest's 2xx only after Kafka acknowledged). Each runs a private pipeline (topics, consumer groups, a Redis
// prefix or a Redis server of its own, user ids of its own), drives it with the load
// generator's batches, injects one fault (or a series) while the load runs, and ends
// with the same checks:
//
//   - every event ingest acknowledged with a 2xx (loadgen -acked) is in
//     presence.events as it was sent: none lost;
//   - every user's status (POST /statuses, GET /v1/users/{id}/status), the online
//     count, the operator listing of GET /v1/online (the bitmaps) and presence.changes
//     equal the model folded from the log (harness/model.go);
//   - a change-feed client (WebSocket) watching a tenth of the users, connected before
//     the load and kept through the scenario — it reconnects with its cursor whenever
//     its connection ends, and the test also drops it during the fault — received
//     exactly the model's changes of its users: no gap, no repeat;
//   - while the fault lasts no read answers 200 with a state older than one it
//     answered before (a lastUpdated going back, the registered count falling), and
//     every refusal is a 503 with Retry-After.
//
// Each logs one line: events offered, acknowledged and lost, and the time to detect
// and to repair the fault, as that scenario defines them.

// faultLoad is one scenario's pipeline, load and observers.
type faultLoad struct {
	name    string
	p       *harness.Pipeline
	cfg     faultConfig
	prefix  string // every user id of the scenario starts with it
	watched []string
	// redisAddr and redisPort are the private Redis, when the scenario has one.
	redisAddr string
	redisPort int
	dir       string

	watcher *faultWatcher
	sampler *faultSampler

	load      *exec.Cmd
	loadOut   *harness.SyncBuffer
	loadDone  chan struct{}
	loadErr   error
	loadStart time.Time
	markers   int
}

type faultConfig struct {
	partitions   int
	privateRedis bool
	history      bool
	users        int
	batchRate    int
	batchSize    int
	duration     time.Duration
	env          map[string]string
	// historyEnv is added to history's environment only.
	historyEnv map[string]string
}

var (
	loadgenOnce sync.Once
	loadgenErr  error
)

// loadgenBinary builds cmd/loadgen beside the service binaries, once per run.
func loadgenBinary(t *testing.T) string {
	t.Helper()
	loadgenOnce.Do(func() {
		out, err := exec.Command("go", "build", "-o", harness.Binary("loadgen"), "github.com/pulse-presence/pulse/cmd/loadgen").CombinedOutput()
		if err != nil {
			loadgenErr = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if loadgenErr != nil {
		t.Fatalf("building cmd/loadgen: %v", loadgenErr)
	}
	return harness.Binary("loadgen")
}

// newFaultLoad starts the scenario's pipeline and the feed client; the load starts
// with startLoad.
func newFaultLoad(t *testing.T, name string, cfg faultConfig) *faultLoad {
	t.Helper()
	loadgenBinary(t)
	p := harness.NewTopics(t, cfg.partitions)
	f := &faultLoad{name: name, p: p, cfg: cfg, prefix: "fl-" + p.Run + "-", dir: t.TempDir()}
	if cfg.privateRedis {
		f.redisPort = harness.FreePort(t)
		f.redisAddr, _ = startRedis(t, f.redisPort)
		p.Env["PULSE_REDIS_ADDR"] = f.redisAddr
	}
	p.Env["PULSE_AGGREGATOR_STATE_CHECK_INTERVAL"] = "1s"
	// The feed client reads every change of its users; a busy machine must not make it
	// a slow consumer, which is another test's subject.
	p.Env["PULSE_FEED_QUEUE_SIZE"] = "65536"
	maps.Copy(p.Env, cfg.env)
	names := []string{"ingest", "aggregator", "query"}
	if cfg.history {
		names = append(names, "history")
	}
	for _, name := range names {
		f.start(t, name)
	}
	for i := range cfg.users / 10 {
		f.watched = append(f.watched, f.prefix+strconv.Itoa(i))
	}
	f.watcher = startFaultWatcher(t, p.Svc["query"].URL, f.watched)
	return f
}

// start starts a service of the pipeline and waits until it is ready.
func (f *faultLoad) start(t *testing.T, name string) {
	t.Helper()
	env := maps.Clone(f.p.Env)
	if name == "history" {
		maps.Copy(env, f.cfg.historyEnv)
	}
	s := harness.StartService(t, name, env)
	harness.Eventually(t, 60*time.Second, func() string {
		if code, body := harness.Get(t, s.URL+"/readyz"); code != http.StatusOK {
			return fmt.Sprintf("%s /readyz = %d %s", name, code, body)
		}
		return ""
	})
	f.p.Svc[name] = s
}

// startLoad runs loadgen for cfg.duration against the pipeline, writing the events
// ingest acknowledged to a file, and starts sampling the read API.
func (f *faultLoad) startLoad(t *testing.T) {
	t.Helper()
	f.sampler = startFaultSampler(t, f.p.Svc["query"].URL, f.watched)
	f.loadOut = &harness.SyncBuffer{}
	f.loadDone = make(chan struct{})
	f.load = exec.Command(loadgenBinary(t),
		"-ingest", f.p.Svc["ingest"].URL, "-query", f.p.Svc["query"].URL,
		"-users", strconv.Itoa(f.cfg.users), "-user-prefix", f.prefix, "-devices", "2",
		"-batch-rate", strconv.Itoa(f.cfg.batchRate), "-batch-size", strconv.Itoa(f.cfg.batchSize),
		"-fresh-rate", "0", "-warmup", "0s", "-duration", f.cfg.duration.String(), "-timeout", "10s",
		"-seed", strconv.FormatUint(mrand.Uint64(), 10), "-quiet",
		"-acked", filepath.Join(f.dir, "acked.jsonl"), "-json", filepath.Join(f.dir, "report.json"))
	f.load.Env = append(os.Environ(), "PULSE_PRODUCER_KEY="+harness.TestKeys.Producer, "PULSE_READER_KEY="+harness.TestKeys.Reader)
	f.load.Stdout, f.load.Stderr = f.loadOut, f.loadOut
	if err := f.load.Start(); err != nil {
		t.Fatalf("starting loadgen: %v", err)
	}
	f.loadStart = time.Now()
	go func() { f.loadErr = f.load.Wait(); close(f.loadDone) }()
	t.Cleanup(func() {
		select {
		case <-f.loadDone:
		default:
			_ = f.load.Process.Kill()
			<-f.loadDone
		}
	})
}

// loadRunning fails the test when the load has ended: a fault must happen under load.
func (f *faultLoad) loadRunning(t *testing.T) {
	t.Helper()
	select {
	case <-f.loadDone:
		t.Fatalf("the load ended (%v) %v after it started, before the fault was done; output:\n%s",
			f.loadErr, time.Since(f.loadStart).Round(time.Millisecond), f.loadOut)
	default:
	}
}

// sleepUnderLoad waits d, failing if the load ends meanwhile.
func (f *faultLoad) sleepUnderLoad(t *testing.T, d time.Duration) {
	t.Helper()
	time.Sleep(d)
	f.loadRunning(t)
}

// marker posts a status event for a user of its own, with an id of its own, and
// returns both: an event posted at a fault, whose effect shows when the pipeline
// applies new events again.
func (f *faultLoad) marker(t *testing.T) (user, id string) {
	t.Helper()
	f.markers++
	user = fmt.Sprintf("%smarker-%d", f.prefix, f.markers)
	id = user + "-e"
	code, body := harness.PostJSON(t, f.p.Svc["ingest"].URL+"/v1/events",
		map[string]any{"events": []harness.WireEvent{{EventID: id, UserID: user, Kind: "status", Status: "online", DeviceID: "marker"}}})
	if code != http.StatusAccepted {
		t.Fatalf("posting a marker event: %d %s", code, body)
	}
	return user, id
}

// faultAcked is one line of loadgen's -acked file.
type faultAcked struct {
	EventID, UserID, DeviceID, Kind, Status, Workload string
}

// faultIngest is the ingest counts of loadgen's JSON report.
type faultIngest struct {
	Offered      uint64            `json:"offered"`
	Acknowledged uint64            `json:"acknowledged"`
	Refused      map[string]uint64 `json:"refused"`
	Unanswered   uint64            `json:"unanswered"`
}

func (c faultIngest) refused() uint64 {
	var n uint64
	for _, v := range c.Refused {
		n += v
	}
	return n
}

// faultResult is what the end of a scenario found.
type faultResult struct {
	ingest  faultIngest
	lost    int
	model   *harness.Model
	records map[int32][]*kgo.Record // presence.events
}

// finish waits for the load to end and runs every check but the scenario's own: the
// acknowledged events are in the log, the state and the changes equal the model, the
// feed client got exactly its users' changes, and the reads never went back.
func (f *faultLoad) finish(t *testing.T) faultResult {
	t.Helper()
	select {
	case <-f.loadDone:
	case <-time.After(f.cfg.duration + 2*time.Minute):
		t.Fatalf("loadgen did not end; output:\n%s", f.loadOut)
	}
	if f.loadErr != nil {
		t.Fatalf("loadgen: %v; output:\n%s", f.loadErr, f.loadOut)
	}
	f.sampler.stop()
	var res faultResult

	// (a) Every acknowledged event is in presence.events, as it was sent.
	raw, err := os.ReadFile(filepath.Join(f.dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Ingest    *faultIngest `json:"ingest"`
		Workloads []struct {
			Name   string `json:"name"`
			Errors struct {
				Dropped uint64 `json:"dropped"`
			} `json:"errors"`
		} `json:"workloads"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil || rep.Ingest == nil {
		t.Fatalf("loadgen's report has no ingest counts (%v):\n%s", err, raw)
	}
	res.ingest = *rep.Ingest
	for _, w := range rep.Workloads {
		if w.Errors.Dropped > 0 {
			t.Errorf("loadgen dropped %d %s requests (no free worker): the load was not the one asked for", w.Errors.Dropped, w.Name)
		}
	}
	acked := f.readAcked(t)
	in := res.ingest
	if uint64(len(acked)) != in.Acknowledged || in.Offered != in.Acknowledged+in.refused()+in.Unanswered || in.Acknowledged == 0 {
		t.Fatalf("loadgen: %d lines in the -acked file, counts %+v: want one line per acknowledged event and offered = acknowledged + refused + unanswered", len(acked), in)
	}
	res.records = harness.ReadTopic(t, f.p.Events)
	inLog := map[string]presence.Event{}
	events := map[int32][]*pulsev1.Event{}
	for part, recs := range res.records {
		for _, r := range recs {
			var pb pulsev1.Event
			if err := proto.Unmarshal(r.Value, &pb); err != nil {
				t.Fatalf("%s/%d@%d does not decode: %v", f.p.Events, part, r.Offset, err)
			}
			e, err := presence.EventFromPB(&pb)
			if err != nil {
				t.Fatalf("%s/%d@%d: %v", f.p.Events, part, r.Offset, err)
			}
			inLog[e.ID] = e
			events[part] = append(events[part], &pb)
		}
	}
	var lostLines []string
	for _, a := range acked {
		e, ok := inLog[a.EventID]
		status := ""
		if ok && e.Kind == presence.KindStatus {
			status = e.Status.String()
		}
		if a.EventID == "" || !ok || e.UserID != a.UserID || e.DeviceID != a.DeviceID || e.Kind.String() != a.Kind || status != a.Status {
			res.lost++
			lostLines = append(lostLines, fmt.Sprintf("%+v (log: %v %+v)", a, ok, e))
		}
	}
	if res.lost > 0 {
		t.Errorf("%d of %d acknowledged events are not in %s as sent:\n%s", res.lost, len(acked), f.p.Events, harness.FirstLines(lostLines, 5))
	}

	// (b) State, counts, bitmaps and changes equal the model of the log.
	m := harness.NewModel()
	seen := map[string]bool{}
	for _, evs := range events {
		m.Fold(evs, seen)
	}
	res.model = m
	f.verifyState(t, m)

	// (c) The feed client got exactly its users' changes, across every reconnection.
	var watched []string
	for _, id := range f.watched {
		if m.Users[id] != nil {
			watched = append(watched, id)
		}
	}
	want, n := watchExpect(m, watched, false)
	harness.Eventually(t, 60*time.Second, func() string {
		if got, _, _ := f.watcher.log.counts(); got < n {
			return fmt.Sprintf("the feed client has %d of its users' %d changes; %s", got, n, f.watcher.describe())
		}
		return ""
	})
	time.Sleep(time.Second) // anything extra would arrive now
	if d := watchDiff("feed client", f.watcher.log, want); len(d) > 0 {
		t.Errorf("the feed client differs from the model (%s):\n%s", f.watcher.describe(), harness.FirstLines(d, 10))
	}
	if f.watcher.reconnects() == 0 {
		t.Errorf("the feed client never reconnected: the scenario did not test a resume")
	}

	// And the reads never answered an older state with 200.
	if bad := f.sampler.problems(); len(bad) > 0 {
		t.Errorf("reads during the scenario:\n%s", harness.FirstLines(bad, 10))
	}
	return res
}

func (f *faultLoad) readAcked(t *testing.T) []faultAcked {
	t.Helper()
	file, err := os.Open(filepath.Join(f.dir, "acked.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	var out []faultAcked
	dec := json.NewDecoder(file)
	for dec.More() {
		var a struct {
			EventID  string `json:"eventId"`
			UserID   string `json:"userId"`
			DeviceID string `json:"deviceId"`
			Kind     string `json:"kind"`
			Status   string `json:"status"`
			Workload string `json:"workload"`
		}
		if err := dec.Decode(&a); err != nil {
			t.Fatalf("line %d of loadgen's -acked file: %v", len(out)+1, err)
		}
		out = append(out, faultAcked(a))
	}
	return out
}

// verifyState waits for the pipeline to apply the whole log, then compares every read
// of the state with the model.
func (f *faultLoad) verifyState(t *testing.T, m *harness.Model) {
	t.Helper()
	p := f.p
	users := m.SortedUsers()
	harness.Eventually(t, 90*time.Second, func() string {
		if d := diffStatuses(p, t, m, users); len(d) > 0 {
			return harness.FirstLines(d, 5) + "\naggregator output:\n" + harness.LastLines(p.Svc["aggregator"].Out.String(), 10)
		}
		return ""
	})
	if d := diffUserStatus(p, t, m, users); len(d) > 0 {
		t.Errorf("GET /v1/users/{id}/status differs from the model:\n%s", harness.FirstLines(d, 10))
	}
	code, body := harness.FreshCount(t, p.Svc["query"].URL+"/v1/online/count", "")
	var got struct {
		Total      uint64            `json:"total"`
		ByStatus   map[string]uint64 `json:"byStatus"`
		Registered uint64            `json:"registered"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &got) != nil {
		t.Fatalf("GET /v1/online/count = %d %s", code, body)
	}
	want := m.Counts()
	if got.Total != want["total"] || got.Registered != want["registered"] || got.ByStatus["online"] != want["online"] ||
		got.ByStatus["idle"] != want["idle"] || got.ByStatus["offline"] != want["offline"] {
		t.Errorf("GET /v1/online/count = %s, want %v", body, want)
	}
	listed, _ := onlineWalk(t, p.Svc["query"].URL, "limit=1000&view=operator", onlineToken, nil)
	if d := onlineDiff(listed, m, true); d != "" {
		t.Errorf("GET /v1/online (operator view) differs from the model:\n%s", d)
	}
	if d := diffChanges(p, t, m); len(d) > 0 {
		t.Errorf("%s differs from the model:\n%s", p.Changes, harness.FirstLines(d, 10))
	}
}

// stopServices stops the services with SIGTERM while the servers they use still run
// (the private Redis's cleanup would otherwise come first).
func (f *faultLoad) stopServices(t *testing.T) {
	t.Helper()
	for _, name := range []string{"ingest", "query", "history", "aggregator"} {
		if s := f.p.Svc[name]; s != nil {
			s.Stop(t)
		}
	}
}

// report logs the scenario's line; figures gives the times to detect and to repair.
func (f *faultLoad) report(t *testing.T, res faultResult, figures string) {
	t.Helper()
	in := res.ingest
	refused := "none"
	if in.refused() > 0 {
		var parts []string
		for _, c := range slices.Sorted(maps.Keys(in.Refused)) {
			parts = append(parts, fmt.Sprintf("%d×%s", in.Refused[c], c))
		}
		refused = strings.Join(parts, ", ")
	}
	t.Logf("%s: events offered %d, acknowledged %d, lost %d (refused %s, unanswered %d); %s; %d users, %d feed changes received, %d feed reconnections",
		f.name, in.Offered, in.Acknowledged, res.lost, refused, in.Unanswered, figures,
		len(res.model.Users), f.watcher.changes(), f.watcher.reconnects())
}

// ingestUntouched checks what a fault away from ingest and Kafka must leave alone:
// every event offered was acknowledged.
func ingestUntouched(t *testing.T, res faultResult) {
	t.Helper()
	if in := res.ingest; in.refused() > 0 || in.Unanswered > 0 {
		t.Errorf("ingest refused %v and left %d events unanswered, though the fault was not ingest's nor Kafka's", in.Refused, in.Unanswered)
	}
}

// faultWatcher is one change-feed client for the whole scenario. It watches users by
// WebSocket and, whenever its connection ends — closed by the server while a state is
// rebuilt, or dropped by the test — connects again with the cursor of the last message
// it got, as docs/feed.md tells clients to.
type faultWatcher struct {
	log   *watchLog
	base  string
	users []string
	done  chan struct{}

	mu       sync.Mutex
	conn     *websocket.Conn
	pause    time.Duration // before the next connection, once
	resumes  int
	dialErrs map[string]int
}

func startFaultWatcher(t *testing.T, base string, users []string) *faultWatcher {
	t.Helper()
	w := &faultWatcher{log: newWatchLog(), base: base, users: users, done: make(chan struct{}), dialErrs: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	go w.run(ctx)
	t.Cleanup(func() {
		cancel()
		w.drop(0)
		<-w.done
	})
	harness.Eventually(t, 30*time.Second, func() string {
		if _, s, _ := w.log.counts(); s != 1 {
			return "the feed client has no snapshot yet; " + w.describe()
		}
		return ""
	})
	return w
}

func (w *faultWatcher) run(ctx context.Context) {
	defer close(w.done)
	for ctx.Err() == nil {
		q := url.Values{"userIds": {strings.Join(w.users, ",")}}
		if _, _, cursor := w.log.counts(); cursor != "" {
			q.Set("cursor", cursor)
		}
		c, res, err := websocket.Dial(ctx, watchURL(w.base, "/v1/watch", q), &websocket.DialOptions{HTTPClient: harness.KeyedClient})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			why := err.Error()
			if res != nil {
				why = "HTTP " + strconv.Itoa(res.StatusCode)
			}
			w.mu.Lock()
			w.dialErrs[why]++
			w.mu.Unlock()
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		c.SetReadLimit(64 << 20)
		w.mu.Lock()
		w.conn = c
		w.mu.Unlock()
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				break
			}
			var m watchMsg
			if err := json.Unmarshal(b, &m); err != nil {
				m = watchMsg{Type: "error", Code: fmt.Sprintf("undecodable message %.200s", b)}
			}
			w.log.add(m)
		}
		_ = c.CloseNow()
		w.mu.Lock()
		w.conn = nil
		pause := w.pause
		w.pause = 0
		if ctx.Err() == nil {
			w.resumes++
		}
		w.mu.Unlock()
		sleepCtx(ctx, max(pause, 100*time.Millisecond))
	}
}

// drop closes the connection as a client losing its network would; the client
// connects again with its cursor after pause.
func (w *faultWatcher) drop(pause time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pause = pause
	if w.conn != nil {
		_ = w.conn.CloseNow()
	}
}

func (w *faultWatcher) reconnects() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.resumes
}

func (w *faultWatcher) changes() int {
	n, _, _ := w.log.counts()
	return n
}

func (w *faultWatcher) describe() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("%d reconnections, failed dials %v", w.resumes, w.dialErrs)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// faultSampler reads the online count and the watched users' statuses every 100 ms
// while the load runs. A read answers either 200 or 503 with Retry-After; a 200 never
// shows an older state than one shown before it: no user's lastUpdated goes back (or
// to null), and the registered count never falls (users are never forgotten).
type faultSampler struct {
	query string
	users []string
	stopC chan struct{}
	done  chan struct{}

	mu         sync.Mutex
	samples    []faultSample
	bad        []string
	rebuilding int // 503s saying the state is being rebuilt
	refusals   int // every 503
	registered uint64
	last       map[string]time.Time
}

// faultSample is one round of reads: ok when every read of it answered 200.
type faultSample struct {
	at time.Time
	ok bool
}

func startFaultSampler(t *testing.T, query string, users []string) *faultSampler {
	s := &faultSampler{query: query, users: users, stopC: make(chan struct{}), done: make(chan struct{}), last: map[string]time.Time{}}
	go s.run()
	t.Cleanup(s.stop)
	return s
}

func (s *faultSampler) stop() {
	select {
	case <-s.stopC:
	default:
		close(s.stopC)
	}
	<-s.done
}

func (s *faultSampler) run() {
	defer close(s.done)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-s.stopC:
			return
		case <-tick.C:
		}
		at := time.Now()
		ok := s.readCount()
		ok = s.readStatuses() && ok
		s.mu.Lock()
		s.samples = append(s.samples, faultSample{at: at, ok: ok})
		s.mu.Unlock()
	}
}

// do sends one read and classifies its answer: 200 (body returned), 503 with
// Retry-After (counted), anything else (a problem).
func (s *faultSampler) do(method, path string, body any) ([]byte, bool) {
	var rd io.Reader = http.NoBody
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, s.query+path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := harness.KeyedClient.Do(req)
	if err != nil {
		s.problem(fmt.Sprintf("%s %s: %v", method, path, err))
		return nil, false
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	switch {
	case err != nil:
		s.problem(fmt.Sprintf("%s %s: reading the answer: %v", method, path, err))
	case res.StatusCode == http.StatusOK:
		return out, true
	case res.StatusCode == http.StatusServiceUnavailable && res.Header.Get("Retry-After") != "":
		s.mu.Lock()
		s.refusals++
		if strings.Contains(string(out), "rebuil") {
			s.rebuilding++
		}
		s.mu.Unlock()
	default:
		s.problem(fmt.Sprintf("%s %s = %d (Retry-After %q) %.200s", method, path, res.StatusCode, res.Header.Get("Retry-After"), out))
	}
	return nil, false
}

func (s *faultSampler) problem(p string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bad = append(s.bad, time.Now().Format("15:04:05.000")+" "+p)
}

func (s *faultSampler) readCount() bool {
	body, ok := s.do(http.MethodGet, "/v1/online/count", nil)
	if !ok {
		return false
	}
	var c struct {
		Registered uint64 `json:"registered"`
	}
	if err := json.Unmarshal(body, &c); err != nil {
		s.problem("count: " + err.Error())
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.Registered < s.registered {
		s.bad = append(s.bad, fmt.Sprintf("%s the registered count fell from %d to %d with 200", time.Now().Format("15:04:05.000"), s.registered, c.Registered))
	}
	s.registered = max(s.registered, c.Registered)
	return true
}

func (s *faultSampler) readStatuses() bool {
	body, ok := s.do(http.MethodPost, "/statuses", map[string]any{"userIds": s.users})
	if !ok {
		return false
	}
	var res struct {
		Statuses []seedView `json:"statuses"`
	}
	if err := json.Unmarshal(body, &res); err != nil || len(res.Statuses) != len(s.users) {
		s.problem(fmt.Sprintf("statuses: %v, %d of %d users", err, len(res.Statuses), len(s.users)))
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range res.Statuses {
		before, had := s.last[v.UserID]
		switch {
		case had && v.LastUpdated == nil:
			s.bad = append(s.bad, fmt.Sprintf("%s %s read 200 %s with lastUpdated null, after %v", time.Now().Format("15:04:05.000"), v.UserID, v.Status, before))
		case had && v.LastUpdated.Before(before):
			s.bad = append(s.bad, fmt.Sprintf("%s %s read 200 %s as of %v, after %v", time.Now().Format("15:04:05.000"), v.UserID, v.Status, *v.LastUpdated, before))
		case v.LastUpdated != nil:
			s.last[v.UserID] = *v.LastUpdated
		}
	}
	return true
}

func (s *faultSampler) problems() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.bad)
}

// outage measures, from the fault at from on, the first round with a refused read
// (detected, -1 without one) and the first round after the last refused one
// (repaired, -1 without one), and counts the refused reads.
func (s *faultSampler) outage(from time.Time) (detected, repaired time.Duration, refused, rebuilding int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var firstBad, lastBad time.Time
	for _, x := range s.samples {
		if x.at.Before(from) || x.ok {
			continue
		}
		if firstBad.IsZero() {
			firstBad = x.at
		}
		lastBad = x.at
	}
	if firstBad.IsZero() {
		return -1, -1, s.refusals, s.rebuilding
	}
	for _, x := range s.samples {
		if x.at.After(lastBad) && x.ok {
			return firstBad.Sub(from), x.at.Sub(from), s.refusals, s.rebuilding
		}
	}
	return firstBad.Sub(from), -1, s.refusals, s.rebuilding
}

// crash is one service death of a crash scenario and what it took to get over it.
type crash struct {
	how string
	at  time.Time

	mu             sync.Mutex
	detect, repair time.Duration // 0: not yet
	err            error
}

func (c *crash) get() (detect, repair time.Duration, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.detect, c.repair, c.err
}

func (c *crash) set(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f()
}

func (c *crash) String() string {
	detect, repair, err := c.get()
	if err != nil {
		return fmt.Sprintf("%s: %v", c.how, err)
	}
	return fmt.Sprintf("%s: detected after %v, repaired after %v", c.how, detect.Round(10*time.Millisecond), repair.Round(10*time.Millisecond))
}

// groupMembers is the consumer group's state and member ids.
func groupMembers(adm *kadm.Client, group string) (string, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return "", nil, err
	}
	g, ok := d[group]
	if !ok {
		return "", nil, fmt.Errorf("group %s not described", group)
	}
	if g.Err != nil {
		return "", nil, g.Err
	}
	var ids []string
	for _, m := range g.Members {
		ids = append(ids, m.MemberID)
	}
	return g.State, ids, nil
}

// follow measures, in the background, how long the pipeline takes to get over c: it
// is detected when the consumer group is stable again without the members it had when
// the service died (their partitions were handed over), and repaired when applied
// (the marker's effect shows) says so. wg tracks it.
func (f *faultLoad) follow(t *testing.T, wg *sync.WaitGroup, c *crash, group string, applied func() bool) {
	t.Helper()
	adm := harness.KafkaAdmin(t)
	_, dead, err := groupMembers(adm, group)
	if err != nil {
		t.Fatalf("describing group %s: %v", group, err)
	}
	wg.Go(func() {
		deadline := c.at.Add(2 * time.Minute)
		for {
			detect, repair, _ := c.get()
			if detect > 0 && repair > 0 {
				return
			}
			if time.Now().After(deadline) {
				c.set(func() {
					c.err = fmt.Errorf("not over it within 2 minutes (detected after %v, repaired after %v)", detect, repair)
				})
				return
			}
			if detect == 0 {
				if state, ids, err := groupMembers(adm, group); err == nil && state == "Stable" && len(ids) > 0 &&
					!slices.ContainsFunc(ids, func(id string) bool { return slices.Contains(dead, id) }) {
					c.set(func() { c.detect = time.Since(c.at) })
				}
			}
			if repair == 0 && applied() {
				c.set(func() { c.repair = time.Since(c.at) })
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// markerShows says whether the query API shows user's marker status.
func (f *faultLoad) markerShows(user string) func() bool {
	return func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.p.Svc["query"].URL+"/status/"+url.PathEscape(user), nil)
		res, err := harness.KeyedClient.Do(req)
		if err != nil {
			return false
		}
		defer res.Body.Close()
		var v seedView
		return res.StatusCode == http.StatusOK && json.NewDecoder(res.Body).Decode(&v) == nil && v.Status == "online"
	}
}

// killService kills a service with SIGKILL and waits for it to be gone.
func killService(t *testing.T, s *harness.Service) time.Time {
	t.Helper()
	if err := s.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("killing %s: %v", s.Name, err)
	}
	<-s.Done
	return time.Now()
}

// redisPID is the process id of the Redis server at addr, from INFO.
func redisPID(t *testing.T, addr string) int {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	info, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatalf("INFO server of %s: %v", addr, err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("process_id %q: %v", v, err)
			}
			return pid
		}
	}
	t.Fatalf("INFO server of %s names no process_id", addr)
	return 0
}

// metric is the value of a metric line of a service's /metrics, "" when absent.
func metric(t *testing.T, s *harness.Service, line string) string {
	t.Helper()
	_, body := harness.Get(t, s.URL+"/metrics")
	for l := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(l, line+" "); ok {
			return v
		}
	}
	return ""
}

func faultDefaults(cfg faultConfig) faultConfig {
	if cfg.partitions == 0 {
		cfg.partitions = 4
	}
	if cfg.users == 0 {
		cfg.users = 2000
	}
	if cfg.batchRate == 0 {
		cfg.batchRate = 20
	}
	if cfg.batchSize == 0 {
		cfg.batchSize = 50
	}
	if cfg.duration == 0 {
		cfg.duration = 30 * time.Second
	}
	return cfg
}

// checkRebuilt asserts the aggregator rebuilt shards from the log.
func (f *faultLoad) checkRebuilt(t *testing.T) string {
	t.Helper()
	agg := f.p.Svc["aggregator"]
	if out := agg.Out.String(); !strings.Contains(out, "shard rebuilt from the log") {
		t.Errorf("the aggregator did not log a rebuild; its output ends:\n%s", harness.LastLines(out, 20))
	}
	n := metric(t, agg, "pulse_aggregator_rebuilds_total")
	if v, err := strconv.ParseFloat(n, 64); err != nil || v < 1 {
		t.Errorf("pulse_aggregator_rebuilds_total = %q, want at least 1", n)
	}
	return n
}

// Redis restarted empty under load: the private redis-server is killed with SIGKILL
// and, 2 s later, a new one without any data starts on the same port. Reads answer
// 503 while Redis is away and then "being rebuilt", never an older state with 200;
// the aggregator notices the empty Redis by itself (the state check, or a window
// write refused) and rebuilds every shard from the log; then every check passes.
// Detect: the first refused read after the kill; repair: the first round of reads all
// answering 200 after the last refused one.
func TestFaultLoadRedisRestartedEmpty(t *testing.T) {
	f := newFaultLoad(t, "Redis restarted empty", faultDefaults(faultConfig{privateRedis: true}))
	f.startLoad(t)
	f.sleepUnderLoad(t, 8*time.Second)

	pid := redisPID(t, f.redisAddr)
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing redis-server %d: %v", pid, err)
	}
	f.watcher.drop(4 * time.Second)
	time.Sleep(2 * time.Second)
	startRedis(t, f.redisPort)
	back := time.Now()
	f.loadRunning(t)

	res := f.finish(t)
	ingestUntouched(t, res)
	detected, repaired, refused, rebuilding := f.sampler.outage(killed)
	if detected < 0 || repaired < 0 {
		t.Errorf("reads after the kill: detected %v, repaired %v: want refusals, then 200s again", detected, repaired)
	}
	// Reads while Redis is away are refused; whether one also meets the rebuild that
	// follows depends on how fast it runs (see the FLUSHALL scenario).
	rebuilds := f.checkRebuilt(t)
	f.report(t, res, fmt.Sprintf("time to detect %v, time to repair %v (Redis down %v, reads all 200 again %v after the empty one started; %d reads refused, %d of them \"being rebuilt\"; %s shard rebuilds)",
		detected.Round(10*time.Millisecond), repaired.Round(10*time.Millisecond), back.Sub(killed).Round(10*time.Millisecond),
		(repaired-back.Sub(killed)).Round(10*time.Millisecond), refused, rebuilding, rebuilds))
	f.stopServices(t)
}

// Redis FLUSHALL under load, on a private redis-server: reads answer 503 "being
// rebuilt", never an older state with 200; the aggregator rebuilds every shard from
// the log without anyone acting; then every check passes. Detect: the first refused
// read after the flush; repair: the first round of reads all answering 200 after the
// last refused one.
func TestFaultLoadRedisFlushAll(t *testing.T) {
	f := newFaultLoad(t, "Redis FLUSHALL", faultDefaults(faultConfig{privateRedis: true}))
	f.startLoad(t)
	f.sleepUnderLoad(t, 8*time.Second)

	rdb := redis.NewClient(&redis.Options{Addr: f.redisAddr})
	defer rdb.Close()
	flushed := time.Now()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	f.watcher.drop(3 * time.Second)
	f.loadRunning(t)

	res := f.finish(t)
	ingestUntouched(t, res)
	detected, repaired, refused, rebuilding := f.sampler.outage(flushed)
	if detected >= 0 && repaired < 0 {
		t.Errorf("reads after the flush: refused from %v on and never answered 200 again", detected)
	}
	// A 503 is what a read meeting the outage must get, not something a read must meet:
	// on an idle machine the aggregator rebuilds two small shards within one 100 ms
	// round of the sampler. That the outage was noticed and repaired is the rebuild
	// itself (checkRebuilt); that no read answered wrong meanwhile, the sampler's
	// checks and the end's model.
	rebuilds := f.checkRebuilt(t)
	outage := fmt.Sprintf("time to detect %v, time to repair %v", detected.Round(10*time.Millisecond), repaired.Round(10*time.Millisecond))
	if detected < 0 {
		outage = "no read met the outage (rebuilt within one 100 ms round of reads)"
	}
	f.report(t, res, fmt.Sprintf("%s (%d reads refused, %d of them \"being rebuilt\"; %s shard rebuilds)",
		outage, refused, rebuilding, rebuilds))
	f.stopServices(t)
}

// The aggregator dies three times under load: SIGKILL at a random moment; then, in
// the replacement, the crash point PULSE_AGGREGATOR_CRASH_AFTER_WRITE — it exits with
// code 3 right after a window reached Redis and before that window's changes were
// produced and its offsets committed; then SIGKILL again at a random moment. Each
// time a new aggregator starts at once. Replays never regress the state (guarantee
// 7), the window left half done is finished, the feed drops re-produced changes, and
// every check passes. Detect: the consumer group stable again without the dead
// member; repair: an event posted at the death shows in the query API.
func TestFaultLoadAggregatorCrashes(t *testing.T) {
	f := newFaultLoad(t, "aggregator crashes", faultDefaults(faultConfig{duration: 40 * time.Second}))
	group := f.p.Env["PULSE_AGGREGATOR_GROUP"]
	f.startLoad(t)
	rnd := mrand.New(mrand.NewPCG(mrand.Uint64(), 13))
	randomIn := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rnd.Int64N(int64(hi-lo))) }
	var wg sync.WaitGroup
	var crashes []*crash
	died := func(how string, at time.Time) *crash {
		user, _ := f.marker(t)
		c := &crash{how: how, at: at}
		f.follow(t, &wg, c, group, f.markerShows(user))
		crashes = append(crashes, c)
		return c
	}
	startAggregator := func(crashAfter int) *harness.Service {
		env := maps.Clone(f.p.Env)
		if crashAfter > 0 {
			env["PULSE_AGGREGATOR_CRASH_AFTER_WRITE"] = strconv.Itoa(crashAfter)
		}
		s := harness.StartService(t, "aggregator", env)
		f.p.Svc["aggregator"] = s
		return s
	}

	// 1: SIGKILL at a random moment.
	f.sleepUnderLoad(t, randomIn(3*time.Second, 6*time.Second))
	first := died("SIGKILL", killService(t, f.p.Svc["aggregator"]))
	f.watcher.drop(3 * time.Second)
	// 2: the replacement exits right after its n-th window write.
	n := 20 + rnd.IntN(100)
	s := startAggregator(n)
	select {
	case <-s.Done:
	case <-time.After(90 * time.Second):
		t.Fatalf("the aggregator with PULSE_AGGREGATOR_CRASH_AFTER_WRITE=%d did not exit within 90 s; output:\n%s", n, harness.LastLines(s.Out.String(), 20))
	}
	var exit *exec.ExitError
	if !errors.As(s.Err, &exit) || exit.ExitCode() != 3 || !strings.Contains(s.Out.String(), "exiting between a window's Redis write and its changes and commit") {
		t.Fatalf("the aggregator with PULSE_AGGREGATOR_CRASH_AFTER_WRITE=%d ended with %v; output:\n%s", n, s.Err, harness.LastLines(s.Out.String(), 20))
	}
	f.loadRunning(t)
	second := died(fmt.Sprintf("crash point after window write %d", n), time.Now())
	afterCrashPoint := startAggregator(0)
	// 3: SIGKILL at a random moment once the replacement works.
	harness.Eventually(t, 60*time.Second, func() string {
		d1, _, _ := first.get()
		d2, _, _ := second.get()
		if d1 == 0 || d2 == 0 {
			return "the group has not handed the partitions over yet"
		}
		return ""
	})
	f.sleepUnderLoad(t, randomIn(time.Second, 4*time.Second))
	died("SIGKILL", killService(t, f.p.Svc["aggregator"]))
	startAggregator(0)
	f.loadRunning(t)

	res := f.finish(t)
	wg.Wait()
	ingestUntouched(t, res)
	var lines []string
	for _, c := range crashes {
		if _, _, err := c.get(); err != nil {
			t.Errorf("%s", c)
		}
		lines = append(lines, c.String())
	}
	// Whether the window the crash point left written but uncommitted had changes to
	// produce again (a window without changes leaves no outbox).
	reproduced := "no changes of the uncommitted window to produce again"
	for l := range strings.SplitSeq(afterCrashPoint.Out.String(), "\n") {
		if i := strings.Index(l, "re-producing changes of an uncommitted window"); i >= 0 {
			reproduced = "the next aggregator produced the uncommitted window's changes again: " + strings.TrimSpace(l[i:])
		}
	}
	f.report(t, res, "time to detect and to repair per crash: "+strings.Join(lines, "; ")+"; "+reproduced)
	f.stopServices(t)
}

// History dies twice under load, SIGKILLed at random moments, and a new one starts
// each time. Besides the checks of every scenario, Cassandra ends with exactly the
// rows the history model (history_test.go) derives from the two logs: every event
// but heartbeats and every change once in user_activity, user_status as the newest
// event and change say. Detect: the history group stable again without the dead
// member; repair: an event posted at the death is in user_status.
func TestFaultLoadHistoryCrashes(t *testing.T) {
	f := newFaultLoad(t, "history crashes", faultDefaults(faultConfig{history: true, users: 500, batchRate: 6, duration: 35 * time.Second,
		historyEnv: map[string]string{
			"PULSE_HISTORY_COMMIT_INTERVAL": "200ms",
			// Cassandra runs at a lower priority than everything else on the machine
			// (PULSE_CASSANDRA_NICE): on a busy one it may take longer than the
			// defaults to accept a session or answer the readiness check, which is not
			// what this test is about.
			"PULSE_CASSANDRA_CONNECT_TIMEOUT": "20s",
			"PULSE_CASSANDRA_TIMEOUT":         "10s",
			"PULSE_READY_CHECK_TIMEOUT":       "10s",
		}}))
	group := f.p.Env["PULSE_HISTORY_GROUP"]
	session := migCassandra(t)
	ks := harness.EnvOr("PULSE_CASSANDRA_KEYSPACE", "pulse")
	var hm histModel
	var histUsers []string
	h := &histEnv{run: f.p.Run, events: f.p.Events, changes: f.p.Changes, group: group, adm: harness.KafkaAdmin(t), session: session, ks: ks}
	h.histCleanup(t, &hm, nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, u := range histUsers {
			_ = session.Query(`DELETE FROM `+ks+`.user_status WHERE user_id = ?`, u).ExecContext(ctx)
		}
	})
	f.startLoad(t)
	rnd := mrand.New(mrand.NewPCG(mrand.Uint64(), 17))
	randomIn := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rnd.Int64N(int64(hi-lo))) }
	var wg sync.WaitGroup
	var crashes []*crash
	for i := range 2 {
		f.sleepUnderLoad(t, randomIn(2*time.Second, 5*time.Second))
		at := killService(t, f.p.Svc["history"])
		user, id := f.marker(t)
		if i == 0 {
			f.watcher.drop(3 * time.Second)
		}
		c := &crash{how: fmt.Sprintf("SIGKILL %d", i+1), at: at}
		f.follow(t, &wg, c, group, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var last string
			err := session.Query(`SELECT last_event_id FROM `+ks+`.user_status WHERE user_id = ?`, user).ScanContext(ctx, &last)
			return err == nil && last == id
		})
		crashes = append(crashes, c)
		f.start(t, "history")
		harness.Eventually(t, 60*time.Second, func() string {
			if d, _, _ := c.get(); d == 0 {
				return "the history group has not handed the partitions over yet"
			}
			return ""
		})
	}

	res := f.finish(t)
	wg.Wait()
	ingestUntouched(t, res)

	// Cassandra: exactly the history model of the two logs, once history has
	// committed both to their ends.
	var events []histEvent
	for part, recs := range res.records {
		for _, r := range recs {
			var pb pulsev1.Event
			if err := proto.Unmarshal(r.Value, &pb); err != nil {
				t.Fatal(err)
			}
			e, err := presence.EventFromPB(&pb)
			if err != nil {
				t.Fatal(err)
			}
			events = append(events, histEvent{e: e, partition: part, offset: r.Offset})
		}
	}
	// A change produced again after a crash is the same change (same source
	// position): history writes the same row, so the model counts it once.
	var changes []histChange
	seenChange := map[[2]int64]bool{}
	for _, recs := range harness.ReadTopic(t, f.p.Changes) {
		for _, r := range recs {
			var c pulsev1.Change
			if err := proto.Unmarshal(r.Value, &c); err != nil {
				t.Fatal(err)
			}
			k := [2]int64{int64(c.SourcePartition), c.SourceOffset}
			if !seenChange[k] {
				seenChange[k] = true
				changes = append(changes, histChange{c: &c})
			}
		}
	}
	hm = histBuildModel(events, changes)
	histUsers = res.model.SortedUsers()
	harness.Eventually(t, 120*time.Second, func() string { return faultCommitted(t, h.adm, group, f.p.Events, f.p.Changes) })
	histResult := fmt.Sprintf("Cassandra's %d history rows and %d user_status rows equal the model", len(hm.rows), len(hm.status))
	// Once committed, the rows are written; the wait only rides out reads that a busy
	// Cassandra does not answer in time.
	diff := faultHistDiff(t, h, hm, events, histUsers)
	for deadline := time.Now().Add(3 * time.Minute); diff != "" && time.Now().Before(deadline); {
		time.Sleep(time.Second)
		diff = faultHistDiff(t, h, hm, events, histUsers)
	}
	if diff != "" {
		t.Errorf("Cassandra differs from the history model: %s", diff)
		histResult = "Cassandra differs from the model"
	}
	var lines []string
	for _, c := range crashes {
		if _, _, err := c.get(); err != nil {
			t.Errorf("%s", c)
		}
		lines = append(lines, c.String())
	}
	f.report(t, res, fmt.Sprintf("time to detect and to repair per crash: %s; %s", strings.Join(lines, "; "), histResult))
	f.stopServices(t)
}

// faultCommitted says what the group has not committed yet of the topics' ends.
func faultCommitted(t *testing.T, adm *kadm.Client, group string, topics ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return err.Error()
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return err.Error()
	}
	var behind []string
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := committed.Lookup(o.Topic, o.Partition)
		if o.Offset > 0 && (!ok || c.At < o.Offset) {
			behind = append(behind, fmt.Sprintf("%s/%d at %d of %d", o.Topic, o.Partition, c.At, o.Offset))
		}
	})
	if len(behind) > 0 {
		return "history has not committed " + strings.Join(behind, ", ")
	}
	return ""
}

// faultHistDiff is histDiff for the load generator's events, reading users 5 at a
// time on 8 goroutines. Ingest stamps every event of one request with the same
// received-at, so two events of a user in one batch are equally new and
// user_status.last_event_id may name either (Cassandra keeps the cell with the
// highest write timestamp; both have the same). Every other column and every row
// must equal the model exactly.
func faultHistDiff(t *testing.T, h *histEnv, m histModel, events []histEvent, users []string) string {
	t.Helper()
	// newest[user] are the ids of the user's newest non-stale events, all equally new.
	newest := map[string][]string{}
	newestAt := map[string]time.Time{}
	seen := map[string]bool{}
	device := map[string]time.Time{}
	for _, he := range events {
		e := he.e
		if seen[e.UserID+"|"+e.ID] {
			continue
		}
		seen[e.UserID+"|"+e.ID] = true
		at := e.Time()
		k := e.UserID + "|" + e.DeviceID
		if at.Before(device[k]) {
			continue
		}
		device[k] = at
		switch {
		case at.After(newestAt[e.UserID]):
			newestAt[e.UserID], newest[e.UserID] = at, []string{e.ID}
		case at.Equal(newestAt[e.UserID]):
			newest[e.UserID] = append(newest[e.UserID], e.ID)
		}
	}
	days := map[string]bool{}
	for _, r := range m.rows {
		days[r.Bucket] = true
	}
	for _, d := range []time.Duration{-24 * time.Hour, 0, 24 * time.Hour} {
		days[histDay(time.Now().Add(d))] = true
	}
	dayList := slices.Collect(maps.Keys(days))

	var (
		mu     sync.Mutex
		rows   = map[string]histRow{}
		status = map[string]histStatus{}
		errs   []string
	)
	chunks := make(chan []string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for chunk := range chunks {
				r, s, err := h.histRead(t, chunk, dayList)
				mu.Lock()
				if err != nil {
					errs = append(errs, err.Error())
				}
				maps.Copy(rows, r)
				maps.Copy(status, s)
				mu.Unlock()
			}
		})
	}
	for i := 0; i < len(users); i += 5 {
		chunks <- users[i:min(i+5, len(users))]
	}
	close(chunks)
	wg.Wait()
	if len(errs) > 0 {
		return harness.FirstLines(errs, 3)
	}

	var diffs []string
	for k, want := range m.rows {
		got, ok := rows[k]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("missing row %s: %+v", k, want))
		case got != want:
			diffs = append(diffs, fmt.Sprintf("row %s:\n  got  %+v\n  want %+v", k, got, want))
		}
	}
	for k, got := range rows {
		if _, ok := m.rows[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("extra row %s: %+v", k, got))
		}
	}
	for _, u := range users {
		got, want := status[u], m.status[u]
		if got.LastEventID != want.LastEventID && slices.Contains(newest[u], got.LastEventID) {
			want.LastEventID = got.LastEventID
		}
		if got != want {
			diffs = append(diffs, fmt.Sprintf("user_status %s:\n  got  %+v\n  want %+v", u, got, want))
		}
	}
	if len(diffs) == 0 {
		return ""
	}
	slices.Sort(diffs)
	return fmt.Sprintf("%d rows in Cassandra, %d in the model; differences:\n%s", len(rows), len(m.rows), harness.FirstLines(diffs, 8))
}

// Kafka killed with SIGKILL under the load generator's load, and started again 5 s
// later: ingest refuses with 503 and Retry-After while the broker is away, and every
// event it acknowledged, before and after, is in presence.events and applied. A probe
// posts one status event every 100 ms from just before the kill: detect is its first
// refusal, repair its first acknowledgement after that. This stops the shared Kafka:
// it runs in make test-faults, never beside other tests.
func TestFaultLoadKafkaKilled(t *testing.T) {
	pid := stackPID(t, "kafka")
	f := newFaultLoad(t, "Kafka SIGKILL", faultDefaults(faultConfig{duration: 60 * time.Second,
		env: map[string]string{"PULSE_INGEST_ACK_TIMEOUT": "2s"}}))
	f.startLoad(t)
	f.sleepUnderLoad(t, 8*time.Second)

	type probe struct {
		at        time.Time
		id        string
		code      int // 0: no answer
		retryHint bool
	}
	var (
		probeMu sync.Mutex
		probes  []probe
		probing sync.WaitGroup
		// backAt is when the probe was acknowledged again after a refusal.
		backAt time.Time
	)
	probeUser := f.prefix + "probe"
	probing.Go(func() {
		refused := false
		for i := 0; ; i++ {
			id := fmt.Sprintf("%s-%d", probeUser, i)
			b, _ := json.Marshal(map[string]any{"events": []harness.WireEvent{{EventID: id, UserID: probeUser, Kind: "status",
				Status: []string{"online", "idle"}[i%2], DeviceID: "probe"}}})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.p.Svc["ingest"].URL+"/v1/events", bytes.NewReader(b))
			req.Header.Set("Content-Type", "application/json")
			pr := probe{at: time.Now(), id: id}
			if res, err := harness.KeyedClient.Do(req); err == nil {
				pr.code, pr.retryHint = res.StatusCode, res.Header.Get("Retry-After") != ""
				res.Body.Close()
			}
			cancel()
			probeMu.Lock()
			probes = append(probes, pr)
			refused = refused || pr.code != http.StatusAccepted
			if refused && pr.code == http.StatusAccepted && backAt.IsZero() {
				backAt = pr.at
			}
			// A second of acknowledgements after the repair, then the probe stops, so
			// the model read at the end is the probe user's last word; it gives up
			// after 5 minutes.
			done := !backAt.IsZero() && time.Since(backAt) > time.Second || len(probes) > 3000
			probeMu.Unlock()
			if done {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	time.Sleep(time.Second) // the probe is acknowledged before the kill
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing Kafka (pid %d): %v", pid, err)
	}
	restart := stackRestarter(t)
	f.watcher.drop(3 * time.Second)
	time.Sleep(5 * time.Second)
	f.loadRunning(t)
	restart()
	restarted := time.Now()
	probing.Wait()
	res := f.finish(t)

	// Every refusal was a 503 with Retry-After; the probe's acknowledged events are in
	// the log too.
	for code := range res.ingest.Refused {
		if code != "503" {
			t.Errorf("ingest refused %d events with HTTP %s, want only 503", res.ingest.Refused[code], code)
		}
	}
	if res.ingest.refused() == 0 {
		t.Errorf("ingest refused none of the load's events while Kafka was away")
	}
	inLog := map[string]bool{}
	for _, recs := range res.records {
		for _, r := range recs {
			var e pulsev1.Event
			if err := proto.Unmarshal(r.Value, &e); err == nil {
				inLog[e.EventId] = true
			}
		}
	}
	detected := time.Duration(-1)
	probeMu.Lock()
	defer probeMu.Unlock()
	for _, pr := range probes {
		switch {
		case pr.code == http.StatusAccepted:
			if !inLog[pr.id] {
				t.Errorf("the probe's event %s was acknowledged but is not in the log", pr.id)
			}
		case detected < 0 && !pr.at.Before(killed):
			detected = pr.at.Sub(killed)
			fallthrough
		default:
			if pr.code != 0 && (pr.code != http.StatusServiceUnavailable || !pr.retryHint) {
				t.Errorf("the probe got HTTP %d (Retry-After %v) while Kafka was away, want 503 with Retry-After", pr.code, pr.retryHint)
			}
		}
	}
	if detected < 0 || backAt.IsZero() {
		t.Fatalf("the probe saw no refusal (%v) or no acknowledgement after one (%v)", detected, backAt)
	}
	f.report(t, res, fmt.Sprintf("time to detect %v, time to repair %v (Kafka down %v, kill to restarted)",
		detected.Round(10*time.Millisecond), backAt.Sub(killed).Round(10*time.Millisecond), restarted.Sub(killed).Round(10*time.Millisecond)))
	f.stopServices(t)
}
