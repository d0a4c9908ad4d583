package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/api/openapi"
)

const (
	corsOrigin = "http://127.0.0.1:18081"
	corsKey    = "pulse_cors-test-producer-key"
)

// corsHarness is ingest with authentication on (one write key, corsKey) and
// PULSE_CORS_ORIGINS=corsOrigin.
func corsHarness(t *testing.T) *harness {
	t.Helper()
	keys := filepath.Join(t.TempDir(), "api-keys")
	if err := os.WriteFile(keys, []byte(auth.Line("producer", auth.ScopeWrite, corsKey)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return newHarness(t, map[string]string{
		"PULSE_AUTH":          "on",
		"PULSE_API_KEYS_FILE": keys,
		"PULSE_CORS_ORIGINS":  corsOrigin,
	})
}

// corsOf is the Access-Control-* headers and Vary of h.
func corsOf(h http.Header) map[string][]string {
	out := map[string][]string{}
	for k, v := range h {
		if strings.HasPrefix(k, "Access-Control-") || k == "Vary" {
			out[k] = v
		}
	}
	return out
}

// A page of an allowed origin may post: its preflight is answered without a key, and
// the post's answer, accepted or refused, carries its origin and the headers it may
// read. Another origin's preflight meets the guard and gets no CORS header.
func TestCORSOnIngest(t *testing.T) {
	hs := corsHarness(t)
	preflight := httptest.NewRequest(http.MethodOptions, "/v1/events", nil)
	preflight.Header.Set("Origin", corsOrigin)
	preflight.Header.Set("Access-Control-Request-Method", "POST")
	preflight.Header.Set("Access-Control-Request-Headers", "authorization,content-type")
	res := hs.do(preflight, "")
	if want := map[string][]string{
		"Access-Control-Allow-Origin":  {corsOrigin},
		"Access-Control-Allow-Methods": {"GET,POST"},
		"Access-Control-Allow-Headers": {"Authorization,Content-Type,Last-Event-ID"},
		"Access-Control-Max-Age":       {"600"},
		"Vary":                         {"Origin", "Access-Control-Request-Method", "Access-Control-Request-Headers"},
	}; res.status != http.StatusNoContent || !reflect.DeepEqual(corsOf(res.header), want) {
		t.Errorf("preflight = %d %q\nwant 204 %q", res.status, corsOf(res.header), want)
	}

	simple := map[string][]string{
		"Access-Control-Allow-Origin":   {corsOrigin},
		"Access-Control-Expose-Headers": {"Retry-After,WWW-Authenticate"},
		"Vary":                          {"Origin"},
	}
	post := func(key string) response {
		req := httptest.NewRequest(http.MethodPost, "/v1/heartbeat", strings.NewReader(`{"userId":"alice","eventId":"hb-cors"}`))
		req.Header.Set("Origin", corsOrigin)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		return hs.do(req, "application/json")
	}
	if res := post(""); res.status != http.StatusUnauthorized || !reflect.DeepEqual(corsOf(res.header), simple) ||
		res.header.Get("WWW-Authenticate") != `Bearer realm="pulse"` {
		t.Errorf("post without a key = %d %q, WWW-Authenticate %q; want 401 %q", res.status, corsOf(res.header), res.header.Get("WWW-Authenticate"), simple)
	}
	if res := post(corsKey); res.status != http.StatusAccepted || !reflect.DeepEqual(corsOf(res.header), simple) {
		t.Errorf("post with a key = %d %s %q; want 202 %q", res.status, res.body, corsOf(res.header), simple)
	}

	other := httptest.NewRequest(http.MethodOptions, "/v1/events", nil)
	other.Header.Set("Origin", "https://evil.example.com")
	other.Header.Set("Access-Control-Request-Method", "POST")
	if res := hs.do(other, ""); res.status != http.StatusUnauthorized || len(corsOf(res.header)) != 0 {
		t.Errorf("another origin's preflight = %d %q; want 401 without CORS headers", res.status, corsOf(res.header))
	}
	if n := hs.endOffset(); n != 1 {
		t.Errorf("%d records produced, want 1 (the keyed post)", n)
	}
	// Preflights are answered by the middleware: no route is added for them.
	if err := openapi.CheckRoutes("ingest", hs.srv.Echo.Routes()); err != nil {
		t.Error(err)
	}
}
