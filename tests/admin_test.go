package tests

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/tests/harness"
)

// With PULSE_ADMIN_ADDR set, every service serves /metrics and Go's profiles only on
// its admin listener: the main port answers 404 for them, with or without credentials,
// and keeps the probes; the admin port answers without credentials.
func TestAdminListenerServesMetricsAlone(t *testing.T) {
	p := harness.NewTopics(t, 2)
	admin := map[string]string{}
	for _, name := range []string{"ingest", "aggregator", "history", "query", "notifier"} {
		admin[name] = fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
		p.Env["PULSE_ADMIN_ADDR"] = admin[name]
		p.Env["PULSE_PPROF"] = "true"
		p.Start(t, name)
	}
	for name, s := range p.Svc {
		for _, c := range []struct {
			client *http.Client
			url    string
			want   int
		}{
			{harness.BareClient, s.URL + "/metrics", http.StatusNotFound},
			{harness.KeyedClient, s.URL + "/metrics", http.StatusNotFound},
			{harness.BareClient, s.URL + "/debug/pprof/", http.StatusNotFound},
			{harness.KeyedClient, s.URL + "/debug/pprof/cmdline", http.StatusNotFound},
			{harness.BareClient, s.URL + "/healthz", http.StatusOK},
			{harness.BareClient, s.URL + "/readyz", http.StatusOK},
			{harness.BareClient, "http://" + admin[name] + "/debug/pprof/cmdline", http.StatusOK},
		} {
			if code, body := fetch(t, c.client, c.url); code != c.want {
				t.Errorf("%s: GET %s = %d, want %d: %.200s", name, c.url, code, c.want, body)
			}
		}
		code, body := fetch(t, harness.BareClient, "http://"+admin[name]+"/metrics")
		if code != http.StatusOK || !strings.Contains(body, "\npulse_") {
			t.Errorf("%s: admin /metrics = %d without pulse_ metrics: %.300s", name, code, body)
		}
	}
}

// fetch GETs url with c under a deadline: its status and body, or 0 and the error.
func fetch(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}
