package httpserver

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulse-presence/pulse/internal/platform/config"
)

const (
	chatOrigin = "https://chat.example.com"
	demoOrigin = "http://127.0.0.1:18081"
)

// corsServer is a server with PULSE_CORS_ORIGINS=origins and, as the services have, a
// guard added after New that refuses requests without Authorization: Bearer k. guarded
// counts the requests the guard saw.
func corsServer(t *testing.T, origins string) (s *Server, guarded *int) {
	t.Helper()
	env := config.NewEnv(config.MapLookup(map[string]string{CORSOriginsEnv: origins}))
	cfg := ConfigFromEnv(env, "127.0.0.1:0")
	env.Load(CORSVars(&cfg.CORS)...)
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	s = New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	guarded = new(int)
	s.Echo.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			*guarded++
			if c.Request().Header.Get(echo.HeaderAuthorization) != "Bearer k" {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="pulse"`)
				return &Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "missing credentials"}
			}
			return next(c)
		}
	})
	ok := func(c echo.Context) error { return c.String(http.StatusOK, "ok") }
	s.Echo.GET("/v1/users/:userId/status", ok)
	s.Echo.POST("/v1/events", ok)
	return s, guarded
}

func serve(s *Server, method, target string, header map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	s.Echo.ServeHTTP(rec, req)
	return rec
}

// corsHeaders are the Access-Control-* headers of h and its Vary, for exact comparison.
func corsHeaders(h http.Header) map[string][]string {
	out := map[string][]string{}
	for k, v := range h {
		if strings.HasPrefix(k, "Access-Control-") || k == "Vary" {
			out[k] = v
		}
	}
	return out
}

func checkCORS(t *testing.T, what string, rec *httptest.ResponseRecorder, status int, want map[string][]string) {
	t.Helper()
	if rec.Code != status {
		t.Errorf("%s: status %d, want %d (%s)", what, rec.Code, status, rec.Body)
	}
	if got := corsHeaders(rec.Header()); !reflect.DeepEqual(got, want) {
		t.Errorf("%s: CORS headers\n got %q\nwant %q", what, got, want)
	}
}

// An allowed origin's request is answered with its origin, Vary: Origin and the
// headers clients must read; its errors too (a 401 carries WWW-Authenticate, which
// the page may read). No Access-Control-Allow-Credentials: Pulse uses no cookies.
func TestCORSAllowedOriginGetsItsOrigin(t *testing.T) {
	s, _ := corsServer(t, chatOrigin+", "+demoOrigin)
	want := map[string][]string{
		"Access-Control-Allow-Origin":   {chatOrigin},
		"Access-Control-Expose-Headers": {"Retry-After,WWW-Authenticate"},
		"Vary":                          {"Origin"},
	}
	rec := serve(s, http.MethodGet, "/v1/users/alice/status", map[string]string{"Origin": chatOrigin, "Authorization": "Bearer k"})
	checkCORS(t, "GET with a key", rec, http.StatusOK, want)

	rec = serve(s, http.MethodGet, "/v1/users/alice/status", map[string]string{"Origin": chatOrigin})
	checkCORS(t, "GET without a key", rec, http.StatusUnauthorized, want)
	if got := rec.Header().Get(echo.HeaderWWWAuthenticate); got != `Bearer realm="pulse"` {
		t.Errorf("GET without a key: WWW-Authenticate %q", got)
	}

	rec = serve(s, http.MethodPost, "/v1/events", map[string]string{"Origin": demoOrigin, "Authorization": "Bearer k"})
	want["Access-Control-Allow-Origin"] = []string{demoOrigin}
	checkCORS(t, "POST from the second origin", rec, http.StatusOK, want)
}

// Any other origin, however close to an allowed one, gets no CORS header, and the
// request is served as without CORS; Vary: Origin still tells caches the answer
// depends on it.
func TestCORSOtherOriginsGetNoCORSHeaders(t *testing.T) {
	s, _ := corsServer(t, chatOrigin)
	for _, origin := range []string{
		"https://evil.example.com",
		"https://chat.example.com.evil.com",
		"https://evilchat.example.com",
		"https://sub.chat.example.com",
		"http://chat.example.com",
		"https://chat.example.com:443",
		"https://chat.example.com:8443",
		"HTTPS://CHAT.EXAMPLE.COM",
		"https://chat.example.com/",
		"null",
	} {
		rec := serve(s, http.MethodGet, "/v1/users/alice/status", map[string]string{"Origin": origin, "Authorization": "Bearer k"})
		checkCORS(t, "Origin "+origin, rec, http.StatusOK, map[string][]string{"Vary": {"Origin"}})
	}
	rec := serve(s, http.MethodGet, "/v1/users/alice/status", map[string]string{"Authorization": "Bearer k"})
	checkCORS(t, "no Origin", rec, http.StatusOK, map[string][]string{"Vary": {"Origin"}})
}

// A preflight from an allowed origin is answered 204 before the guard, without a key:
// the methods the routes use, the request headers clients send, and how long to keep
// the answer.
func TestCORSPreflightFromAllowedOriginNeedsNoKey(t *testing.T) {
	s, guarded := corsServer(t, chatOrigin)
	for _, target := range []string{"/v1/users/alice/status", "/v1/events"} {
		rec := serve(s, http.MethodOptions, target, map[string]string{
			"Origin":                         chatOrigin,
			"Access-Control-Request-Method":  "POST",
			"Access-Control-Request-Headers": "authorization,content-type",
		})
		checkCORS(t, "preflight of "+target, rec, http.StatusNoContent, map[string][]string{
			"Access-Control-Allow-Origin":  {chatOrigin},
			"Access-Control-Allow-Methods": {"GET,POST"},
			"Access-Control-Allow-Headers": {"Authorization,Content-Type,Last-Event-ID"},
			"Access-Control-Max-Age":       {"600"},
			"Vary":                         {"Origin", "Access-Control-Request-Method", "Access-Control-Request-Headers"},
		})
		if rec.Body.Len() != 0 {
			t.Errorf("preflight of %s: body %q", target, rec.Body)
		}
	}
	if *guarded != 0 {
		t.Errorf("the guard saw %d preflights, want none", *guarded)
	}
}

// A preflight from another origin, or an OPTIONS that is no preflight, is handled as
// without CORS: here the guard refuses it, with no CORS header, so the browser blocks
// the request it was asking for.
func TestCORSOtherPreflightsMeetTheGuard(t *testing.T) {
	s, guarded := corsServer(t, chatOrigin)
	for what, header := range map[string]map[string]string{
		"preflight from another origin": {"Origin": "https://evil.example.com", "Access-Control-Request-Method": "GET"},
		"preflight without Origin":      {"Access-Control-Request-Method": "GET"},
		"OPTIONS without a method":      {"Origin": chatOrigin},
	} {
		rec := serve(s, http.MethodOptions, "/v1/users/alice/status", header)
		checkCORS(t, what, rec, http.StatusUnauthorized, map[string][]string{})
	}
	if *guarded != 3 {
		t.Errorf("the guard saw %d requests, want 3", *guarded)
	}
}

// Without PULSE_CORS_ORIGINS no CORS header is sent, not even Vary, and preflights
// meet the guard.
func TestCORSOffByDefault(t *testing.T) {
	s, _ := corsServer(t, "")
	rec := serve(s, http.MethodGet, "/v1/users/alice/status", map[string]string{"Origin": chatOrigin, "Authorization": "Bearer k"})
	checkCORS(t, "GET", rec, http.StatusOK, map[string][]string{})
	rec = serve(s, http.MethodOptions, "/v1/users/alice/status", map[string]string{"Origin": chatOrigin, "Access-Control-Request-Method": "GET"})
	checkCORS(t, "preflight", rec, http.StatusUnauthorized, map[string][]string{})
}

// A WebSocket handshake keeps to PULSE_FEED_ORIGINS: CORS leaves it alone.
func TestCORSLeavesWebSocketHandshakes(t *testing.T) {
	s, _ := corsServer(t, chatOrigin)
	rec := serve(s, http.MethodGet, "/v1/users/alice/status", map[string]string{
		"Origin": chatOrigin, "Authorization": "Bearer k", "Connection": "Upgrade", "Upgrade": "websocket",
	})
	checkCORS(t, "handshake", rec, http.StatusOK, map[string][]string{})
}

// PULSE_CORS_ORIGINS takes exact origins only, and says why it refuses one.
func TestCORSOriginsAreChecked(t *testing.T) {
	for _, ok := range []string{
		"https://chat.example.com",
		"http://127.0.0.1:18081",
		"http://localhost:3000",
		"https://[::1]:8443",
		"https://xn--bcher-kva.example",
		"https://a.example,https://b.example",
	} {
		var c CORSConfig
		env := config.NewEnv(config.MapLookup(map[string]string{CORSOriginsEnv: ok}))
		env.Load(CORSVars(&c)...)
		if err := env.Err(); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for value, want := range map[string]string{
		"*":                               `PULSE_CORS_ORIGINS: "*": a wildcard lets every site's pages call the API; list each origin, such as https://chat.example.com`,
		"https://*.example.com":           `PULSE_CORS_ORIGINS: "https://*.example.com": wildcards are not supported: list each origin`,
		"null":                            `PULSE_CORS_ORIGINS: "null": null is the origin of sandboxed and file: pages, which any site can make; list real origins`,
		"https://chat.example.com/":       `PULSE_CORS_ORIGINS: "https://chat.example.com/": an origin has no trailing slash (browsers send none); write https://chat.example.com`,
		"https://chat.example.com/app":    `PULSE_CORS_ORIGINS: "https://chat.example.com/app": a path is not part of an origin; write https://chat.example.com`,
		"https://chat.example.com?x=1":    `PULSE_CORS_ORIGINS: "https://chat.example.com?x=1": a query is not part of an origin; write https://chat.example.com`,
		"https://chat.example.com#top":    `PULSE_CORS_ORIGINS: "https://chat.example.com#top": a fragment is not part of an origin; write https://chat.example.com`,
		"ftp://files.example.com":         `PULSE_CORS_ORIGINS: "ftp://files.example.com": the scheme must be http or https, the only ones a page calling the API can have`,
		"chat.example.com":                `PULSE_CORS_ORIGINS: "chat.example.com": the scheme must be http or https, the only ones a page calling the API can have`,
		"https://":                        `PULSE_CORS_ORIGINS: "https://": no host: want scheme://host[:port], such as https://chat.example.com`,
		"https://user@chat.example.com":   `PULSE_CORS_ORIGINS: "https://user@chat.example.com": user information is not part of an origin`,
		"https://Chat.Example.com":        `PULSE_CORS_ORIGINS: "https://Chat.Example.com": browsers send the scheme and host in lower case; write https://chat.example.com`,
		"https://chat.example.com:443":    `PULSE_CORS_ORIGINS: "https://chat.example.com:443": browsers leave out the scheme's default port; write https://chat.example.com`,
		"http://127.0.0.1:80":             `PULSE_CORS_ORIGINS: "http://127.0.0.1:80": browsers leave out the scheme's default port; write http://127.0.0.1`,
		"http://127.0.0.1:0":              `PULSE_CORS_ORIGINS: "http://127.0.0.1:0": the port must be 1..65535`,
		"https://bücher.example":          `PULSE_CORS_ORIGINS: "https://bücher.example": browsers send an international domain name in its xn-- (punycode) form`,
		"https://a.example,https://b/x/,": `PULSE_CORS_ORIGINS: "https://b/x/": a path is not part of an origin; write https://b`,
	} {
		var c CORSConfig
		env := config.NewEnv(config.MapLookup(map[string]string{CORSOriginsEnv: value}))
		env.Load(CORSVars(&c)...)
		if err := env.Err(); err == nil || err.Error() != want {
			t.Errorf("%s:\n got %v\nwant %s", value, err, want)
		}
	}
}
