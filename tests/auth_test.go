package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/api/openapi"
	"github.com/pulse-presence/pulse/tests/harness"
)

// Authentication and limits against the real services (docs/design.md, Security):
// the services run with the harness's keys file and HS256 secret (harness/keys.go);
// these tests send credentials explicitly through bareClient.

// authDo sends a request with cred as bearer ("" for none) and returns the answer.
func authDo(t *testing.T, method, target, cred, body string) (int, http.Header, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if cred != "" {
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	res, err := harness.BareClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, strings.TrimSpace(string(b))
}

// userToken is a user token for sub, signed with secret (the services' own
// testKeys.hs256 unless testing a bad signature), expiring at exp.
func userToken(t *testing.T, sub string, exp time.Time, secret string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": exp.Unix(), "iat": time.Now().Unix()}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openPaths need no credentials; every other operation of the document does.
var openPaths = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true, "/openapi.json": true}

// guarded is every operation of service the document lists, but the open ones.
func guarded(t *testing.T, service string) []openapi.Operation {
	t.Helper()
	ops, err := openapi.Operations(service)
	if err != nil {
		t.Fatal(err)
	}
	var out []openapi.Operation
	for _, op := range ops {
		if !openPaths[op.Path] {
			out = append(out, op)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no guarded operation of %s in the document", service)
	}
	return out
}

// validBody is a body the route would accept for user, so a refusal is the
// credential's alone.
func validBody(op openapi.Operation, user string) string {
	switch op.Path {
	case "/status":
		return `{"userId":"` + user + `","status":"online"}`
	case "/v1/events":
		return `{"events":[{"userId":"` + user + `","kind":"activity"}]}`
	case "/v1/heartbeat":
		return `{"userId":"` + user + `"}`
	case "/statuses", "/v1/statuses", "/v1/online/filter":
		return `{"userIds":["` + user + `"]}`
	case "/v1/groups/{groupId}/members":
		switch op.Method {
		case http.MethodPut:
			return `{"userIds":["` + user + `"]}`
		case http.MethodPatch:
			return `{"add":["` + user + `"]}`
		}
	}
	return ""
}

// authGroup is the group the group routes name: nobody is a member of it.
const authGroup = "auth-group"

func opURL(base string, op openapi.Operation, user string) string {
	return base + strings.NewReplacer("{userId}", user, "{groupId}", authGroup).Replace(op.Path)
}

// opScope is the scope the document says op needs (x-scope).
func opScope(t *testing.T, op openapi.Operation) string {
	t.Helper()
	// Path items hold "servers" too, which does not decode as an operation.
	var raw struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openapi.Document(), &raw); err != nil {
		t.Fatal(err)
	}
	var o struct {
		Scope string `json:"x-scope"`
	}
	if err := json.Unmarshal(raw.Paths[op.Path][strings.ToLower(op.Method)], &o); err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	return o.Scope
}

// TestAuthEveryRoute: every guarded route of ingest and query answers 401 with the
// Bearer challenge to no credentials, an unknown key, an expired user token and one
// signed with another secret; 403 to a key without the service's scope, and to a
// reader's key on the routes of the operator scope; and a user token may write and
// read only its own user. Nothing refused reaches Kafka, and both
// keys of a rotation work.
func TestAuthEveryRoute(t *testing.T) {
	p := harness.NewTopics(t, 2)
	p.Start(t, "ingest")
	p.Start(t, "query")
	ingest, query := p.Svc["ingest"].URL, p.Svc["query"].URL
	alice := p.Run + "-alice"
	bob := p.Run + "-bob"
	hour := time.Now().Add(time.Hour)

	unauthorized := map[string]string{
		"no credentials":   "",
		"unknown key":      "pulse_not-a-key-of-this-service-000000000000",
		"expired token":    userToken(t, alice, time.Now().Add(-time.Hour), harness.TestKeys.Hs256),
		"forged signature": userToken(t, alice, hour, strings.Repeat("x", 43)),
	}
	wrongScope := map[string][]string{
		"ingest": {harness.TestKeys.Reader, harness.TestKeys.Operator},
		"query":  {harness.TestKeys.Producer, harness.TestKeys.RotOld},
	}
	for service, base := range map[string]string{"ingest": ingest, "query": query} {
		for _, op := range guarded(t, service) {
			target, body := opURL(base, op, alice), validBody(op, alice)
			for name, cred := range unauthorized {
				code, h, got := authDo(t, op.Method, target, cred, body)
				wantChallenge := `Bearer realm="pulse", error="invalid_token"`
				if cred == "" {
					wantChallenge = `Bearer realm="pulse"`
				}
				if code != http.StatusUnauthorized || h.Get("WWW-Authenticate") != wantChallenge || !strings.HasPrefix(got, `{"error":{"code":"unauthorized","message":"`) {
					t.Errorf("%s %s, %s: %d %q %s; want 401, WWW-Authenticate %q and the JSON error", op, service, name, code, h.Get("WWW-Authenticate"), got, wantChallenge)
				}
			}
			wrong := wrongScope[service]
			if service == "query" && opScope(t, op) == "write" {
				// A read service's write (a group's members): read keys lack its scope.
				wrong = []string{harness.TestKeys.Reader, harness.TestKeys.Operator}
			}
			if service == "query" && op.Method == http.MethodDelete && opScope(t, op) == "operator" {
				// An operator action (erasing a user): read keys lack its scope too.
				wrong = []string{harness.TestKeys.Producer, harness.TestKeys.Reader}
			}
			for _, cred := range wrong {
				code, _, got := authDo(t, op.Method, target, cred, body)
				if code != http.StatusForbidden || !strings.HasPrefix(got, `{"error":{"code":"forbidden","message":"key it-`) {
					t.Errorf("%s %s with a key lacking the scope: %d %s; want 403 forbidden", op, service, code, got)
				}
			}
			if opScope(t, op) == "operator" {
				// A user's history and export, the pipeline view: a reader's key passes
				// the guard (the read scope) and is refused by the route.
				code, _, got := authDo(t, op.Method, target, harness.TestKeys.Reader, body)
				if code != http.StatusForbidden || !strings.HasPrefix(got, `{"error":{"code":"forbidden","message":"`) {
					t.Errorf("%s %s with a reader's key: %d %s; want 403 forbidden", op, service, code, got)
				}
			}
		}
	}

	// A key in the URL (?access_token=) is refused everywhere; browsers open the feed
	// with a ticket (tests/tickets_test.go), with which the firehose is a 403 (a
	// reader, known), not a 401, over SSE and WebSocket.
	for _, tc := range []struct {
		target string
		code   int
	}{
		{query + "/v1/watch/sse?firehose=true&access_token=" + harness.TestKeys.Reader, http.StatusUnauthorized},
		{query + "/v1/watch/sse?userIds=a&ticket=pwt_unknown", http.StatusUnauthorized},
		{query + "/v1/online/count?access_token=" + harness.TestKeys.Reader, http.StatusUnauthorized},
	} {
		if code, _, got := authDo(t, http.MethodGet, tc.target, "", ""); code != tc.code {
			t.Errorf("GET %s: %d %s; want %d", tc.target, code, got, tc.code)
		}
	}
	tk, _ := watchTicket(t, query, harness.TestKeys.Reader)
	if code, _, got := authDo(t, http.MethodGet, query+"/v1/watch/sse?firehose=true&ticket="+url.QueryEscape(tk), "", ""); code != http.StatusForbidden {
		t.Errorf("SSE firehose with a reader's ticket: %d %s; want 403", code, got)
	}
	wsCtx, wsCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wsCancel()
	tk, _ = watchTicket(t, query, harness.TestKeys.Reader)
	_, res, err := websocket.Dial(wsCtx, watchURL(query, "/v1/watch", url.Values{"firehose": {"true"}, "ticket": {tk}}),
		&websocket.DialOptions{HTTPClient: harness.BareClient})
	if err == nil || res == nil || res.StatusCode != http.StatusForbidden {
		t.Errorf("WebSocket firehose with a reader's ticket: %v, %v; want HTTP 403", res, err)
	}

	// A user token acts for its own user only.
	aliceToken := userToken(t, alice, hour, harness.TestKeys.Hs256)
	for _, op := range guarded(t, "ingest") {
		if code, _, got := authDo(t, op.Method, opURL(ingest, op, bob), aliceToken, validBody(op, bob)); code != http.StatusForbidden ||
			got != `{"error":{"code":"forbidden","message":"this user token acts only for its own user; \"`+bob+`\" is another"}}` {
			t.Errorf("%s for bob with alice's token: %d %s; want 403", op, code, got)
		}
	}
	twoUsers := `{"events":[{"userId":"` + alice + `","kind":"activity"},{"userId":"` + bob + `","kind":"activity"}]}`
	if code, _, got := authDo(t, http.MethodPost, ingest+"/v1/events", aliceToken, twoUsers); code != http.StatusForbidden {
		t.Errorf("a batch for alice and bob with alice's token: %d %s; want 403", code, got)
	}
	for _, op := range guarded(t, "query") {
		target := opURL(query, op, bob)
		switch op.Path {
		case "/v1/watch/tickets":
			continue // names no user: a ticket acts as alice, which TestWatchTickets checks
		case "/v1/watch/sse":
			target += "?userIds=" + bob
		case "/v1/watch":
			// A plain GET is a 426 there; the WebSocket handshake gets the 403.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, res, err := websocket.Dial(ctx, watchURL(query, "/v1/watch", url.Values{"userIds": {bob}}),
				&websocket.DialOptions{HTTPClient: harness.BareClient, HTTPHeader: http.Header{"Authorization": {"Bearer " + aliceToken}}})
			cancel()
			if err == nil || res == nil || res.StatusCode != http.StatusForbidden {
				t.Errorf("WebSocket watch of bob with alice's token: %v, %v; want HTTP 403", res, err)
			}
			continue
		}
		code, _, got := authDo(t, op.Method, target, aliceToken, validBody(op, bob))
		if code != http.StatusForbidden || !strings.HasPrefix(got, `{"error":{"code":"forbidden"`) {
			t.Errorf("%s for bob with alice's token: %d %s; want 403", op, code, got)
		}
	}
	if code, _, got := authDo(t, http.MethodPost, query+"/statuses", aliceToken, `{"userIds":["`+alice+`","`+bob+`"]}`); code != http.StatusForbidden {
		t.Errorf("POST /statuses of alice and bob with alice's token: %d %s; want 403", code, got)
	}

	// Nothing of the refused requests reached Kafka.
	if recs := harness.ReadTopic(t, p.Events); len(recs) != 0 {
		t.Fatalf("refused requests reached %s: %d partitions hold records", p.Events, len(recs))
	}

	// Alice's own token writes and reads alice; both keys of a rotation write.
	if code, _, got := authDo(t, http.MethodPost, ingest+"/status", aliceToken, `{"userId":"`+alice+`","status":"online"}`); code != http.StatusOK ||
		got != `{"success":true,"message":"Status updated successfully."}` {
		t.Fatalf("alice's own status with her token: %d %s", code, got)
	}
	ids := map[string]string{}
	for name, key := range map[string]string{"old": harness.TestKeys.RotOld, "new": harness.TestKeys.RotNew} {
		id := p.Run + "-rot-" + name
		code, _, got := authDo(t, http.MethodPost, ingest+"/v1/heartbeat", key, `{"userId":"`+bob+`","eventId":"`+id+`"}`)
		if code != http.StatusAccepted || got != `{"eventId":"`+id+`"}` {
			t.Fatalf("heartbeat with the %s rotation key: %d %s", name, code, got)
		}
		ids[id] = bob
	}
	got := map[string]string{}
	status := ""
	for _, evs := range harness.LoggedEvents(t, p.Events) {
		for _, e := range evs {
			if e.GetUserId() == alice {
				status = e.GetStatus().String()
				continue
			}
			got[e.GetEventId()] = e.GetUserId()
		}
	}
	if status != "STATUS_ONLINE" || len(got) != 2 || got[p.Run+"-rot-old"] != bob || got[p.Run+"-rot-new"] != bob {
		t.Fatalf("%s holds alice's status %q and others %v; want alice online and exactly the two rotation heartbeats", p.Events, status, got)
	}
	// Alice reads her own status (the seed's shape) once the aggregator would have
	// applied it; without an aggregator here it is the unknown user's answer.
	code, _, body := authDo(t, http.MethodGet, query+"/status/"+alice, aliceToken, "")
	if code != http.StatusOK || body != `{"userId":"`+alice+`","status":"offline","lastUpdated":null}` {
		t.Fatalf("GET /status/alice with her token: %d %s", code, body)
	}
}

// TestAuthRateLimits: past the events per second of a user id, and of a key, ingest
// answers 429 with Retry-After, and after waiting that long the same request is
// accepted; nothing refused reaches Kafka.
func TestAuthRateLimits(t *testing.T) {
	p := harness.NewTopics(t, 2)
	for k, v := range map[string]string{
		"PULSE_INGEST_USER_RATE": "1", "PULSE_INGEST_USER_BURST": "2",
		"PULSE_INGEST_KEY_RATE": "1", "PULSE_INGEST_MAX_BATCH": "3",
	} {
		p.Env[k] = v
	}
	p.Start(t, "ingest")
	ingest := p.Svc["ingest"].URL
	u := func(n int) string { return p.Run + "-u" + strconv.Itoa(n) }
	heartbeat := func(key, user string) (int, http.Header, string) {
		return authDo(t, http.MethodPost, ingest+"/v1/heartbeat", key, `{"userId":"`+user+`"}`)
	}
	waitRetryAfter := func(h http.Header) {
		secs, err := strconv.Atoi(h.Get("Retry-After"))
		if err != nil || secs != 1 {
			t.Fatalf("Retry-After = %q, want 1", h.Get("Retry-After"))
		}
		time.Sleep(time.Duration(secs) * time.Second)
	}

	// Per user: a burst of 2, then 1 a second, whatever the key.
	for i := range 2 {
		if code, _, got := heartbeat(harness.TestKeys.Producer, u(1)); code != http.StatusAccepted {
			t.Fatalf("heartbeat %d of u1: %d %s", i, code, got)
		}
	}
	code, h, got := heartbeat(harness.TestKeys.RotNew, u(1))
	if code != http.StatusTooManyRequests || got != `{"error":{"code":"rate_limited","message":"user \"`+u(1)+
		`\" is over its rate of 1 events/s (PULSE_INGEST_USER_RATE); retry after Retry-After seconds"}}` {
		t.Fatalf("3rd heartbeat of u1: %d %s; want 429", code, got)
	}
	waitRetryAfter(h)
	if code, _, got := heartbeat(harness.TestKeys.Producer, u(1)); code != http.StatusAccepted {
		t.Fatalf("heartbeat of u1 after Retry-After: %d %s", code, got)
	}

	// Per key: a burst of PULSE_INGEST_MAX_BATCH (3), then 1 a second.
	batch := `{"events":[{"userId":"` + u(2) + `","kind":"activity"},{"userId":"` + u(3) + `","kind":"activity"},{"userId":"` + u(4) + `","kind":"activity"}]}`
	if code, _, got := authDo(t, http.MethodPost, ingest+"/v1/events", harness.TestKeys.RotOld, batch); code != http.StatusAccepted {
		t.Fatalf("3 events with the old rotation key: %d %s", code, got)
	}
	code, h, got = heartbeat(harness.TestKeys.RotOld, u(5))
	if code != http.StatusTooManyRequests || got != `{"error":{"code":"rate_limited","message":"key it-rotation-old is over its rate of 1 events/s (PULSE_INGEST_KEY_RATE); retry after Retry-After seconds"}}` {
		t.Fatalf("4th event of the key: %d %s; want 429", code, got)
	}
	waitRetryAfter(h)
	if code, _, got := heartbeat(harness.TestKeys.RotOld, u(5)); code != http.StatusAccepted {
		t.Fatalf("the key's event after Retry-After: %d %s", code, got)
	}

	perUser := map[string]int{}
	for _, evs := range harness.LoggedEvents(t, p.Events) {
		for _, e := range evs {
			perUser[e.GetUserId()]++
		}
	}
	want := map[string]int{u(1): 3, u(2): 1, u(3): 1, u(4): 1, u(5): 1}
	if len(perUser) != len(want) {
		t.Fatalf("events per user in Kafka = %v, want %v", perUser, want)
	}
	for id, n := range want {
		if perUser[id] != n {
			t.Fatalf("events per user in Kafka = %v, want %v", perUser, want)
		}
	}
}

// TestAuthFeedConnectionCaps: query holds at most PULSE_FEED_MAX_CONNECTIONS feed
// connections, and PULSE_FEED_MAX_CONNECTIONS_PER_KEY per key; the next is refused
// before any upgrade with a JSON error (429 for the key, 503 for the instance), over
// SSE and WebSocket alike, and is accepted once a connection has closed.
func TestAuthFeedConnectionCaps(t *testing.T) {
	p := harness.NewTopics(t, 1)
	p.Env["PULSE_FEED_MAX_CONNECTIONS"] = "2"
	p.Env["PULSE_FEED_MAX_CONNECTIONS_PER_KEY"] = "1"
	p.Start(t, "query")
	query := p.Svc["query"].URL
	sseURL := query + "/v1/watch/sse?userIds=" + p.Run + "-alice"

	// openSSE opens a stream with key, retrying while the feed is not ready, and
	// returns its cancel.
	openSSE := func(key string) context.CancelFunc {
		t.Helper()
		var stop context.CancelFunc
		harness.Eventually(t, 30*time.Second, func() string {
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, sseURL, nil)
			req.Header.Set("Authorization", "Bearer "+key)
			res, err := harness.BareClient.Do(req)
			if err != nil {
				cancel()
				t.Fatalf("GET %s: %v", sseURL, err)
			}
			if res.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				cancel()
				if res.StatusCode == http.StatusServiceUnavailable && bytes.Contains(b, []byte("not available")) {
					return "feed not ready: " + string(b)
				}
				t.Fatalf("SSE with a free key: %d %s", res.StatusCode, b)
			}
			stop = func() { cancel(); res.Body.Close() }
			return ""
		})
		t.Cleanup(stop)
		return stop
	}
	stopReader := openSSE(harness.TestKeys.Reader)

	keyFull := `{"error":{"code":"rate_limited","message":"key it-reader holds its most feed connections on this instance (PULSE_FEED_MAX_CONNECTIONS_PER_KEY=1); close one first"}}`
	code, h, got := authDo(t, http.MethodGet, sseURL, harness.TestKeys.Reader, "")
	if code != http.StatusTooManyRequests || got != keyFull || h.Get("Retry-After") != "5" {
		t.Fatalf("2nd SSE of the reader key: %d %s (Retry-After %q); want 429 %s", code, got, h.Get("Retry-After"), keyFull)
	}

	// The operator key takes the instance's second connection, over WebSocket.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wsURL := watchURL(query, "/v1/watch", url.Values{"userIds": {p.Run + "-alice"}})
	conn, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: harness.BareClient,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + harness.TestKeys.Operator}}})
	if err != nil {
		t.Fatalf("WebSocket with the operator key: %v", err)
	}
	defer conn.CloseNow()

	instanceFull := `{"error":{"code":"unavailable","message":"this instance holds its most feed connections (PULSE_FEED_MAX_CONNECTIONS=2); retry later or on another instance"}}`
	code, h, got = authDo(t, http.MethodGet, sseURL, harness.TestKeys.Reader2, "")
	if code != http.StatusServiceUnavailable || got != instanceFull || h.Get("Retry-After") != "5" {
		t.Fatalf("3rd connection (SSE, another key): %d %s; want 503 %s", code, got, instanceFull)
	}
	_, res, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: harness.BareClient,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + harness.TestKeys.Reader2}}})
	if err == nil || res == nil || res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("3rd connection (WebSocket): %v, %v; want HTTP 503", res, err)
	}
	if b, _ := io.ReadAll(res.Body); strings.TrimSpace(string(b)) != instanceFull {
		t.Fatalf("3rd connection (WebSocket) body %s, want %s", b, instanceFull)
	}

	// Once the reader's stream ends, the other reader gets its place.
	stopReader()
	harness.Eventually(t, 10*time.Second, func() string {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, sseURL, nil)
		req.Header.Set("Authorization", "Bearer "+harness.TestKeys.Reader2)
		res, err := harness.BareClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", sseURL, err)
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			var e struct{ Error struct{ Code string } }
			_ = json.NewDecoder(res.Body).Decode(&e)
			return "after the reader left: " + strconv.Itoa(res.StatusCode) + " " + e.Error.Code
		}
		return ""
	})
}

// TestAuthSecureByDefault: ingest and query refuse to start with neither keys nor a
// user-token key; with PULSE_AUTH=off they start, warn, and let requests without
// credentials read, but never in the operator view.
func TestAuthSecureByDefault(t *testing.T) {
	env := harness.StackEnv()
	delete(env, "PULSE_API_KEYS_FILE")
	delete(env, "PULSE_JWT_HS256_SECRET")
	env["PULSE_REDIS_PREFIX"] = "it-" + harness.RandomID(t)
	for _, name := range []string{"ingest", "query"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, harness.Binary(name))
		cmd.Env = append(os.Environ(), "PULSE_HTTP_ADDR=127.0.0.1:"+strconv.Itoa(harness.FreePort(t)))
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		want := "authentication: no API keys (PULSE_API_KEYS_FILE) and no user token verifier"
		if err == nil || timedOut || !strings.Contains(string(out), want) {
			t.Errorf("%s without keys: %v; output:\n%s\nwant a failed start saying %q", name, err, out, want)
		}
	}
	env["PULSE_AUTH"] = "off"
	q := harness.StartService(t, "query", env)
	if code, _, got := authDo(t, http.MethodGet, q.URL+"/status/nobody", "", ""); code != http.StatusOK ||
		got != `{"userId":"nobody","status":"offline","lastUpdated":null}` {
		t.Errorf("GET /status/nobody without credentials, auth off: %d %s", code, got)
	}
	if code, _, got := authDo(t, http.MethodGet, q.URL+"/status/nobody?view=operator", "", ""); code != http.StatusForbidden {
		t.Errorf("the operator view without credentials, auth off: %d %s; want 403", code, got)
	}
	if !strings.Contains(q.Out.String(), "authentication is off (PULSE_AUTH=off)") {
		t.Errorf("query with PULSE_AUTH=off logged no warning; output:\n%s", q.Out)
	}
}

// TestAuthKeysRotateWithoutRestart: ingest reads its keys file again when it changes
// (PULSE_API_KEYS_RELOAD), so a key is rotated on a running service: the new key is
// added beside the old, both work, then the old is removed and refused.
func TestAuthKeysRotateWithoutRestart(t *testing.T) {
	p := harness.NewTopics(t, 1)
	file := filepath.Join(t.TempDir(), "api-keys")
	write := func(lines ...string) {
		t.Helper()
		// Write then rename, as an operator's tooling would: the service never reads
		// half a file.
		tmp := file + ".new"
		if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	oldLine := auth.Line("rot-old", auth.ScopeWrite, harness.TestKeys.RotOld)
	newLine := auth.Line("rot-new", auth.ScopeWrite, harness.TestKeys.RotNew)
	write(oldLine)
	p.Env["PULSE_API_KEYS_FILE"] = file
	p.Env["PULSE_API_KEYS_RELOAD"] = "100ms"
	p.Start(t, "ingest")
	post := func(key string) int {
		code, _, _ := authDo(t, http.MethodPost, p.Svc["ingest"].URL+"/v1/heartbeat", key, `{"userId":"`+p.Run+`-rot"}`)
		return code
	}
	waitFor := func(what string, key string, want int) {
		t.Helper()
		harness.Eventually(t, 10*time.Second, func() string {
			if got := post(key); got != want {
				return fmt.Sprintf("%s: %d, want %d", what, got, want)
			}
			return ""
		})
	}
	if post(harness.TestKeys.RotOld) != http.StatusAccepted || post(harness.TestKeys.RotNew) != http.StatusUnauthorized {
		t.Fatal("before the rotation: want the old key accepted and the new one refused")
	}
	write(oldLine, newLine)
	waitFor("the new key once added", harness.TestKeys.RotNew, http.StatusAccepted)
	if got := post(harness.TestKeys.RotOld); got != http.StatusAccepted {
		t.Fatalf("the old key while both are listed: %d", got)
	}
	write(newLine)
	waitFor("the old key once removed", harness.TestKeys.RotOld, http.StatusUnauthorized)
	if got := post(harness.TestKeys.RotNew); got != http.StatusAccepted {
		t.Fatalf("the new key after the rotation: %d", got)
	}
	if !strings.Contains(p.Svc["ingest"].Out.String(), "API keys reloaded") {
		t.Errorf("ingest logged no reload; output:\n%s", p.Svc["ingest"].Out)
	}
}

// TestAuthUserTokenWatch: a user token watches, over SSE and WebSocket, its own user
// and the users of its pulse_watch claim; any other user (in the URL or in a
// subscribe command) and the firehose are refused.
func TestAuthUserTokenWatch(t *testing.T) {
	p := harness.NewTopics(t, 1)
	p.Start(t, "query")
	query := p.Svc["query"].URL
	alice, bob, carol := p.Run+"-alice", p.Run+"-bob", p.Run+"-carol"
	exp := time.Now().Add(time.Hour).Unix()
	sign := func(claims jwt.MapClaims) string {
		claims["iat"] = time.Now().Unix()
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(harness.TestKeys.Hs256))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	friends := sign(jwt.MapClaims{"sub": alice, "exp": exp, "pulse_watch": []string{bob}})
	alone := sign(jwt.MapClaims{"sub": alice, "exp": exp})

	// Allowed: alice and bob over SSE, once the feed is ready.
	sse := func(q, token string) (int, string) {
		return func() (int, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, query+"/v1/watch/sse?"+q, nil)
			req.Header.Set("Authorization", "Bearer "+token)
			res, err := harness.BareClient.Do(req)
			if err != nil {
				t.Fatalf("GET /v1/watch/sse?%s: %v", q, err)
			}
			defer res.Body.Close()
			if res.StatusCode == http.StatusOK {
				line, _ := bufioLine(res.Body) // the stream stays open: read the first event only
				return res.StatusCode, line
			}
			b, _ := io.ReadAll(res.Body)
			return res.StatusCode, strings.TrimSpace(string(b))
		}()
	}
	harness.Eventually(t, 30*time.Second, func() string {
		if code, got := sse("userIds="+alice+","+bob, friends); code != http.StatusOK || got != "event: snapshot" {
			return fmt.Sprintf("SSE of alice and bob with alice's token: %d %s", code, got)
		}
		return ""
	})
	for _, tc := range []struct {
		q, token, want string
	}{
		{"userIds=" + alice + "," + carol, friends, `{"error":{"code":"forbidden","message":"this user token may not watch \"` + carol + `\": only its own user and the users of its pulse_watch claim"}}`},
		{"userIds=" + bob, alone, `{"error":{"code":"forbidden","message":"this user token may not watch \"` + bob + `\": only its own user and the users of its pulse_watch claim"}}`},
		{"firehose=true", friends, `{"error":{"code":"forbidden","message":"a user token may not watch the firehose"}}`},
		{"userIds=" + alice + "&view=operator", friends, `{"error":{"code":"forbidden","message":"view=operator needs a key with the operator scope: Authorization: Bearer \u003ckey\u003e"}}`},
	} {
		if code, got := sse(tc.q, tc.token); code != http.StatusForbidden || got != tc.want {
			t.Errorf("SSE ?%s: %d %s; want 403 %s", tc.q, code, got, tc.want)
		}
	}

	// WebSocket: a subscribe to carol is refused with a forbidden error message and
	// ignored; one to bob is answered with bob's snapshot.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, watchURL(query, "/v1/watch", url.Values{"userIds": {alice}}),
		&websocket.DialOptions{HTTPClient: harness.BareClient, HTTPHeader: http.Header{"Authorization": {"Bearer " + friends}}})
	if err != nil {
		t.Fatalf("WebSocket with alice's token: %v", err)
	}
	defer conn.CloseNow()
	read := func() watchMsg {
		t.Helper()
		_, b, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("reading the WebSocket: %v", err)
		}
		var m watchMsg
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("message %s: %v", b, err)
		}
		return m
	}
	if m := read(); m.Type != "snapshot" || len(m.Statuses) != 1 || m.Statuses[0].UserID != alice {
		t.Fatalf("first message %+v, want alice's snapshot", m)
	}
	for _, id := range []string{carol, bob} {
		if err := conn.Write(ctx, websocket.MessageText, []byte(`{"op":"subscribe","userIds":["`+id+`"]}`)); err != nil {
			t.Fatal(err)
		}
	}
	if m := read(); m.Type != "error" || m.Code != "forbidden" {
		t.Fatalf("after subscribing carol: %+v, want an error message with code forbidden", m)
	}
	if m := read(); m.Type != "snapshot" || len(m.Statuses) != 1 || m.Statuses[0].UserID != bob {
		t.Fatalf("after subscribing bob: %+v, want bob's snapshot", m)
	}
}

// bufioLine reads the first event line ("event: …") of an SSE stream.
func bufioLine(r io.Reader) (string, error) {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if err != nil || strings.HasPrefix(line, "event:") {
			return strings.TrimSpace(line), err
		}
	}
}
