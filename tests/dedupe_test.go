package tests

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/tests/harness"
)

// TestEventIDsAreScopedToTheirUser: two users whose clients chose the same eventId,
// in one partition, are both applied; a user's own repeat of an id is dropped.
func TestEventIDsAreScopedToTheirUser(t *testing.T) {
	p := harness.NewPipeline(t, 1, nil)
	alice, bob := p.Run+"-alice", p.Run+"-bob"
	post := func(events ...harness.WireEvent) {
		t.Helper()
		code, body := harness.PostJSON(t, p.Svc["ingest"].URL+"/v1/events", map[string]any{"events": events})
		if code != http.StatusAccepted {
			t.Fatalf("POST /v1/events = %d %s", code, body)
		}
	}
	post(harness.WireEvent{EventID: "shared-1", UserID: alice, Status: "online"}, harness.WireEvent{EventID: "shared-1", UserID: bob, Status: "idle"})
	p.WaitStatus(t, alice, "online")
	p.WaitStatus(t, bob, "idle")
	// Alice's client retries shared-1 with another body: a duplicate, dropped. Bob's
	// heartbeat after it, in the same partition, tells when it has been folded.
	marker := time.Now().Add(2 * time.Second).Truncate(time.Millisecond).UTC() // after every earlier event of bob
	post(harness.WireEvent{EventID: "shared-1", UserID: alice, Status: "offline"},
		harness.WireEvent{EventID: "marker", UserID: bob, Kind: "heartbeat", OccurredAt: &marker})
	harness.Eventually(t, 10*time.Second, func() string {
		code, body := harness.OnlineDo(t, http.MethodGet, p.Svc["query"].URL+"/v1/users/"+bob+"/status?view=operator", harness.TestKeys.Operator, nil)
		if code != http.StatusOK || !strings.Contains(string(body), `"lastSeen":"`+marker.Format(time.RFC3339Nano)+`"`) {
			return "bob's marker not folded yet: " + string(body)
		}
		return ""
	})
	if s := p.Status(t, alice); s != "online" {
		t.Fatalf("alice reads %s after a repeated id, want online", s)
	}
}
