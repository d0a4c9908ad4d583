package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/domain/records"
	"github.com/pulse-presence/pulse/tests/harness"
)

// presentMsg is any message a feed socket receives, acks included.
type presentMsg struct {
	watchMsg
	Op      string `json:"op"`
	EventID string `json:"eventId"`
	Message string `json:"message"`
	got     time.Time
}

// liveSocket is a feed WebSocket whose messages a goroutine reads as they come, as a
// browser does: only a socket being read answers the server's pings.
type liveSocket struct {
	t    *testing.T
	conn *websocket.Conn
	// raw is the TCP connection under it, to cut without a close frame.
	raw  net.Conn
	msgs chan presentMsg
	done chan error
}

// openSocket dials /v1/watch?q as cred and starts reading it.
func openSocket(t *testing.T, ctx context.Context, base, cred string, q url.Values) (*liveSocket, *http.Response, error) {
	t.Helper()
	s := &liveSocket{t: t, msgs: make(chan presentMsg, 256), done: make(chan error, 1)}
	var mu sync.Mutex
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		mu.Lock()
		s.raw = c
		mu.Unlock()
		return c, err
	}}
	conn, res, err := websocket.Dial(ctx, watchURL(base, "/v1/watch", q), &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: tr}, HTTPHeader: http.Header{"Authorization": {"Bearer " + cred}}})
	if err != nil {
		return nil, res, err
	}
	s.conn = conn
	t.Cleanup(func() { _ = conn.CloseNow() })
	go func() {
		for {
			_, b, err := conn.Read(ctx)
			if err != nil {
				s.done <- err
				close(s.msgs)
				return
			}
			m := presentMsg{got: time.Now()}
			if err := json.Unmarshal(b, &m); err != nil {
				s.done <- fmt.Errorf("message %.200s: %w", b, err)
				close(s.msgs)
				return
			}
			s.msgs <- m
		}
	}()
	return s, res, nil
}

func (s *liveSocket) send(cmd string) {
	s.t.Helper()
	if err := s.conn.Write(context.Background(), websocket.MessageText, []byte(cmd)); err != nil {
		s.t.Fatalf("sending %s: %v", cmd, err)
	}
}

// next is the next message, failing the test after wait.
func (s *liveSocket) next(wait time.Duration) presentMsg {
	s.t.Helper()
	select {
	case m, ok := <-s.msgs:
		if !ok {
			s.t.Fatalf("the socket ended: %v", <-s.done)
		}
		return m
	case <-time.After(wait):
		s.t.Fatalf("no message within %v", wait)
	}
	return presentMsg{}
}

// quiet fails the test if a message arrives within d.
func (s *liveSocket) quiet(d time.Duration, why string) {
	s.t.Helper()
	select {
	case m := <-s.msgs:
		s.t.Fatalf("%s: got %+v", why, m.watchMsg)
	case <-time.After(d):
	}
}

// TestPresentSocketIsTheDevicesPresence: a user token's WebSocket opened with
// ?present=<deviceId> keeps that device present for as long as it lives, posts its
// status and activity commands as events (acked with their ids once Kafka has them),
// posts the device offline at once when the client closes it, keeps it online when it
// drops and reconnects (to another instance) within PULSE_OFFLINE_AFTER, and lets the
// device time out after PULSE_OFFLINE_AFTER when it drops for good. A watcher sees every transition once,
// and the events are in presence.events with the token's principal, like ingest's.
func TestPresentSocketIsTheDevicesPresence(t *testing.T) {
	const offlineAfter, heartbeat = 3 * time.Second, 500 * time.Millisecond
	p := harness.NewTopics(t, 2)
	p.Env["PULSE_OFFLINE_AFTER"] = offlineAfter.String()
	p.Env["PULSE_PRESENT_HEARTBEAT"] = heartbeat.String()
	p.Start(t, "aggregator")
	p.Start(t, "query")
	base := p.Svc["query"].URL
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	alice, bob := p.Run+"-alice", p.Run+"-bob"
	mint := func(user string, watch ...string) string {
		tok, err := auth.MintUserToken(harness.TestKeys.Hs256, auth.UserToken{User: user, Watch: watch, TTL: time.Hour, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	aliceTok, bobTok := mint(alice, bob), mint(bob, alice)

	// Refused before any upgrade, each naming the fault.
	for _, c := range []struct {
		cred string
		q    url.Values
		code int
		want string
	}{
		{harness.TestKeys.Reader, url.Values{"present": {"web"}, "presentUser": {bob}}, http.StatusForbidden, "write scope"},
		{bobTok, url.Values{"present": {"web"}, "presentUser": {alice}}, http.StatusForbidden, "its own user"},
		{bobTok, url.Values{"presentUser": {bob}}, http.StatusBadRequest, "presentUser"},
		{bobTok, url.Values{"present": {strings.Repeat("d", 129)}}, http.StatusBadRequest, "present"},
	} {
		_, res, err := openSocket(t, ctx, base, c.cred, c.q)
		if err == nil || res == nil || res.StatusCode != c.code {
			t.Fatalf("present socket %v: %v (%v), want %d", c.q, err, res, c.code)
		}
	}
	code, body := harness.OnlineDo(t, http.MethodGet, base+"/v1/watch/sse?userIds="+bob+"&present=web", bobTok, nil)
	if code != http.StatusBadRequest || !strings.Contains(string(body), "WebSocket") {
		t.Fatalf("present on SSE: %d %s, want 400 naming the WebSocket", code, body)
	}

	var w *liveSocket
	harness.Eventually(t, 30*time.Second, func() string {
		s, res, err := openSocket(t, ctx, base, aliceTok, url.Values{"userIds": {bob}})
		if err != nil {
			return fmt.Sprintf("alice's watch: %v (%v)", err, res)
		}
		w = s
		return ""
	})
	if m := w.next(10 * time.Second); m.Type != "snapshot" || len(m.Statuses) != 1 || m.Statuses[0].Status != "offline" {
		t.Fatalf("alice's first message %+v, want bob offline", m.watchMsg)
	}
	change := func(want, prev, cause string, within time.Duration) presentMsg {
		t.Helper()
		m := w.next(within)
		if m.Type != "change" || m.UserID != bob || m.Status != want || m.Previous != prev || m.Cause != cause {
			t.Fatalf("alice saw %+v, want bob %s → %s (%s)", m.watchMsg, prev, want, cause)
		}
		return m
	}

	// Bob's page opens: his device is online for as long as the socket lives.
	opened := time.Now()
	b, res, err := openSocket(t, ctx, base, bobTok, url.Values{"present": {"web"}})
	if err != nil {
		t.Fatalf("bob's present socket: %v (%v)", err, res)
	}
	m := change("online", "offline", "event", 10*time.Second)
	t.Logf("alice saw bob online %v after his socket opened", m.got.Sub(opened).Round(time.Millisecond))
	w.quiet(2*offlineAfter, "bob's socket lives, so nothing may change")

	// Commands are the device's events, acknowledged with their ids.
	ack := func(cmd, op string) string {
		t.Helper()
		b.send(cmd)
		for {
			m := b.next(10 * time.Second)
			if m.Type == "snapshot" {
				continue
			}
			if m.Type != "ack" || m.Op != op || m.EventID == "" {
				t.Fatalf("%s answered %+v (%s), want an ack of %s", cmd, m.watchMsg, m.Message, op)
			}
			return m.EventID
		}
	}
	idleID := ack(`{"op":"status","status":"idle"}`, "status")
	change("idle", "online", "event", 10*time.Second)
	activityID := ack(`{"op":"activity"}`, "activity")
	change("online", "idle", "event", 10*time.Second)
	b.send(`{"op":"status","status":"busy"}`)
	if m := b.next(10 * time.Second); m.Type != "error" || m.Code != "invalid_command" || !strings.Contains(m.Message, "status") {
		t.Fatalf("a status of busy: %+v %s, want invalid_command naming status", m.watchMsg, m.Message)
	}

	// Bob closes his tab: offline at once.
	closed := time.Now()
	if err := b.conn.Close(websocket.StatusGoingAway, "tab closed"); err != nil {
		t.Fatalf("closing bob's socket: %v", err)
	}
	m = change("offline", "online", "event", 10*time.Second)
	t.Logf("alice saw bob offline %v after he closed his socket", m.got.Sub(closed).Round(time.Millisecond))

	// Bob comes back, then his network drops: no close frame, so his device times out.
	b, res, err = openSocket(t, ctx, base, bobTok, url.Values{"present": {"web"}})
	if err != nil {
		t.Fatalf("bob's second present socket: %v (%v)", err, res)
	}
	change("online", "offline", "event", 10*time.Second)

	// His connection drops and he reconnects within PULSE_OFFLINE_AFTER, to another
	// query instance (as after a restart of his): his device never looks offline.
	other := harness.StartService(t, "query", p.Env)
	_ = b.raw.Close()
	harness.Eventually(t, 30*time.Second, func() string {
		c, res, err := openSocket(t, ctx, other.URL, bobTok, url.Values{"present": {"web"}})
		if err != nil {
			return fmt.Sprintf("bob's socket on the other instance: %v (%v)", err, res)
		}
		b = c
		return ""
	})
	w.quiet(2*offlineAfter, "bob reconnected within PULSE_OFFLINE_AFTER, so nothing may change")

	time.Sleep(2 * heartbeat)
	cut := time.Now()
	_ = b.raw.Close()
	m = change("offline", "online", "timeout", offlineAfter+10*time.Second)
	took := m.got.Sub(cut)
	t.Logf("alice saw bob offline %v after his connection was cut (PULSE_OFFLINE_AFTER=%v)", took.Round(time.Millisecond), offlineAfter)
	if took < offlineAfter-2*heartbeat {
		t.Fatalf("bob timed out %v after the cut, before PULSE_OFFLINE_AFTER=%v since his last heartbeat could have passed", took, offlineAfter)
	}

	// The events are the log's like any other: bob's principal, device web, in order.
	var kinds []string
	harness.Eventually(t, 20*time.Second, func() string {
		kinds = kinds[:0]
		var ids []string
		for _, recs := range harness.ReadTopic(t, p.Events) {
			for _, r := range recs {
				if string(r.Key) != bob {
					continue
				}
				e, err := records.DecodeEvent(r)
				if err != nil {
					t.Fatalf("record of bob: %v", err)
				}
				if e.Source.String() == "timeout" {
					continue // the aggregator's decision, not the socket's
				}
				var principal string
				for _, h := range r.Headers {
					if h.Key == records.PrincipalHeader {
						principal = string(h.Value)
					}
				}
				if principal != "user:"+bob || e.DeviceID != "web" || e.Source.String() != "api" {
					t.Fatalf("bob's event %+v with principal %q, want device web, source api, principal user:%s", e, principal, bob)
				}
				kind := e.Kind.String()
				if kind == "status" {
					kind += ":" + e.Status.String()
				}
				kinds = append(kinds, kind)
				ids = append(ids, e.ID)
			}
		}
		if !slices.Contains(ids, idleID) || !slices.Contains(ids, activityID) {
			return fmt.Sprintf("acked events %s and %s not both in the log", idleID, activityID)
		}
		return ""
	})
	// Heartbeats come on the socket's own clock and may fall between commands, so
	// the commands are compared in order without them; the socket's opening
	// heartbeat comes first and the reconnected sockets' heartbeats come last.
	var commands []string
	for _, k := range kinds {
		if k != "heartbeat" {
			commands = append(commands, k)
		}
	}
	want := []string{"status:idle", "activity", "status:offline"}
	if !slices.Equal(commands, want) || kinds[0] != "heartbeat" || kinds[len(kinds)-1] != "heartbeat" {
		t.Fatalf("bob's events in the log: %v, want heartbeats first and last and %v in between", kinds, want)
	}
}
