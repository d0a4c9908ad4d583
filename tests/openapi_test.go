package tests

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/api/openapi"
	"github.com/pulse-presence/pulse/tests/harness"
)

// The running ingest and query binaries serve the embedded OpenAPI document with
// their own operations (openapi.For), and answer every one with something other than
// 404 or 405.
func TestOpenAPIDocumentIsServedAndTrue(t *testing.T) {
	env := harness.StackEnv()
	env["PULSE_REDIS_PREFIX"] = "it-" + harness.RandomID(t)
	for _, name := range []string{"ingest", "query"} {
		t.Run(name, func(t *testing.T) {
			s := harness.StartService(t, name, env)
			want, err := openapi.For(name)
			if err != nil {
				t.Fatal(err)
			}
			code, body := harness.Get(t, s.URL+"/openapi.json")
			if code != http.StatusOK || body != string(want) {
				t.Fatalf("GET /openapi.json = %d, %d bytes; want 200 and %s's part of the embedded document", code, len(body), name)
			}
			ops, err := openapi.Operations(name)
			if err != nil {
				t.Fatal(err)
			}
			for _, op := range ops {
				path := strings.ReplaceAll(op.Path, "{userId}", "openapi-probe")
				if code := openapiProbe(t, op.Method, s.URL+path); code == http.StatusNotFound || code == http.StatusMethodNotAllowed {
					t.Errorf("%s %s = %d: the document lists a route %s does not serve", op.Method, path, code, name)
				}
			}
		})
	}
}

// openapiProbe sends a minimal request and returns the status code; a stream that
// is still open at the deadline (the change feed) counts as 200.
func openapiProbe(t *testing.T, method, target string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var body io.Reader
	if method == http.MethodPost {
		body = bytes.NewReader([]byte(`{}`))
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := harness.KeyedClient.Do(req)
	if errors.Is(err, context.DeadlineExceeded) {
		return http.StatusOK
	}
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	res.Body.Close()
	return res.StatusCode
}
