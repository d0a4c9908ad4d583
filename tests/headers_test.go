package tests

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulse-presence/pulse/tests/harness"
)

// Every answer of ingest and query carries X-Content-Type-Options: nosniff, and
// Strict-Transport-Security when the service itself speaks TLS.
func TestAnswersCarrySecurityHeaders(t *testing.T) {
	p := harness.NewTopics(t, 2)
	p.Start(t, "ingest")
	p.Start(t, "query")
	check := func(c *http.Client, method, url, key, body string, tls bool) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, url, rd)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if got := res.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s %s (%d): X-Content-Type-Options %q, want nosniff", method, url, res.StatusCode, got)
		}
		hsts := res.Header.Get("Strict-Transport-Security")
		if tls && !strings.HasPrefix(hsts, "max-age=") {
			t.Errorf("%s %s over TLS (%d): Strict-Transport-Security %q, want max-age=…", method, url, res.StatusCode, hsts)
		}
		if !tls && hsts != "" {
			t.Errorf("%s %s over plain HTTP: Strict-Transport-Security %q, want none", method, url, hsts)
		}
	}
	ing, q := p.Svc["ingest"].URL, p.Svc["query"].URL
	for _, tls := range []bool{false, true} {
		c := harness.BareClient
		if tls {
			dir := t.TempDir()
			certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
			ca := newTLSCA(t, "pulse headers CA")
			ca.writeServerPair(t, certFile, keyFile)
			env := map[string]string{"PULSE_TLS_CERT_FILE": certFile, "PULSE_TLS_KEY_FILE": keyFile}
			for k, v := range p.Env {
				env[k] = v
			}
			c = tlsClient(ca)
			ing = startTLSService(t, "ingest", env, c).URL
			q = startTLSService(t, "query", env, c).URL
		}
		check(c, http.MethodPost, ing+"/status", harness.TestKeys.Producer, `{"userId":"`+p.Run+`-h","status":"online"}`, tls)
		check(c, http.MethodPost, ing+"/v1/events", harness.TestKeys.Producer, `{"events":[{"userId":"u","status":"nope"}]}`, tls)
		check(c, http.MethodPost, ing+"/v1/events", "", `{}`, tls)
		check(c, http.MethodGet, ing+"/openapi.json", "", "", tls)
		check(c, http.MethodGet, q+"/status/"+p.Run+"-h", harness.TestKeys.Reader, "", tls)
		check(c, http.MethodGet, q+"/v1/online/count", harness.TestKeys.Reader, "", tls)
		check(c, http.MethodGet, q+"/v1/online/count", "", "", tls)
		check(c, http.MethodGet, q+"/nowhere", "", "", tls)
		check(c, http.MethodGet, q+"/readyz", "", "", tls)
	}
}
