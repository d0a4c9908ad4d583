package tests

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestEventIDsAreScopedToTheirUser: two users whose clients chose the same eventId,
// in one partition, are both applied; a user's own repeat of an id is dropped.
func TestEventIDsAreScopedToTheirUser(t *testing.T) {
	p := newPipeline(t, 1, nil)
	alice, bob := p.run+"-alice", p.run+"-bob"
	post := func(events ...wireEvent) {
		t.Helper()
		code, body := postJSON(t, p.svc["ingest"].url+"/v1/events", map[string]any{"events": events})
		if code != http.StatusAccepted {
			t.Fatalf("POST /v1/events = %d %s", code, body)
		}
	}
	post(wireEvent{EventID: "shared-1", UserID: alice, Status: "online"}, wireEvent{EventID: "shared-1", UserID: bob, Status: "idle"})
	p.waitStatus(t, alice, "online")
	p.waitStatus(t, bob, "idle")
	// Alice's client retries shared-1 with another body: a duplicate, dropped. Bob's
	// heartbeat after it, in the same partition, tells when it has been folded.
	marker := time.Now().Add(2 * time.Second).Truncate(time.Millisecond).UTC() // after every earlier event of bob
	post(wireEvent{EventID: "shared-1", UserID: alice, Status: "offline"},
		wireEvent{EventID: "marker", UserID: bob, Kind: "heartbeat", OccurredAt: &marker})
	eventually(t, 10*time.Second, func() string {
		code, body := onlineDo(t, http.MethodGet, p.svc["query"].url+"/v1/users/"+bob+"/status?view=operator", testKeys.operator, nil)
		if code != http.StatusOK || !strings.Contains(string(body), `"lastSeen":"`+marker.Format(time.RFC3339Nano)+`"`) {
			return "bob's marker not folded yet: " + string(body)
		}
		return ""
	})
	if s := p.status(t, alice); s != "online" {
		t.Fatalf("alice reads %s after a repeated id, want online", s)
	}
}
