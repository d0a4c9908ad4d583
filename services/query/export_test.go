package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/cursor"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
)

// An export's cursor comes back as it was made; one damaged, of another layout, or
// naming a position outside its export's range is refused.
func TestExportCursorRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 23, 10, 0, 0, 123456000, time.UTC)
	c := exportCursor{ExportedAt: at, From: dayOf(at.Add(-400 * day)), User: exportUser("alice"),
		Pos: timelineCursor{At: at.Add(-time.Hour).Truncate(time.Millisecond), EntryID: "e:ü-1"}}
	got, err := decodeExportCursor(c.Encode())
	if err != nil || got != c {
		t.Fatalf("decode(encode(%+v)) = %+v, %v", c, got, err)
	}
	if exportUser("alice") == exportUser("bob") {
		t.Fatal("two users' cursors are bound to the same user")
	}
	s := c.Encode()
	damaged := s[:10] + string(rune(s[10]^1)) + s[11:]
	early := c
	early.Pos.At = c.From.Add(-time.Millisecond)
	for name, bad := range map[string]string{
		"damaged":             damaged,
		"a timeline cursor":   c.Pos.Encode(),
		"a daily cursor":      dailyCursor{Buckets: 16, Bucket: 3, After: "alice"}.Encode(),
		"before its range":    early.Encode(),
		"truncated":           s[:20],
		"a made up body":      exportFormat.Encode([]byte("0123456789")),
		"an unknown envelope": "AAAA",
	} {
		if _, err := decodeExportCursor(bad); err == nil {
			t.Errorf("%s: decoded", name)
		} else if !strings.Contains(err.Error(), cursor.ErrInvalid.Error()) {
			t.Errorf("%s: %v, want an invalid cursor", name, err)
		}
	}
}

// auditLines are the audit lines of a JSON log.
func auditLines(t *testing.T, log string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(log) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == "audit" {
			delete(m, "time")
			delete(m, "took")
			out = append(out, m)
		}
	}
	return out
}

// The export answers operators only, checks its input before reading anything, and
// audits every call it answers, naming the credential and never its secret.
func TestExportRefusesBadInputAndAuditsEveryCall(t *testing.T) {
	var log bytes.Buffer
	srv := newTestServerLogging(t, offlineStore(t), nil, &log)
	at := time.Now().UTC()
	own := exportCursor{ExportedAt: at, From: dayOf(at.Add(-400 * day)), User: exportUser("alice"),
		Pos: timelineCursor{At: at.Add(-time.Hour).Truncate(time.Millisecond), EntryID: "e:1"}}
	bobs := own
	bobs.User = exportUser("bob")
	for _, tc := range []struct {
		target   string
		operator bool
		code     int
		field    string
		user     string
	}{
		// Without the operator scope (auth is off here: the anonymous reader).
		{"/v1/users/alice/export", false, http.StatusForbidden, "", "alice"},
		{"/v1/users/alice/export?view=operator", false, http.StatusForbidden, "", "alice"},
		{"/v1/users/%E2%80%AEalice/export", true, http.StatusBadRequest, "userId", ""},
		{"/v1/users/alice/export?limit=0", true, http.StatusBadRequest, "limit", "alice"},
		{"/v1/users/alice/export?limit=1001", true, http.StatusBadRequest, "limit", "alice"},
		{"/v1/users/alice/export?view=public", true, http.StatusBadRequest, "view", "alice"},
		{"/v1/users/alice/export?view=all", true, http.StatusBadRequest, "view", "alice"},
		{"/v1/users/alice/export?from=2026-01-01", true, http.StatusBadRequest, "from", "alice"},
		{"/v1/users/alice/export?cursor=" + own.Pos.Encode(), true, http.StatusBadRequest, "cursor", "alice"},
		{"/v1/users/alice/export?cursor=" + bobs.Encode(), true, http.StatusBadRequest, "cursor", "alice"},
		// Valid: Cassandra is not connected, so a 503 to retry.
		{"/v1/users/alice/export", true, http.StatusServiceUnavailable, "", "alice"},
		{"/v1/users/alice/export?view=operator&limit=10&cursor=" + own.Encode(), true, http.StatusServiceUnavailable, "", "alice"},
	} {
		before := len(auditLines(t, log.String()))
		req := httptest.NewRequest(http.MethodGet, tc.target, nil)
		if tc.operator {
			req.Header.Set("Authorization", "Bearer "+testToken)
		}
		rec := httptest.NewRecorder()
		srv.Echo.ServeHTTP(rec, req)
		r := reply{rec.Code, strings.TrimSpace(rec.Body.String())}
		if r.code != tc.code || (tc.field != "" && !strings.Contains(r.body, `"field":"`+tc.field+`"`)) {
			t.Errorf("GET %s (operator %v) = %d %s; want %d naming %q", tc.target, tc.operator, r.code, r.body, tc.code, tc.field)
		}
		// Every answer of the handler; auth.Views refuses view=all before it.
		if cc := rec.Header().Get("Cache-Control"); tc.operator && !strings.Contains(tc.target, "view=all") && cc != "private, no-store" {
			t.Errorf("GET %s: Cache-Control %q, want private, no-store", tc.target, cc)
		}
		lines := auditLines(t, log.String())
		if len(lines) != before+1 {
			t.Errorf("GET %s: %d audit lines, want one", tc.target, len(lines)-before)
			continue
		}
		credential := "anonymous"
		if tc.operator {
			credential = "operator-token"
		}
		page := "first"
		if strings.Contains(tc.target, "cursor=") && tc.code != http.StatusBadRequest {
			page = "next"
		}
		want := map[string]any{"level": "INFO", "msg": "audit", "action": "export", "user": tc.user, "credential": credential,
			"status": float64(tc.code), "page": page, "entries": float64(0)}
		got := lines[len(lines)-1]
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(want)
		if !bytes.Equal(a, b) {
			t.Errorf("GET %s: audit line %s, want %s", tc.target, a, b)
		}
	}
	if strings.Contains(log.String(), testToken) {
		t.Errorf("the log shows the operator token:\n%s", log.String())
	}
}

// The live state is exported whole, as operators see it, with the times readers who
// are not operators are shown, every device and the custom status as held.
func TestExportCurrentOf(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	u := &presence.User{Index: 17, Status: presence.Invisible, Invisible: true, LastUpdated: t0, LastActive: t0, LastSeen: t0.Add(40 * time.Second),
		Offset: 2214, Public: presence.Public{LastUpdated: t0, LastActive: t0.Add(-5 * time.Minute), LastSeen: t0},
		Devices: []presence.Device{
			{ID: "laptop", Status: presence.Offline, LastSeen: t0.Add(-time.Hour), PublicLastSeen: t0.Add(-time.Hour)},
			{ID: "phone", Status: presence.Online, LastSeen: t0.Add(40 * time.Second), Hidden: true},
		},
		Custom:      presence.CustomStatus{Text: "Heads down", Emoji: "🎧", Until: t0.Add(-time.Minute)},
		CustomSetAt: t0.Add(-time.Hour),
	}
	got, err := json.Marshal(exportCurrentOf(u, 3, []string{"team-a"}))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"status":"invisible","invisible":true,"lastUpdated":"2026-11-23T09:00:00Z","lastActive":"2026-11-23T09:00:00Z","lastSeen":"2026-11-23T09:00:40Z",` +
		`"public":{"lastUpdated":"2026-11-23T09:00:00Z","lastActive":"2026-11-23T08:55:00Z","lastSeen":"2026-11-23T09:00:00Z"},` +
		`"devices":[{"deviceId":"laptop","status":"offline","lastSeen":"2026-11-23T08:00:00Z","publicLastSeen":"2026-11-23T08:00:00Z","hidden":false},` +
		`{"deviceId":"phone","status":"online","lastSeen":"2026-11-23T09:00:40Z","publicLastSeen":null,"hidden":true}],` +
		`"custom":{"text":"Heads down","emoji":"🎧","until":"2026-11-23T08:59:00Z"},"customSetAt":"2026-11-23T08:00:00Z",` +
		`"groups":["team-a"],"shard":3,"index":17,"logOffset":2214}`
	if string(got) != want {
		t.Errorf("exportCurrentOf =\n%s\nwant\n%s", got, want)
	}
	// A user with nothing but an index: every time null, no device, no custom status.
	got, _ = json.Marshal(exportCurrentOf(presence.NewUser(4), 0, []string{}))
	want = `{"status":"offline","invisible":false,"lastUpdated":null,"lastActive":null,"lastSeen":null,` +
		`"public":{"lastUpdated":null,"lastActive":null,"lastSeen":null},"devices":[],"custom":null,"customSetAt":null,` +
		`"groups":[],"shard":0,"index":4,"logOffset":-1}`
	if string(got) != want {
		t.Errorf("exportCurrentOf(new user) =\n%s\nwant\n%s", got, want)
	}
}

// A user_status row is exported with every column; what was never written is null,
// a cleared custom status {}.
func TestExportStatusOf(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		row  historystore.StatusRow
		want string
	}{
		{historystore.StatusRow{Status: "idle", LastUpdated: t0, LastActive: t0, LastSeen: t0.Add(time.Second), LastEventID: "e1",
			Custom: presence.CustomStatus{Text: "Lunch"}, CustomSetAt: t0, Groups: []string{"a", "b"}},
			`{"status":"idle","lastUpdated":"2026-11-23T09:00:00Z","lastActive":"2026-11-23T09:00:00Z","lastSeen":"2026-11-23T09:00:01Z",` +
				`"lastEventId":"e1","custom":{"text":"Lunch"},"customSetAt":"2026-11-23T09:00:00Z","groups":["a","b"]}`},
		// A user whose events never changed their status, whose custom status was cleared.
		{historystore.StatusRow{LastSeen: t0, LastEventID: "e2", CustomSetAt: t0},
			`{"status":null,"lastUpdated":null,"lastActive":null,"lastSeen":"2026-11-23T09:00:00Z","lastEventId":"e2","custom":{},` +
				`"customSetAt":"2026-11-23T09:00:00Z","groups":[]}`},
		// Only a group.
		{historystore.StatusRow{Groups: []string{"team-a"}},
			`{"status":null,"lastUpdated":null,"lastActive":null,"lastSeen":null,"lastEventId":null,"custom":null,"customSetAt":null,"groups":["team-a"]}`},
	} {
		got, err := json.Marshal(exportStatusOf(&tc.row))
		if err != nil || string(got) != tc.want {
			t.Errorf("exportStatusOf(%+v) =\n%s (%v)\nwant\n%s", tc.row, got, err, tc.want)
		}
	}
}
