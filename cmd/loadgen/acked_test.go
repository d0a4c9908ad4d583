package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeIngest is an ingest that acknowledges some batches and not others: of every
// five POST /v1/events, the second is a 503, the third a 429, the fourth never
// answered within the client's -timeout, and the rest 202 with ids of its own. It
// keeps, per outcome, the events it was sent.
type fakeIngest struct {
	mu       sync.Mutex
	batches  int
	acked    []AckedEvent // in no particular order
	refused  map[int]int  // events by status code
	hung     int          // events of requests left unanswered
	received int          // every event of every request
	bad      []string
}

func (f *fakeIngest) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/events", func(w http.ResponseWriter, r *http.Request) {
		var b eventsBody
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			f.fail(w, err.Error())
			return
		}
		f.mu.Lock()
		f.received += len(b.Events)
		probe := len(b.Events) == 1 && b.Events[0].DeviceID == "probe"
		// Only batches take turns in the outcomes: probes interleaving with them
		// could otherwise take every turn of one outcome.
		if !probe {
			f.batches++
		}
		n := f.batches
		switch {
		case probe || n%5 == 0 || n%5 == 1:
			ids := make([]string, len(b.Events))
			for i, e := range b.Events {
				ids[i] = fmt.Sprintf("b%d-%d", n, i)
				f.acked = append(f.acked, AckedEvent{EventID: ids[i], UserID: e.UserID, DeviceID: e.DeviceID, Kind: e.Kind, Status: e.Status,
					Workload: map[bool]string{true: "fresh", false: "batch"}[probe]})
			}
			f.mu.Unlock()
			reply(w, http.StatusAccepted, map[string]any{"accepted": len(ids), "eventIds": ids})
		case n%5 == 2:
			f.refused[http.StatusServiceUnavailable] += len(b.Events)
			f.mu.Unlock()
			w.Header().Set("Retry-After", "1")
			reply(w, http.StatusServiceUnavailable, map[string]any{"error": map[string]string{"code": "unavailable", "message": "Kafka is away"}})
		case n%5 == 3:
			f.refused[http.StatusTooManyRequests] += len(b.Events)
			f.mu.Unlock()
			reply(w, http.StatusTooManyRequests, map[string]any{"error": map[string]string{"code": "rate_limited", "message": "slow down"}})
		default:
			f.hung += len(b.Events)
			f.mu.Unlock()
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		}
	})
	mux.HandleFunc("POST /status", func(w http.ResponseWriter, r *http.Request) {
		var b statusBody
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			f.fail(w, err.Error())
			return
		}
		f.mu.Lock()
		f.received++
		f.acked = append(f.acked, AckedEvent{UserID: b.UserID, Kind: "status", Status: b.Status, Workload: "single"})
		f.mu.Unlock()
		reply(w, http.StatusOK, map[string]any{"success": true, "message": "Status updated successfully."})
	})
	mux.HandleFunc("POST /v1/heartbeat", func(w http.ResponseWriter, r *http.Request) {
		var b heartbeatBody
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			f.fail(w, err.Error())
			return
		}
		f.mu.Lock()
		f.received++
		id := fmt.Sprintf("hb-%d", len(f.acked))
		f.acked = append(f.acked, AckedEvent{EventID: id, UserID: b.UserID, DeviceID: b.DeviceID, Kind: "heartbeat", Workload: "heartbeat"})
		f.mu.Unlock()
		reply(w, http.StatusAccepted, map[string]any{"eventId": id})
	})
	mux.HandleFunc("POST /statuses", func(w http.ResponseWriter, r *http.Request) {
		var b userIDsBody
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			f.fail(w, err.Error())
			return
		}
		out := []map[string]any{}
		for _, id := range b.UserIDs {
			out = append(out, map[string]any{"userId": id, "status": "offline", "lastUpdated": nil})
		}
		reply(w, http.StatusOK, map[string]any{"statuses": out})
	})
	mux.HandleFunc("GET /status/{id}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, map[string]any{"userId": r.PathValue("id"), "status": "online", "lastUpdated": nil})
	})
	return mux
}

func (f *fakeIngest) fail(w http.ResponseWriter, why string) {
	f.mu.Lock()
	f.bad = append(f.bad, why)
	f.mu.Unlock()
	reply(w, http.StatusBadRequest, map[string]any{"error": map[string]string{"code": "bad_request", "message": why}})
}

func readAcked(t *testing.T, path string) []AckedEvent {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []AckedEvent
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	for dec.More() {
		var e AckedEvent
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("line %d of the -acked file: %v", len(out)+1, err)
		}
		out = append(out, e)
	}
	return out
}

func sortedAcked(evs []AckedEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = fmt.Sprintf("%+v", e)
	}
	slices.Sort(out)
	return out
}

// TestAckedFileListsExactlyTheAcknowledgedEvents: against an ingest that acknowledges
// some requests, refuses others with 503 and 429 and leaves some unanswered, the
// -acked file holds exactly the events the server acknowledged — warm-up included,
// with the ids it answered — and the report's ingest counts add up to every event
// sent, by outcome and status code.
func TestAckedFileListsExactlyTheAcknowledgedEvents(t *testing.T) {
	fake := &fakeIngest{refused: map[int]int{}}
	srv := httptest.NewServer(fake.handler())
	defer srv.Close()
	dir := t.TempDir()
	ackedPath, jsonPath := filepath.Join(dir, "acked.jsonl"), filepath.Join(dir, "report.json")

	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{
		"-ingest", srv.URL, "-query", srv.URL, "-warmup", "300ms", "-duration", "700ms", "-timeout", "300ms",
		"-users", "50", "-user-prefix", "fault-7-", "-devices", "2",
		"-single-rate", "20", "-batch-rate", "20", "-batch-size", "3", "-heartbeat-rate", "10", "-fresh-rate", "5",
		"-quiet", "-acked", ackedPath, "-json", jsonPath,
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	t.Logf("report:\n%s", stdout.String())

	got := readAcked(t, ackedPath)
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.bad) > 0 {
		t.Fatalf("the fake refused bodies: %q", fake.bad)
	}
	if fake.hung == 0 || len(fake.refused) != 2 || len(fake.acked) == 0 {
		t.Fatalf("the run did not meet every outcome: %d acknowledged, refused %v, %d unanswered", len(fake.acked), fake.refused, fake.hung)
	}
	if g, w := sortedAcked(got), sortedAcked(fake.acked); !slices.Equal(g, w) {
		t.Errorf("the -acked file has %d events, the server acknowledged %d; first lines:\n%s\nwant:\n%s",
			len(g), len(w), strings.Join(g[:min(5, len(g))], "\n"), strings.Join(w[:min(5, len(w))], "\n"))
	}
	for _, e := range got {
		if !strings.HasPrefix(e.UserID, "fault-7-") {
			t.Errorf("user %q lacks the -user-prefix", e.UserID)
			break
		}
	}

	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		AcceptedEvents uint64        `json:"acceptedEvents"`
		Ingest         *IngestCounts `json:"ingest"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	want := IngestCounts{
		Offered: uint64(fake.received), Acknowledged: uint64(len(fake.acked)), Unanswered: uint64(fake.hung),
		Refused: map[string]uint64{"503": uint64(fake.refused[503]), "429": uint64(fake.refused[429])},
	}
	if r.Ingest == nil || fmt.Sprint(*r.Ingest) != fmt.Sprint(want) {
		t.Errorf("report's ingest counts = %+v, want %+v", r.Ingest, want)
	}
	if r.Ingest != nil && r.Ingest.Offered != r.Ingest.Acknowledged+r.Ingest.RefusedTotal()+r.Ingest.Unanswered {
		t.Errorf("offered %d is not acknowledged + refused + unanswered: %+v", r.Ingest.Offered, r.Ingest)
	}
	// The measured numbers leave the warm-up out; the whole run's include it.
	if r.AcceptedEvents >= uint64(len(fake.acked)) {
		t.Errorf("acceptedEvents %d (measured window) not below the whole run's %d", r.AcceptedEvents, len(fake.acked))
	}
	line := fmt.Sprintf("ingest events, whole run: offered %d, acknowledged %d, refused %d (HTTP 429 ×%d, HTTP 503 ×%d), unanswered %d",
		want.Offered, want.Acknowledged, want.RefusedTotal(), fake.refused[429], fake.refused[503], want.Unanswered)
	if !strings.Contains(stdout.String(), line) {
		t.Errorf("the table lacks %q", line)
	}
}

// Without an ingest workload there are no ingest counts; an -acked file that cannot
// be created stops the run before any request.
func TestAckedWithoutIngestAndUnwritable(t *testing.T) {
	fake := &fakeIngest{refused: map[int]int{}}
	srv := httptest.NewServer(fake.handler())
	defer srv.Close()
	dir := t.TempDir()
	jsonPath, ackedPath := filepath.Join(dir, "report.json"), filepath.Join(dir, "acked.jsonl")
	err := run(t.Context(), []string{"-ingest", srv.URL, "-query", srv.URL, "-warmup", "0s", "-duration", "200ms",
		"-read-rate", "10", "-fresh-rate", "0", "-quiet", "-json", jsonPath, "-acked", ackedPath}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Ingest *IngestCounts `json:"ingest"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Ingest != nil {
		t.Errorf("a report without ingest workloads has ingest counts (%v):\n%s", err, b)
	}
	if got := readAcked(t, ackedPath); len(got) != 0 {
		t.Errorf("-acked file of a run without ingest workloads has %d lines", len(got))
	}

	err = run(t.Context(), []string{"-ingest", srv.URL, "-query", srv.URL, "-duration", "200ms", "-single-rate", "10",
		"-fresh-rate", "0", "-quiet", "-acked", filepath.Join(dir, "no-such-dir", "acked.jsonl")}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-acked") {
		t.Fatalf("run with an -acked file in a missing directory: %v, want an error naming -acked", err)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if fake.received != 0 {
		t.Errorf("the server got %d events from runs that should have sent none", fake.received)
	}
}
