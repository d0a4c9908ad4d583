package httpserver

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulse-presence/pulse/internal/platform/config"
)

// With PULSE_ADMIN_ADDR, /metrics and the profiles answer only on the admin listener,
// the probes only on the main port, and both listeners stop with the server.
func TestAdminListenerTakesMetricsAndProfiles(t *testing.T) {
	cfg := ConfigFromEnv(config.NewEnv(config.MapLookup(map[string]string{
		"PULSE_ADMIN_ADDR": "127.0.0.1:0", "PULSE_PPROF": "true",
	})), "127.0.0.1:0")
	s := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	main, admin := "http://"+s.Addr().String(), "http://"+s.AdminAddr().String()
	for _, c := range []struct {
		url  string
		want int
	}{
		{main + "/metrics", http.StatusNotFound},
		{main + "/debug/pprof/", http.StatusNotFound},
		{main + "/debug/pprof/cmdline", http.StatusNotFound},
		{main + "/healthz", http.StatusOK},
		{admin + "/metrics", http.StatusOK},
		{admin + "/debug/pprof/cmdline", http.StatusOK},
		{admin + "/healthz", http.StatusNotFound},
		{admin + "/readyz", http.StatusNotFound},
	} {
		if got, body := status(t, c.url); got != c.want {
			t.Errorf("GET %s = %d, want %d (%s)", c.url, got, c.want, body)
		}
	}
	if _, body := status(t, admin+"/metrics"); !strings.Contains(body, "pulse_http_request_duration_seconds") {
		t.Errorf("admin /metrics lacks Pulse's request metrics:\n%.500s", body)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want a clean stop", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if _, err := (&http.Client{Timeout: 5 * time.Second}).Get(admin + "/metrics"); err == nil {
		t.Error("the admin listener still answers after the server stopped")
	}
}

func TestAdminAddrMustBeHostPort(t *testing.T) {
	env := config.NewEnv(config.MapLookup(map[string]string{"PULSE_ADMIN_ADDR": "9090"}))
	ConfigFromEnv(env, "127.0.0.1:0")
	if env.Err() == nil || !strings.Contains(env.Err().Error(), "PULSE_ADMIN_ADDR") {
		t.Fatalf("PULSE_ADMIN_ADDR=9090: %v, want an error naming it", env.Err())
	}
}

func status(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}
