package tests

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/records"
)

// TestEventsNameTheirPrincipalAndRequestsAreLogged: every event ingest writes carries
// the name of the key that posted it in a Kafka header, and the access log (here every
// request, PULSE_ACCESS_LOG_EVERY=1) names the route template, that principal and the
// remote address, never the key itself.
func TestEventsNameTheirPrincipalAndRequestsAreLogged(t *testing.T) {
	p := newTopics(t, 1)
	p.env["PULSE_ACCESS_LOG_EVERY"] = "1"
	p.start(t, "ingest")
	user := p.run + "-alice"
	code, body := postJSON(t, p.svc["ingest"].url+"/v1/events", map[string]any{"events": []wireEvent{
		{UserID: user, Status: "online"}, {UserID: user, Kind: "heartbeat"},
	}})
	if code != http.StatusAccepted {
		t.Fatalf("POST /v1/events = %d %s", code, body)
	}
	var n int
	for _, recs := range readTopic(t, p.events) {
		for _, r := range recs {
			n++
			var principal []string
			for _, h := range r.Headers {
				if h.Key == records.PrincipalHeader {
					principal = append(principal, string(h.Value))
				}
			}
			if len(principal) != 1 || principal[0] != "it-producer" {
				t.Errorf("record at offset %d: %s headers %q, want one, it-producer", r.Offset, records.PrincipalHeader, principal)
			}
		}
	}
	if n != 2 {
		t.Fatalf("%d records in %s, want 2", n, p.events)
	}
	eventually(t, 5*time.Second, func() string {
		out := p.svc["ingest"].out.String()
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "msg=request") && strings.Contains(line, "route=/v1/events") {
				for _, want := range []string{"method=POST", "status=202", "principal=it-producer", "remote=127.0.0.1"} {
					if !strings.Contains(line, want) {
						t.Fatalf("access log line %q lacks %q", line, want)
					}
				}
				if strings.Contains(out, testKeys.producer) {
					t.Fatal("the producer key is in ingest's output")
				}
				return ""
			}
		}
		return "no access log line of POST /v1/events yet"
	})
}
