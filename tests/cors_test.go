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

// A page of an origin listed in PULSE_CORS_ORIGINS can call ingest and query from a
// browser: its preflight is answered without a key, its requests carry
// Access-Control-Allow-Origin; a page of any other origin gets no CORS header, and the
// preflight meets the guard like any request without a key.
func TestCORSForConfiguredOrigins(t *testing.T) {
	const allowed, other = "http://chat.test:8000", "http://evil.test"
	p := harness.NewTopics(t, 1)
	p.Env["PULSE_CORS_ORIGINS"] = "https://app.test," + allowed
	p.Start(t, "ingest")
	p.Start(t, "query")
	ing, q := p.Svc["ingest"].URL, p.Svc["query"].URL

	do := func(method, url, origin, key, body string, extra map[string]string) *http.Response {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, url, rd)
		req.Header.Set("Origin", origin)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range extra {
			req.Header.Set(k, v)
		}
		res, err := harness.BareClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	preflight := map[string]string{
		"Access-Control-Request-Method":  "POST",
		"Access-Control-Request-Headers": "authorization,content-type",
	}
	for _, base := range []string{ing + "/v1/events", q + "/statuses"} {
		res := do(http.MethodOptions, base, allowed, "", "", preflight)
		if res.StatusCode != http.StatusNoContent {
			t.Errorf("preflight of %s from %s: %d, want 204", base, allowed, res.StatusCode)
		}
		for h, want := range map[string]string{
			"Access-Control-Allow-Origin":  allowed,
			"Access-Control-Allow-Methods": "GET,POST",
			"Access-Control-Allow-Headers": "Authorization,Content-Type,Last-Event-ID",
			"Access-Control-Max-Age":       "600",
		} {
			if got := res.Header.Get(h); got != want {
				t.Errorf("preflight of %s: %s = %q, want %q", base, h, got, want)
			}
		}
		res = do(http.MethodOptions, base, other, "", "", preflight)
		if res.StatusCode != http.StatusUnauthorized || res.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("preflight of %s from %s: %d with Access-Control-Allow-Origin %q, want 401 and none",
				base, other, res.StatusCode, res.Header.Get("Access-Control-Allow-Origin"))
		}
	}

	user := p.Run + "-cors"
	res := do(http.MethodPost, ing+"/v1/events", allowed, harness.TestKeys.Producer,
		`{"events":[{"userId":"`+user+`","status":"online"}]}`, nil)
	if res.StatusCode != http.StatusAccepted || res.Header.Get("Access-Control-Allow-Origin") != allowed ||
		res.Header.Get("Access-Control-Expose-Headers") != "Retry-After,WWW-Authenticate" {
		t.Errorf("POST /v1/events from %s: %d, Allow-Origin %q, Expose-Headers %q; want 202, %s, Retry-After,WWW-Authenticate",
			allowed, res.StatusCode, res.Header.Get("Access-Control-Allow-Origin"), res.Header.Get("Access-Control-Expose-Headers"), allowed)
	}
	res = do(http.MethodGet, q+"/status/"+user, other, harness.TestKeys.Reader, "", nil)
	if res.StatusCode != http.StatusOK || res.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("GET /status from %s: %d with Access-Control-Allow-Origin %q, want 200 and none",
			other, res.StatusCode, res.Header.Get("Access-Control-Allow-Origin"))
	}
	// An error answer is readable by the page too: a 401 says why.
	res = do(http.MethodGet, q+"/v1/online/count", allowed, "", "", nil)
	if res.StatusCode != http.StatusUnauthorized || res.Header.Get("Access-Control-Allow-Origin") != allowed {
		t.Errorf("GET /v1/online/count without a key from %s: %d, Allow-Origin %q; want 401, %s",
			allowed, res.StatusCode, res.Header.Get("Access-Control-Allow-Origin"), allowed)
	}
	// The SSE stream, which also applies PULSE_FEED_ORIGINS, names the origin once.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, q+"/v1/watch/sse?userIds="+user, nil)
	req.Header.Set("Origin", allowed)
	req.Header.Set("Authorization", "Bearer "+harness.TestKeys.Reader)
	sse, err := harness.BareClient.Do(req)
	if err != nil {
		t.Fatalf("GET /v1/watch/sse: %v", err)
	}
	defer sse.Body.Close()
	if got := sse.Header.Values("Access-Control-Allow-Origin"); sse.StatusCode != http.StatusOK || len(got) != 1 || got[0] != allowed {
		t.Errorf("GET /v1/watch/sse from %s: %d, Access-Control-Allow-Origin %q; want 200 and [%s]", allowed, sse.StatusCode, got, allowed)
	}
}
