package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pulse-presence/pulse/cmd/internal/eventgen"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakePulse answers like Pulse's ingest and query APIs, checks every body the load
// generator sends, and counts what it got. A posted status shows from the
// showOnRead-th GET /status of that user on, standing in for the aggregator's lag.
// POST /v1/heartbeat always answers 503 and POST /v1/online/filter does not exist,
// so both error classes are exercised.
type fakePulse struct {
	showOnRead int
	// checkAuth refuses requests without the test's key of their service.
	checkAuth bool

	mu       sync.Mutex
	requests map[string]int // by route
	events   int            // events in POST /v1/events, probes' included
	bad      []string       // bodies the real API would refuse
	state    map[string]fakeStatus
}

type fakeStatus struct {
	old, new  string
	readsLeft int // GET /status reads that still show old
}

func newFakePulse(showOnRead int) *fakePulse {
	return &fakePulse{showOnRead: showOnRead, requests: map[string]int{}, state: map[string]fakeStatus{}}
}

func (f *fakePulse) handler() http.Handler {
	mux := http.NewServeMux()
	count := func(route string, h http.HandlerFunc) {
		mux.HandleFunc(route, func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			f.requests[route]++
			f.mu.Unlock()
			// Ingest's routes are the POSTs but for the two reads by POST.
			want := "Bearer " + testProducerKey
			if r.Method == http.MethodGet || route == "POST /statuses" || route == "POST /v1/online/filter" {
				want = "Bearer " + testReaderKey
			}
			if got := r.Header.Get("Authorization"); f.checkAuth && got != want {
				f.refuse(w, route+": Authorization "+got)
				return
			}
			if r.Method == http.MethodPost && r.Header.Get("Content-Type") != "application/json" {
				f.refuse(w, route+": Content-Type "+r.Header.Get("Content-Type"))
				return
			}
			h(w, r)
		})
	}
	count("POST /status", func(w http.ResponseWriter, r *http.Request) {
		var b statusBody
		if !f.decode(w, r, &b) || !f.check(w, validUser(b.UserID) && validStatus(b.Status), fmt.Sprintf("%+v", b)) {
			return
		}
		reply(w, http.StatusOK, map[string]any{"success": true, "message": "Status updated successfully."})
	})
	count("POST /v1/events", func(w http.ResponseWriter, r *http.Request) {
		var b eventsBody
		if !f.decode(w, r, &b) {
			return
		}
		ids := make([]string, len(b.Events))
		for i, e := range b.Events {
			kindOK := e.Kind == "status" && validStatus(e.Status) ||
				(e.Kind == "heartbeat" || e.Kind == "activity") && e.Status == ""
			idsOK := validUser(e.UserID) && validDevice(e.DeviceID) ||
				strings.HasPrefix(e.UserID, "lg-probe-") && e.DeviceID == "probe"
			if !f.check(w, kindOK && idsOK, fmt.Sprintf("event %+v", e)) {
				return
			}
			ids[i] = strconv.Itoa(i)
		}
		f.mu.Lock()
		f.events += len(b.Events)
		for _, e := range b.Events {
			if e.Kind == "status" {
				f.state[e.UserID] = fakeStatus{old: f.state[e.UserID].shown(), new: e.Status, readsLeft: f.showOnRead - 1}
			}
		}
		f.mu.Unlock()
		reply(w, http.StatusAccepted, map[string]any{"accepted": len(b.Events), "eventIds": ids})
	})
	count("POST /v1/heartbeat", func(w http.ResponseWriter, r *http.Request) {
		var b heartbeatBody
		if !f.decode(w, r, &b) || !f.check(w, validUser(b.UserID) && validDevice(b.DeviceID), fmt.Sprintf("%+v", b)) {
			return
		}
		w.Header().Set("Retry-After", "1")
		reply(w, http.StatusServiceUnavailable, map[string]any{"error": map[string]string{"code": "unavailable", "message": "Kafka is away"}})
	})
	count("GET /status/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if !f.check(w, validUser(id) || strings.HasPrefix(id, "lg-probe-"), "user "+id) {
			return
		}
		reply(w, http.StatusOK, map[string]any{"userId": id, "status": f.status(id, true), "lastUpdated": nil})
	})
	count("POST /statuses", func(w http.ResponseWriter, r *http.Request) {
		var b userIDsBody
		if !f.decode(w, r, &b) {
			return
		}
		out := []map[string]any{}
		for _, id := range b.UserIDs {
			out = append(out, map[string]any{"userId": id, "status": f.status(id, false), "lastUpdated": nil})
		}
		reply(w, http.StatusOK, map[string]any{"statuses": out})
	})
	count("GET /v1/users/{id}/status", func(w http.ResponseWriter, r *http.Request) {
		if !f.check(w, validUser(r.PathValue("id")), "user "+r.PathValue("id")) {
			return
		}
		reply(w, http.StatusOK, map[string]any{"userId": r.PathValue("id"), "status": "offline", "devices": []any{}})
	})
	count("GET /v1/online/count", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, http.StatusOK, map[string]any{"total": 0, "byStatus": map[string]int{}, "registered": 0})
	})
	// No /v1/online/filter: the mux answers 404, which -filter-rate must report.
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests["404 "+r.Method+" "+r.URL.Path]++
		f.mu.Unlock()
		http.NotFound(w, r)
	})
	return mux
}

// status is what a reader sees of id; a GET /status read counts towards showOnRead.
func (f *fakePulse) status(id string, get bool) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.state[id]
	if !ok {
		return "offline"
	}
	shown := s.shown()
	if get && s.readsLeft > 0 {
		s.readsLeft--
		f.state[id] = s
	}
	return shown
}

func (s fakeStatus) shown() string {
	switch {
	case s.new == "":
		return "offline"
	case s.readsLeft > 0:
		return s.old
	}
	return s.new
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func (f *fakePulse) refuse(w http.ResponseWriter, why string) {
	f.mu.Lock()
	f.bad = append(f.bad, why)
	f.mu.Unlock()
	reply(w, http.StatusBadRequest, map[string]any{"error": map[string]string{"code": "bad_request", "message": why}})
}

func (f *fakePulse) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields() // as the real API does
	if err := dec.Decode(v); err != nil {
		f.refuse(w, err.Error())
		return false
	}
	return true
}

// validUser accepts the ids of -users 1000.
func validUser(id string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(id, "lg-"))
	return strings.HasPrefix(id, "lg-") && err == nil && n >= 0 && n < 1000
}

// validDevice accepts the ids of -devices 3.
func validDevice(id string) bool { return id == "d0" || id == "d1" || id == "d2" }

func validStatus(s string) bool {
	return s == "online" || s == "idle" || s == "offline" || s == "invisible"
}

// check refuses the request unless ok.
func (f *fakePulse) check(w http.ResponseWriter, ok bool, what string) bool {
	if !ok {
		f.refuse(w, what)
	}
	return ok
}

// TestRunAgainstFakeAPI runs every workload for 0.5 s of warm-up and 1 s measured, and
// checks the counts on both sides exactly: the server saw rate × 1.5 s requests of
// each kind, the report counts rate × 1 s of them.
// The keys loadgen sends, from the environment: the producer's to ingest, the
// reader's to query.
const (
	testProducerKey = "pulse_test-producer"
	testReaderKey   = "pulse_test-reader"
)

func TestRunAgainstFakeAPI(t *testing.T) {
	t.Setenv("PULSE_PRODUCER_KEY", testProducerKey)
	t.Setenv("PULSE_READER_KEY", testReaderKey)
	fake := newFakePulse(5)
	fake.checkAuth = true
	srv := httptest.NewServer(fake.handler())
	defer srv.Close()
	// Ingest and query at different addresses, so each gets its own key.
	qsrv := httptest.NewServer(fake.handler())
	defer qsrv.Close()
	jsonPath := filepath.Join(t.TempDir(), "report.json")

	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{
		"-ingest", srv.URL, "-query", qsrv.URL + "/",
		"-warmup", "500ms", "-duration", "1s", "-users", "1000", "-devices", "3", "-seed", "42",
		"-single-rate", "40", "-batch-rate", "10", "-batch-size", "7", "-heartbeat-rate", "20",
		"-read-rate", "30", "-batch-read-rate", "10", "-read-batch-size", "5", "-detail-rate", "10",
		"-count-rate", "10", "-filter-rate", "10", "-fresh-rate", "10",
		"-json", jsonPath,
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	t.Logf("report:\n%s", stdout.String())

	fake.mu.Lock()
	if len(fake.bad) > 0 {
		t.Errorf("the API would have refused: %q", fake.bad)
	}
	// Probe users: 10/s × 30 s reuse = 300, read in one POST /statuses before the run.
	// The 15 probes use lg-probe-0 … lg-probe-14 once each, so every one reads
	// "offline" at first and posts "online".
	wantRequests := map[string]int{
		"POST /status":                   60,
		"POST /v1/events":                15 + 15, // batches + probe writes
		"POST /v1/heartbeat":             30,
		"POST /statuses":                 15 + 1,
		"GET /v1/users/{id}/status":      15,
		"GET /v1/online/count":           15,
		"404 POST /v1/online/filter":     15,
		"GET /status/{id} (not polling)": 45,
	}
	polls := fake.requests["GET /status/{id}"] - 45
	got := map[string]int{}
	for route, n := range fake.requests {
		got[route] = n
	}
	got["GET /status/{id} (not polling)"] = 45
	delete(got, "GET /status/{id}")
	for route, n := range wantRequests {
		if got[route] != n {
			t.Errorf("server saw %d × %s, want %d", got[route], route, n)
		}
	}
	if len(got) != len(wantRequests) {
		t.Errorf("server saw routes %v, want exactly %v", got, wantRequests)
	}
	if fake.events != 15*7+15 {
		t.Errorf("server got %d events, want %d", fake.events, 15*7+15)
	}
	fake.mu.Unlock()
	// Every probe sees its write on its 5th read.
	if polls != 15*5 {
		t.Errorf("%d probe polls, want %d", polls, 15*5)
	}

	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("decoding the JSON report: %v", err)
	}
	if r.MeasuredSeconds != 1 || r.WarmupSeconds != 0.5 || r.Interrupted || r.Seed != 42 || r.Config["batch-size"] != "7" {
		t.Errorf("report header: measured %v, warm-up %v, interrupted %v, seed %d, batch-size %q",
			r.MeasuredSeconds, r.WarmupSeconds, r.Interrupted, r.Seed, r.Config["batch-size"])
	}
	// Measured: 40 single + 10 × 7 batch + 10 probe events; heartbeats all got 503.
	if r.AcceptedEvents != 120 || r.AcceptedEventsPerSec != 120 {
		t.Errorf("accepted events %d (%v/s), want 120 (120/s)", r.AcceptedEvents, r.AcceptedEventsPerSec)
	}
	type line struct {
		ok, c4xx, c5xx, transport, dropped, events uint64
		codes                                      string
	}
	want := map[string]line{
		"single":     {ok: 40, events: 40},
		"batch":      {ok: 10, events: 70},
		"heartbeat":  {c5xx: 20, codes: "503:20"},
		"read":       {ok: 30},
		"batch-read": {ok: 10},
		"detail":     {ok: 10},
		"count":      {ok: 10},
		"filter":     {c4xx: 10, codes: "404:10"},
		"fresh":      {ok: 10, events: 10},
	}
	if len(r.Workloads) != len(want) {
		t.Errorf("%d workloads in the report, want %d", len(r.Workloads), len(want))
	}
	for _, w := range r.Workloads {
		var codes []string
		for c, n := range w.StatusCodes {
			codes = append(codes, fmt.Sprintf("%s:%d", c, n))
		}
		gotLine := line{w.OK, w.Errors.C4xx, w.Errors.C5xx, w.Errors.Transport, w.Errors.Dropped, w.Events, strings.Join(codes, ",")}
		if gotLine != want[w.Name] {
			t.Errorf("%s: got %+v, want %+v", w.Name, gotLine, want[w.Name])
		}
		n := w.OK + w.Errors.C4xx + w.Errors.C5xx
		if w.Scheduled != n || w.AchievedRate != float64(n) || w.TargetRate*r.MeasuredSeconds != float64(n) {
			t.Errorf("%s: scheduled %d, achieved %v/s, target %v/s; want all %d", w.Name, w.Scheduled, w.AchievedRate, w.TargetRate, n)
		}
		if w.LatencyMs.Count != w.OK || (w.OK > 0 && !(w.LatencyMs.P50 > 0 && w.LatencyMs.P50 <= w.LatencyMs.Max)) {
			t.Errorf("%s: latency %+v for %d answers", w.Name, w.LatencyMs, w.OK)
		}
	}
	f := r.Freshness
	if f == nil {
		t.Fatal("no freshness in the report")
	}
	if f.Probes != 10 || f.Seen != 10 || f.Timeouts != 0 || f.Aborted != 0 || f.Polls != 50 || f.PollErrors != 0 || f.Ms.Count != 10 {
		t.Errorf("freshness %+v, want 10 probes, all seen after 5 reads", f)
	}
	// The 5th read starts no sooner than 4 poll intervals after the write's answer.
	if f.Ms.Mean < 8 || f.Ms.P50 < 8 || f.Ms.Max > 1000 {
		t.Errorf("freshness mean %v ms, p50 %v ms, max %v ms; want ≥ 8 ms and well under a second", f.Ms.Mean, f.Ms.P50, f.Ms.Max)
	}
	for _, s := range []string{"accepted events/s: 120.0", "heartbeat: HTTP 503 ×20", "filter: HTTP 404 ×10", "freshness"} {
		if !strings.Contains(stdout.String(), s) {
			t.Errorf("the table lacks %q", s)
		}
	}
	if !strings.Contains(stderr.String(), "fresh") {
		t.Errorf("no progress line on stderr: %q", stderr.String())
	}
}

// TestRunInterrupted: a Ctrl-C ends scheduling at once, waits for what is in flight
// and still reports, on the time actually measured.
func TestRunInterrupted(t *testing.T) {
	fake := newFakePulse(1)
	srv := httptest.NewServer(fake.handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
	defer cancel()
	jsonPath := filepath.Join(t.TempDir(), "report.json")
	var stdout bytes.Buffer
	began := time.Now()
	err := run(ctx, []string{"-ingest", srv.URL, "-query", srv.URL, "-warmup", "200ms", "-duration", "1m",
		"-users", "1000", "-single-rate", "50", "-fresh-rate", "0", "-quiet", "-json", jsonPath}, &stdout, new(bytes.Buffer))
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("run took %v after the interrupt", took)
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	w := r.Workloads[0]
	if !r.Interrupted || r.MeasuredSeconds < 0.3 || r.MeasuredSeconds > 1 || w.Scheduled != w.OK || w.OK < 10 {
		t.Errorf("interrupted %v, measured %v s, scheduled %d, ok %d; want an interrupted report of ~0.5 s, all ok",
			r.Interrupted, r.MeasuredSeconds, w.Scheduled, w.OK)
	}
	if !strings.Contains(stdout.String(), "interrupted") {
		t.Errorf("the table does not say the run was interrupted:\n%s", stdout.String())
	}
}

func TestFlagsRefused(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-fresh-rate", "0"}, "every rate is 0"},
		{[]string{"-batch-size", "1001"}, "-batch-size must be 1…1000"},
		{[]string{"-single-rate", "-1"}, "-single-rate must be a number ≥ 0"},
		{[]string{"-ingest", "localhost:1"}, "-ingest"},
		{[]string{"-mix", "status=1,login=2"}, `"login": kind must be`},
		{[]string{"-mix", "status=0"}, "at least one weight"},
		{[]string{"-duration", "0s", "-users", "0"}, "-users must be at least 1"},
		{[]string{"-user-prefix", "a,b"}, "-user-prefix must be"},
		{[]string{"-user-prefix", ""}, "-user-prefix must be"},
	} {
		_, err := parseFlags(tt.args, new(bytes.Buffer))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want one containing %q", tt.args, err, tt.want)
		}
	}
}

func TestRequestRandIsReproducible(t *testing.T) {
	g := eventgen.Gen{Users: 100000, Devices: 2, Kinds: eventgen.MustParseMix(eventgen.DefaultKinds)}
	draw := func(seed, salt, seq uint64) string {
		rng := requestRand(seed, salt, seq)
		return fmt.Sprint(g.Event(rng), g.Event(rng), eventgen.Status(rng))
	}
	if a, b := draw(1, 2, 3), draw(1, 2, 3); a != b {
		t.Fatalf("same seed, workload and request drew %q and %q", a, b)
	}
	seen := map[string]bool{}
	for _, k := range [][3]uint64{{1, 2, 3}, {1, 2, 4}, {1, 3, 3}, {2, 2, 3}} {
		seen[draw(k[0], k[1], k[2])] = true
	}
	if len(seen) != 4 {
		t.Fatalf("changing the seed, workload or request number did not change the draw")
	}
}
