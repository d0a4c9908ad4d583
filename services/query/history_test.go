package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/rollup"
	"github.com/pulse-presence/pulse/internal/platform/cassx"
	"github.com/pulse-presence/pulse/internal/platform/cursor"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
)

var now = time.Date(2026, 11, 23, 12, 30, 0, 0, time.UTC)

func vals(kv ...string) url.Values {
	q := url.Values{}
	for i := 0; i < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	return q
}

func TestParseRange(t *testing.T) {
	tests := []struct {
		name     string
		q        url.Values
		from, to time.Time
		field    string // the 400's field, "" for success
	}{
		{name: "defaults", q: vals(), from: now.Add(-day), to: now},
		{name: "times", q: vals("from", "2026-11-01T10:00:00Z", "to", "2026-11-02T10:00:00.5+01:00"),
			from: time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC), to: time.Date(2026, 11, 2, 9, 0, 0, 5e8, time.UTC)},
		{name: "dates", q: vals("from", "2026-11-01", "to", "2026-11-02"),
			from: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), to: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)},
		{name: "exactly the bound", q: vals("from", "2026-10-01", "to", "2026-11-01"),
			from: time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), to: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)},
		{name: "past the bound", q: vals("from", "2026-10-01", "to", "2026-11-01T00:00:00.001Z"), field: "from"},
		{name: "reversed", q: vals("from", "2026-11-02", "to", "2026-11-01"), field: "from"},
		{name: "empty range", q: vals("from", "2026-11-02", "to", "2026-11-02"), field: "from"},
		{name: "bad to", q: vals("to", "yesterday"), field: "to"},
		{name: "bad from", q: vals("from", "2026-13-01"), field: "from"},
		{name: "before 1970", q: vals("from", "1969-12-31T23:59:59Z", "to", "1970-01-02"), field: "from"},
		{name: "year 9999", q: vals("from", "9998-12-31", "to", "9999-01-01"), field: "to"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from, to, err := parseRange(tt.q, now, day, 31*day)
			if tt.field != "" {
				if err == nil || !strings.Contains(err.Error(), ": "+tt.field+": ") {
					t.Fatalf("parseRange() error = %v, want a 400 on %s", err, tt.field)
				}
				return
			}
			if err != nil || !from.Equal(tt.from) || !to.Equal(tt.to) {
				t.Fatalf("parseRange() = %v, %v, %v; want %v, %v", from, to, err, tt.from, tt.to)
			}
		})
	}
}

func TestParseDayRange(t *testing.T) {
	from, to, err := parseDayRange(vals(), now, 31, 400)
	if err != nil || from.Format(time.DateOnly) != "2026-10-24" || to.Format(time.DateOnly) != "2026-11-23" {
		t.Fatalf("defaults = %v, %v, %v", from, to, err)
	}
	from, to, err = parseDayRange(vals("from", "2025-10-20", "to", "2026-11-23"), now, 31, 400)
	if err != nil || int(to.Sub(from)/day)+1 != 400 {
		t.Fatalf("400 days = %v, %v, %v", from, to, err)
	}
	for q, field := range map[string]url.Values{
		"from": vals("from", "2025-10-19", "to", "2026-11-23"),
		"to":   vals("to", "2026-11-23T00:00:00Z"),
	} {
		if _, _, err := parseDayRange(field, now, 31, 400); err == nil || !strings.Contains(err.Error(), ": "+q+": ") {
			t.Errorf("%v: error = %v, want a 400 on %s", field, err, q)
		}
	}
}

func TestTimelineCursorRoundTrip(t *testing.T) {
	c := timelineCursor{At: time.UnixMilli(1763900000123).UTC(), EntryID: "e:01JDX3Q6Z0"}
	got, err := decodeTimelineCursor(c.Encode())
	if err != nil || got != c {
		t.Fatalf("decode(encode(%+v)) = %+v, %v", c, got, err)
	}
	d := dailyCursor{Buckets: 16, Bucket: 3, After: "alice"}
	gd, err := decodeDailyCursor(d.Encode())
	if err != nil || gd != d {
		t.Fatalf("decode(encode(%+v)) = %+v, %v", d, gd, err)
	}
	// Each refuses the other's cursors, mangled ones and made-up positions.
	for _, s := range []string{"", "AQ", d.Encode()[:len(d.Encode())-2] + "AA", dailyCursor{Buckets: 2, Bucket: 2}.Encode()} {
		if _, err := decodeDailyCursor(s); err == nil {
			t.Errorf("decodeDailyCursor(%q) accepted it", s)
		}
	}
	if _, err := decodeTimelineCursor("AQAB"); err == nil {
		t.Error("decodeTimelineCursor accepted a short cursor")
	}
}

// Two shards peak at different seconds: the global peak is the largest per-second
// sum, not the sum of the shards' peaks.
// An event's custom status reaches the timeline as data: left out when the event left
// it as it was, and on changes; {} for a clear; else as the status reads answer it.
func TestTimelineEntryData(t *testing.T) {
	at := time.Date(2026, 11, 26, 14, 0, 0, 0, time.UTC)
	event := func(c *presence.CustomStatus) *historystore.Activity {
		return &historystore.Activity{OccurredAt: at, EntryID: "e:e1", EntryType: "event", Kind: "status", Status: "online",
			DeviceID: "phone", Source: "api", ReceivedAt: at, LogPartition: 3, LogOffset: 7, Custom: c}
	}
	const head = `{"occurredAt":"2026-11-26T14:00:00Z","entryId":"e:e1","entryType":"event","kind":"status","status":"online",` +
		`"deviceId":"phone","source":"api","receivedAt":"2026-11-26T14:00:00Z","stale":false,"logPartition":3,"logOffset":7`
	tests := []struct {
		name string
		row  *historystore.Activity
		want string
	}{
		{"none", event(nil), head + `}`},
		{"clear", event(&presence.CustomStatus{}), head + `,"data":{}}`},
		{"set", event(&presence.CustomStatus{Text: "In a meeting", Emoji: "📅", Until: at.Add(time.Hour)}),
			head + `,"data":{"text":"In a meeting","emoji":"📅","until":"2026-11-26T15:00:00Z"}}`},
		{"emoji", event(&presence.CustomStatus{Emoji: "🌴"}), head + `,"data":{"emoji":"🌴"}}`},
		{"change", &historystore.Activity{OccurredAt: at, EntryID: "c:e1", EntryType: "change", Status: "online", PreviousStatus: "offline",
			Cause: "event", DeviceID: "phone", LogPartition: 3, LogOffset: 7},
			`{"occurredAt":"2026-11-26T14:00:00Z","entryId":"c:e1","entryType":"change","status":"online","previousStatus":"offline",` +
				`"deviceId":"phone","cause":"event","stale":false,"logPartition":3,"logOffset":7}`},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		if err := json.NewEncoder(&b).Encode(timelineEntryOf(tt.row)); err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSuffix(b.String(), "\n"); got != tt.want {
			t.Errorf("%s: entry =\n%s\nwant\n%s", tt.name, got, tt.want)
		}
	}
}

func TestConcurrencyFoldSumsShardsPerSecond(t *testing.T) {
	m0 := time.Date(2026, 11, 22, 20, 0, 0, 0, time.UTC)
	series := func(base int, peakAt, peak int) []int {
		s := make([]int, 60)
		for i := range s {
			s[i] = base
		}
		s[peakAt] = peak
		return s
	}
	rows := []historystore.MinuteCounts{
		{Minute: m0, Shard: 0, Online: series(10, 5, 50), CloseOnline: 10, CloseIdle: 1, CloseInvisible: 2},
		{Minute: m0, Shard: 1, Online: series(20, 30, 40), CloseOnline: 20, CloseIdle: 3, CloseInvisible: 0},
		{Minute: m0.Add(time.Minute), Shard: 0, Online: series(7, 0, 7), CloseOnline: 7, CloseIdle: 2},
		{Minute: m0.Add(time.Minute), Shard: 1, Online: series(8, 59, 30), CloseOnline: 30, CloseIdle: 4},
		{Minute: m0.Add(61 * time.Minute), Shard: 1, Online: series(1, 0, 1), CloseOnline: 1},
	}
	fold := func(st step) []concurrencyPoint {
		f := concurrencyFold{step: st}
		for _, r := range rows {
			f.add(r)
		}
		return f.finish()
	}
	// Second 5: 50 + 20 = 70; second 30: 10 + 40 = 50. The shards' peaks add to 90.
	assertPoints(t, "minute", fold(stepMinute), []concurrencyPoint{
		{At: m0, CloseOnline: 30, CloseIdle: 4, CloseInvisible: ptr[int64](2), PeakOnline: 70, Minutes: 1},
		{At: m0.Add(time.Minute), CloseOnline: 37, CloseIdle: 6, PeakOnline: 37, Minutes: 1},
		{At: m0.Add(61 * time.Minute), CloseOnline: 1, PeakOnline: 1, Minutes: 1},
	})
	assertPoints(t, "hour", fold(stepHour), []concurrencyPoint{
		{At: m0, CloseOnline: 37, CloseIdle: 6, PeakOnline: 70, Minutes: 2},
		{At: m0.Add(time.Hour), CloseOnline: 1, PeakOnline: 1, Minutes: 1},
	})
	assertPoints(t, "day", fold(stepDay), []concurrencyPoint{
		{At: time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC), CloseOnline: 1, PeakOnline: 70, Minutes: 3},
	})
	if got := (&concurrencyFold{}).finish(); got == nil || len(got) != 0 {
		t.Errorf("no rows = %#v, want an empty list", got)
	}
}

func assertPoints(t *testing.T, name string, got, want []concurrencyPoint) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d points %+v, want %+v", name, len(got), got, want)
	}
	for i := range got {
		g, w := got[i], want[i]
		if w.CloseInvisible == nil {
			w.CloseInvisible = ptr[int64](0)
		}
		if g.CloseInvisible == nil || *g.CloseInvisible != *w.CloseInvisible {
			t.Errorf("%s: point %d closeInvisible = %v, want %d", name, i, g.CloseInvisible, *w.CloseInvisible)
		}
		g.CloseInvisible, w.CloseInvisible = nil, nil
		if !g.At.Equal(w.At) || g != w {
			t.Errorf("%s: point %d = %+v, want %+v", name, i, got[i], want[i])
		}
	}
}

func bitmapBytes(t *testing.T, ids ...uint32) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := roaring.BitmapOf(ids...).WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Per shard the hours are unioned (a user present in two hours counts once); shards
// are summed (the same index in two shards is two users).
func TestUniquesFoldUnionsHoursAndSumsShards(t *testing.T) {
	h0 := time.Date(2026, 11, 22, 22, 0, 0, 0, time.UTC)
	rows := []historystore.HourUsers{
		{Hour: h0, Shard: 0, Users: bitmapBytes(t, 1, 2, 3)},
		{Hour: h0, Shard: 1, Users: bitmapBytes(t, 1, 2)},
		{Hour: h0.Add(time.Hour), Shard: 0, Users: bitmapBytes(t, 3, 4)},
		{Hour: h0.Add(2 * time.Hour), Shard: 0, Users: bitmapBytes(t, 1, 9)}, // Monday the 23rd
	}
	fold := func(p rollup.Period) []uniquesPoint {
		f := uniquesFold{period: p}
		for _, r := range rows {
			if err := f.add(r); err != nil {
				t.Fatal(err)
			}
		}
		return f.finish()
	}
	type ucount struct {
		start  time.Time
		users  uint64
		shards int
	}
	check := func(name string, got []uniquesPoint, want []ucount) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %+v, want %+v", name, got, want)
		}
		for i, w := range want {
			g := got[i]
			if !g.Start.Equal(w.start) || g.Users != w.users || g.Shards != w.shards || g.HyperLogLogBytes != uint64(w.shards)*12288 || g.BitmapBytes == 0 {
				t.Errorf("%s: point %d = %+v, want %+v", name, i, g, w)
			}
		}
	}
	check("hour", fold(rollup.PeriodHour), []ucount{{h0, 5, 2}, {h0.Add(time.Hour), 2, 1}, {h0.Add(2 * time.Hour), 2, 1}})
	d22 := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	check("day", fold(rollup.PeriodDay), []ucount{{d22, 6, 2}, {d22.AddDate(0, 0, 1), 2, 1}})
	// The 22nd is a Sunday: its week started on Monday the 16th.
	check("week", fold(rollup.PeriodWeek), []ucount{{d22.AddDate(0, 0, -6), 6, 2}, {d22.AddDate(0, 0, 1), 2, 1}})
	check("month", fold(rollup.PeriodMonth), []ucount{{time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), 7, 2}})

	f := uniquesFold{period: rollup.PeriodDay}
	if err := f.add(historystore.HourUsers{Hour: h0, Users: []byte("not a bitmap")}); err == nil {
		t.Error("a corrupt bitmap was accepted")
	}
}

// withView adds view=operator to target.
func withView(target string) string {
	if strings.Contains(target, "?") {
		return target + "&view=operator"
	}
	return target + "?view=operator"
}

// Without Cassandra the history routes answer 503 with Retry-After, after checking
// their input, and the live routes still answer.
func TestHistoryRoutesWithoutCassandra(t *testing.T) {
	srv := newTestServer(t, offlineStore(t))
	for _, target := range []string{
		withView("/v1/users/alice/timeline"), withView("/v1/users/alice/sessions"), withView("/v1/users/alice/daily"),
		"/v1/stats/concurrency?step=hour", "/v1/stats/uniques?period=week", withView("/v1/stats/daily?day=2026-11-22"),
	} {
		req := httptest.NewRequest(http.MethodGet, target, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		rec := httptest.NewRecorder()
		srv.Echo.ServeHTTP(rec, req)
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "5" {
			t.Errorf("GET %s = %d (Retry-After %q) %s, want 503 with Retry-After 5", target, rec.Code, rec.Header().Get("Retry-After"), rec.Body)
		}
		var body struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error.Code != "unavailable" {
			t.Errorf("GET %s body = %s", target, rec.Body)
		}
	}
	for target, field := range map[string]string{
		"/v1/users/alice/timeline?from=2026-01-01&to=2026-03-01":    "from",
		"/v1/users/alice/timeline?limit=0":                          "limit",
		"/v1/users/alice/timeline?cursor=AAAA":                      "cursor",
		"/v1/users/alice/timeline?since=1h":                         "since",
		"/v1/users/alice/sessions?from=2024-01-01&to=2026-01-01":    "from",
		"/v1/users/alice/daily?to=tomorrow":                         "to",
		"/v1/stats/concurrency?from=2026-01-01&to=2026-02-02":       "from",
		"/v1/stats/concurrency?step=second":                         "step",
		"/v1/stats/uniques?period=year":                             "period",
		"/v1/stats/uniques?from=2024-01-01T00:00:00Z&to=2026-01-01": "from",
		"/v1/stats/daily?day=2026-11-22T00:00:00Z":                  "day",
		"/v1/stats/uniques?group=no%20spaces":                       "group",
		"/v1/stats/concurrency?group=a%2Fb":                         "group",
		// A group's concurrency spans at most a day, within the at= retention.
		"/v1/stats/concurrency?group=team&from=2026-11-01&to=2026-11-02T00:00:01Z": "from",
		"/v1/stats/concurrency?group=team&from=2020-01-01&to=2020-01-01T01:00:00Z": "from",
		"/v1/stats/daily?cursor=" + (timelineCursor{}).Encode():                    "cursor",
	} {
		if !strings.HasPrefix(target, "/v1/stats/concurrency") && !strings.HasPrefix(target, "/v1/stats/uniques") {
			target = withView(target)
		}
		r := call(t, srv, http.MethodGet, target, "", true)
		if r.code != http.StatusBadRequest || !strings.Contains(r.body, `"field":"`+field+`"`) {
			t.Errorf("GET %s = %d %s, want a 400 naming %s", target, r.code, r.body, field)
		}
	}
}

// A user's history shows the time they spent invisible, so its routes answer only in
// the operator view: without the token, or without asking for the view, they are a 403
// and nothing is read; the aggregates name nobody and answer everyone.
func TestUserHistoryNeedsTheOperatorView(t *testing.T) {
	srv := newTestServer(t, offlineStore(t))
	for _, target := range []string{
		"/v1/users/alice/timeline", "/v1/users/alice/sessions", "/v1/users/alice/daily", "/v1/stats/daily?day=2026-11-22",
	} {
		for _, tc := range []struct {
			target   string
			operator bool
			want     int
		}{
			{target, false, http.StatusForbidden},           // no token
			{target, true, http.StatusForbidden},            // token, public view
			{withView(target), false, http.StatusForbidden}, // view without the token
			{withView(target), true, http.StatusServiceUnavailable},
		} {
			r := call(t, srv, http.MethodGet, tc.target, "", tc.operator)
			if r.code != tc.want {
				t.Errorf("GET %s (token %v) = %d %s, want %d", tc.target, tc.operator, r.code, r.body, tc.want)
			}
			if tc.want == http.StatusForbidden && !strings.Contains(r.body, `"code":"forbidden"`) {
				t.Errorf("GET %s (token %v) body = %s, want the forbidden error", tc.target, tc.operator, r.body)
			}
		}
	}
	for _, target := range []string{"/v1/stats/concurrency?step=hour", "/v1/stats/uniques?period=week"} {
		if r := call(t, srv, http.MethodGet, target, "", false); r.code != http.StatusServiceUnavailable {
			t.Errorf("GET %s = %d %s, want 503 (open to readers, Cassandra down)", target, r.code, r.body)
		}
	}
}

// Run keeps retrying while Cassandra is unreachable, leaves the session nil, and ends
// with its context.
func TestHistoryDBRetriesUntilStopped(t *testing.T) {
	db := newHistoryDB(cassx.Config{Hosts: []string{"127.0.0.1"}, Port: 1, ConnectTimeout: 100 * time.Millisecond},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	db.retry = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- db.Run(ctx) }()
	time.Sleep(300 * time.Millisecond)
	if db.get() != nil {
		t.Fatal("a session without Cassandra")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not end with its context")
	}
	var nilDB *historyDB
	if nilDB.get() != nil {
		t.Fatal("a nil historyDB has a session")
	}
}

// Whatever a client sends as a history cursor is refused as invalid or names a
// position that encodes back to a cursor naming the same position.
func FuzzDecodeHistoryCursors(f *testing.F) {
	f.Add(timelineCursor{At: time.UnixMilli(1763900000123).UTC(), EntryID: "e:01JDX3Q6Z0"}.Encode())
	f.Add(dailyCursor{Buckets: 16, Bucket: 15, After: "alice"}.Encode())
	f.Add("AQgDgA-XjM3B")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		if c, err := decodeTimelineCursor(s); err == nil {
			if again, err := decodeTimelineCursor(c.Encode()); err != nil || again != c {
				t.Fatalf("timeline cursor %+v does not round trip: %+v, %v", c, again, err)
			}
		} else if !errors.Is(err, cursor.ErrInvalid) {
			t.Fatalf("error %v does not wrap cursor.ErrInvalid", err)
		}
		if c, err := decodeDailyCursor(s); err == nil {
			if c.Bucket < 0 || c.Bucket >= c.Buckets {
				t.Fatalf("decoded %q to %+v", s, c)
			}
			if again, err := decodeDailyCursor(c.Encode()); err != nil || again != c {
				t.Fatalf("daily cursor %+v does not round trip: %+v, %v", c, again, err)
			}
		} else if !errors.Is(err, cursor.ErrInvalid) {
			t.Fatalf("error %v does not wrap cursor.ErrInvalid", err)
		}
	})
}

// Whatever a client sends as from and to is a range within the bounds or a 400.
func FuzzParseRange(f *testing.F) {
	f.Add("2026-11-01", "2026-11-02T10:00:00.5+01:00")
	f.Add("", "9998-12-31T23:59:59.999999999Z")
	f.Add("1970-01-01T00:00:00-01:00", "")
	f.Fuzz(func(t *testing.T, from, to string) {
		q := url.Values{}
		if from != "" {
			q.Set("from", from)
		}
		if to != "" {
			q.Set("to", to)
		}
		lo, hi, err := parseRange(q, now, day, 31*day)
		if err != nil {
			var he *httpserver.Error
			if !errors.As(err, &he) || he.Status != http.StatusBadRequest || (he.Field != "from" && he.Field != "to") {
				t.Fatalf("parseRange(%q, %q) = %v, want a 400 naming from or to", from, to, err)
			}
			return
		}
		if !lo.Before(hi) || hi.Sub(lo) > 31*day || lo.Before(earliest) || !hi.Before(latest) {
			t.Fatalf("parseRange(%q, %q) = %v, %v", from, to, lo, hi)
		}
	})
}

func ptr[T any](v T) *T { return &v }
