package tests

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/pulse-presence/pulse/tests/harness"
)

// Ingest bounds a key's events per second by default, and a user's bucket that is in
// debt stays remembered however many other users post, so forgetting cannot refill it.
func TestIngestRateDefaultsAndUserDebtIsKept(t *testing.T) {
	p := harness.NewTopics(t, 2)
	p.Env["PULSE_INGEST_RATE_USERS"] = "10"
	p.Env["PULSE_INGEST_USER_RATE"] = "1"
	p.Env["PULSE_INGEST_USER_BURST"] = "5"
	p.Start(t, "ingest")
	s := p.Svc["ingest"]
	if m := regexp.MustCompile(`"?key_rate"?[=:](\d+)`).FindStringSubmatch(s.Out.String()); m == nil || m[1] == "0" {
		t.Errorf("ingest starts with key_rate %v, want a non-zero default:\n%s", m, harness.FirstLines(strings.Split(s.Out.String(), "\n"), 5))
	}
	post := func(user string, n int) (int, string) {
		evs := make([]map[string]any, n)
		for i := range evs {
			evs[i] = map[string]any{"userId": user, "kind": "heartbeat"}
		}
		code, _, body := authDo(t, http.MethodPost, s.URL+"/v1/events", harness.TestKeys.Producer, batchJSON(t, evs...))
		return code, body
	}
	debtor := p.Run + "-debtor"
	if code, body := post(debtor, 5); code != http.StatusAccepted {
		t.Fatalf("the debtor's burst = %d %s, want 202", code, body)
	}
	// Twenty other users, twice the users remembered, each post one event.
	for i := range 20 {
		if code, body := post(fmt.Sprintf("%s-other-%d", p.Run, i), 1); code != http.StatusAccepted {
			t.Fatalf("other user %d = %d %s", i, code, body)
		}
	}
	if code, body := post(debtor, 5); code != http.StatusTooManyRequests {
		t.Errorf("the debtor's second burst after others posted = %d %s, want 429 (its debt kept)", code, body)
	}
}
