package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/api/historyapi"
)

// operatorEnv is the environment of an operator pointing pulsectl at base.
func operatorEnv(base string) func(string) string {
	return func(k string) string {
		switch k {
		case "PULSE_QUERY_URL":
			return base
		case "PULSE_OPERATOR_KEY":
			return "op-key"
		}
		return ""
	}
}

// The export of "al ice" in three pages of two entries at most.
const (
	exportPage1 = `{"userId":"al ice","exportedAt":"2026-11-23T10:00:00.123456Z",
	"current":{"status":"online","invisible":false,"lastUpdated":"2026-11-23T09:00:30Z","lastActive":"2026-11-23T09:00:30Z","lastSeen":"2026-11-23T09:00:31Z",
		"public":{"lastUpdated":"2026-11-23T09:00:30Z","lastActive":"2026-11-23T09:00:30Z","lastSeen":"2026-11-23T09:00:31Z"},
		"devices":[{"deviceId":"phone","status":"online","lastSeen":"2026-11-23T09:00:31Z","publicLastSeen":"2026-11-23T09:00:31Z","hidden":false},
			{"deviceId":"tablet","status":"offline","lastSeen":"2026-11-23T09:00:16Z","publicLastSeen":null,"hidden":true}],
		"custom":{"text":"At work","emoji":"💼"},"customSetAt":"2026-11-23T09:00:00Z","groups":["team-a","team-b"],"shard":1,"index":7,"logOffset":42},
	"history":{
		"status":{"status":"online","lastUpdated":"2026-11-23T09:00:30Z","lastActive":"2026-11-23T09:00:30Z","lastSeen":"2026-11-23T09:00:31Z",
			"lastEventId":"e6","custom":{"text":"At work","emoji":"💼"},"customSetAt":"2026-11-23T09:00:00Z","groups":["team-a","team-b"]},
		"timeline":{"userId":"al ice","from":"2025-10-19T00:00:00Z","to":"2026-11-24T10:00:00.123456Z","entries":[
			{"occurredAt":"2026-11-23T09:00:30Z","entryId":"e:e6","entryType":"event","kind":"status","status":"online","deviceId":"phone","source":"api","receivedAt":"2026-11-23T09:00:30.01Z","stale":false,"logPartition":1,"logOffset":41},
			{"occurredAt":"2026-11-23T09:00:30Z","entryId":"c:e6","entryType":"change","status":"online","previousStatus":"offline","cause":"event","stale":false,"logPartition":1,"logOffset":41}],
			"nextCursor":"C1"},
		"sessions":{"userId":"al ice","from":"2025-10-19T00:00:00Z","to":"2026-11-24T10:00:00.123456Z","sessions":[
			{"start":"2026-11-23T09:00:30Z","end":null,"open":true,"onlineSeconds":1,"idleSeconds":0,"invisibleSeconds":0,"through":"2026-11-23T09:00:31Z","status":"online"},
			{"start":"2026-11-23T09:00:00Z","end":"2026-11-23T09:00:20Z","open":false,"onlineSeconds":10,"idleSeconds":5,"invisibleSeconds":5,"through":"2026-11-23T09:00:20Z","status":"offline"}],
			"truncated":false},
		"daily":{"userId":"al ice","from":"2025-10-19","to":"2026-11-24","days":[
			{"day":"2026-11-23","onlineSeconds":11,"idleSeconds":5,"invisibleSeconds":5,"sessions":2,"firstSeen":"2026-11-23T09:00:00Z","lastSeen":"2026-11-23T09:00:31Z","through":"2026-11-23T09:00:31Z","status":"online"}]},
		"pointInTime":{"shard":1,"index":7}}}`
	exportPage2 = `{"userId":"al ice","exportedAt":"2026-11-23T10:00:00.123456Z","history":{"timeline":{"userId":"al ice","from":"2025-10-19T00:00:00Z","to":"2026-11-24T10:00:00.123456Z","entries":[
			{"occurredAt":"2026-11-23T09:00:20Z","entryId":"e:e5","entryType":"event","kind":"status","status":"offline","deviceId":"phone","source":"api","receivedAt":"2026-11-23T09:00:20.01Z","stale":false,"logPartition":1,"logOffset":40},
			{"occurredAt":"2026-11-23T09:00:20Z","entryId":"c:e5","entryType":"change","status":"offline","previousStatus":"invisible","cause":"event","stale":false,"logPartition":1,"logOffset":40}],
			"nextCursor":"C2"}}}`
	exportPage3 = `{"userId":"al ice","exportedAt":"2026-11-23T10:00:00.123456Z","history":{"timeline":{"userId":"al ice","from":"2025-10-19T00:00:00Z","to":"2026-11-24T10:00:00.123456Z","entries":[
			{"occurredAt":"2026-11-23T09:00:00Z","entryId":"e:e1","entryType":"event","kind":"status","status":"online","deviceId":"phone","source":"api","receivedAt":"2026-11-23T09:00:00.01Z","stale":false,"logPartition":1,"logOffset":36,"data":{"text":"At work","emoji":"💼"}}],
			"nextCursor":null}}}`
)

func exportAnswers() map[string]string {
	return map[string]string{
		"/v1/users/al%20ice/export?limit=2&view=operator":           exportPage1,
		"/v1/users/al%20ice/export?cursor=C1&limit=2&view=operator": exportPage2,
		"/v1/users/al%20ice/export?cursor=C2&limit=2&view=operator": exportPage3,
	}
}

// -json follows the cursor and prints one document: the first page with every page's
// entries in order and nextCursor null, exactly as encoding/json indents it.
func TestExportJSONFollowsCursors(t *testing.T) {
	srv, asked := fakeQuery(t, exportAnswers())
	var out bytes.Buffer
	if err := runExportEnv(context.Background(), []string{"al ice", "-json", "-limit", "2"}, &out, operatorEnv(srv.URL)); err != nil {
		t.Fatal(err)
	}
	if len(*asked) != 3 {
		t.Errorf("asked %v, want three pages", *asked)
	}
	var want historyapi.Export
	if err := json.Unmarshal([]byte(exportPage1), &want); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{exportPage2, exportPage3} {
		var page historyapi.Export
		if err := json.Unmarshal([]byte(p), &page); err != nil {
			t.Fatal(err)
		}
		want.History.Timeline.Entries = append(want.History.Timeline.Entries, page.History.Timeline.Entries...)
	}
	want.History.Timeline.NextCursor = nil
	b, err := json.MarshalIndent(want, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != string(b)+"\n" {
		t.Errorf("-json =\n%s\nwant\n%s", got, b)
	}
	if len(want.History.Timeline.Entries) != 5 || !strings.Contains(out.String(), `"nextCursor": null`) {
		t.Errorf("the document holds %d entries, want 5 and a null nextCursor", len(want.History.Timeline.Entries))
	}
}

// A user with an empty timeline keeps its empty list; the other sections as answered.
func TestExportJSONWithoutEntries(t *testing.T) {
	page := `{"userId":"bob","exportedAt":"2026-11-23T10:00:00Z","current":null,"history":{"status":{"status":null,"lastUpdated":null,"lastActive":null,
		"lastSeen":null,"lastEventId":null,"custom":null,"customSetAt":null,"groups":["g"]},"timeline":{"userId":"bob","from":"2025-10-19T00:00:00Z",
		"to":"2026-11-24T10:00:00Z","entries":[],"nextCursor":null},"sessions":{"userId":"bob","from":"2025-10-19T00:00:00Z","to":"2026-11-24T10:00:00Z",
		"sessions":[],"truncated":false},"daily":{"userId":"bob","from":"2025-10-19","to":"2026-11-24","days":[]},"pointInTime":null}}`
	srv, _ := fakeQuery(t, map[string]string{"/v1/users/bob/export?limit=1000&view=operator": page})
	var out bytes.Buffer
	if err := runExportEnv(context.Background(), []string{"-json", "bob"}, &out, operatorEnv(srv.URL)); err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("-json printed no JSON: %v\n%s", err, out.String())
	}
	var doc map[string]any
	_ = json.Unmarshal([]byte(page), &doc)
	a, _ := json.Marshal(v)
	b, _ := json.Marshal(doc)
	if !bytes.Equal(a, b) {
		t.Errorf("-json =\n%s\nwant the answer\n%s", a, b)
	}
	if !strings.Contains(out.String(), `"entries": []`) || !strings.Contains(out.String(), `"current": null`) {
		t.Errorf("-json =\n%s", out.String())
	}
}

// Without -json: the live state, history's row, the counts over every page, and the
// newest -recent rows of each list.
func TestExportSummary(t *testing.T) {
	srv, _ := fakeQuery(t, exportAnswers())
	var out bytes.Buffer
	if err := runExportEnv(context.Background(), []string{"al ice", "-limit", "2", "-recent", "1"}, &out, operatorEnv(srv.URL)); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"user al ice, exported 2026-11-23 10:00:00.123; history from 2025-10-19 00:00:00.000 to 2026-11-24 10:00:00.123",
		"",
		"now (Redis): online since 2026-11-23 09:00:30.000, last active 2026-11-23 09:00:30.000, last seen 2026-11-23 09:00:31.000",
		"  as others see it: last active 2026-11-23 09:00:30.000, last seen 2026-11-23 09:00:31.000",
		"  custom status: 💼 At work (set 2026-11-23 09:00:00.000)",
		"  device phone: online, last seen 2026-11-23 09:00:31.000",
		"  device tablet: offline, last seen 2026-11-23 09:00:16.000, hidden",
		"  groups: team-a, team-b",
		"  shard 1, index 7",
		"",
		"history (Cassandra):",
		"  status row: online since 2026-11-23 09:00:30.000, last active 2026-11-23 09:00:30.000, last seen 2026-11-23 09:00:31.000, last event e6",
		"    custom status: 💼 At work (set 2026-11-23 09:00:00.000)",
		"    groups: team-a, team-b",
		"  point in time: shard 1, index 7",
		"  5 timeline entries, 2 sessions (1 open), 1 day",
		"",
		"newest timeline entries (1 of 5):",
		"OCCURRED_AT              TYPE   KIND    STATUS  PREVIOUS  DEVICE  SOURCE  CAUSE  STALE  RECEIVED_AT              ENTRY_ID  CUSTOM",
		"2026-11-23 09:00:30.000  event  status  online            phone   api            false  2026-11-23 09:00:30.010  e:e6",
		"",
		"newest sessions (1 of 2):",
		"START                    END  OPEN  DURATION  ONLINE  IDLE  INVISIBLE  THROUGH                  STATUS",
		"2026-11-23 09:00:30.000       true  1s        1s      0s    0s         2026-11-23 09:00:31.000  online",
		"",
		"newest days (1 of 1):",
		"DAY         ONLINE  IDLE  INVISIBLE  SESSIONS  FIRST_SEEN               LAST_SEEN                THROUGH                  STATUS",
		"2026-11-23  11s     5s    5s         2         2026-11-23 09:00:00.000  2026-11-23 09:00:31.000  2026-11-23 09:00:31.000  online",
		"",
	}, "\n")
	if got := out.String(); got != want {
		t.Errorf("summary =\n%s\nwant\n%s", got, want)
	}

	// -recent 0: the counts only.
	out.Reset()
	if err := runExportEnv(context.Background(), []string{"-recent", "0", "-limit", "2", "al ice"}, &out, operatorEnv(srv.URL)); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.HasSuffix(got, "  5 timeline entries, 2 sessions (1 open), 1 day\n") {
		t.Errorf("summary with -recent 0 =\n%s", got)
	}
}

// Bad arguments are refused before any request; the API's refusals reach the operator
// with what to do; a page answered 503 is tried again after its Retry-After.
func TestExportArgumentsAndErrors(t *testing.T) {
	wait := exportMinWait
	exportMinWait = time.Millisecond
	t.Cleanup(func() { exportMinWait = wait })
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Header.Get("Authorization") != "Bearer op-key":
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"error":{"code":"forbidden","message":"key it-reader has scopes \"read\"; the export of a user needs operator"}}`)
		case r.URL.Path == "/v1/users/nobody/export":
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error":{"code":"not_found","message":"Pulse holds nothing about user \"nobody\""}}`)
		case r.URL.Path == "/v1/users/flaky/export" && calls.Load() == 1:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"code":"unavailable","message":"history (Cassandra) is not reachable right now"}}`)
		case r.URL.Path == "/v1/users/down/export":
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"code":"unavailable","message":"history (Cassandra) is not reachable right now"}}`)
		default:
			fmt.Fprint(w, `{"userId":"flaky","exportedAt":"2026-11-23T10:00:00Z","current":null,"history":{"status":null,
				"timeline":{"userId":"flaky","from":"2025-10-19T00:00:00Z","to":"2026-11-24T10:00:00Z","entries":[],"nextCursor":null},
				"sessions":{"userId":"flaky","from":"2025-10-19T00:00:00Z","to":"2026-11-24T10:00:00Z","sessions":[],"truncated":false},
				"daily":{"userId":"flaky","from":"2025-10-19","to":"2026-11-24","days":[]},"pointInTime":{"shard":0,"index":3}}}`)
		}
	}))
	defer srv.Close()
	run := func(env func(string) string, args ...string) error {
		var out bytes.Buffer
		return runExportEnv(context.Background(), args, &out, env)
	}
	op := operatorEnv(srv.URL)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage: pulsectl export USER"},
		{[]string{"a", "b"}, "usage: pulsectl export USER"},
		{[]string{"al\u202eice"}, `user id "al\u202eice": `},
		{[]string{"a", "-limit", "0"}, "-limit 0: want 1 to 1000"},
		{[]string{"a", "-recent", "-1"}, "-recent -1: want 0 or more"},
		{[]string{"a", "-csv"}, "flag provided but not defined: -csv"},
	} {
		if err := run(op, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("export %q: %v, want %q", tc.args, err, tc.want)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("bad arguments made %d requests", n)
	}
	if err := run(op, "flaky"); err != nil {
		t.Errorf("a page answered 503 once: %v, want it retried", err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d requests for a page answered 503 once, want 2", n)
	}
	reader := func(k string) string {
		if k == "PULSE_READER_KEY" {
			return "reader-key"
		}
		return op(k)
	}
	noOperator := func(k string) string {
		if k == "PULSE_OPERATOR_KEY" {
			return ""
		}
		return reader(k)
	}
	if err := run(noOperator, "alice"); err == nil || err.Error() !=
		`/v1/users/alice/export: 403 key it-reader has scopes "read"; the export of a user needs operator (set PULSE_OPERATOR_KEY)` {
		t.Errorf("with a reader's key: %v", err)
	}
	if err := run(op, "nobody"); err == nil || err.Error() != `/v1/users/nobody/export: 404 Pulse holds nothing about user "nobody"` {
		t.Errorf("an unknown user: %v", err)
	}
	before := calls.Load()
	if err := run(op, "down"); err == nil || err.Error() != "/v1/users/down/export: 503 history (Cassandra) is not reachable right now (retry after 0s)" {
		t.Errorf("Cassandra down: %v", err)
	}
	if n := calls.Load() - before; n != exportRetries {
		t.Errorf("%d tries of a page always answered 503, want %d", n, exportRetries)
	}
}
