package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/api/openapi"
	"github.com/pulse-presence/pulse/tests/harness"
)

// checkExamples sends every operation of service's document built from the
// document's own examples alone — path and query parameters that have one, the
// request body's example — and wants one of the operation's 2xx answers (after
// retrying a 503 for up to a minute). Ingest's go
// first, so the users query's examples name exist. The change feed's streams are
// left out (tests/watch_test.go); a parameter with x-no-example (a signed cursor, an
// instant bound to the clock) is left out, as a client's first request would.
func checkExamples(t *testing.T, p *harness.Pipeline, service, key string) {
	t.Helper()
	raw, err := openapi.For(service)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	paths := doc["paths"].(map[string]any)
	names := make([]string, 0, len(paths))
	for path := range paths {
		names = append(names, path)
	}
	sort.Strings(names)
	sent := 0
	for _, path := range names {
		if path == "/v1/watch" || path == "/v1/watch/sse" {
			continue
		}
		for method, rawOp := range paths[path].(map[string]any) {
			op, ok := rawOp.(map[string]any)
			if !ok || !slices.Contains([]string{"get", "post"}, method) {
				continue
			}
			target, body := exampleRequest(t, doc, path, op)
			// A 503 says "not yet, retry" (query connects to Cassandra in the
			// background): a client following Retry-After tries again.
			var code, answer string
			for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Second) {
				code, answer = sendExample(t, strings.ToUpper(method), p.Svc[service].URL+target, body, key)
				if code != "503" || time.Now().After(deadline) {
					break
				}
			}
			sent++
			if _, ok := op["responses"].(map[string]any)[code]; !ok || code[0] != '2' {
				t.Errorf("%s %s with the document's examples = %s %s; want one of its 2xx answers",
					strings.ToUpper(method), target, code, harness.LastLines(answer, 5))
			}
		}
	}
	t.Logf("%s: %d operations sent with the document's examples", service, sent)
}

// exampleRequest is the path with its parameters' examples, and the body's example.
func exampleRequest(t *testing.T, doc map[string]any, path string, op map[string]any) (target string, body []byte) {
	t.Helper()
	q := url.Values{}
	params, _ := op["parameters"].([]any)
	for _, rp := range params {
		p := deref(doc, rp)
		ex, ok := p["example"]
		if !ok {
			continue
		}
		v := strings.Trim(string(mustJSON(t, ex)), `"`)
		switch p["in"] {
		case "path":
			path = strings.ReplaceAll(path, "{"+p["name"].(string)+"}", url.PathEscape(v))
		case "query":
			q.Set(p["name"].(string), v)
		}
	}
	target = path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	if rb, ok := op["requestBody"]; ok {
		media := deref(doc, rb)["content"].(map[string]any)["application/json"].(map[string]any)
		ex, ok := media["example"]
		if !ok {
			ex, ok = deref(doc, media["schema"])["example"]
		}
		if !ok {
			t.Fatalf("%s: the request body has no example", path)
		}
		body = mustJSON(t, ex)
	}
	return target, body
}

// deref follows local references ("#/components/parameters/At") to the object.
func deref(doc map[string]any, v any) map[string]any {
	m, _ := v.(map[string]any)
	for m != nil {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		var cur any = doc
		for _, tok := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			cur = cur.(map[string]any)[tok]
		}
		m, _ = cur.(map[string]any)
	}
	return m
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sendExample(t *testing.T, method, target string, body []byte, key string) (code, answer string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	} else {
		req.Body = nil
	}
	res, err := harness.BareClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	return res.Status[:3], string(b)
}
