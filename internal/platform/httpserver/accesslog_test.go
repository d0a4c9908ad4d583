package httpserver

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulse-presence/pulse/internal/platform/config"
)

// The access log logs one request in every PULSE_ACCESS_LOG_EVERY with the route
// template, the credential's name and the remote address, and never the credential,
// the query string or the ids in the path.
func TestAccessLogIsSampledAndHoldsNoSecret(t *testing.T) {
	var buf bytes.Buffer
	cfg := ConfigFromEnv(config.NewEnv(config.MapLookup(map[string]string{"PULSE_ACCESS_LOG_EVERY": "2"})), "127.0.0.1:0")
	s := New(cfg, slog.New(slog.NewTextHandler(&buf, nil)), prometheus.NewRegistry())
	s.Echo.GET("/status/:userId", func(c echo.Context) error {
		SetPrincipal(c, "dev-reader")
		return c.String(http.StatusOK, "ok")
	})
	for range 4 {
		req := httptest.NewRequest(http.MethodGet, "/status/alice?access_token=pulse_secret", nil)
		req.Header.Set("Authorization", "Bearer pulse_secret")
		req.RemoteAddr = "192.0.2.7:51000"
		s.Echo.ServeHTTP(httptest.NewRecorder(), req)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d access log lines of 4 requests, want 2 (one in 2):\n%s", len(lines), buf.String())
	}
	for _, l := range lines {
		for _, want := range []string{"msg=request", "route=/status/:userId", "method=GET", "status=200", "principal=dev-reader", "remote=192.0.2.7"} {
			if !strings.Contains(l, want) {
				t.Errorf("access log line %q lacks %q", l, want)
			}
		}
		for _, never := range []string{"pulse_secret", "alice", "access_token"} {
			if strings.Contains(l, never) {
				t.Errorf("access log line %q holds %q", l, never)
			}
		}
	}
}
