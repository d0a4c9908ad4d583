package webhooks

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
	"github.com/pulse-presence/pulse/internal/domain/records"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/pkg/webhook"
)

func TestPickRate(t *testing.T) {
	for _, tt := range []struct {
		batched *report.ModeResult
		want    float64
		source  string
	}{
		{nil, 5000, "-webhooks-rate"},
		{&report.ModeResult{MaxOfferedEventsPerSec: 20000, Steps: []report.StepResult{{OfferedEventsPerSec: 5000}}}, 10000, "half the highest batched step that kept up in this run (20,000 events/s)"},
		{&report.ModeResult{Steps: []report.StepResult{{OfferedEventsPerSec: 5000}}}, 2500, "half the first batched step's rate (5,000 events/s): no step kept up"},
		{&report.ModeResult{}, 5000, "-webhooks-rate"},
	} {
		got, source := pickRate(tt.batched, 5000)
		if got != tt.want || !strings.HasPrefix(source, tt.source) {
			t.Errorf("pickRate(%+v) = %v, %q; want %v, %q…", tt.batched, got, source, tt.want, tt.source)
		}
	}
}

// changeRecord is a record of presence.changes as the aggregator writes it.
func changeRecord(t *testing.T, c *pulsev1.Change, at time.Time) *kgo.Record {
	t.Helper()
	if c.ChangedAtUs == 0 {
		c.ChangedAtUs = at.UnixMicro()
	}
	r, err := records.Change("presence.changes", c)
	if err != nil {
		t.Fatal(err)
	}
	r.Timestamp = at
	return r
}

func status(prev, cur pulsev1.Status, part int32, off int64) *pulsev1.Change {
	return &pulsev1.Change{UserId: "u1", Previous: prev, Current: cur, SourcePartition: part, SourceOffset: off}
}

// TestExpected checks which changes each view expects: a public view skips what reads
// the same publicly (offline ↔ invisible, a custom status of someone offline), and a
// change written twice counts once, at its first record's time.
func TestExpected(t *testing.T) {
	base := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	on, off, inv, idle := pulsev1.Status_STATUS_ONLINE, pulsev1.Status_STATUS_OFFLINE, pulsev1.Status_STATUS_INVISIBLE, pulsev1.Status_STATUS_IDLE
	customOnly := func(cur pulsev1.Status, off int64) *pulsev1.Change {
		c := status(cur, cur, 3, off)
		c.CustomOnly = true
		return c
	}
	member := status(on, on, 4, 1)
	member.GroupId = "room-1"
	recs := []*kgo.Record{
		changeRecord(t, status(off, on, 0, 10), base),                   // public and operator
		changeRecord(t, status(on, idle, 0, 11), base.Add(time.Second)), // both
		changeRecord(t, status(off, inv, 1, 5), base),                   // operator only: offline → offline publicly
		changeRecord(t, status(on, inv, 1, 6), base),                    // both: online → offline publicly
		changeRecord(t, customOnly(idle, 7), base),                      // both
		changeRecord(t, customOnly(inv, 8), base),                       // operator only
		changeRecord(t, member, base),                                   // both
		changeRecord(t, status(off, on, 0, 10), base.Add(time.Minute)),  // written again: one change, the first time
	}
	bad := changeRecord(t, status(on, on, 9, 9), base) // not a change
	noSchema := changeRecord(t, status(off, on, 9, 10), base)
	noSchema.Headers = nil
	var cs []change
	undecodable := 0
	for _, r := range append(recs, bad, noSchema) {
		c, err := decode(r)
		if err != nil {
			undecodable++
			continue
		}
		cs = append(cs, c)
	}
	if undecodable != 2 || len(cs) != len(recs) {
		t.Fatalf("%d decoded, %d undecodable; want %d and 2", len(cs), undecodable, len(recs))
	}
	ids := func(m map[string]time.Time) []string {
		var out []string
		for id := range m {
			out = append(out, id)
		}
		slices.Sort(out)
		return out
	}
	pub, op := expected(cs, false), expected(cs, true)
	if got, want := ids(pub), []string{"0:10", "0:11", "1:6", "3:7", "4:1"}; !slices.Equal(got, want) {
		t.Errorf("public view expects %v, want %v", got, want)
	}
	if got, want := ids(op), []string{"0:10", "0:11", "1:5", "1:6", "3:7", "3:8", "4:1"}; !slices.Equal(got, want) {
		t.Errorf("operator view expects %v, want %v", got, want)
	}
	if !op["0:10"].Equal(base) || !pub["0:11"].Equal(base.Add(time.Second)) {
		t.Errorf("produced times: 0:10 %v, 0:11 %v", op["0:10"], pub["0:11"])
	}
}

// TestSummarize checks one endpoint's figures against hand-made receipts: latency
// quantiles from each change's record to its first receipt, rates over the window,
// duplicates, changes from outside the window, and the missing ones.
func TestSummarize(t *testing.T) {
	from := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	w := window{from: from, to: from.Add(10 * time.Second)}
	want := map[string]time.Time{}
	got := receipts{first: map[string]time.Time{}, count: map[string]int{}, requests: 12, invalidSignatures: 1, malformed: 1}
	// 100 changes, one every 100 ms; change i is received (i+1) ms later, once, except
	// change 99 is received at 10.5 s (after the window) and the last 5 never.
	for i := range 105 {
		id := "0:" + string(rune('a'+i/26)) + string(rune('a'+i%26))
		at := from.Add(time.Duration(i) * 100 * time.Millisecond)
		want[id] = at
		if i >= 100 {
			continue
		}
		first := at.Add(time.Duration(i+1) * time.Millisecond)
		if i == 99 {
			first = from.Add(10500 * time.Millisecond)
		}
		got.first[id], got.count[id] = first, 1
	}
	got.count["0:aa"] = 3 // received twice more
	got.first["7:1"], got.count["7:1"] = from, 2
	got.changes = 100 + 2 + 2
	spec := endpointSpec{id: "bench-100ms", view: "public", maxChanges: 100, maxWait: 100 * time.Millisecond}
	e := summarize(spec, want, got, w)

	if e.Expected != 105 || e.Delivered != 100 || e.Missing != 5 || e.Duplicates != 3 || e.Outside != 1 {
		t.Errorf("expected %d, delivered %d, missing %d, duplicates %d, outside %d; want 105, 100, 5, 3, 1",
			e.Expected, e.Delivered, e.Missing, e.Duplicates, e.Outside)
	}
	if !slices.Equal(e.MissingIDs, []string{"0:dw", "0:dx", "0:dy", "0:dz", "0:ea"}) {
		t.Errorf("missing ids %v", e.MissingIDs)
	}
	if e.ChangesPerRequest != 10.4 || e.InvalidSignatures != 1 || e.Malformed != 1 || e.Requests != 12 {
		t.Errorf("requests %d (%d invalid, %d malformed), %v changes per request", e.Requests, e.InvalidSignatures, e.Malformed, e.ChangesPerRequest)
	}
	// Latencies 1…99 ms and 600 ms (10.5 s − 9.9 s).
	l := e.LatencyMs
	if l.Count != 100 || l.P50 != 50 || l.P99 != 99 || l.Max != 600 {
		t.Errorf("latency %+v; want 100 of them, p50 50 ms, p99 99 ms, max 600 ms", l)
	}
	// Produced in the window: changes 0…100 (10.0 s is its end, included); received in
	// it: 0…98.
	if e.ProducedPerSec != 10.1 || e.DeliveredPerSec != 9.9 {
		t.Errorf("produced %v/s, delivered %v/s; want 10.1 and 9.9", e.ProducedPerSec, e.DeliveredPerSec)
	}
	if e.LastDeliverySeconds != 0.5 || e.MaxWaitSeconds != 0.1 || e.View != "public" || e.MaxChanges != 100 {
		t.Errorf("summary %+v", e)
	}
	if none := summarize(spec, nil, receipts{}, w); none.Expected != 0 || none.LatencyMs.Count != 0 || none.LastDeliverySeconds != 0 {
		t.Errorf("nothing expected nor received: %+v", none)
	}
}

// TestReceiver posts signed and unsigned batches: only a batch for the endpoint with
// a signature by its secret counts, and a change received again is a duplicate.
func TestReceiver(t *testing.T) {
	r, err := newReceiver("bench-1s")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }
	srv := httptest.NewServer(r)
	defer srv.Close()
	post := func(endpoint string, ids []string, secret string, signedAt time.Time) int {
		b := webhook.Batch{Endpoint: endpoint, ID: "0-1-2"}
		for _, id := range ids {
			b.Changes = append(b.Changes, webhook.Change{ID: id, Type: webhook.TypeChange, UserID: "u1", Status: "online"})
		}
		body, _ := json.Marshal(b)
		req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
		req.Header.Set(webhook.SignatureHeader, webhook.Sign([]byte(secret), signedAt, body))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for _, tt := range []struct {
		endpoint, secret string
		ids              []string
		signedAt         time.Time
		want             int
	}{
		{"bench-1s", r.secret, []string{"0:1", "0:2"}, now, http.StatusNoContent},
		{"bench-1s", r.secret, []string{"0:2", "0:3"}, now.Add(-time.Minute), http.StatusNoContent},
		{"bench-1s", "another secret of 32 bytes......", []string{"0:4"}, now, http.StatusUnauthorized},
		{"bench-1s", r.secret, []string{"0:5"}, now.Add(-time.Hour), http.StatusUnauthorized}, // signed too long ago
		{"bench-100ms", r.secret, []string{"0:6"}, now, http.StatusBadRequest},
	} {
		if got := post(tt.endpoint, tt.ids, tt.secret, tt.signedAt); got != tt.want {
			t.Errorf("%s %v signed at %v: %d, want %d", tt.endpoint, tt.ids, tt.signedAt, got, tt.want)
		}
	}
	got := r.snapshot()
	if got.requests != 5 || got.invalidSignatures != 2 || got.malformed != 1 || got.changes != 4 {
		t.Errorf("%d requests, %d invalid signatures, %d malformed, %d changes; want 5, 2, 1, 4", got.requests, got.invalidSignatures, got.malformed, got.changes)
	}
	if len(got.first) != 3 || got.count["0:2"] != 2 || !got.first["0:1"].Equal(now) {
		t.Errorf("receipts %v, counts %v", got.first, got.count)
	}
	if !r.hasAll(map[string]time.Time{"0:1": {}, "0:3": {}}) || r.hasAll(map[string]time.Time{"0:1": {}, "0:4": {}}) {
		t.Error("hasAll")
	}
}

// TestEndpointsFile writes the phase's endpoints over a file and restores it, mode
// included; a file that was not there is restored as one without endpoints.
func TestEndpointsFile(t *testing.T) {
	dir := t.TempDir()
	f := endpointsFile{filepath.Join(dir, "notifier", "endpoints.json")}
	original := []byte(`{"endpoints": [{"id": "mine", "url": "http://example.com/", "secret": "0123456789abcdef"}]}`)
	if err := os.MkdirAll(filepath.Dir(f.path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.path, original, 0o640); err != nil {
		t.Fatal(err)
	}
	s, err := f.save()
	if err != nil {
		t.Fatal(err)
	}
	if !s.existed || s.endpoints != 1 || s.mode != 0o640 {
		t.Fatalf("saved %+v", s)
	}
	specs := []endpointSpec{
		{id: "bench-100ms", url: "http://127.0.0.1:1/a", secret: "s1", view: "public", maxChanges: 100, maxWait: 100 * time.Millisecond},
		{id: "bench-1s", url: "http://127.0.0.1:2/b", secret: "s2", view: "operator", maxChanges: 100, maxWait: time.Second},
	}
	if err := f.write(endpointsJSON(specs)); err != nil {
		t.Fatal(err)
	}
	var parsed struct {
		Endpoints []struct {
			ID, URL, Secret, View string
			Batch                 struct {
				MaxChanges int    `json:"maxChanges"`
				MaxWait    string `json:"maxWait"`
			}
		}
	}
	b, _ := os.ReadFile(f.path)
	if err := json.Unmarshal(b, &parsed); err != nil {
		t.Fatal(err)
	}
	if len(parsed.Endpoints) != 2 || parsed.Endpoints[0].Batch.MaxWait != "100ms" || parsed.Endpoints[1].Batch.MaxWait != "1s" ||
		parsed.Endpoints[1].View != "operator" || parsed.Endpoints[0].Batch.MaxChanges != 100 || parsed.Endpoints[1].Secret != "s2" {
		t.Errorf("endpoints file %s", b)
	}
	if st, _ := os.Stat(f.path); st.Mode().Perm() != 0o600 {
		t.Errorf("the phase's file has mode %v, want 0600", st.Mode().Perm())
	}
	if err := f.restore(s); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(f.path); !bytes.Equal(b, original) {
		t.Errorf("restored %s", b)
	}
	if st, _ := os.Stat(f.path); st.Mode().Perm() != 0o640 {
		t.Errorf("restored mode %v", st.Mode().Perm())
	}
	if entries, _ := os.ReadDir(filepath.Dir(f.path)); len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}

	gone := endpointsFile{filepath.Join(dir, "none.json")}
	s, err = gone.save()
	if err != nil || s.existed {
		t.Fatalf("save of a missing file: %+v, %v", s, err)
	}
	if err := gone.restore(s); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(gone.path); string(b) != "{\"endpoints\": []}\n" {
		t.Errorf("restored a missing file as %q", b)
	}
}

func TestEnvironValue(t *testing.T) {
	env := []byte("HOME=/root\x00PULSE_NOTIFIER_ENDPOINTS_FILE=/x/endpoints.json\x00XPULSE_NOTIFIER_ENDPOINTS_FILE=/y\x00")
	if got := environValue(env, "PULSE_NOTIFIER_ENDPOINTS_FILE"); got != "/x/endpoints.json" {
		t.Errorf("got %q", got)
	}
	if got := environValue(env, "PULSE_HOME"); got != "" {
		t.Errorf("absent variable: %q", got)
	}
	if f := locateEndpointsFile(0, "/home/pulse"); os.Getenv("PULSE_NOTIFIER_ENDPOINTS_FILE") == "" && f.path != "/home/pulse/notifier/endpoints.json" {
		t.Errorf("default file %s", f.path)
	}
}
