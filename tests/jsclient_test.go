package tests

import (
	"context"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/tests/harness"
)

// The JavaScript client (clients/js) against a live ingest, aggregator and query of
// a private pipeline: its stack tests (clients/js/test/stack) post statuses as bob,
// watch him as alice, cut alice's connection while bob changes twice and check that
// the resume brings both changes exactly once, in order, read the refusals as the
// client's errors, and ride out 429s of a query with a tiny rate by their Retry-After. They get the services' URLs and two user tokens, each allowed
// to watch the other, in the variables they read; `make test-integration` installs
// the package's dependencies first (npm ci).
func TestJSClient(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "clients", "js"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err != nil {
		t.Fatalf("clients/js has no dependencies installed (make test-integration runs npm ci there): %v", err)
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatalf("npm is needed for the JavaScript client's tests: %v", err)
	}

	p := harness.NewTopics(t, 2)
	for _, name := range []string{"aggregator", "ingest", "query"} {
		p.Start(t, name)
	}
	// The feed answers 503 until it tails the log; the client would ride that out with
	// its backoff, but the tests' deadlines are for what they test.
	harness.Eventually(t, 60*time.Second, func() string {
		code, body := harness.Get(t, p.Svc["query"].URL+"/metrics")
		if code != http.StatusOK || !regexp.MustCompile(`(?m)^pulse_feed_ready 1$`).MatchString(body) {
			return "query's feed is not ready (pulse_feed_ready)"
		}
		return ""
	})
	// A second query whose user tokens may read once a second, in bursts of two, for
	// the client's 429 path: the other tests keep the default rates.
	limitedEnv := maps.Clone(p.Env)
	limitedEnv["PULSE_QUERY_USER_RATE"], limitedEnv["PULSE_QUERY_USER_BURST"] = "1", "2"
	limited := harness.StartService(t, "query", limitedEnv)
	alice, bob := "js-alice-"+p.Run, "js-bob-"+p.Run
	mint := func(user, friend string) string {
		t.Helper()
		tok, err := auth.MintUserToken(harness.TestKeys.Hs256, auth.UserToken{User: user, Watch: []string{friend}, TTL: time.Hour, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "run", "--silent", "test:stack")
	cmd.Dir = dir
	// Later entries win: the tests run here whatever the caller's environment says.
	cmd.Env = append(os.Environ(),
		"PULSE_STACK_TESTS=on",
		"PULSE_INGEST_URL="+p.Svc["ingest"].URL,
		"PULSE_QUERY_URL="+p.Svc["query"].URL,
		"PULSE_QUERY_URL_LIMITED="+limited.URL,
		"PULSE_USER_TOKEN_ALICE="+mint(alice, bob),
		"PULSE_USER_TOKEN_BOB="+mint(bob, alice),
		"NO_COLOR=1",
	)
	began := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(began).Round(100 * time.Millisecond)
	if err != nil {
		t.Fatalf("npm run test:stack failed after %v (%v):\n%s", took, err, harness.LastLines(string(out), 200))
	}
	// node --test closes with its counts: every test must have run and passed.
	counts := regexp.MustCompile(`(?m)^# (tests|pass|fail|skipped|cancelled) (\d+)$`).FindAllStringSubmatch(string(out), -1)
	got := map[string]string{}
	for _, c := range counts {
		got[c[1]] = c[2]
	}
	if got["tests"] == "" || got["tests"] == "0" || got["tests"] != got["pass"] || got["skipped"] != "0" {
		t.Fatalf("npm run test:stack: want every test run and passed, got %v:\n%s", got, harness.LastLines(string(out), 200))
	}
	results := regexp.MustCompile(`(?m)^(?:not )?ok \d+ - .*$|^# (?:stack|alice)[^\n]*$`).FindAllString(string(out), -1)
	t.Logf("npm run test:stack: %s of %s passed in %v:\n%s", got["pass"], got["tests"], took, strings.Join(results, "\n"))
}
