package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/records"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
	"github.com/pulse-presence/pulse/tests/harness"
)

// customView is the part of GET /v1/users/{id}/status a custom status shows in.
type customView struct {
	Status string          `json:"status"`
	Data   json.RawMessage `json:"data"`
}

// TestCustomStatusThroughThePipeline posts custom statuses through ingest and reads
// them back from query and its change feed: as they were sent for a visible user,
// null to a reader and as sent to an operator for an invisible one, a change of its
// own when only it changes, cleared at a short until by the aggregator's timeout (a
// change at until, the state and the log agree), cleared by {}, and set through a
// present socket's status command.
func TestCustomStatusThroughThePipeline(t *testing.T) {
	p := harness.NewPipeline(t, 2, nil)
	ingest, q := p.Svc["ingest"].URL, p.Svc["query"].URL
	alice, carol, dave, erin := p.Run+"-alice", p.Run+"-carol", p.Run+"-dave", p.Run+"-erin"

	post := func(events ...map[string]any) {
		t.Helper()
		if code, body := harness.PostJSON(t, ingest+"/v1/events", map[string]any{"events": events}); code != http.StatusAccepted {
			t.Fatalf("POST /v1/events = %d %s", code, body)
		}
	}
	read := func(user, key string, operator bool) customView {
		t.Helper()
		target := q + "/v1/users/" + user + "/status"
		if operator {
			target += "?view=operator"
		}
		code, body := harness.OnlineDo(t, http.MethodGet, target, key, nil)
		var v customView
		if code != http.StatusOK || json.Unmarshal(body, &v) != nil {
			t.Fatalf("GET %s = %d %s", target, code, body)
		}
		return v
	}
	// await polls the reader's (or the operator's) view until it shows status and data.
	await := func(user string, operator bool, status, data string) {
		t.Helper()
		key := ""
		if operator {
			key = harness.TestKeys.Operator
		}
		harness.Eventually(t, 30*time.Second, func() string {
			if v := read(user, key, operator); v.Status != status || string(v.Data) != data {
				return fmt.Sprintf("%s (operator %v): %s %s, want %s %s", user, operator, v.Status, v.Data, status, data)
			}
			return ""
		})
	}

	const meeting = `{"text":"In a meeting","emoji":"📅"}`
	daveUntil := time.Now().Add(6 * time.Second).UTC().Truncate(time.Millisecond)

	// A reader watches alice and dave: changes carry the custom status.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var w *liveSocket
	harness.Eventually(t, 30*time.Second, func() string {
		s, res, err := openSocket(t, ctx, q, harness.TestKeys.Reader, url.Values{"userIds": {alice + "," + dave}})
		if err != nil {
			return fmt.Sprintf("the watch: %v (%v)", err, res)
		}
		w = s
		return ""
	})
	if m := w.next(10 * time.Second); m.Type != "snapshot" {
		t.Fatalf("first message %+v, want a snapshot", m.watchMsg)
	}
	// change reads the next change of user, which must be previous → status for cause
	// with data as given, and returns it.
	pending := map[string][]presentMsg{} // changes read while waiting for another user's
	change := func(user, previous, status, cause, data string) presentMsg {
		t.Helper()
		for {
			var m presentMsg
			if q := pending[user]; len(q) > 0 {
				m, pending[user] = q[0], q[1:]
			} else if m = w.next(20 * time.Second); m.Type != "change" {
				continue
			} else if m.UserID != user {
				pending[m.UserID] = append(pending[m.UserID], m)
				continue
			}
			if m.Previous != previous || m.Status != status || m.Cause != cause || string(m.Data) != data {
				t.Fatalf("%s's change %+v data %s, want %s → %s (%s) with %s", user, m.watchMsg, m.Data, previous, status, cause, data)
			}
			return m
		}
	}

	post(
		map[string]any{"userId": alice, "status": "online", "deviceId": "laptop",
			"data": map[string]any{"text": "In a meeting", "emoji": "📅"}},
		map[string]any{"userId": carol, "status": "online", "data": map[string]any{"text": "Heads down", "emoji": "🎧"}},
		map[string]any{"userId": dave, "status": "idle", "data": map[string]any{"emoji": "🥪", "until": daveUntil.Format(time.RFC3339Nano)}},
	)
	await(alice, false, "online", meeting)
	await(alice, true, "online", meeting)
	change(alice, "offline", "online", "event", meeting)
	// The seed shapes stay as they were.
	if code, body := harness.Get(t, q+"/status/"+alice); code != http.StatusOK || strings.Contains(body, "data") {
		t.Fatalf("GET /status/%s = %d %s, want the seed shape", alice, code, body)
	}
	// A status event without data leaves it; a heartbeat cannot carry it.
	post(map[string]any{"userId": alice, "status": "idle", "deviceId": "laptop"})
	await(alice, false, "idle", meeting)
	change(alice, "online", "idle", "event", meeting)
	// A new one while idle is a change of the custom status alone.
	post(map[string]any{"userId": alice, "status": "idle", "deviceId": "laptop", "data": map[string]any{"text": "Lunch"}})
	change(alice, "idle", "idle", "event", `{"text":"Lunch"}`)
	await(alice, false, "idle", `{"text":"Lunch"}`)
	code, body := harness.PostJSON(t, ingest+"/v1/heartbeat", map[string]any{"userId": alice, "data": map[string]any{"text": "x"}})
	if code != http.StatusBadRequest || !strings.Contains(string(body), `"field":"data"`) {
		t.Fatalf("POST /v1/heartbeat with data = %d %s, want a 400 naming data", code, body)
	}
	code, body = harness.PostJSON(t, ingest+"/v1/events", map[string]any{"events": []map[string]any{
		{"userId": alice, "status": "online", "data": map[string]any{"text": strings.Repeat("x", 129)}}}})
	if code != http.StatusBadRequest || !strings.Contains(string(body), `"field":"events[0].data.text"`) {
		t.Fatalf("a text of 129 characters = %d %s, want a 400 naming events[0].data.text", code, body)
	}

	// Invisible hides it from readers, as offline would; operators see it.
	await(carol, false, "online", `{"text":"Heads down","emoji":"🎧"}`)
	post(map[string]any{"userId": carol, "status": "invisible"})
	await(carol, true, "invisible", `{"text":"Heads down","emoji":"🎧"}`)
	await(carol, false, "offline", "null")

	// dave's clears itself at until through the aggregator's timeout: a change of the
	// custom status alone at until, with nothing posted, and Redis holds it no more.
	daveData := fmt.Sprintf(`{"emoji":"🥪","until":%q}`, daveUntil.Format(time.RFC3339Nano))
	await(dave, false, "idle", daveData)
	change(dave, "offline", "idle", "event", daveData)
	cleared := change(dave, "idle", "idle", "timeout", "null")
	if !cleared.At.Equal(daveUntil) {
		t.Errorf("dave's custom status cleared at %v, want its until %v", cleared.At, daveUntil)
	}
	t.Logf("dave's custom status cleared %v after its until", cleared.got.Sub(daveUntil).Round(time.Millisecond))
	if v := read(dave, harness.TestKeys.Operator, true); string(v.Data) != "null" {
		t.Fatalf("dave after until, operator view: %s, want null", v.Data)
	}
	store := statestore.New(stateRDB(t, harness.RedisAddr()), p.Env["PULSE_REDIS_PREFIX"])
	harness.Eventually(t, 30*time.Second, func() string {
		u, err := store.Get(context.Background(), dave)
		if err != nil || u == nil || !u.Custom.IsZero() || u.Status != presence.Idle {
			return fmt.Sprintf("dave's state after until: %+v, %v; want idle without a custom status", u, err)
		}
		return ""
	})
	// The log holds the aggregator's decision, like any timeout.
	var timeouts []string
	for _, recs := range harness.ReadTopic(t, p.Events) {
		for _, r := range recs {
			if string(r.Key) != dave {
				continue
			}
			e, err := records.DecodeEvent(r)
			if err != nil {
				t.Fatalf("record of dave: %v", err)
			}
			if e.Source == presence.SourceTimeout {
				timeouts = append(timeouts, fmt.Sprintf("%s %s %s", e.Kind, e.DeviceID, e.Time().Format(time.RFC3339Nano)))
			}
		}
	}
	if want := []string{"custom * " + daveUntil.Format(time.RFC3339Nano)}; !slices.Equal(timeouts, want) {
		t.Errorf("dave's timeouts in the log: %v, want %v", timeouts, want)
	}

	// {} clears, with the status it comes with.
	post(map[string]any{"userId": alice, "status": "online", "deviceId": "phone", "data": map[string]any{}})
	await(alice, true, "online", "null")
	change(alice, "idle", "online", "event", "null")

	// A present socket's status command sets it, and is refused naming the member.
	tok, err := auth.MintUserToken(harness.TestKeys.Hs256, auth.UserToken{User: erin, TTL: time.Hour, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	s, res, err := openSocket(t, ctx, q, tok, url.Values{"present": {"web"}})
	if err != nil {
		t.Fatalf("erin's present socket: %v (%v)", err, res)
	}
	reply := func(cmd string) presentMsg {
		t.Helper()
		s.send(cmd)
		for {
			if m := s.next(10 * time.Second); m.Type != "snapshot" {
				return m
			}
		}
	}
	if m := reply(`{"op":"status","status":"online","data":{"emoji":"📅📅"}}`); m.Type != "error" || m.Code != "invalid_command" ||
		!strings.HasPrefix(m.Message, "data.emoji: ") {
		t.Fatalf("two emoji: %+v %s, want invalid_command naming data.emoji", m.watchMsg, m.Message)
	}
	if m := reply(`{"op":"activity","data":{}}`); m.Type != "error" || m.Code != "invalid_command" || !strings.HasPrefix(m.Message, "data: ") {
		t.Fatalf("activity with data: %+v %s, want invalid_command naming data", m.watchMsg, m.Message)
	}
	if m := reply(`{"op":"status","status":"online","data":{"text":"On the road","emoji":"🚗"}}`); m.Type != "ack" || m.EventID == "" {
		t.Fatalf("status with data: %+v %s, want an ack", m.watchMsg, m.Message)
	}
	await(erin, false, "online", `{"text":"On the road","emoji":"🚗"}`)
}

// TestCustomStatusInTheTimeline posts status events with and without data through
// ingest and reads them back from query's timeline: each event entry answers as data
// the custom status the event set ({} for a clear, nothing for an event that carried
// none), a stale one and one sent while invisible included; the aggregator's timeout
// at a short until is an entry of its own with {}; no change entry has data, and a
// reader gets a 403. The keyspace is the test's own, migrated from this tree.
func TestCustomStatusInTheTimeline(t *testing.T) {
	p := harness.NewTopics(t, 2)
	_, ks := migratedKeyspace(t)
	p.Env["PULSE_CASSANDRA_KEYSPACE"] = ks
	for _, name := range []string{"aggregator", "history", "ingest", "query"} {
		p.Start(t, name)
	}
	ingest, q := p.Svc["ingest"].URL, p.Svc["query"].URL
	user := p.Run + "-tl"

	// One device's events a few seconds apart in the recent past; s6 is dated before
	// s5, so it is stale. s7's custom status clears itself a few seconds from now.
	start := time.Now().Add(-2 * time.Minute).UTC().Truncate(time.Millisecond)
	until := start.Add(time.Hour)
	soon := time.Now().Add(6 * time.Second).UTC().Truncate(time.Millisecond)
	at := func(s int) string { return start.Add(time.Duration(s) * time.Second).Format(time.RFC3339Nano) }
	ev := func(id, status string, s int, data map[string]any) map[string]any {
		e := map[string]any{"eventId": p.Run + "-" + id, "userId": user, "status": status, "deviceId": "phone", "occurredAt": at(s)}
		if data != nil {
			e["data"] = data
		}
		return e
	}
	for _, e := range []map[string]any{
		ev("s1", "online", 0, map[string]any{"text": "In a meeting", "emoji": "📅", "until": until.Format(time.RFC3339Nano)}),
		ev("s2", "idle", 5, nil),
		ev("s3", "online", 10, map[string]any{"emoji": "🌴"}),
		ev("s4", "invisible", 15, map[string]any{"text": "Heads down"}),
		ev("s5", "online", 25, map[string]any{}),
		ev("s6", "idle", 20, map[string]any{"text": "Late"}),
		ev("s7", "online", 30, map[string]any{"emoji": "⏳", "until": soon.Format(time.RFC3339Nano)}),
	} {
		if code, body := harness.PostJSON(t, ingest+"/v1/events", map[string]any{"events": []map[string]any{e}}); code != http.StatusAccepted {
			t.Fatalf("POST /v1/events = %d %s", code, body)
		}
	}

	// Newest first: the timeout at soon, s7, s5, s6 (stale), s4, s3, s2, s1. The
	// timeout's id derives from its deadline; it shows as e:timeout-….
	entry := func(id, kind, status string, when string, stale bool, data string) string {
		return fmt.Sprintf("%s kind=%s status=%s at=%s stale=%v data=%s", id, kind, status, when, stale, data)
	}
	sent := func(id, status string, s int, stale bool, data string) string {
		return entry("e:"+p.Run+"-"+id, "status", status, at(s), stale, data)
	}
	want := []string{
		entry("e:timeout-…", "custom", "", soon.Format(time.RFC3339Nano), false, `{}`),
		sent("s7", "online", 30, false, fmt.Sprintf(`{"emoji":"⏳","until":%q}`, soon.Format(time.RFC3339Nano))),
		sent("s5", "online", 25, false, `{}`),
		sent("s6", "idle", 20, true, `{"text":"Late"}`),
		sent("s4", "invisible", 15, false, `{"text":"Heads down"}`),
		sent("s3", "online", 10, false, `{"emoji":"🌴"}`),
		sent("s2", "idle", 5, false, ``),
		sent("s1", "online", 0, false, fmt.Sprintf(`{"text":"In a meeting","emoji":"📅","until":%q}`, until.Format(time.RFC3339Nano))),
	}
	// Every change of the status, none with data. s6, stale, changed nothing; s7 and
	// the timeout changed the custom status alone, which history keeps no change of.
	var wantChanges []string
	for _, c := range []struct {
		id, status string
		s          int
	}{{"s5", "online", 25}, {"s4", "invisible", 15}, {"s3", "online", 10}, {"s2", "idle", 5}, {"s1", "online", 0}} {
		wantChanges = append(wantChanges, entry("c:"+p.Run+"-"+c.id, "", c.status, at(c.s), false, ""))
	}
	target := q + "/v1/users/" + user + "/timeline?from=" + url.QueryEscape(start.Add(-time.Minute).Format(time.RFC3339)) +
		"&to=" + url.QueryEscape(start.Add(5*time.Minute).Format(time.RFC3339)) + "&view=operator"
	harness.Eventually(t, 30*time.Second, func() string {
		var page struct {
			Entries []struct {
				OccurredAt time.Time       `json:"occurredAt"`
				EntryID    string          `json:"entryId"`
				EntryType  string          `json:"entryType"`
				Kind       string          `json:"kind"`
				Status     string          `json:"status"`
				Stale      bool            `json:"stale"`
				Data       json.RawMessage `json:"data"`
			} `json:"entries"`
		}
		// Query connects to Cassandra in the background: a 503 first is no failure.
		code, body := hapiGetRaw(t, target)
		if code != http.StatusOK {
			return fmt.Sprintf("GET %s = %d %s", target, code, body)
		}
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatalf("GET %s: %v in %s", target, err, body)
		}
		var got, changes []string
		for _, e := range page.Entries {
			id := e.EntryID
			if strings.HasPrefix(id, "e:timeout-") {
				id = "e:timeout-…"
			}
			line := entry(id, e.Kind, e.Status, e.OccurredAt.Format(time.RFC3339Nano), e.Stale, string(e.Data))
			if e.EntryType == "change" {
				changes = append(changes, line)
				continue
			}
			got = append(got, line)
		}
		if !slices.Equal(got, want) || !slices.Equal(changes, wantChanges) {
			return fmt.Sprintf("timeline events:\n%s\nwant:\n%s\nchanges:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"),
				strings.Join(changes, "\n"), strings.Join(wantChanges, "\n"))
		}
		return ""
	})

	// The timeline is the operator's alone: a reader gets a 403, not the custom status
	// set while invisible.
	code, body := harness.OnlineDo(t, http.MethodGet, strings.TrimSuffix(target, "&view=operator"), harness.TestKeys.Reader, nil)
	if code != http.StatusForbidden || strings.Contains(string(body), "Heads down") {
		t.Fatalf("a reader's GET of the timeline = %d %s, want 403", code, body)
	}
}
