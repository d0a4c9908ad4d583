package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// fakeQuery answers the history routes with canned JSON and records what was asked.
func fakeQuery(t *testing.T, answers map[string]string) (*httptest.Server, *[]string) {
	t.Helper()
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.EscapedPath() + "?" + r.URL.RawQuery
		asked = append(asked, key)
		body, ok := answers[key]
		if !ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":{"code":"invalid_request","message":"unexpected %s","field":"from"}}`, key)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, &asked
}

func envWith(base string) func(string) string {
	return func(k string) string {
		if k == "PULSE_QUERY_URL" {
			return base
		}
		return ""
	}
}

func TestHistoryUserFollowsCursors(t *testing.T) {
	srv, asked := fakeQuery(t, map[string]string{
		"/v1/users/al%20ice/timeline?from=2026-11-22&limit=2&to=2026-11-23": `{"entries":[
			{"occurredAt":"2026-11-22T20:00:01.5Z","entryId":"c:2","entryType":"change","status":"idle","previousStatus":"online","cause":"timeout","stale":false,"logPartition":1,"logOffset":9},
			{"occurredAt":"2026-11-22T20:00:00Z","entryId":"e:1","entryType":"event","kind":"status","status":"online","deviceId":"phone","source":"api","receivedAt":"2026-11-22T20:00:00.25Z","stale":true,"logPartition":1,"logOffset":8,"data":{"text":"lunch","emoji":"🥪","until":"2026-11-22T21:00:00Z"}}],
			"nextCursor":"CUR"}`,
		"/v1/users/al%20ice/timeline?cursor=CUR&from=2026-11-22&limit=2&to=2026-11-23": `{"entries":[
			{"occurredAt":"2026-11-22T08:00:00Z","entryId":"e:0","entryType":"event","kind":"heartbeat","deviceId":"laptop","source":"api","stale":false,"logPartition":1,"logOffset":2},
			{"occurredAt":"2026-11-22T07:00:00Z","entryId":"e:t","entryType":"event","kind":"custom","deviceId":"*","source":"timeout","stale":false,"logPartition":1,"logOffset":1,"data":{}}],
			"nextCursor":null}`,
	})
	var out bytes.Buffer
	// Flags after the id, as people type them.
	err := runHistoryEnv(context.Background(), []string{"user", "al ice", "-from", "2026-11-22", "-to", "2026-11-23", "-limit", "2"}, &out, envWith(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"OCCURRED_AT              TYPE    KIND       STATUS  PREVIOUS  DEVICE  SOURCE   CAUSE    STALE  RECEIVED_AT              ENTRY_ID  CUSTOM",
		"2026-11-22 20:00:01.500  change             idle    online                     timeout  false                           c:2",
		"2026-11-22 20:00:00.000  event   status     online            phone   api               true   2026-11-22 20:00:00.250  e:1       🥪 lunch until 2026-11-22 21:00:00.000",
		"2026-11-22 08:00:00.000  event   heartbeat                    laptop  api               false                           e:0",
		"2026-11-22 07:00:00.000  event   custom                       *       timeout           false                           e:t       (cleared)",
		"",
	}, "\n")
	if out.String() != want {
		t.Errorf("table =\n%s\nwant\n%s", out.String(), want)
	}
	if len(*asked) != 2 {
		t.Errorf("asked %v, want two pages", *asked)
	}

	out.Reset()
	if err := runHistoryEnv(context.Background(), []string{"user", "-csv", "-limit", "2", "-from", "2026-11-22", "-to", "2026-11-23", "al ice"}, &out, envWith(srv.URL)); err != nil {
		t.Fatal(err)
	}
	wantCSV := "OCCURRED_AT,TYPE,KIND,STATUS,PREVIOUS,DEVICE,SOURCE,CAUSE,STALE,RECEIVED_AT,ENTRY_ID,CUSTOM\n" +
		"2026-11-22T20:00:01.5Z,change,,idle,online,,,timeout,false,,c:2,\n" +
		"2026-11-22T20:00:00Z,event,status,online,,phone,api,,true,2026-11-22T20:00:00.25Z,e:1,🥪 lunch until 2026-11-22T21:00:00Z\n" +
		"2026-11-22T08:00:00Z,event,heartbeat,,,laptop,api,,false,,e:0,\n" +
		"2026-11-22T07:00:00Z,event,custom,,,*,timeout,,false,,e:t,(cleared)\n"
	if out.String() != wantCSV {
		t.Errorf("csv =\n%s\nwant\n%s", out.String(), wantCSV)
	}
}

func TestSessionsAndStatsTables(t *testing.T) {
	srv, _ := fakeQuery(t, map[string]string{
		"/v1/users/bob/sessions?": `{"sessions":[
			{"start":"2026-11-22T20:00:00Z","end":null,"open":true,"onlineSeconds":90.5,"idleSeconds":0,"invisibleSeconds":0,"through":"2026-11-22T20:01:30.5Z","status":"online"},
			{"start":"2026-11-22T08:00:00Z","end":"2026-11-22T09:00:00Z","open":false,"onlineSeconds":3000,"idleSeconds":600,"invisibleSeconds":0,"through":"2026-11-22T09:00:00Z","status":"offline"}],"truncated":false}`,
		"/v1/stats/concurrency?from=2026-11-22T20%3A00%3A00Z&step=hour&to=2026-11-22T22%3A00%3A00Z": `{"points":[
			{"at":"2026-11-22T20:00:00Z","closeOnline":12,"closeIdle":3,"closeInvisible":1,"peakOnline":20,"minutes":60}]}`,
		"/v1/stats/uniques?from=2026-11-01&period=week&to=2026-11-08": `{"points":[
			{"start":"2026-10-27T00:00:00Z","end":"2026-11-03T00:00:00Z","users":1234,"shards":16,"bitmapBytes":4100,"hyperLogLogBytes":196608}]}`,
		"/v1/stats/concurrency?from=2026-11-22T20%3A00%3A00Z&group=team-a&step=minute&to=2026-11-22T20%3A02%3A00Z": `{"groupId":"team-a","members":3,"points":[
			{"at":"2026-11-22T20:00:00Z","closeOnline":2,"closeIdle":1,"peakOnline":3,"minutes":1},
			{"at":"2026-11-22T20:01:00Z","closeOnline":1,"closeIdle":0,"peakOnline":2,"minutes":1}]}`,
		"/v1/stats/uniques?from=2026-11-22&group=team-a&period=hour&to=2026-11-22T02%3A00%3A00Z": `{"groupId":"team-a","members":3,"points":[
			{"start":"2026-11-22T00:00:00Z","end":"2026-11-22T01:00:00Z","users":2,"shards":16,"bitmapBytes":40,"hyperLogLogBytes":196608}]}`,
		"/v1/stats/daily?day=2026-11-22&limit=1000": `{"day":"2026-11-22","users":[
			{"userId":"a","onlineSeconds":60,"idleSeconds":0,"invisibleSeconds":0,"sessions":1,"firstSeen":"2026-11-22T01:00:00Z","lastSeen":"2026-11-22T01:00:59.999999Z","through":"2026-11-23T00:00:00Z","status":"offline"}],"nextCursor":"N"}`,
		"/v1/stats/daily?cursor=N&day=2026-11-22&limit=1000": `{"day":"2026-11-22","users":[],"nextCursor":null}`,
		"/v1/stats/daily?day=2026-11-23&limit=1000":          `{"day":"2026-11-23","users":[],"nextCursor":null}`,
	})
	env := envWith(srv.URL)
	run := func(f func(context.Context, []string, *bytes.Buffer) error, args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := f(context.Background(), args, &out); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return out.String()
	}
	sessions := func(ctx context.Context, a []string, b *bytes.Buffer) error { return runSessionsEnv(ctx, a, b, env) }
	stats := func(ctx context.Context, a []string, b *bytes.Buffer) error { return runStatsEnv(ctx, a, b, env) }

	if got, want := run(sessions, "bob"), strings.Join([]string{
		"START                    END                      OPEN   DURATION  ONLINE   IDLE   INVISIBLE  THROUGH                  STATUS",
		"2026-11-22 20:00:00.000                           true   1m30.5s   1m30.5s  0s     0s         2026-11-22 20:01:30.500  online",
		"2026-11-22 08:00:00.000  2026-11-22 09:00:00.000  false  1h0m0s    50m0s    10m0s  0s         2026-11-22 09:00:00.000  offline",
		""}, "\n"); got != want {
		t.Errorf("sessions =\n%s\nwant\n%s", got, want)
	}
	if got, want := run(sessions, "bob", "-csv"), "START,END,OPEN,DURATION,ONLINE,IDLE,INVISIBLE,THROUGH,STATUS\n"+
		"2026-11-22T20:00:00Z,,true,90.5,90.5,0,0,2026-11-22T20:01:30.5Z,online\n"+
		"2026-11-22T08:00:00Z,2026-11-22T09:00:00Z,false,3600,3000,600,0,2026-11-22T09:00:00Z,offline\n"; got != want {
		t.Errorf("sessions csv =\n%s\nwant\n%s", got, want)
	}
	if got, want := run(stats, "concurrency", "-from", "2026-11-22T20:00:00Z", "-to", "2026-11-22T22:00:00Z", "-step", "hour", "-csv"),
		"AT,CLOSE_ONLINE,CLOSE_IDLE,CLOSE_INVISIBLE,PEAK_ONLINE,MINUTES\n2026-11-22T20:00:00Z,12,3,1,20,60\n"; got != want {
		t.Errorf("concurrency =\n%s\nwant\n%s", got, want)
	}
	if got, want := run(stats, "uniques", "-from", "2026-11-01", "-to", "2026-11-08", "-period", "week"), strings.Join([]string{
		"START                    END                      USERS  SHARDS  BITMAP_BYTES  HLL_BYTES",
		"2026-10-27 00:00:00.000  2026-11-03 00:00:00.000  1234   16      4100          196608",
		""}, "\n"); got != want {
		t.Errorf("uniques =\n%s\nwant\n%s", got, want)
	}
	// -group passes group= through; the tables are the same.
	if got, want := run(stats, "concurrency", "-group", "team-a", "-from", "2026-11-22T20:00:00Z", "-to", "2026-11-22T20:02:00Z", "-csv"),
		"AT,CLOSE_ONLINE,CLOSE_IDLE,CLOSE_INVISIBLE,PEAK_ONLINE,MINUTES\n2026-11-22T20:00:00Z,2,1,-,3,1\n2026-11-22T20:01:00Z,1,0,-,2,1\n"; got != want {
		t.Errorf("group concurrency =\n%s\nwant\n%s", got, want)
	}
	if got, want := run(stats, "uniques", "-from", "2026-11-22", "-to", "2026-11-22T02:00:00Z", "-period", "hour", "-group", "team-a", "-csv"),
		"START,END,USERS,SHARDS,BITMAP_BYTES,HLL_BYTES\n2026-11-22T00:00:00Z,2026-11-22T01:00:00Z,2,16,40,196608\n"; got != want {
		t.Errorf("group uniques =\n%s\nwant\n%s", got, want)
	}
	if got, want := run(stats, "daily", "-from", "2026-11-22", "-to", "2026-11-23", "-csv"),
		"DAY,USER,ONLINE,IDLE,INVISIBLE,SESSIONS,FIRST_SEEN,LAST_SEEN,THROUGH,STATUS\n"+
			"2026-11-22,a,60,0,0,1,2026-11-22T01:00:00Z,2026-11-22T01:00:59.999999Z,2026-11-23T00:00:00Z,offline\n"; got != want {
		t.Errorf("daily =\n%s\nwant\n%s", got, want)
	}
}

// The API's error reaches the analyst with the parameter it names and Retry-After.
func TestAnalyticsErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/stats/concurrency" {
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"code":"unavailable","message":"history (Cassandra) is not reachable right now"}}`)
			return
		}
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"code":"invalid_request","message":"spans more than 31 days","field":"from"}}`)
	}))
	defer srv.Close()
	env := envWith(srv.URL)
	var out bytes.Buffer
	err := runStatsEnv(context.Background(), []string{"concurrency"}, &out, env)
	if err == nil || err.Error() != "/v1/stats/concurrency: 503 history (Cassandra) is not reachable right now (retry after 5s)" {
		t.Errorf("503: %v", err)
	}
	err = runHistoryEnv(context.Background(), []string{"user", "x", "-from", "2020-01-01"}, &out, env)
	if err == nil || err.Error() != "/v1/users/x/timeline: 400 from: spans more than 31 days" {
		t.Errorf("400: %v", err)
	}
	for _, args := range [][]string{{}, {"user"}, {"user", "a", "b"}, {"users", "a"}} {
		if err := runHistoryEnv(context.Background(), args, &out, env); err == nil {
			t.Errorf("history %v: no error", args)
		}
	}
	if err := runStatsEnv(context.Background(), []string{"peaks"}, &out, env); err == nil || !strings.Contains(err.Error(), `unknown stats "peaks"`) {
		t.Errorf("stats peaks: %v", err)
	}
	if err := runStatsEnv(context.Background(), []string{"daily", "-from", "22.11.2026"}, &out, env); err == nil || !strings.Contains(err.Error(), "-from") {
		t.Errorf("stats daily -from 22.11.2026: %v", err)
	}
	// -url beats the environment.
	if err := runSessionsEnv(context.Background(), []string{"-url", "http://127.0.0.1:1", "a"}, &out, env); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("-url: %v", err)
	}
}
