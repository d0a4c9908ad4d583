package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/platform/cursor"
	"github.com/pulse-presence/pulse/services/query/feed"
	"github.com/pulse-presence/pulse/services/query/online"
	"github.com/pulse-presence/pulse/tests/harness"
)

// TestCursorsAreSigned: every cursor query hands out (the listing's, the feed's) is
// signed with PULSE_CURSOR_SECRET, and query takes back only those: a cursor made up,
// edited, stripped of its tag or signed with a retired secret is a 400 naming the
// cursor, and nothing is read for it. During a rotation (PULSE_CURSOR_SECRET new,
// PULSE_CURSOR_SECRET_PREVIOUS old) the old secret's cursors still work.
func TestCursorsAreSigned(t *testing.T) {
	const (
		oldSecret = "the secret before the rotation, 32 bytes or more"
		newSecret = "the secret after the rotation, also 32 bytes long"
	)
	p := harness.NewTopics(t, 2)
	p.Env["PULSE_CURSOR_SECRET"] = oldSecret
	for _, name := range []string{"aggregator", "ingest", "query"} {
		p.Start(t, name)
	}
	users := make([]string, 6)
	var evs []harness.WireEvent
	now := time.Now().UTC()
	for i := range users {
		users[i] = fmt.Sprintf("cur-%s-%d", p.Run, i)
		evs = append(evs, harness.WireEvent{UserID: users[i], Kind: "status", Status: "online", DeviceID: "phone", OccurredAt: &now})
	}
	if code, body := harness.PostJSON(t, p.Svc["ingest"].URL+"/v1/events", map[string]any{"events": evs}); code != http.StatusAccepted {
		t.Fatalf("POST /v1/events = %d %s", code, body)
	}
	q := func() string { return p.Svc["query"].URL }
	harness.Eventually(t, 30*time.Second, func() string {
		if got, _ := onlineWalk(t, q(), "limit=1000", onlineToken, nil); len(got) != len(users) {
			return fmt.Sprintf("%d users listed, want %d", len(got), len(users))
		}
		return ""
	})

	// The first page's cursor, as query signed it.
	page := func(c string) (int, string) {
		code, body := harness.OnlineDo(t, http.MethodGet, q()+"/v1/online?limit=2&cursor="+url.QueryEscape(c), onlineToken, nil)
		return code, string(body)
	}
	code, body := harness.OnlineDo(t, http.MethodGet, q()+"/v1/online?limit=2", onlineToken, nil)
	var first struct {
		NextCursor *string `json:"nextCursor"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &first) != nil || first.NextCursor == nil {
		t.Fatalf("first page = %d %s", code, body)
	}
	signed := *first.NextCursor
	inner := signed[:len(signed)-cursor.TagLen]
	c, err := online.DecodeCursor(inner)
	if err != nil {
		t.Fatalf("the signed cursor %q does not hold a listing cursor: %v", signed, err)
	}
	if code, body := page(signed); code != http.StatusOK {
		t.Fatalf("the signed cursor = %d %s", code, body)
	}

	// What a client might send instead, each refused before anything is read.
	other, _ := cursor.NewKeys("a secret query never had, thirty-two bytes")
	further := c
	further.Pos.From += 1000
	edited := []byte(signed)
	edited[2] ^= 1
	forged := map[string]string{
		"unsigned (the cursor without its tag)": inner,
		"another position, unsigned":            further.Encode(),
		"another position, old tag":             further.Encode() + signed[len(inner):],
		"signed with another secret":            other.Sign(inner),
		"one character changed":                 string(edited),
		"the document's illustrative example":   "AQgDgA-XjM3B",
	}
	refused := func(what string, code int, body string) {
		t.Helper()
		if code != http.StatusBadRequest || !strings.Contains(body, `"field":"cursor"`) {
			t.Errorf("%s: %d %s, want a 400 naming the cursor", what, code, body)
		}
		if strings.Contains(body, oldSecret) || strings.Contains(body, newSecret) {
			t.Errorf("%s: the answer shows a secret", what)
		}
	}
	for what, s := range forged {
		code, body := page(s)
		refused("listing, "+what, code, body)
	}

	// The feed's cursors: a snapshot's cursor resumes; a forged one is refused.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := newWatchLog()
	ws := watchDialWS(t, ctx, watchURL(q(), "/v1/watch", url.Values{"userIds": {users[0]}}), log)
	var feedCursor string
	harness.Eventually(t, 15*time.Second, func() string {
		if _, n, c := log.counts(); n == 0 || c == "" {
			return "no snapshot yet"
		}
		_, _, feedCursor = log.counts()
		return ""
	})
	_ = ws.conn.CloseNow()
	feedInner := feedCursor[:len(feedCursor)-cursor.TagLen]
	if _, err := feed.DecodeCursor(feedInner); err != nil {
		t.Fatalf("the feed's cursor %q does not hold a feed cursor: %v", feedCursor, err)
	}
	for what, s := range map[string]string{"unsigned": feedInner, "signed with another secret": other.Sign(feedInner)} {
		code, body := sseStatus(t, ctx, q()+"/v1/watch/sse?userIds="+users[0]+"&cursor="+url.QueryEscape(s))
		refused("feed, "+what, code, body)
	}
	if code, body := sseStatus(t, ctx, q()+"/v1/watch/sse?userIds="+users[0]+"&cursor="+url.QueryEscape(feedCursor)); code != http.StatusOK {
		t.Errorf("resuming the feed from its own cursor = %d %s", code, body)
	}

	// A rotation: the new secret signs, the old one's cursors still work.
	p.Svc["query"].Stop(t)
	p.Env["PULSE_CURSOR_SECRET"], p.Env["PULSE_CURSOR_SECRET_PREVIOUS"] = newSecret, oldSecret
	p.Start(t, "query")
	if code, body := page(signed); code != http.StatusOK {
		t.Errorf("during the rotation, the old secret's cursor = %d %s", code, body)
	}
	code, body = harness.OnlineDo(t, http.MethodGet, q()+"/v1/online?limit=2", onlineToken, nil)
	if code != http.StatusOK || json.Unmarshal(body, &first) != nil || first.NextCursor == nil {
		t.Fatalf("first page during the rotation = %d %s", code, body)
	}
	rotated := *first.NextCursor
	if rotated == signed || !strings.HasPrefix(rotated, inner) {
		t.Errorf("during the rotation the same position is %q, before %q: want the same cursor with a new tag", rotated, signed)
	}

	// The rotation done: the old secret's cursors are refused, the new one's work.
	p.Svc["query"].Stop(t)
	delete(p.Env, "PULSE_CURSOR_SECRET_PREVIOUS")
	p.Start(t, "query")
	oldCode, oldBody := page(signed)
	refused("after the rotation, the old secret's cursor", oldCode, oldBody)
	if code, body := page(rotated); code != http.StatusOK {
		t.Errorf("after the rotation, the new secret's cursor = %d %s", code, body)
	}
}

// sseStatus opens the feed's SSE stream at target and returns its status and, for an
// error, its body; a stream that opens is closed at once.
func sseStatus(t *testing.T, ctx context.Context, target string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+onlineToken)
	res, err := harness.KeyedClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusOK {
		return res.StatusCode, ""
	}
	var b strings.Builder
	buf := make([]byte, 4096)
	n, _ := res.Body.Read(buf)
	b.Write(buf[:n])
	return res.StatusCode, b.String()
}
