package httpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulse-presence/pulse/internal/platform/config"
)

// logLines decodes the JSON lines a slog.JSONHandler wrote.
func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := json.NewDecoder(buf)
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("decoding log line: %v", err)
		}
		out = append(out, m)
	}
	return out
}

func TestFailedRequestsAreLoggedThrottled(t *testing.T) {
	var buf bytes.Buffer
	cfg := ConfigFromEnv(config.NewEnv(config.MapLookup(nil)), "127.0.0.1:0")
	s := New(cfg, slog.New(slog.NewJSONHandler(&buf, nil)), prometheus.NewRegistry())
	s.Echo.GET("/down", func(echo.Context) error {
		return errors.Join(Unavailable("the store is down", time.Second), errors.New("dial tcp: connection refused"))
	})
	s.Echo.GET("/bad", func(echo.Context) error { return BadRequest("x", "is wrong") })

	// 4xx answers are the client's to fix and never logged.
	for range 10 {
		if res, _ := do(t, s, http.MethodGet, "/bad"); res.StatusCode != http.StatusBadRequest {
			t.Fatalf("GET /bad: %d", res.StatusCode)
		}
	}
	const burst = 100
	for range burst {
		if res, _ := do(t, s, http.MethodGet, "/down"); res.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("GET /down: %d", res.StatusCode)
		}
	}
	lines := logLines(t, &buf)
	if len(lines) != failureLogFirst {
		t.Fatalf("%d failures in a burst wrote %d lines, want the first %d", burst, len(lines), failureLogFirst)
	}
	for _, l := range lines {
		if l["msg"] != "request failed" || l["route"] != "/down" || l["method"] != "GET" ||
			l["err"] != "503 unavailable: the store is down\ndial tcp: connection refused" || l["failures_since_last_line"] != nil {
			t.Fatalf("line %v: want the failure with its cause, standing for itself alone", l)
		}
	}

	// After the interval, the next failure's line counts every one not logged.
	time.Sleep(failureLogInterval + 100*time.Millisecond)
	do(t, s, http.MethodGet, "/down")
	lines = logLines(t, &buf)
	if len(lines) != 1 {
		t.Fatalf("after the interval: %d lines, want 1", len(lines))
	}
	if got, want := lines[0]["failures_since_last_line"], float64(burst-failureLogFirst+1); got != want {
		t.Fatalf("failures_since_last_line = %v, want %v", got, want)
	}
}
