package tests

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/records"
	"github.com/pulse-presence/pulse/tests/harness"
)

// TestEventsNameTheirPrincipalAndRequestsAreLogged: every event ingest writes carries
// the name of the key that posted it in a Kafka header, and the access log (here every
// request, PULSE_ACCESS_LOG_EVERY=1) names the route template, that principal and the
// remote address, never the key itself.
func TestEventsNameTheirPrincipalAndRequestsAreLogged(t *testing.T) {
	p := harness.NewTopics(t, 1)
	p.Env["PULSE_ACCESS_LOG_EVERY"] = "1"
	p.Start(t, "ingest")
	user := p.Run + "-alice"
	code, body := harness.PostJSON(t, p.Svc["ingest"].URL+"/v1/events", map[string]any{"events": []harness.WireEvent{
		{UserID: user, Status: "online"}, {UserID: user, Kind: "heartbeat"},
	}})
	if code != http.StatusAccepted {
		t.Fatalf("POST /v1/events = %d %s", code, body)
	}
	var n int
	for _, recs := range harness.ReadTopic(t, p.Events) {
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
		t.Fatalf("%d records in %s, want 2", n, p.Events)
	}
	harness.Eventually(t, 5*time.Second, func() string {
		out := p.Svc["ingest"].Out.String()
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "msg=request") && strings.Contains(line, "route=/v1/events") {
				for _, want := range []string{"method=POST", "status=202", "principal=it-producer", "remote=127.0.0.1"} {
					if !strings.Contains(line, want) {
						t.Fatalf("access log line %q lacks %q", line, want)
					}
				}
				if strings.Contains(out, harness.TestKeys.Producer) {
					t.Fatal("the producer key is in ingest's output")
				}
				return ""
			}
		}
		return "no access log line of POST /v1/events yet"
	})
}
