package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/services/query/feed"
)

const watchTestToken = "0123456789abcdef-operator"

type watchState map[string]*presence.User

func (s watchState) GetMany(_ context.Context, ids []string) ([]*presence.User, error) {
	out := make([]*presence.User, len(ids))
	for i, id := range ids {
		out[i] = s[id]
	}
	return out, nil
}

func (s watchState) GroupMembers(context.Context, string, int) ([]string, error) { return nil, nil }

// watchServer runs the feed routes over a kfake log, with HTTP read and write
// timeouts far below the test's length: feed connections must outlive them.
func watchServer(t *testing.T) (url string, produce func(user string, from, to presence.Status), stop func()) {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "changes"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	env := config.NewEnv(config.MapLookup(map[string]string{
		"PULSE_KAFKA_BROKERS":                strings.Join(cluster.ListenAddrs(), ","),
		"PULSE_TOPIC_CHANGES":                "changes",
		"PULSE_HTTP_ADDR":                    "127.0.0.1:0",
		"PULSE_HTTP_READ_TIMEOUT":            "300ms",
		"PULSE_HTTP_WRITE_TIMEOUT":           "300ms",
		"PULSE_FEED_PING_INTERVAL":           "1s",
		"PULSE_FEED_MAX_USERS":               "3",
		auth.OperatorTokenEnv:                watchTestToken,
		"PULSE_AUTH":                         "off",
		"PULSE_FEED_MAX_CONNECTIONS_PER_KEY": "2",
	}))
	cfg, err := loadConfig(env)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := prometheus.NewRegistry()
	hub, err := feed.NewHub(cfg.hub(), watchState{"alice": {Status: presence.Online, Offset: -1}}, logger, reg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httpserver.New(cfg.HTTP, logger, reg)
	installAuth(srv.Echo, newAuth(t, cfg), reg, logger)
	a := &api{feed: newWatcher(hub, cfg.Feed, logger), logger: logger}
	a.watchRoutes(srv.Echo)
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		hubDone := make(chan error, 1)
		go func() { hubDone <- hub.Run(ctx) }()
		_ = srv.Run(ctx)
		<-hubDone
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	for !hub.Ready() {
		time.Sleep(5 * time.Millisecond)
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DefaultProduceTopic("changes"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	var offset int64
	return "http://" + srv.Addr().String(), func(user string, from, to presence.Status) {
		offset++
		b, _ := proto.Marshal(&pulsev1.Change{UserId: user, Previous: presence.StatusToPB(from), Current: presence.StatusToPB(to),
			ChangedAtUs: time.Now().UnixMicro(), SourceOffset: offset})
		r := &kgo.Record{Key: []byte(user), Value: b,
			Headers: []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaChange)}}}
		if err := prod.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Error(err)
		}
	}, stop
}

func TestWatchRejectsBadRequestsBeforeUpgrading(t *testing.T) {
	url, _, _ := watchServer(t)
	wsHeaders := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
	bearer := map[string]string{"Authorization": "Bearer " + watchTestToken}
	tests := []struct {
		name, path string
		headers    map[string]string
		status     int
		field      string
	}{
		{"plain GET on the WebSocket route", "/v1/watch?userIds=a", nil, 426, ""},
		{"bad firehose flag", "/v1/watch?firehose=yes", wsHeaders, 400, "firehose"},
		{"firehose without the token", "/v1/watch?firehose=true", wsHeaders, 403, ""},
		{"firehose with ids", "/v1/watch?firehose=true&userIds=a", wsHeaders, 400, "userIds"},
		{"empty id", "/v1/watch?userIds=a,,b", wsHeaders, 400, "userIds[1]"},
		{"too many ids", "/v1/watch?userIds=a,b&userIds=c,d", wsHeaders, 400, "userIds"},
		{"id too long", "/v1/watch?userIds=" + strings.Repeat("x", 129), wsHeaders, 400, "userIds[0]"},
		{"garbage cursor", "/v1/watch?userIds=a&cursor=xyz", wsHeaders, 400, "cursor"},
		{"operator view without the token", "/v1/watch?userIds=a&view=operator", wsHeaders, 403, ""},
		{"SSE without ids", "/v1/watch/sse", nil, 400, "userIds"},
		{"SSE firehose without the token", "/v1/watch/sse?firehose=true", nil, 403, ""},
		{"SSE bad Last-Event-ID", "/v1/watch/sse?userIds=a", map[string]string{"Last-Event-ID": "nope"}, 400, "Last-Event-ID"},
		{"SSE firehose with the token but ids", "/v1/watch/sse?firehose=true&userIds=a", bearer, 400, "userIds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, url+tt.path, nil)
			for k, v := range tt.headers {
				req.Header.Set(k, v)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var body struct {
				Error struct{ Code, Message, Field string } `json:"error"`
			}
			if res.StatusCode != tt.status || json.NewDecoder(res.Body).Decode(&body) != nil || body.Error.Field != tt.field || body.Error.Code == "" {
				t.Fatalf("GET %s = %d %+v, want %d naming %q", tt.path, res.StatusCode, body, tt.status, tt.field)
			}
		})
	}
}

// A cursor the feed cannot read is a 400 naming where it came from and saying what is
// wrong with it.
func TestWatchRefusesBadCursors(t *testing.T) {
	url, _, _ := watchServer(t)
	const advice = ": send the cursor of the last message received, or none"
	for _, tt := range []struct {
		query, lastEventID, field, message string
	}{
		{"&cursor=!!", "", "cursor", "invalid cursor: not base64url"},
		{"&cursor=AQgDgA-XjM3B", "", "cursor", "invalid cursor: too short"}, // a listing cursor
		{"&cursor=ATsp11oBKp1ZH3A", "", "cursor", "invalid cursor: checksum mismatch"},
		{"&cursor=" + strings.Repeat("A", feed.MaxCursorLen+1), "", "cursor", fmt.Sprintf("invalid cursor: longer than %d characters", feed.MaxCursorLen)},
		{"", "nope", "Last-Event-ID", "invalid cursor: too short"},
		{"&cursor=!!", "ATsp10oBKp1ZH3A", "cursor", "invalid cursor: not base64url"}, // the parameter wins
	} {
		req, _ := http.NewRequest(http.MethodGet, url+"/v1/watch/sse?userIds=a"+tt.query, nil)
		if tt.lastEventID != "" {
			req.Header.Set("Last-Event-ID", tt.lastEventID)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error struct{ Code, Message, Field string } `json:"error"`
		}
		err = json.NewDecoder(res.Body).Decode(&body)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusBadRequest || body.Error.Code != "invalid_request" ||
			body.Error.Field != tt.field || body.Error.Message != tt.message+advice {
			t.Errorf("%.60s (Last-Event-ID %q) = %d %+v, want 400 naming %s: %s", tt.query, tt.lastEventID, res.StatusCode, body, tt.field, tt.message+advice)
		}
	}
}

// A WebSocket client gets its snapshot, subscribes, gets changes, pings, and stays
// connected well past the server's HTTP timeouts.
func TestWatchWebSocket(t *testing.T) {
	url, produce, _ := watchServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var pongs atomic.Int32
	conn, _, err := websocket.Dial(ctx, strings.Replace(url, "http", "ws", 1)+"/v1/watch?userIds=alice", &websocket.DialOptions{
		OnPingReceived: func(context.Context, []byte) bool { pongs.Add(1); return true },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	// A client reads all the time: pings are answered while reading.
	msgs := make(chan []byte, 16)
	go func() {
		defer close(msgs)
		for {
			_, b, err := conn.Read(ctx)
			if err != nil {
				return
			}
			msgs <- b
		}
	}()
	readMsg := func() map[string]any {
		t.Helper()
		b, ok := <-msgs
		if !ok {
			t.Fatal("connection closed")
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := readMsg(); m["type"] != "snapshot" || jsonOf(m["statuses"]) != `[{"data":null,"lastActive":null,"lastSeen":null,"lastUpdated":null,"status":"online","userId":"alice"}]` {
		t.Fatalf("first message %v", m)
	}
	if err := conn.Write(ctx, websocket.MessageText, []byte(`{"op":"subscribe","userIds":["bob"]}`)); err != nil {
		t.Fatal(err)
	}
	if m := readMsg(); m["type"] != "snapshot" || jsonOf(m["statuses"]) != `[{"data":null,"lastActive":null,"lastSeen":null,"lastUpdated":null,"status":"offline","userId":"bob"}]` {
		t.Fatalf("after subscribe %v", m)
	}
	if err := conn.Write(ctx, websocket.MessageText, []byte(`{"op":"dance"}`)); err != nil {
		t.Fatal(err)
	}
	if m := readMsg(); m["type"] != "error" || m["code"] != "invalid_command" {
		t.Fatalf("after a bad command %v", m)
	}
	// Past the HTTP read and write timeouts, and at least one ping.
	time.Sleep(time.Second)
	for deadline := time.Now().Add(10 * time.Second); pongs.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	produce("bob", presence.Offline, presence.Invisible)
	produce("bob", presence.Invisible, presence.Online)
	m := readMsg()
	if m["type"] != "change" || m["userId"] != "bob" || m["previous"] != "offline" || m["status"] != "online" || m["cursor"] == "" {
		t.Fatalf("change %v", m)
	}
	if pongs.Load() == 0 {
		t.Error("no ping within 11s of a 1s ping interval")
	}
	_ = conn.Close(websocket.StatusNormalClosure, "")
	for range msgs {
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The SSE stream: events with the cursor as id, pings as comments, and a resume by
// Last-Event-ID.
func TestWatchSSE(t *testing.T) {
	url, produce, _ := watchServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open := func(lastID string) (*bufio.Reader, func()) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/watch/sse?userIds=bob", nil)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
			t.Fatalf("SSE answer %d %v", res.StatusCode, res.Header)
		}
		return bufio.NewReader(res.Body), func() { res.Body.Close() }
	}
	// next returns the next event's id and data, counting pings on the way.
	pings := 0
	next := func(r *bufio.Reader) (id, data string) {
		t.Helper()
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == ": ping":
				pings++
			case strings.HasPrefix(line, "id: "):
				id = line[4:]
			case strings.HasPrefix(line, "data: "):
				data = line[6:]
			case line == "" && data != "":
				return id, data
			}
		}
	}
	r, closeFirst := open("")
	if id, data := next(r); id == "" || !strings.Contains(data, `"type":"snapshot"`) {
		t.Fatalf("first event id %q data %s", id, data)
	}
	produce("bob", presence.Offline, presence.Online)
	id1, data := next(r)
	if !strings.Contains(data, `"userId":"bob","status":"online","previous":"offline"`) || !strings.Contains(data, `"cursor":"`+id1+`"`) {
		t.Fatalf("change event id %q data %s", id1, data)
	}
	time.Sleep(2500 * time.Millisecond) // two ping intervals, past the HTTP timeouts
	produce("bob", presence.Online, presence.Idle)
	_, data = next(r)
	if !strings.Contains(data, `"status":"idle"`) || pings == 0 {
		t.Fatalf("second change %s after %d pings", data, pings)
	}
	closeFirst()

	r, closeSecond := open(id1)
	defer closeSecond()
	if _, data := next(r); !strings.Contains(data, `"status":"idle","previous":"online"`) {
		t.Fatalf("resumed with Last-Event-ID, first event %s", data)
	}
}

// On shutdown a WebSocket is closed with 1001 going away, an SSE stream ends with an
// error event saying so.
func TestWatchGoingAwayOnShutdown(t *testing.T) {
	url, _, stop := watchServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, strings.Replace(url, "http", "ws", 1)+"/v1/watch?userIds=alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	if _, _, err := conn.Read(ctx); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/watch/sse?userIds=alice", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	_, _, err = conn.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("read at shutdown = %v, want close 1001", err)
	}
	body, _ := io.ReadAll(res.Body)
	if !strings.HasSuffix(string(body), "event: error\ndata: {\"type\":\"error\",\"code\":\"going_away\",\"message\":\"going away\"}\n\n") {
		t.Fatalf("SSE stream ended with %q", body)
	}
	<-stopped
}
