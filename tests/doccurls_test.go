package tests

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
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

// TestEveryDocCurlWorks runs every curl command of README.md and docs/*.md against the
// services, so that no documented request drifts from the API: each must answer 2xx
// (a point-in-time read, a group's concurrency too, may also say, with 404 or 503,
// that history holds no final state of that instant on this fresh pipeline). The commands run as written, with
// the shell variables the docs define ($W, $R, $H, $U, the keys, $NEXT, a cursor of the
// listing) and the local stack's ports pointed at the test's services. Only the
// HTTPS example is left out: it needs a TLS-configured service of its own
// (TestTLS covers that path).
func TestEveryDocCurlWorks(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	type docCurl struct{ where, cmd string }
	var curls []docCurl
	skipped := 0
	for _, f := range files {
		for _, c := range docCurls(t, f) {
			if strings.Contains(c.cmd, "https://") {
				skipped++
				continue
			}
			curls = append(curls, docCurl{fmt.Sprintf("%s:%d", filepath.Base(f), c.line), c.cmd})
		}
	}
	if len(curls) < 20 || skipped != 1 {
		t.Fatalf("found %d curl commands and %d HTTPS ones: is the extraction right?", len(curls), skipped)
	}

	p := harness.NewPipeline(t, 2, nil)
	ingest, query := p.Svc["ingest"].URL, p.Svc["query"].URL
	// A few users online, so the listing has a second page and the examples' users
	// exist.
	now := time.Now().UTC()
	var evs []harness.WireEvent
	for _, u := range []string{"alice", "bob", "carol"} {
		evs = append(evs, harness.WireEvent{UserID: u, Kind: "status", Status: "online", DeviceID: "phone", OccurredAt: &now})
	}
	if code, body := harness.PostJSON(t, ingest+"/v1/events", map[string]any{"events": evs}); code != http.StatusAccepted {
		t.Fatalf("POST /v1/events = %d %s", code, body)
	}
	var next string
	harness.Eventually(t, 30*time.Second, func() string {
		code, body := harness.OnlineDo(t, http.MethodGet, query+"/v1/online?limit=1", harness.TestKeys.Reader, nil)
		var page struct {
			NextCursor *string `json:"nextCursor"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &page) != nil || page.NextCursor == nil {
			return fmt.Sprintf("no second page yet: %d %s", code, body)
		}
		next = *page.NextCursor
		return ""
	})

	// docs/client.md's $U: alice's user token, which may watch bob and carol.
	alice, err := auth.MintUserToken(harness.TestKeys.Hs256, auth.UserToken{User: "alice", Watch: []string{"bob", "carol"}, TTL: time.Hour, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(),
		"U=Authorization: Bearer "+alice,
		"PULSE_USER_TOKEN="+alice,
		"W=Authorization: Bearer "+harness.TestKeys.Producer,
		"R=Authorization: Bearer "+harness.TestKeys.Reader,
		"H=Authorization: Bearer "+harness.TestKeys.Operator,
		"PULSE_PRODUCER_KEY="+harness.TestKeys.Producer,
		"PULSE_READER_KEY="+harness.TestKeys.Reader,
		"PULSE_OPERATOR_KEY="+harness.TestKeys.Operator,
		"NEXT="+next,
	)
	hosts := strings.NewReplacer(
		"localhost:18080", strings.TrimPrefix(ingest, "http://"),
		"localhost:18081", strings.TrimPrefix(query, "http://"),
		"127.0.0.1:18080", strings.TrimPrefix(ingest, "http://"),
		"127.0.0.1:18081", strings.TrimPrefix(query, "http://"),
	)
	for _, c := range curls {
		// The answer's status goes to stdout; a stream (curl -N) is cut after 3 s.
		cmd := exec.Command("bash", "-c", hosts.Replace(c.cmd)+" -o /dev/null -w '%{http_code}' --max-time 3")
		cmd.Env = env
		out, err := cmd.Output()
		code := strings.TrimSpace(string(out))
		var exit *exec.ExitError
		stream := strings.Contains(c.cmd, "-N ") || strings.Contains(c.cmd, "-sN ")
		streamCut := stream && errors.As(err, &exit) && exit.ExitCode() == 28 // --max-time
		if err != nil && !streamCut {
			t.Errorf("%s: %s\n  failed: %v (status %q)", c.where, c.cmd, err, code)
			continue
		}
		// A group's concurrency is read from the point-in-time rows too.
		pointInTime := strings.Contains(c.cmd, "at=") || strings.Contains(c.cmd, "/v1/stats/concurrency?group=")
		ok := strings.HasPrefix(code, "2") || pointInTime && (code == "404" || code == "503")
		if !ok {
			t.Errorf("%s: %s\n  answered %s", c.where, c.cmd, code)
		}
	}
	t.Logf("%d documented curl commands answered as documented (%d HTTPS one left out)", len(curls), skipped)
}

// docCurlLine is one curl command of a Markdown file and its line, continuation lines
// joined and a trailing comment left out.
type docCurlLine struct {
	line int
	cmd  string
}

var inlineCurl = regexp.MustCompile("`(curl [^`]+)`")

// docCurls are the curl commands of a Markdown file: lines of its code blocks that
// start with curl (joined with the lines a trailing backslash continues them on), and
// inline code that does.
func docCurls(t *testing.T, path string) []docCurlLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []docCurlLine
	sc := bufio.NewScanner(f)
	n, fence := 0, false
	var cur *docCurlLine
	for sc.Scan() {
		n++
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if !fence {
			for _, m := range inlineCurl.FindAllStringSubmatch(line, -1) {
				out = append(out, docCurlLine{n, m[1]})
			}
			continue
		}
		text := strings.TrimSpace(line)
		switch {
		case cur != nil && openQuote(cur.cmd):
			cur.cmd += "\n" + line // a quoted body goes on over lines
		case cur != nil:
			cur.cmd += " " + strings.TrimSuffix(text, `\`)
		case strings.HasPrefix(text, "curl "):
			cur = &docCurlLine{n, strings.TrimSuffix(text, `\`)}
		}
		if cur != nil && !strings.HasSuffix(text, `\`) && !openQuote(cur.cmd) {
			cur.cmd = withoutComment(cur.cmd)
			out = append(out, *cur)
			cur = nil
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// withoutComment is cmd without a shell comment at its end: a # after a space, outside
// quotes.
func withoutComment(cmd string) string {
	var quote rune
	for i, r := range cmd {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && i > 0 && (cmd[i-1] == ' ' || cmd[i-1] == '\t'):
			return strings.TrimSpace(cmd[:i])
		}
	}
	return cmd
}

// openQuote reports whether cmd ends inside a quoted string.
func openQuote(cmd string) bool {
	var quote rune
	for _, r := range cmd {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		}
	}
	return quote != 0
}
