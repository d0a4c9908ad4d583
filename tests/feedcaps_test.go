package tests

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/tests/harness"
)

// TestFeedCapsPerUserAndAddress: a user token holds at most
// PULSE_FEED_MAX_CONNECTIONS_PER_USER feed connections and one remote address at most
// PULSE_FEED_MAX_CONNECTIONS_PER_ADDRESS, whatever its credentials: the next is a 429
// naming the variable, before any upgrade.
func TestFeedCapsPerUserAndAddress(t *testing.T) {
	p := harness.NewTopics(t, 1)
	p.Env["PULSE_FEED_MAX_CONNECTIONS_PER_USER"] = "2"
	p.Env["PULSE_FEED_MAX_CONNECTIONS_PER_ADDRESS"] = "4"
	p.Start(t, "query")
	alice := p.Run + "-alice"
	sseURL := p.Svc["query"].URL + "/v1/watch/sse?userIds=" + alice
	token := userToken(t, alice, time.Now().Add(time.Hour), harness.TestKeys.Hs256)

	// open opens a stream with cred, retrying while the feed is not ready; it returns
	// the refusal's status and body instead when the stream is refused otherwise.
	open := func(cred string) (int, string) {
		t.Helper()
		var code int
		var body string
		harness.Eventually(t, 30*time.Second, func() string {
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, sseURL, nil)
			req.Header.Set("Authorization", "Bearer "+cred)
			res, err := harness.BareClient.Do(req)
			if err != nil {
				cancel()
				t.Fatalf("GET %s: %v", sseURL, err)
			}
			code = res.StatusCode
			if code == http.StatusOK {
				t.Cleanup(func() { cancel(); res.Body.Close() })
				body = ""
				return ""
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			cancel()
			body = string(b)
			if code == http.StatusServiceUnavailable && strings.Contains(body, "not available") {
				return "feed not ready: " + body
			}
			return ""
		})
		return code, body
	}
	for i := range 2 {
		if code, body := open(token); code != http.StatusOK {
			t.Fatalf("stream %d of alice's token: %d %s", i+1, code, body)
		}
	}
	if code, body := open(token); code != http.StatusTooManyRequests ||
		!strings.Contains(body, "user "+alice+" holds its most feed connections on this instance (PULSE_FEED_MAX_CONNECTIONS_PER_USER=2)") {
		t.Fatalf("3rd stream of alice's token: %d %s, want 429 naming PULSE_FEED_MAX_CONNECTIONS_PER_USER", code, body)
	}
	for _, key := range []string{harness.TestKeys.Reader, harness.TestKeys.Reader2} {
		if code, body := open(key); code != http.StatusOK {
			t.Fatalf("a key's stream: %d %s", code, body)
		}
	}
	if code, body := open(harness.TestKeys.Operator); code != http.StatusTooManyRequests ||
		!strings.Contains(body, "address 127.0.0.1 holds its most feed connections on this instance (PULSE_FEED_MAX_CONNECTIONS_PER_ADDRESS=4)") {
		t.Fatalf("5th stream from 127.0.0.1: %d %s, want 429 naming PULSE_FEED_MAX_CONNECTIONS_PER_ADDRESS", code, body)
	}
}
