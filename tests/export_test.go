package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/api/historyapi"
	"github.com/pulse-presence/pulse/tests/harness"
)

// TestExportHoldsEverythingOfOneUser posts a known minute of one user's statuses (a
// custom status, idle, invisible, offline and back), makes them a member of a group,
// and posts another user's statuses beside them; once history wrote them, the
// operator's export of the first user (GET /v1/users/{id}/export, read in pages of
// five entries) holds exactly what was posted: every event and change in the
// timeline, newest first; two sessions, the first closed with its totals; the day;
// history's status row; the live state as the status reads show it, with the group;
// the user's index, the same in Redis and history. The other user is nowhere in it.
// A reader's key, a producer's and the user's own token are 403s, a bad id a 400, a
// user Pulse never saw a 404, another user's cursor a 400; every call query answered
// is an audit line naming the credential and never a key; and pulsectl export -json
// prints the same timeline whole. The keyspace is the test's own, migrated from this
// tree.
func TestExportHoldsEverythingOfOneUser(t *testing.T) {
	p := harness.NewTopics(t, 2)
	_, ks := migratedKeyspace(t)
	p.Env["PULSE_CASSANDRA_KEYSPACE"] = ks
	// user_status and the sessions and days are written within a second.
	p.Env["PULSE_HISTORY_STATUS_INTERVAL"] = "1s"
	p.Env["PULSE_HISTORY_ROLLUP_INTERVAL"] = "1s"
	// JSON lines, the services' default, so the audit lines are read as machines would.
	p.Env["PULSE_LOG_FORMAT"] = "json"
	for _, name := range []string{"aggregator", "history", "ingest", "query"} {
		p.Start(t, name)
	}
	ingest, q := p.Svc["ingest"].URL, p.Svc["query"].URL
	ann, bob, group := p.Run+"-ann", p.Run+"-bob", "export-"+p.Run

	// The minute must lie in one UTC day, so that it is one day row.
	for time.Now().UTC().Add(-3*time.Minute).Day() != time.Now().UTC().Add(2*time.Minute).Day() {
		time.Sleep(10 * time.Second)
	}
	start := time.Now().Add(-2 * time.Minute).UTC().Truncate(time.Millisecond)
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	type step struct {
		user, id, status string
		s                int
		data             string
	}
	steps := []step{
		{ann, "a1", "online", 0, `{"text":"At work","emoji":"💼"}`},
		{bob, "b1", "online", 2, ""},
		{ann, "a2", "idle", 5, ""},
		{bob, "b2", "offline", 7, ""},
		{ann, "a3", "online", 10, ""},
		{ann, "a4", "invisible", 15, ""},
		{ann, "a5", "offline", 20, ""},
		{ann, "a6", "online", 30, ""},
	}
	for _, st := range steps {
		when := at(st.s)
		e := harness.WireEvent{EventID: p.Run + "-" + st.id, UserID: st.user, Kind: "status", Status: st.status, DeviceID: "phone",
			OccurredAt: &when, Data: json.RawMessage(st.data)}
		if code, body := harness.PostJSON(t, ingest+"/v1/events", map[string]any{"events": []harness.WireEvent{e}}); code != http.StatusAccepted {
			t.Fatalf("POST /v1/events = %d %s", code, body)
		}
	}
	if code, body := harness.OnlineDo(t, http.MethodPut, q+"/v1/groups/"+group+"/members", harness.TestKeys.Producer,
		map[string]any{"userIds": []string{ann}}); code != http.StatusAccepted {
		t.Fatalf("PUT the group's members = %d %s", code, body)
	}

	export := func(user, query, key string) (int, string) {
		t.Helper()
		target := q + "/v1/users/" + url.PathEscape(user) + "/export" + query
		code, body := harness.OnlineDo(t, http.MethodGet, target, key, nil)
		return code, string(body)
	}
	// readAll reads every page of user's export, five entries a page.
	readAll := func(user string) (first historyapi.Export, raws []string, sizes []int, err error) {
		query := "?limit=5"
		for {
			code, body := export(user, query, harness.TestKeys.Operator)
			if code != http.StatusOK {
				return first, raws, sizes, fmt.Errorf("GET export%s = %d %s", query, code, body)
			}
			raws = append(raws, body)
			var page historyapi.Export
			if err := json.Unmarshal([]byte(body), &page); err != nil {
				t.Fatalf("export page %s: %v", body, err)
			}
			sizes = append(sizes, len(page.History.Timeline.Entries))
			if len(raws) == 1 {
				first = page
			} else {
				first.History.Timeline.Entries = append(first.History.Timeline.Entries, page.History.Timeline.Entries...)
			}
			if page.History.Timeline.NextCursor == nil {
				return first, raws, sizes, nil
			}
			query = "?limit=5&cursor=" + url.QueryEscape(*page.History.Timeline.NextCursor)
		}
	}

	// Wait for history: the last event in user_status, both sessions, the group.
	var doc historyapi.Export
	var raws []string
	var sizes []int
	harness.Eventually(t, 60*time.Second, func() string {
		var err error
		if doc, raws, sizes, err = readAll(ann); err != nil {
			return err.Error() // a 503 while query connects to Cassandra, a 404 before anything is written
		}
		h := doc.History
		switch {
		case h.Status == nil || h.Status.LastEventID == nil || *h.Status.LastEventID != p.Run+"-a6" || len(h.Status.Groups) == 0:
			return fmt.Sprintf("user_status not written yet: %+v", h.Status)
		case len(h.Sessions.Sessions) != 2 || h.Sessions.Sessions[1].Open:
			return fmt.Sprintf("sessions not written yet: %+v", h.Sessions.Sessions)
		case len(h.Timeline.Entries) != 12:
			return fmt.Sprintf("%d timeline entries, want 12", len(h.Timeline.Entries))
		case doc.Current == nil || len(doc.Current.Groups) == 0:
			return fmt.Sprintf("the group not in Redis yet: %+v", doc.Current)
		}
		return ""
	})

	// An operator's answer: no cache may keep it.
	if code, body := func() (int, string) {
		req, _ := http.NewRequest(http.MethodGet, q+"/v1/users/"+ann+"/export?limit=1", nil)
		req.Header.Set("Authorization", "Bearer "+harness.TestKeys.Operator)
		res, err := harness.BareClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		return res.StatusCode, res.Header.Get("Cache-Control")
	}(); code != http.StatusOK || body != "private, no-store" {
		t.Errorf("the export = %d with Cache-Control %q; want 200 with private, no-store", code, body)
	}

	// The pages: 5, 5 and 2 entries; the later ones carry the timeline alone, with the
	// first page's instant and range.
	if !slices.Equal(sizes, []int{5, 5, 2}) {
		t.Errorf("pages of %v entries, want 5, 5, 2", sizes)
	}
	for i, raw := range raws[1:] {
		var page map[string]json.RawMessage
		_ = json.Unmarshal([]byte(raw), &page)
		var hist map[string]json.RawMessage
		_ = json.Unmarshal(page["history"], &hist)
		var tl historyapi.TimelinePage
		_ = json.Unmarshal(hist["timeline"], &tl)
		if len(page) != 3 || page["current"] != nil || len(hist) != 1 || !tl.From.Equal(doc.History.Timeline.From) || !tl.To.Equal(doc.History.Timeline.To) ||
			!strings.Contains(string(page["exportedAt"]), doc.ExportedAt.Format(time.RFC3339Nano)) {
			t.Errorf("page %d = %s; want userId, the first page's exportedAt and the timeline alone, over the same range", i+2, raw)
		}
	}
	exportedAt := doc.ExportedAt
	if d := time.Since(exportedAt); d < 0 || d > 2*time.Minute || doc.UserID != ann {
		t.Errorf("userId %q, exportedAt %v: want %q and a moment ago", doc.UserID, exportedAt, ann)
	}
	if from, to := doc.History.Timeline.From, doc.History.Timeline.To; !from.Equal(time.Date(exportedAt.Year(), exportedAt.Month(), exportedAt.Day()-400, 0, 0, 0, 0, time.UTC)) ||
		!to.Equal(exportedAt.Add(24*time.Hour)) {
		t.Errorf("the range is %v to %v; want 400 days back from %v to a day after", from, to, exportedAt)
	}

	// The timeline: each status event and the change it made, newest first.
	var want, got []string
	prev := "offline"
	for _, st := range steps {
		if st.user != ann {
			continue
		}
		id, when := p.Run+"-"+st.id, at(st.s).Format(time.RFC3339Nano)
		data := ""
		if st.data != "" {
			data = st.data
		}
		want = append(want,
			fmt.Sprintf("%s c:%s change kind= status=%s previous=%s cause=event stale=false received=false", when, id, st.status, prev),
			fmt.Sprintf("%s e:%s event kind=status status=%s device=phone source=api stale=false received=true data=%s", when, id, st.status, data))
		prev = st.status
	}
	slices.Reverse(want) // newest first; at one instant by entry id, descending: e: before c:
	for _, e := range doc.History.Timeline.Entries {
		data := ""
		if e.Data != nil {
			b, _ := json.Marshal(e.Data)
			data = string(b)
		}
		when := e.OccurredAt.Format(time.RFC3339Nano)
		if e.EntryType == "event" {
			got = append(got, fmt.Sprintf("%s %s event kind=%s status=%s device=%s source=%s stale=%v received=%v data=%s",
				when, e.EntryID, e.Kind, e.Status, e.DeviceID, e.Source, e.Stale, e.ReceivedAt != nil, data))
		} else {
			got = append(got, fmt.Sprintf("%s %s %s kind=%s status=%s previous=%s cause=%s stale=%v received=%v",
				when, e.EntryID, e.EntryType, e.Kind, e.Status, e.PreviousStatus, e.Cause, e.Stale, e.ReceivedAt != nil))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("timeline:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Sessions: the open one from a6, the closed one from a1 to a5 with its totals.
	h := doc.History
	s0, s1 := h.Sessions.Sessions[0], h.Sessions.Sessions[1]
	if !s0.Open || s0.End != nil || !s0.Start.Equal(at(30)) || s0.Status != "online" {
		t.Errorf("the newest session %+v: want open, from %v, online", s0, at(30))
	}
	if s1.Open || s1.End == nil || !s1.Start.Equal(at(0)) || !s1.End.Equal(at(20)) || s1.OnlineSeconds != 10 || s1.IdleSeconds != 5 ||
		s1.InvisibleSeconds != 5 || !s1.Through.Equal(at(20)) || s1.Status != "offline" || h.Sessions.Truncated {
		t.Errorf("the first session %+v: want closed, %v to %v, 10 s online, 5 idle, 5 invisible", s1, at(0), at(20))
	}
	// The sessions and the day are the rows the analysts' routes read: the same answers.
	var sessions historyapi.Sessions
	hapiGet(t, q+"/v1/users/"+ann+"/sessions?from="+url.QueryEscape(at(0).Format(time.RFC3339Nano))+"&to="+url.QueryEscape(at(31).Format(time.RFC3339Nano)), &sessions)
	if a, b := mustJSON(t, sessions.Sessions), mustJSON(t, h.Sessions.Sessions); !bytes.Equal(a, b) {
		t.Errorf("history.sessions.sessions = %s; the sessions route answers %s", b, a)
	}
	day := start.Format(time.DateOnly)
	var days historyapi.UserDays
	hapiGet(t, q+"/v1/users/"+ann+"/daily?from="+day+"&to="+day, &days)
	if a, b := mustJSON(t, days.Days), mustJSON(t, h.Daily.Days); !bytes.Equal(a, b) || len(days.Days) != 1 {
		t.Errorf("history.daily.days = %s; the daily route answers %s, want one day", b, a)
	} else if d := h.Daily.Days[0]; d.Day != day || d.IdleSeconds != 5 || d.InvisibleSeconds != 5 || d.OnlineSeconds < 10 ||
		d.FirstSeen == nil || !d.FirstSeen.Equal(at(0)) || d.Status != "online" {
		t.Errorf("the day %+v: want %s, 5 s idle, 5 invisible, at least 10 online, first seen %v, online", d, day, at(0))
	}

	// History's status row, and the live state in Redis.
	customJSON := `{"text":"At work","emoji":"💼"}`
	sj, _ := json.Marshal(h.Status)
	wantStatus := fmt.Sprintf(`{"status":"online","lastUpdated":%q,"lastActive":%q,"lastSeen":%q,"lastEventId":%q,"custom":%s,"customSetAt":%q,"groups":[%q]}`,
		at(30).Format(time.RFC3339Nano), at(30).Format(time.RFC3339Nano), at(30).Format(time.RFC3339Nano), p.Run+"-a6", customJSON,
		at(0).Format(time.RFC3339Nano), group)
	if string(sj) != wantStatus {
		t.Errorf("history.status = %s\nwant %s", sj, wantStatus)
	}
	cur := doc.Current
	cj, _ := json.Marshal(struct {
		Status, LastUpdated, LastActive, LastSeen, Custom, CustomSetAt, Devices, Groups any
		Invisible                                                                       bool
	}{cur.Status, cur.LastUpdated, cur.LastActive, cur.LastSeen, cur.Custom, cur.CustomSetAt, cur.Devices, cur.Groups, cur.Invisible})
	wantCurrent := fmt.Sprintf(`{"Status":"online","LastUpdated":%q,"LastActive":%q,"LastSeen":%q,"Custom":%s,"CustomSetAt":%q,`+
		`"Devices":[{"deviceId":"phone","status":"online","lastSeen":%q,"publicLastSeen":%q,"hidden":false}],"Groups":[%q],"Invisible":false}`,
		at(30).Format(time.RFC3339Nano), at(30).Format(time.RFC3339Nano), at(30).Format(time.RFC3339Nano), customJSON, at(0).Format(time.RFC3339Nano),
		at(30).Format(time.RFC3339Nano), at(30).Format(time.RFC3339Nano), group)
	if string(cj) != wantCurrent {
		t.Errorf("current = %s\nwant %s", cj, wantCurrent)
	}
	// The times other readers are shown are those a reader's status read answers.
	var public struct{ LastUpdated, LastActive, LastSeen *time.Time }
	if code, body := harness.OnlineDo(t, http.MethodGet, q+"/v1/users/"+ann+"/status", harness.TestKeys.Reader, nil); code != http.StatusOK ||
		json.Unmarshal(body, &public) != nil {
		t.Fatalf("a reader's status of %s = %d %s", ann, code, body)
	}
	if a, b := times(public.LastUpdated, public.LastActive, public.LastSeen), times(cur.Public.LastUpdated, cur.Public.LastActive, cur.Public.LastSeen); a != b {
		t.Errorf("current.public = %s, a reader's status read %s", b, a)
	}
	if h.PointInTime == nil || int(h.PointInTime.Shard) != cur.Shard || h.PointInTime.Index != cur.Index || cur.LogOffset < 0 {
		t.Errorf("pointInTime %+v, current shard %d index %d offset %d: want the same shard and index", h.PointInTime, cur.Shard, cur.Index, cur.LogOffset)
	}

	// The other user is nowhere in it, and has their own.
	for i, raw := range raws {
		if strings.Contains(raw, bob) {
			t.Errorf("page %d of %s's export names %s:\n%s", i+1, ann, bob, raw)
		}
	}
	bobs, _, _, err := readAll(bob)
	if err != nil || len(bobs.History.Timeline.Entries) != 4 || len(bobs.History.Sessions.Sessions) != 1 || bobs.Current.Status != "offline" {
		t.Errorf("%s's export: %v, %d entries, sessions %+v, current %+v; want 4 entries, one session, offline", bob, err,
			len(bobs.History.Timeline.Entries), bobs.History.Sessions.Sessions, bobs.Current)
	}

	// Refusals.
	annToken := userToken(t, ann, time.Now().Add(time.Hour), harness.TestKeys.Hs256)
	for name, key := range map[string]string{"a reader's key": harness.TestKeys.Reader, "a producer's key": harness.TestKeys.Producer, "the user's own token": annToken} {
		if code, body := export(ann, "", key); code != http.StatusForbidden || !strings.HasPrefix(body, `{"error":{"code":"forbidden"`) || strings.Contains(body, "At work") {
			t.Errorf("the export with %s = %d %s; want 403", name, code, body)
		}
	}
	if code, body := export(ann, "?view=operator", harness.TestKeys.Reader); code != http.StatusForbidden {
		t.Errorf("the export with a reader's key and view=operator = %d %s; want 403", code, body)
	}
	if code, body := export("x\u200by", "", harness.TestKeys.Operator); code != http.StatusBadRequest || !strings.Contains(body, `"field":"userId"`) {
		t.Errorf("the export of a bad id = %d %s; want a 400 naming userId", code, body)
	}
	nobody := p.Run + "-nobody"
	if code, body := export(nobody, "", harness.TestKeys.Operator); code != http.StatusNotFound ||
		!strings.Contains(body, `"code":"not_found","message":"Pulse holds nothing about user \"`+nobody+`\"`) {
		t.Errorf("the export of a user Pulse never saw = %d %s; want 404", code, body)
	}
	var page1 historyapi.Export
	_ = json.Unmarshal([]byte(raws[0]), &page1)
	if code, body := export(bob, "?cursor="+url.QueryEscape(*page1.History.Timeline.NextCursor), harness.TestKeys.Operator); code != http.StatusBadRequest ||
		!strings.Contains(body, `"field":"cursor"`) {
		t.Errorf("%s's export with %s's cursor = %d %s; want a 400 naming cursor", bob, ann, code, body)
	}

	// pulsectl export -json prints the same timeline, whole, from pages of five.
	cmd := exec.Command(harness.Binary("pulsectl"), "export", ann, "-json", "-limit", "5")
	cmd.Env = append(os.Environ(), "PULSE_QUERY_URL="+q, "PULSE_OPERATOR_KEY="+harness.TestKeys.Operator, "PULSE_OPERATOR_TOKEN=", "PULSE_READER_KEY=")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("pulsectl export: %v\n%s", err, errOut.String())
	}
	var printed historyapi.Export
	if err := json.Unmarshal(out.Bytes(), &printed); err != nil {
		t.Fatalf("pulsectl export -json printed no document: %v\n%s", err, out.String())
	}
	a, _ := json.Marshal(printed.History.Timeline.Entries)
	b, _ := json.Marshal(doc.History.Timeline.Entries)
	if !bytes.Equal(a, b) || printed.History.Timeline.NextCursor != nil || printed.UserID != ann || printed.Current == nil ||
		printed.History.PointInTime == nil || *printed.History.PointInTime != *h.PointInTime {
		t.Errorf("pulsectl export -json =\n%s\nwant the timeline of the pages read above:\n%s", out.String(), b)
	}

	// Every call query answered is one audit line, naming the credential and never a key.
	log := p.Svc["query"].Out.String()
	for _, secret := range []string{harness.TestKeys.Operator, harness.TestKeys.Reader, harness.TestKeys.Producer, annToken} {
		if strings.Contains(log, secret) {
			t.Fatal("query's log shows a credential")
		}
	}
	count := map[string]int{}
	defer func() { t.Logf("audit lines: %v", count) }()
	for line := range strings.Lines(log) {
		var l struct {
			Msg, Action, User, Credential, Page, Level string
			Status                                     int
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.Msg != "audit" {
			continue
		}
		if l.Action != "export" || l.Level != "INFO" {
			t.Errorf("audit line %s: want action=export at info", line)
		}
		count[fmt.Sprintf("%s %s %d %s", l.User, l.Credential, l.Status, l.Page)]++
	}
	for key, least := range map[string]int{
		ann + " it-operator 200 first":    2, // the test's last read, and pulsectl's
		ann + " it-operator 200 next":     4,
		ann + " it-reader 403 first":      2,
		ann + " it-producer 403 first":    0, // refused by the guard (no read scope): no line
		" it-operator 400 first":          1,
		nobody + " it-operator 404 first": 1,
		bob + " it-operator 400 next":     0, // a cursor refused: the page is not a next page
		bob + " it-operator 400 first":    1,
	} {
		if count[key] < least || (least == 0 && count[key] != 0) {
			t.Errorf("%d audit lines %q, want %d or more (exactly 0 when 0); all: %v", count[key], key, least, count)
		}
	}
}

// times writes instants that may be null.
func times(ts ...*time.Time) string {
	var out []string
	for _, t := range ts {
		if t == nil {
			out = append(out, "null")
			continue
		}
		out = append(out, t.UTC().Format(time.RFC3339Nano))
	}
	return strings.Join(out, " ")
}
