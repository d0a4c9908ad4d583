package httpserver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/health"
)

func newTestServer(t *testing.T, checks ...health.Check) *Server {
	t.Helper()
	cfg := ConfigFromEnv(config.NewEnv(config.MapLookup(nil)), "127.0.0.1:0")
	return New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), checks...)
}

func do(t *testing.T, s *Server, method, path string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	s.Echo.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	res := rec.Result()
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

func TestReadyzReportsEachDependency(t *testing.T) {
	synctest.Test(t, testReadyzReportsEachDependency)
}

func testReadyzReportsEachDependency(t *testing.T) {
	redisUp := true
	probes := 0
	s := newTestServer(t,
		health.Check{Name: "kafka", Func: func(context.Context) error { return nil }},
		health.Check{Name: "redis", Func: func(context.Context) error {
			probes++
			if redisUp {
				return nil
			}
			return errors.New("dial tcp 127.0.0.1:16379: connection refused")
		}},
	)
	res, body := do(t, s, http.MethodGet, "/readyz")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("readyz = %d %s, want 200", res.StatusCode, body)
	}
	redisUp = false
	// Within a second of the last probe, /readyz answers from it, however many ask.
	for range 100 {
		if res, _ = do(t, s, http.MethodGet, "/readyz"); res.StatusCode != http.StatusOK {
			t.Fatalf("readyz within a second of a good probe = %d, want the cached 200", res.StatusCode)
		}
	}
	if probes != 1 {
		t.Fatalf("101 /readyz within a second probed Redis %d times, want 1", probes)
	}
	time.Sleep(readyInterval)
	res, body = do(t, s, http.MethodGet, "/readyz")
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("readyz with redis down = %d, want 503", res.StatusCode)
	}
	var rep health.Report
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Ready || len(rep.Checks) != 2 || !rep.Checks[0].OK || rep.Checks[1].OK ||
		rep.Checks[1].Error != "redis unavailable" {
		t.Fatalf("report = %+v", rep)
	}
	_, metrics := do(t, s, http.MethodGet, "/metrics")
	for _, want := range []string{`pulse_dependency_up{dependency="kafka"} 1`, `pulse_dependency_up{dependency="redis"} 0`,
		`pulse_http_request_duration_seconds_count{code="503",method="GET",route="/readyz"} 1`,
		`pulse_http_request_duration_seconds_count{code="200",method="GET",route="/readyz"} 101`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestErrorsHaveOneShape(t *testing.T) {
	s := newTestServer(t)
	s.Echo.GET("/bad", func(echo.Context) error {
		return BadRequest("status", `must be one of online, idle, offline, invisible`)
	})
	s.Echo.GET("/down", func(echo.Context) error {
		return Unavailable("kafka did not acknowledge in time", 1500*time.Millisecond)
	})
	s.Echo.GET("/boom", func(echo.Context) error { return errors.New("secret detail") })
	s.Echo.GET("/panic", func(echo.Context) error { panic("bug") })

	tests := []struct {
		path, body, retryAfter string
		status                 int
	}{
		{"/bad", `{"error":{"code":"invalid_request","message":"must be one of online, idle, offline, invisible","field":"status"}}`, "", 400},
		{"/down", `{"error":{"code":"unavailable","message":"kafka did not acknowledge in time"}}`, "2", 503},
		{"/boom", `{"error":{"code":"internal","message":"internal error"}}`, "", 500},
		{"/panic", `{"error":{"code":"internal","message":"internal error"}}`, "", 500},
		{"/nope", `{"error":{"code":"not_found","message":"Not Found"}}`, "", 404},
	}
	for _, tt := range tests {
		res, body := do(t, s, http.MethodGet, tt.path)
		if res.StatusCode != tt.status || strings.TrimSpace(body) != tt.body {
			t.Errorf("GET %s = %d %s, want %d %s", tt.path, res.StatusCode, body, tt.status, tt.body)
		}
		if got := res.Header.Get("Retry-After"); got != tt.retryAfter {
			t.Errorf("GET %s Retry-After = %q, want %q", tt.path, got, tt.retryAfter)
		}
	}
}

func TestRunShutsDownOnCancel(t *testing.T) {
	s := newTestServer(t)
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	res, err := http.Get("http://" + s.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("healthz = %d", res.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil after a clean shutdown", err)
	}
	if _, err := http.Get("http://" + s.Addr().String() + "/healthz"); err == nil {
		t.Fatal("server still answers after shutdown")
	}
}

// Invented methods share the label "other", and paths no route matches the label
// "unmatched": the series cannot grow with what clients send.
func TestMetricLabelsAreBounded(t *testing.T) {
	s := newTestServer(t)
	s.Echo.GET("/status/:userId", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	for _, r := range []struct{ method, path string }{
		{"PROBE1", "/status/alice"}, {"PROBE2", "/status/bob"}, {"BREW", "/nowhere/1"}, {"PROBE3", "/nowhere/2"},
		{http.MethodGet, "/status/carol"}, {http.MethodGet, "/nowhere/3"},
	} {
		do(t, s, r.method, r.path)
	}
	_, metrics := do(t, s, http.MethodGet, "/metrics")
	for _, want := range []string{
		`pulse_http_request_duration_seconds_count{code="405",method="other",route="/status/:userId"} 2`,
		`pulse_http_request_duration_seconds_count{code="404",method="other",route="unmatched"} 2`,
		`pulse_http_request_duration_seconds_count{code="200",method="GET",route="/status/:userId"} 1`,
		`pulse_http_request_duration_seconds_count{code="404",method="GET",route="unmatched"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	for _, bad := range []string{"PROBE", "BREW", "alice", "nowhere"} {
		if strings.Contains(metrics, bad) {
			t.Errorf("metrics hold %q, which a client chose", bad)
		}
	}
}

func TestMethodLabel(t *testing.T) {
	for in, want := range map[string]string{"GET": "GET", "HEAD": "HEAD", "POST": "POST", "PUT": "PUT", "PATCH": "PATCH",
		"DELETE": "DELETE", "OPTIONS": "OPTIONS", "get": "other", "PROBE1": "other", "CONNECT": "other", "TRACE": "other", "": "other"} {
		if got := MethodLabel(in); got != want {
			t.Errorf("MethodLabel(%q) = %q, want %q", in, got, want)
		}
	}
}

// Every answer, errors and unmatched paths included, is nosniff; plain HTTP carries no
// Strict-Transport-Security (it would be ignored, and the port does not speak TLS).
func TestAnswersAreNosniff(t *testing.T) {
	s := newTestServer(t)
	s.Echo.GET("/boom", func(echo.Context) error { return errors.New("boom") })
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/nowhere", "/boom"} {
		res, _ := do(t, s, http.MethodGet, path)
		if got := res.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s (%d): X-Content-Type-Options %q, want nosniff", path, res.StatusCode, got)
		}
		if got := res.Header.Get("Strict-Transport-Security"); got != "" {
			t.Errorf("%s over plain HTTP: Strict-Transport-Security %q, want none", path, got)
		}
	}
}
