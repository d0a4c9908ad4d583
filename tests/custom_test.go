package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
	"github.com/pulse-presence/pulse/tests/harness"
)

// customView is the part of GET /v1/users/{id}/status a custom status shows in.
type customView struct {
	Status string          `json:"status"`
	Data   json.RawMessage `json:"data"`
}

// TestCustomStatusThroughThePipeline posts custom statuses through ingest and reads
// them back from query: as they were sent for a visible user, null to a reader and as
// sent to an operator for an invisible one, null once a short until has passed (at
// read time, while Redis still holds it, and dropped from the state by the next fold),
// cleared by {}, and set through a present socket's status command.
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
	post(
		map[string]any{"userId": alice, "status": "online", "deviceId": "laptop",
			"data": map[string]any{"text": "In a meeting", "emoji": "📅"}},
		map[string]any{"userId": carol, "status": "online", "data": map[string]any{"text": "Heads down", "emoji": "🎧"}},
		map[string]any{"userId": dave, "status": "idle", "data": map[string]any{"emoji": "🥪", "until": daveUntil.Format(time.RFC3339Nano)}},
	)
	await(alice, false, "online", meeting)
	await(alice, true, "online", meeting)
	// The seed shapes stay as they were.
	if code, body := harness.Get(t, q+"/status/"+alice); code != http.StatusOK || strings.Contains(body, "data") {
		t.Fatalf("GET /status/%s = %d %s, want the seed shape", alice, code, body)
	}
	// A status event without data leaves it; a heartbeat cannot carry it.
	post(map[string]any{"userId": alice, "status": "idle", "deviceId": "laptop"})
	await(alice, false, "idle", meeting)
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

	// dave's clears itself at until: readers see null at once, though Redis holds it
	// until the aggregator folds dave again.
	await(dave, false, "idle", fmt.Sprintf(`{"emoji":"🥪","until":%q}`, daveUntil.Format(time.RFC3339Nano)))
	time.Sleep(time.Until(daveUntil))
	if v := read(dave, "", false); string(v.Data) != "null" {
		t.Fatalf("dave after until: %s, want null", v.Data)
	}
	if v := read(dave, harness.TestKeys.Operator, true); string(v.Data) != "null" {
		t.Fatalf("dave after until, operator view: %s, want null", v.Data)
	}
	store := statestore.New(stateRDB(t, harness.RedisAddr()), p.Env["PULSE_REDIS_PREFIX"])
	u, err := store.Get(context.Background(), dave)
	if err != nil || u == nil || u.Custom.IsZero() {
		t.Fatalf("dave's state before another fold: %+v, %v; want it to hold the expired custom status", u, err)
	}
	post(map[string]any{"userId": dave, "kind": "heartbeat"})
	harness.Eventually(t, 30*time.Second, func() string {
		u, err := store.Get(context.Background(), dave)
		if err != nil || u == nil || !u.Custom.IsZero() {
			return fmt.Sprintf("dave's state after a heartbeat past until: %+v, %v; want no custom status", u, err)
		}
		return ""
	})

	// {} clears.
	post(map[string]any{"userId": alice, "status": "online", "deviceId": "phone", "data": map[string]any{}})
	await(alice, true, "online", "null")

	// A present socket's status command sets it, and is refused naming the member.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
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
