package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"github.com/pulse-presence/pulse/tests/harness"
)

// watchTicket asks base for a feed ticket acting as cred (POST /v1/watch/tickets).
func watchTicket(t *testing.T, base, cred string) (ticket string, expiresAt time.Time) {
	t.Helper()
	code, h, body := authDo(t, http.MethodPost, base+"/v1/watch/tickets", cred, "")
	if code != http.StatusOK {
		t.Fatalf("POST /v1/watch/tickets: %d %s", code, body)
	}
	if cc := h.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("a ticket's answer has Cache-Control %q, want no-store", cc)
	}
	var a struct {
		Ticket    string    `json:"ticket"`
		ExpiresAt time.Time `json:"expiresAt"`
	}
	if err := json.Unmarshal([]byte(body), &a); err != nil || a.Ticket == "" {
		t.Fatalf("POST /v1/watch/tickets answered %s: %v", body, err)
	}
	return a.Ticket, a.ExpiresAt
}

// sseOpen opens an SSE stream of u, with cred in the Authorization header unless it
// is empty: 200 and its first line (the stream is then closed), or the refusal's
// status and body.
func sseOpen(t *testing.T, u, cred string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if cred != "" {
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	res, err := harness.BareClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusOK {
		line, _ := bufioLine(res.Body)
		return res.StatusCode, line
	}
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, strings.TrimSpace(string(b))
}

// TestWatchTickets: a ticket of POST /v1/watch/tickets opens the feed once, over SSE
// and WebSocket, on any query instance sharing the Redis; a second use, or a use past
// its PULSE_WATCH_TICKET_TTL, is a 401; it acts as the credential that asked for it
// (a user token's watch list and connection cap); and a credential in the URL
// (?access_token=) is refused.
func TestWatchTickets(t *testing.T) {
	p := harness.NewTopics(t, 1)
	p.Env["PULSE_WATCH_TICKET_TTL"] = "2s"
	p.Env["PULSE_FEED_MAX_CONNECTIONS_PER_USER"] = "1"
	p.Start(t, "query")
	query := p.Svc["query"].URL
	other := harness.StartService(t, "query", p.Env).URL // a second instance on the same Redis
	alice, bob, carol := p.Run+"-alice", p.Run+"-bob", p.Run+"-carol"
	sse := func(base, q string) string { return base + "/v1/watch/sse?" + q }

	// The feed is ready on both instances (tickets are spent by any answer).
	for _, base := range []string{query, other} {
		harness.Eventually(t, 30*time.Second, func() string {
			if code, got := sseOpen(t, sse(base, "userIds="+alice), harness.TestKeys.Reader); code != http.StatusOK {
				return fmt.Sprintf("%s feed: %d %s", base, code, got)
			}
			return ""
		})
	}

	// Once, over SSE, on the instance that issued it or another.
	for _, base := range []string{query, other} {
		tk, exp := watchTicket(t, query, harness.TestKeys.Reader)
		if d := time.Until(exp); d <= 0 || d > 3*time.Second {
			t.Errorf("a ticket expires in %v, want within PULSE_WATCH_TICKET_TTL (2s)", d)
		}
		if code, got := sseOpen(t, sse(base, "userIds="+alice+"&ticket="+url.QueryEscape(tk)), ""); code != http.StatusOK || got != "event: snapshot" {
			t.Fatalf("SSE on %s with a fresh ticket: %d %s, want the snapshot", base, code, got)
		}
		if code, got := sseOpen(t, sse(base, "userIds="+alice+"&ticket="+url.QueryEscape(tk)), ""); code != http.StatusUnauthorized {
			t.Fatalf("SSE with a used ticket: %d %s, want 401", code, got)
		}
	}

	// Once, over WebSocket.
	tk, _ := watchTicket(t, query, harness.TestKeys.Reader)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, watchURL(query, "/v1/watch", url.Values{"userIds": {alice}, "ticket": {tk}}),
		&websocket.DialOptions{HTTPClient: harness.BareClient})
	if err != nil {
		t.Fatalf("WebSocket with a fresh ticket: %v", err)
	}
	if _, b, err := conn.Read(ctx); err != nil || !strings.Contains(string(b), `"type":"snapshot"`) {
		t.Fatalf("WebSocket with a ticket: first message %s, %v; want the snapshot", b, err)
	}
	conn.CloseNow()
	_, res, err := websocket.Dial(ctx, watchURL(query, "/v1/watch", url.Values{"userIds": {alice}, "ticket": {tk}}),
		&websocket.DialOptions{HTTPClient: harness.BareClient})
	if err == nil || res == nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("WebSocket with a used ticket: %v, %v; want HTTP 401", res, err)
	}

	// Past its time.
	tk, _ = watchTicket(t, query, harness.TestKeys.Reader)
	time.Sleep(2500 * time.Millisecond)
	if code, got := sseOpen(t, sse(query, "userIds="+alice+"&ticket="+url.QueryEscape(tk)), ""); code != http.StatusUnauthorized {
		t.Fatalf("SSE with an expired ticket: %d %s, want 401", code, got)
	}

	// It acts as its credential: a reader's ticket may not take the firehose; alice's
	// token's ticket watches bob (her pulse_watch) but not carol, and counts against
	// her one connection.
	tk, _ = watchTicket(t, query, harness.TestKeys.Reader)
	if code, got := sseOpen(t, sse(query, "firehose=true&ticket="+url.QueryEscape(tk)), ""); code != http.StatusForbidden {
		t.Errorf("firehose with a reader's ticket: %d %s, want 403", code, got)
	}
	token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": alice, "iat": time.Now().Unix(),
		"exp": time.Now().Add(time.Hour).Unix(), "pulse_watch": []string{bob}}).SignedString([]byte(harness.TestKeys.Hs256))
	if err != nil {
		t.Fatal(err)
	}
	tk, _ = watchTicket(t, query, token)
	if code, got := sseOpen(t, sse(query, "userIds="+carol+"&ticket="+url.QueryEscape(tk)), ""); code != http.StatusForbidden {
		t.Errorf("carol with alice's ticket: %d %s, want 403", code, got)
	}
	tk, _ = watchTicket(t, query, token)
	if code, got := sseOpen(t, sse(query, "userIds="+bob+"&ticket="+url.QueryEscape(tk)), ""); code != http.StatusOK {
		t.Errorf("bob with alice's ticket: %d %s, want 200", code, got)
	}
	hold, stop := context.WithCancel(context.Background())
	defer stop()
	// The server frees the stream of bob's ticket once it sees it closed.
	harness.Eventually(t, 10*time.Second, func() string {
		req, _ := http.NewRequestWithContext(hold, http.MethodGet, sse(query, "userIds="+alice), nil)
		req.Header.Set("Authorization", "Bearer "+token)
		held, err := harness.BareClient.Do(req)
		if err != nil {
			t.Fatalf("alice's one stream: %v", err)
		}
		if held.StatusCode != http.StatusOK {
			held.Body.Close()
			return fmt.Sprintf("alice's one stream: %d", held.StatusCode)
		}
		t.Cleanup(func() { held.Body.Close() })
		return ""
	})
	tk, _ = watchTicket(t, query, token)
	if code, got := sseOpen(t, sse(query, "userIds="+alice+"&ticket="+url.QueryEscape(tk)), ""); code != http.StatusTooManyRequests ||
		!strings.Contains(got, "PULSE_FEED_MAX_CONNECTIONS_PER_USER=1") {
		t.Errorf("alice's ticket beside her open stream: %d %s, want her 429", code, got)
	}

	// A long-lived credential in the URL is refused, on the feed and elsewhere.
	for _, u := range []string{sse(query, "userIds="+alice+"&access_token="+harness.TestKeys.Reader), query + "/v1/online/count?access_token=" + harness.TestKeys.Reader} {
		if code, got := sseOpen(t, u, ""); code != http.StatusUnauthorized || !strings.Contains(got, "POST /v1/watch/tickets") {
			t.Errorf("GET %s: %d %s, want 401 pointing at tickets", strings.Replace(u, harness.TestKeys.Reader, "<key>", 1), code, got)
		}
	}
	// The ticket route needs a credential in the header itself.
	if code, _, got := authDo(t, http.MethodPost, query+"/v1/watch/tickets", "", ""); code != http.StatusUnauthorized {
		t.Errorf("POST /v1/watch/tickets without credentials: %d %s, want 401", code, got)
	}
}
