package tests

import (
	"context"
	bin "encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/domain/records"
	"github.com/pulse-presence/pulse/internal/platform/cursor"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/services/query/feed"
	"github.com/pulse-presence/pulse/tests/harness"
)

// feedConn is a WebSocket of the change feed read one message at a time.
type feedConn struct {
	t    *testing.T
	ctx  context.Context
	conn *websocket.Conn
}

// dialFeed opens /v1/watch?q with cred, retrying while the feed is not ready.
func dialFeed(t *testing.T, ctx context.Context, base, cred string, q url.Values) *feedConn {
	t.Helper()
	var conn *websocket.Conn
	harness.Eventually(t, 30*time.Second, func() string {
		c, res, err := websocket.Dial(ctx, watchURL(base, "/v1/watch", q),
			&websocket.DialOptions{HTTPClient: harness.BareClient, HTTPHeader: http.Header{"Authorization": {"Bearer " + cred}}})
		if err != nil {
			if res != nil && res.StatusCode == http.StatusServiceUnavailable {
				return "feed not ready: " + err.Error()
			}
			t.Fatalf("dialling the feed: %v", err)
		}
		conn = c
		return ""
	})
	conn.SetReadLimit(64 << 20)
	t.Cleanup(func() { _ = conn.CloseNow() })
	return &feedConn{t: t, ctx: ctx, conn: conn}
}

func (f *feedConn) send(cmd string) {
	f.t.Helper()
	if err := f.conn.Write(f.ctx, websocket.MessageText, []byte(cmd)); err != nil {
		f.t.Fatalf("sending %.80s: %v", cmd, err)
	}
}

// read returns the next message, or the error that ended the connection.
func (f *feedConn) read() (watchMsg, string, error) {
	_, b, err := f.conn.Read(f.ctx)
	if err != nil {
		return watchMsg{}, "", err
	}
	var m watchMsg
	if err := json.Unmarshal(b, &m); err != nil {
		f.t.Fatalf("message %.200s: %v", b, err)
	}
	return m, string(b), nil
}

func (f *feedConn) mustRead() (watchMsg, string) {
	f.t.Helper()
	m, raw, err := f.read()
	if err != nil {
		f.t.Fatalf("reading the feed: %v", err)
	}
	return m, raw
}

func subscribeCmd(op string, ids ...string) string {
	b, _ := json.Marshal(map[string]any{"op": op, "userIds": ids})
	return string(b)
}

func snapshotIDs(m watchMsg) []string {
	var ids []string
	for _, s := range m.Statuses {
		ids = append(ids, s.UserID)
	}
	return ids
}

// TestFeedSubscribeSnapshotsOnlyWhatItAdds: a subscribe's snapshot lists only the ids
// it adds, and commands beyond PULSE_FEED_COMMAND_RATE (bursts of
// PULSE_FEED_COMMAND_BURST) are ignored with a rate_limited error message while the
// connection stays open.
func TestFeedSubscribeSnapshotsOnlyWhatItAdds(t *testing.T) {
	p := harness.NewTopics(t, 1)
	p.Env["PULSE_FEED_COMMAND_RATE"] = "2"
	p.Env["PULSE_FEED_COMMAND_BURST"] = "3"
	p.Start(t, "query")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, b, c := p.Run+"-a", p.Run+"-b", p.Run+"-c"
	f := dialFeed(t, ctx, p.Svc["query"].URL, harness.TestKeys.Reader, url.Values{"userIds": {a}})
	if m, raw := f.mustRead(); m.Type != "snapshot" || fmt.Sprint(snapshotIDs(m)) != fmt.Sprint([]string{a}) {
		t.Fatalf("first message %s, want a's snapshot", raw)
	}
	f.send(subscribeCmd("subscribe", a, b))
	if m, raw := f.mustRead(); m.Type != "snapshot" || fmt.Sprint(snapshotIDs(m)) != fmt.Sprint([]string{b}) {
		t.Fatalf("after subscribing a (watched) and b: %s, want a snapshot of b only", raw)
	}
	f.send(subscribeCmd("subscribe", a, b))
	if m, raw := f.mustRead(); m.Type != "snapshot" || len(m.Statuses) != 0 || m.Cursor == "" {
		t.Fatalf("after subscribing a and b again: %s, want a snapshot without statuses", raw)
	}

	// 12 commands at once: the burst's last token, and perhaps one refilled, pass.
	for range 12 {
		f.send(subscribeCmd("unsubscribe", c))
	}
	limited := 0
	for limited < 9 {
		m, raw := f.mustRead()
		if m.Type != "error" || m.Code != "rate_limited" ||
			!strings.Contains(raw, "PULSE_FEED_COMMAND_RATE=2") {
			t.Fatalf("after a flood of commands: %s, want rate_limited error messages naming PULSE_FEED_COMMAND_RATE", raw)
		}
		limited++
	}
	t.Logf("%d of 12 commands refused", limited)
	time.Sleep(1500 * time.Millisecond)
	for {
		// The connection stays open: once tokens refill, a subscribe is answered.
		f.send(subscribeCmd("subscribe", c))
		m, raw := f.mustRead()
		if m.Type == "error" && m.Code == "rate_limited" {
			continue // a late refusal of the flood's, or this one's
		}
		if m.Type != "snapshot" || fmt.Sprint(snapshotIDs(m)) != fmt.Sprint([]string{c}) {
			t.Fatalf("after the flood: %s, want c's snapshot", raw)
		}
		break
	}
}

// TestFeedReadLimitFollowsThePrincipal: a user token's WebSocket takes commands only
// as large as naming the users it may watch; a larger message closes it with 1009,
// while a key may still send a subscribe of many long ids.
func TestFeedReadLimitFollowsThePrincipal(t *testing.T) {
	p := harness.NewTopics(t, 1)
	p.Start(t, "query")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := p.Svc["query"].URL
	alice, bob := p.Run+"-alice", p.Run+"-bob"
	tok, err := auth.MintUserToken(harness.TestKeys.Hs256, auth.UserToken{User: alice, Watch: []string{bob}, TTL: time.Hour, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	long := func(i int) string { return fmt.Sprintf("%s-%0120d", p.Run[:4], i) }
	many := make([]string, 1000)
	for i := range many {
		many[i] = long(i)
	}

	// A key names anyone: 1,000 ids of 125 bytes in one command.
	k := dialFeed(t, ctx, base, harness.TestKeys.Reader, url.Values{})
	if m, raw := k.mustRead(); m.Type != "snapshot" || len(m.Statuses) != 0 {
		t.Fatalf("first message %s, want an empty snapshot", raw)
	}
	k.send(subscribeCmd("subscribe", many...))
	if m, raw := k.mustRead(); m.Type != "snapshot" || len(m.Statuses) != len(many) {
		t.Fatalf("a key's subscribe of %d ids: %.200s, want their snapshot", len(many), raw)
	}

	// The token names alice and bob, with room for spaces.
	u := dialFeed(t, ctx, base, tok, url.Values{"userIds": {alice}})
	if m, raw := u.mustRead(); m.Type != "snapshot" {
		t.Fatalf("first message %s", raw)
	}
	u.send(`{ "op" : "subscribe" , "userIds" : [ "` + alice + `" , "` + bob + `" ] }`)
	if m, raw := u.mustRead(); m.Type != "snapshot" || !slices.Contains(snapshotIDs(m), bob) {
		t.Fatalf("the token's subscribe of alice and bob: %s, want bob's snapshot", raw)
	}
	// 100 ids it may not name: no forbidden message, the connection ends unread. The
	// service refuses the frame on its header's length and closes, so the client's
	// write of the payload can lose the race and fail before the close frame is
	// read; such an attempt proves nothing either way and is made again on a new
	// connection.
	oversized := subscribeCmd("subscribe", many[:100]...)
	for attempt := 1; ; attempt++ {
		if err := u.conn.Write(ctx, websocket.MessageText, []byte(oversized)); err != nil {
			if attempt == 5 {
				t.Fatalf("5 writes of the oversized command failed before the close could be read; last: %v", err)
			}
			u = dialFeed(t, ctx, base, tok, url.Values{"userIds": {alice}})
			if m, raw := u.mustRead(); m.Type != "snapshot" {
				t.Fatalf("first message %s", raw)
			}
			continue
		}
		_, raw, err := u.read()
		if err == nil {
			t.Fatalf("the token's subscribe of 100 long ids was read: %s; want the connection closed with 1009", raw)
		}
		if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
			t.Fatalf("the token's oversized command ended the connection with %v, want 1009", err)
		}
		return
	}
}

// produceChanges writes n alternating online/offline changes of user to topic, as
// the aggregator would.
func produceChanges(t *testing.T, topic, user string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(harness.KafkaBrokers()...), kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(5*time.Millisecond), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	at := time.Now().Add(-time.Hour)
	errs := make(chan error, 1)
	for i := range n {
		prev, cur := pulsev1.Status_STATUS_OFFLINE, pulsev1.Status_STATUS_ONLINE
		if i%2 == 1 {
			prev, cur = cur, prev
		}
		r, err := records.Change(topic, &pulsev1.Change{
			UserId: user, EventId: fmt.Sprintf("e%d", i), Previous: prev, Current: cur,
			ChangedAtUs: at.Add(time.Duration(i) * time.Millisecond).UnixMicro(),
			Cause:       pulsev1.Cause_CAUSE_EVENT, DeviceId: "d", SourcePartition: 0, SourceOffset: int64(i),
		})
		if err != nil {
			t.Fatal(err)
		}
		r.Partition = 0
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		t.Fatalf("producing changes: %v", err)
	default:
	}
}

// offsetLike finds numbers of three digits or more in what a client is told.
var offsetLike = regexp.MustCompile(`\d{3,}`)

// TestFeedLogReplaysAreBoundedAndRevealNoOffsets: a principal holds at most
// PULSE_FEED_MAX_LOG_REPLAYS_PER_PRINCIPAL log replays and the instance
// PULSE_FEED_MAX_LOG_REPLAYS; a resume that waits PULSE_FEED_REPLAY_WAIT for a slot is
// a 503 with Retry-After before the stream starts. A cursor the log no longer holds,
// or one that is malformed, is answered without the log's offsets.
func TestFeedLogReplaysAreBoundedAndRevealNoOffsets(t *testing.T) {
	p := harness.NewTopics(t, 1)
	user := p.Run + "-busy"
	const first, n = 1_000, 100_000
	p.Env["PULSE_FEED_REPLAY_BUFFER"] = "0" // every resume reads the log
	p.Env["PULSE_FEED_MAX_LOG_REPLAYS"] = "3"
	p.Env["PULSE_FEED_REPLAY_WAIT"] = "1s"
	p.Env["PULSE_FEED_WRITE_TIMEOUT"] = "2m" // a stalled reader keeps its slot
	p.Start(t, "query")
	base := p.Svc["query"].URL
	fp := feed.TopicFingerprint(p.Changes)

	// The cursors are the server's: before (start) and after (afterFirst) the first
	// 1,000 changes; then 100,000 more, and the log trimmed to begin after the first.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := dialFeed(t, ctx, base, harness.TestKeys.Operator, url.Values{"userIds": {user}})
	m, raw := w.mustRead()
	if m.Type != "snapshot" || m.Cursor == "" {
		t.Fatalf("first message %s, want a snapshot", raw)
	}
	start := m.Cursor
	produceChanges(t, p.Changes, user, first)
	var afterFirst string
	for i := range first {
		m, raw := w.mustRead()
		if m.Type != "change" {
			t.Fatalf("live message %d: %s, want a change", i, raw)
		}
		afterFirst = m.Cursor
	}
	_ = w.conn.CloseNow()
	produceChanges(t, p.Changes, user, n)
	adm := harness.KafkaAdmin(t)
	var trim kadm.Offsets
	trim.AddOffset(p.Changes, 0, first, -1)
	if res, err := adm.DeleteRecords(ctx, trim); err != nil || res.Error() != nil {
		t.Fatalf("deleting records before %d: %v %v", first, err, res.Error())
	}

	// resume opens an SSE resume from cur that is never read: the replay stalls on the
	// full socket and keeps its slot. It returns the status, Retry-After and body of
	// a refusal.
	resume := func(cred, cur string) (int, string, string) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet,
			base+"/v1/watch/sse?"+url.Values{"userIds": {user}, "cursor": {cur}}.Encode(), nil)
		req.Header.Set("Authorization", "Bearer "+cred)
		res, err := harness.BareClient.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("GET /v1/watch/sse: %v", err)
		}
		if res.StatusCode == http.StatusOK {
			t.Cleanup(func() { cancel(); res.Body.Close() })
			return res.StatusCode, "", ""
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		cancel()
		return res.StatusCode, res.Header.Get("Retry-After"), string(b)
	}
	// A cursor before the log's start: cursor_expired, without offsets.
	f := dialFeed(t, ctx, base, harness.TestKeys.Operator, url.Values{"userIds": {user}, "cursor": {start}})
	m, raw = f.mustRead()
	if m.Type != "error" || m.Code != "cursor_expired" || offsetLike.MatchString(raw) || strings.Contains(raw, "partition") {
		t.Fatalf("resuming before the log's start: %s, want cursor_expired naming no offset or partition", raw)
	}
	if m, raw := f.mustRead(); m.Type != "snapshot" {
		t.Fatalf("after cursor_expired: %s, want a snapshot", raw)
	}
	// Crafted cursors (malformed, or of two partitions): a 400, or cursor_expired,
	// naming neither partitions nor offsets.
	format := cursor.Format{Version: 1, MinBody: 5, MaxLen: feed.MaxCursorLen}
	body3 := bin.BigEndian.AppendUint32(nil, fp)
	body3 = bin.AppendUvarint(body3, 3)
	body3 = bin.AppendUvarint(body3, 7)
	body3 = append(body3, 0xff) // an unfinished varint
	for _, cur := range []string{format.Encode(body3), feed.EncodeCursor(fp, []int64{first, 5})} {
		code, _, body := resume(harness.TestKeys.Operator, cur)
		if code == http.StatusOK {
			g := dialFeed(t, ctx, base, harness.TestKeys.Operator, url.Values{"userIds": {user}, "cursor": {cur}})
			if m, raw := g.mustRead(); m.Type != "error" || m.Code != "cursor_expired" || strings.Contains(raw, "partition") || offsetLike.MatchString(raw) {
				t.Errorf("a crafted cursor: %s, want cursor_expired naming no partition or offset", raw)
			}
			_ = g.conn.CloseNow()
			continue
		}
		if code != http.StatusBadRequest || strings.Contains(body, "partition") || offsetLike.MatchString(body) {
			t.Errorf("a crafted cursor: %d %s, want a 400 naming no partition or offset", code, body)
		}
	}
	_ = f.conn.CloseNow()

	// Replays from afterFirst read 100,000 changes from Kafka; nobody reads them.
	harness.Eventually(t, 30*time.Second, func() string {
		if code, _, body := resume(harness.TestKeys.Reader, afterFirst); code != http.StatusOK {
			return fmt.Sprintf("first resume: %d %s", code, body)
		}
		return ""
	})
	if code, _, body := resume(harness.TestKeys.Reader, afterFirst); code != http.StatusOK {
		t.Fatalf("the reader key's second resume: %d %s", code, body)
	}
	began := time.Now()
	code, retry, body := resume(harness.TestKeys.Reader, afterFirst)
	waited := time.Since(began)
	if code != http.StatusServiceUnavailable || retry == "" ||
		!strings.Contains(body, "key it-reader runs its most log replays on this instance (PULSE_FEED_MAX_LOG_REPLAYS_PER_PRINCIPAL=2)") {
		t.Fatalf("the reader key's third resume: %d Retry-After %q %s; want 503 with Retry-After naming PULSE_FEED_MAX_LOG_REPLAYS_PER_PRINCIPAL", code, retry, body)
	}
	if waited < 900*time.Millisecond || waited > 10*time.Second {
		t.Fatalf("the third resume was refused after %v, want about PULSE_FEED_REPLAY_WAIT (1s)", waited)
	}
	if code, _, body := resume(harness.TestKeys.Reader2, afterFirst); code != http.StatusOK {
		t.Fatalf("another key's resume: %d %s", code, body)
	}
	code, retry, body = resume(harness.TestKeys.Operator, afterFirst)
	if code != http.StatusServiceUnavailable || retry == "" || !strings.Contains(body, "PULSE_FEED_MAX_LOG_REPLAYS=3") {
		t.Fatalf("a resume past the instance's replays: %d Retry-After %q %s; want 503 naming PULSE_FEED_MAX_LOG_REPLAYS", code, retry, body)
	}
	if offsetLike.MatchString(body) {
		t.Errorf("a refusal names offsets: %s", body)
	}
}
