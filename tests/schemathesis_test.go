package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/tests/harness"
)

// schemathesisBudget is each service's share of the schema-based fuzzing: enough for
// every operation's examples, coverage and some fuzzing on two cores, bounded so
// `make test` stays fast. PULSE_SCHEMATHESIS_SECONDS gives a longer run.
const schemathesisBudget = "40"

// Schemathesis, a property-based fuzzer driven by the OpenAPI document, against the
// live ingest and query of a private pipeline: every request it makes from the
// document — valid, and deliberately invalid — must get an answer the document
// allows (status code, content type, body schema), and no 5xx but the documented 503
// with Retry-After (tests/schemathesis/pulse_checks.py says why). The change feed's
// two streaming routes are left out: a stream open until the deadline is not an
// answer the tool can judge (tests/watch_test.go covers them).
func TestOpenAPIFuzzedWithSchemathesis(t *testing.T) {
	st := os.Getenv("PULSE_SCHEMATHESIS")
	if st == "" {
		st = filepath.Join("..", "bin", "tools", "schemathesis", "bin", "schemathesis")
	}
	st, err := filepath.Abs(st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(st); err != nil {
		t.Fatalf("schemathesis not found at %s (make test-integration installs it into bin/tools; or set PULSE_SCHEMATHESIS): %v", st, err)
	}
	budget := os.Getenv("PULSE_SCHEMATHESIS_SECONDS")
	if budget == "" {
		budget = schemathesisBudget
	}
	// Query reads history's tables itself: the history service is not needed.
	p := harness.NewTopics(t, 2)
	for _, name := range []string{"ingest", "aggregator", "query"} {
		p.Start(t, name)
	}
	for _, run := range []struct {
		service, key string
		tags         []string
	}{
		{"ingest", harness.TestKeys.Producer, []string{"ingest"}},
		{"query", harness.TestKeys.Operator, []string{"query", "history", "operations"}},
	} {
		t.Run(run.service, func(t *testing.T) {
			url := p.Svc[run.service].URL
			args := []string{"run", url + "/openapi.json", "--url", url,
				"-H", "Authorization: Bearer " + run.key,
				"--checks", "no_unexplained_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
				"--exclude-path-regex", "^/v1/watch",
				// One worker: generating cases in two threads at once has crashed
				// schemathesis itself under CPython 3.11 ("SystemError: AST constructor
				// recursion depth mismatch" while hypothesis parses a lambda's source).
				"--max-time", budget, "--workers", "1", "--request-timeout", "10",
				"--seed", "20261123"}
			for _, tag := range run.tags {
				args = append(args, "--include-tag", tag)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, st, args...)
			hooks, err := filepath.Abs("schemathesis")
			if err != nil {
				t.Fatal(err)
			}
			cmd.Env = append(os.Environ(), "PYTHONPATH="+hooks, "SCHEMATHESIS_HOOKS=pulse_checks", "NO_COLOR=1")
			cmd.Dir = t.TempDir() // its .schemathesis cache stays out of the checkout
			out, err := cmd.CombinedOutput()
			summary := harness.LastLines(string(out), 25)
			if err != nil {
				t.Fatalf("schemathesis against %s found disagreements with the OpenAPI document or server errors (%v):\n%s", run.service, err, harness.LastLines(string(out), 200))
			}
			if strings.Contains(string(out), run.key) {
				t.Fatal("schemathesis's report shows the API key")
			}
			t.Logf("schemathesis against %s, %s s:\n%s", run.service, budget, summary)
		})
	}
}
