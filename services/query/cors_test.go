package main

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/pulse-presence/pulse/internal/api/openapi"
)

const corsOrigin = "http://127.0.0.1:18081"

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

// A page of an allowed origin may read: preflights of the reads, the feed's tickets
// and SSE are answered without a key, before the guard, and a refused read carries
// the origin and the headers the page may read. Another origin's preflight meets the
// guard and gets no CORS header.
func TestCORSOnQuery(t *testing.T) {
	srv := newTestServerWith(t, offlineStore(t), map[string]string{
		"PULSE_AUTH":         "on",
		"PULSE_CORS_ORIGINS": corsOrigin + ",https://chat.example.com",
	})
	serve := func(method, target string, header map[string]string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, target, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		srv.Echo.ServeHTTP(rec, req)
		return rec
	}
	for _, target := range []string{"/v1/users/alice/status", "/statuses", TicketsPath, "/v1/watch/sse"} {
		rec := serve(http.MethodOptions, target, map[string]string{
			"Origin":                         corsOrigin,
			"Access-Control-Request-Method":  "POST",
			"Access-Control-Request-Headers": "authorization",
		})
		if want := map[string][]string{
			"Access-Control-Allow-Origin":  {corsOrigin},
			"Access-Control-Allow-Methods": {"GET,POST"},
			"Access-Control-Allow-Headers": {"Authorization,Content-Type,Last-Event-ID"},
			"Access-Control-Max-Age":       {"600"},
			"Vary":                         {"Origin", "Access-Control-Request-Method", "Access-Control-Request-Headers"},
		}; rec.Code != http.StatusNoContent || !reflect.DeepEqual(corsOf(rec.Header()), want) {
			t.Errorf("preflight of %s = %d %q\nwant 204 %q", target, rec.Code, corsOf(rec.Header()), want)
		}
	}

	rec := serve(http.MethodGet, "/v1/users/alice/status", map[string]string{"Origin": "https://chat.example.com"})
	if want := map[string][]string{
		"Access-Control-Allow-Origin":   {"https://chat.example.com"},
		"Access-Control-Expose-Headers": {"Retry-After,WWW-Authenticate"},
		"Vary":                          {"Origin"},
	}; rec.Code != http.StatusUnauthorized || !reflect.DeepEqual(corsOf(rec.Header()), want) ||
		rec.Header().Get("WWW-Authenticate") != `Bearer realm="pulse"` {
		t.Errorf("read without a key = %d %q, WWW-Authenticate %q; want 401 %q", rec.Code, corsOf(rec.Header()), rec.Header().Get("WWW-Authenticate"), want)
	}

	rec = serve(http.MethodOptions, "/v1/users/alice/status", map[string]string{
		"Origin": "https://evil.example.com", "Access-Control-Request-Method": "GET",
	})
	if rec.Code != http.StatusUnauthorized || len(corsOf(rec.Header())) != 0 {
		t.Errorf("another origin's preflight = %d %q; want 401 without CORS headers", rec.Code, corsOf(rec.Header()))
	}
	rec = serve(http.MethodGet, "/v1/users/alice/status", map[string]string{"Origin": "https://evil.example.com"})
	if rec.Code != http.StatusUnauthorized || !reflect.DeepEqual(corsOf(rec.Header()), map[string][]string{"Vary": {"Origin"}}) {
		t.Errorf("another origin's read = %d %q; want 401 with only Vary: Origin", rec.Code, corsOf(rec.Header()))
	}
	// Preflights are answered by the middleware: no route is added for them.
	if err := openapi.CheckRoutes("query", srv.Echo.Routes()); err != nil {
		t.Error(err)
	}
}
