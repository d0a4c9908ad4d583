package tests

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/tests/harness"
)

// TestFeedEndsWhenItsCredentialDoes: an open feed stream ends, with a
// credential_ended error (SSE) or close code 1008 (WebSocket), once its key is removed
// from the keys file (within PULSE_API_KEYS_RELOAD) or its user token expires.
func TestFeedEndsWhenItsCredentialDoes(t *testing.T) {
	p := harness.NewTopics(t, 1)
	keysFile := filepath.Join(t.TempDir(), "api-keys")
	key, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	writeKeys := func(lines ...string) {
		if err := os.WriteFile(keysFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	keep := auth.Line("it-keep", auth.ScopeRead, harness.TestKeys.Reader)
	writeKeys(keep, auth.Line("it-doomed", auth.ScopeRead, key))
	p.Env[auth.KeysFileEnv] = keysFile
	p.Env["PULSE_API_KEYS_RELOAD"] = "500ms"
	p.Env["PULSE_JWT_LEEWAY"] = "0s"
	p.Start(t, "query")
	alice := p.Run + "-alice"
	base := p.Svc["query"].URL

	// The key's SSE stream, then the key removed.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var res *http.Response
	harness.Eventually(t, 20*time.Second, func() string {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/watch/sse?userIds="+alice, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		r, err := harness.BareClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if r.StatusCode != http.StatusOK {
			r.Body.Close()
			return "feed not ready: " + r.Status
		}
		res = r
		return ""
	})
	defer res.Body.Close()
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	waitLine := func(want string, within time.Duration) string {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the stream ended without a line with %q", want)
				}
				if strings.Contains(l, want) {
					return l
				}
			case <-deadline:
				t.Fatalf("no line with %q within %v", want, within)
			}
		}
	}
	waitLine("event: snapshot", 10*time.Second)
	removed := time.Now()
	writeKeys(keep)
	if l := waitLine(`"code":"credential_ended"`, 10*time.Second); !strings.Contains(l, "data:") {
		t.Fatalf("the stream's last line: %q", l)
	}
	t.Logf("the stream ended %v after its key was removed", time.Since(removed).Round(time.Millisecond))
	select {
	case _, ok := <-lines:
		for ok {
			_, ok = <-lines
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream stayed open after its credential_ended error")
	}

	// A user token's WebSocket ends at the token's expiry.
	tok, err := auth.MintUserToken(harness.TestKeys.Hs256, auth.UserToken{User: alice, TTL: 3 * time.Second, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	conn, _, err := websocket.Dial(ctx, watchURL(base, "/v1/watch", map[string][]string{"userIds": {alice}}),
		&websocket.DialOptions{HTTPClient: harness.BareClient, HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	opened := time.Now()
	for {
		if _, _, err = conn.Read(ctx); err != nil {
			break
		}
	}
	if websocket.CloseStatus(err) != websocket.StatusPolicyViolation || !strings.Contains(err.Error(), "token expired") {
		t.Fatalf("the token's WebSocket ended with %v, want 1008 naming the expiry", err)
	}
	if d := time.Since(opened); d < 2*time.Second || d > 8*time.Second {
		t.Fatalf("the token's WebSocket ended %v after it opened, want about 3 s", d)
	}
}
