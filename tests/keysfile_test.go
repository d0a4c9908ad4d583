package tests

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/tests/harness"
)

// A keys file that disappears leaves no key valid (every request 401) and says so in
// the log and in pulse_auth_keys_file_ok and pulse_auth_keys_loaded; a file that does
// not parse keeps the previous keys and says so; the good file back restores them.
func TestKeysFileGoneFailsClosedAndBrokenKeepsKeys(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api-keys")
	good := auth.Line("gone-reader", auth.ScopeRead, harness.TestKeys.Reader) + "\n" +
		auth.Line("gone-producer", auth.ScopeWrite, harness.TestKeys.Producer) + "\n"
	if err := os.WriteFile(file, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	env := harness.NewTopics(t, 2).Env
	env[auth.KeysFileEnv] = file
	env["PULSE_API_KEYS_RELOAD"] = "200ms"
	query := harness.StartService(t, "query", env)
	count := func() int {
		code, _, _ := authDo(t, http.MethodGet, query.URL+"/v1/online/count", harness.TestKeys.Reader, "")
		return code
	}
	gauges := func(loaded, ok int) string {
		_, body := harness.Get(t, query.URL+"/metrics")
		want := []string{fmt.Sprintf("pulse_auth_keys_loaded %d", loaded), fmt.Sprintf("pulse_auth_keys_file_ok %d", ok)}
		for _, w := range want {
			if !strings.Contains(body, w+"\n") {
				return fmt.Sprintf("/metrics lacks %q: %s", w, strings.Join(grepLines(body, "pulse_auth_keys"), "; "))
			}
		}
		return ""
	}
	if code := count(); code != http.StatusOK {
		t.Fatalf("reader with the keys file = %d, want 200", code)
	}
	harness.Eventually(t, 5*time.Second, func() string { return gauges(2, 1) })

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 5*time.Second, func() string {
		if code := count(); code != http.StatusUnauthorized {
			return fmt.Sprintf("reader with the keys file gone = %d, want 401", code)
		}
		return gauges(0, 0)
	})
	if !strings.Contains(query.Out.String(), "API keys file unreadable; no key is valid") {
		t.Errorf("the log does not say the keys file is gone:\n%s", harness.LastLines(query.Out.String(), 10))
	}

	if err := os.WriteFile(file, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 5*time.Second, func() string {
		if code := count(); code != http.StatusOK {
			return fmt.Sprintf("reader with the keys file back = %d, want 200", code)
		}
		return gauges(2, 1)
	})

	if err := os.WriteFile(file, []byte("this is not a keys file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 5*time.Second, func() string {
		if !strings.Contains(query.Out.String(), "API keys file refused; keeping the previous keys") {
			return "the log does not say the broken file was refused"
		}
		return gauges(2, 0)
	})
	if code := count(); code != http.StatusOK {
		t.Errorf("reader with a broken keys file = %d, want 200 (previous keys kept)", code)
	}
}
