package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/domain/records"
	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const topic = "presence.events"

// testNow is the server clock in tests; its nanoseconds show truncation to µs.
var testNow = time.Date(2025, 3, 14, 15, 9, 26, 535_897_932, time.UTC)

// nowUs is testNow as the record carries it.
const nowUs = 1741964966_535897

// harness is the real server and producer against an in-process Kafka.
type harness struct {
	t       testing.TB
	cluster *kfake.Cluster
	client  *kgo.Client
	srv     *httpserver.Server
	h       *handler
	reg     *prometheus.Registry
}

func newHarness(t testing.TB, env map[string]string) *harness {
	t.Helper()
	cluster := kfake.MustCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topic))
	t.Cleanup(cluster.Close)
	vars := map[string]string{
		"PULSE_KAFKA_BROKERS": strings.Join(cluster.ListenAddrs(), ","),
		"PULSE_HTTP_ADDR":     "127.0.0.1:0",
		// Authentication is tested in internal/api/auth and tests/auth_test.go.
		"PULSE_AUTH": "off",
	}
	for k, v := range env {
		vars[k] = v
	}
	cfg, err := loadConfig(config.NewEnv(config.MapLookup(vars)))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := prometheus.NewRegistry()
	client, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.Kafka.Brokers...)}, producerOpts(cfg)...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	authn, err := auth.New(cfg.Auth)
	if err != nil {
		t.Fatal(err)
	}
	srv, h, err := newServer(cfg, logger, reg, client, authn)
	if err != nil {
		t.Fatal(err)
	}
	h.now = func() time.Time { return testNow }
	return &harness{t: t, cluster: cluster, client: client, srv: srv, h: h, reg: reg}
}

type response struct {
	status int
	header http.Header
	body   string
}

func (hs *harness) post(path, body string) response {
	hs.t.Helper()
	return hs.do(httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)), "application/json")
}

func (hs *harness) do(req *http.Request, contentType string) response {
	hs.t.Helper()
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	hs.srv.Echo.ServeHTTP(rec, req)
	return response{status: rec.Code, header: rec.Header(), body: strings.TrimSpace(rec.Body.String())}
}

// endOffset is how many records the topic holds, over all partitions.
func (hs *harness) endOffset() int64 {
	hs.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	offsets, err := kadm.NewClient(hs.client).ListEndOffsets(ctx, topic)
	if err != nil {
		hs.t.Fatal(err)
	}
	var n int64
	offsets.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			hs.t.Fatal(o.Err)
		}
		n += o.Offset
	})
	return n
}

// consumed is a record read back from the topic.
type consumed struct {
	partition int32
	key       string
	headers   []kgo.RecordHeader
	event     *pulsev1.Event
}

// consume reads exactly n records from the topic, and fails if it holds more.
func (hs *harness) consume(n int) []consumed {
	hs.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(hs.cluster.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		hs.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []consumed
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			hs.t.Fatalf("consumed %d of %d records: %v", len(out), n, err)
		}
		fs.EachError(func(t string, p int32, err error) { hs.t.Fatalf("fetching %s/%d: %v", t, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			var ev pulsev1.Event
			if err := proto.Unmarshal(r.Value, &ev); err != nil {
				hs.t.Fatalf("record value at %d/%d: %v", r.Partition, r.Offset, err)
			}
			out = append(out, consumed{partition: r.Partition, key: string(r.Key), headers: r.Headers, event: &ev})
		})
	}
	if got := hs.endOffset(); got != int64(n) {
		hs.t.Fatalf("topic holds %d records, want %d", got, n)
	}
	return out
}

// checkRecords asserts the records read back are want, in order per user (the only
// order Kafka keeps), with the schema header, keyed by user id, one partition a user.
func checkRecords(t *testing.T, got []consumed, want []*pulsev1.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	byUser := map[string][]consumed{}
	partitionOf := map[string]int32{}
	for _, r := range got {
		// These handlers run with authentication off: the principal is anonymous.
		if len(r.headers) != 2 || r.headers[0].Key != pulsev1.SchemaHeader || string(r.headers[0].Value) != pulsev1.SchemaEvent ||
			r.headers[1].Key != records.PrincipalHeader || string(r.headers[1].Value) != "anonymous" {
			t.Errorf("record %s headers = %v, want %s=%s and %s=anonymous", r.event.GetEventId(), r.headers,
				pulsev1.SchemaHeader, pulsev1.SchemaEvent, records.PrincipalHeader)
		}
		if r.key != r.event.GetUserId() {
			t.Errorf("record %s key = %q, want the user id %q", r.event.GetEventId(), r.key, r.event.GetUserId())
		}
		if p, ok := partitionOf[r.key]; ok && p != r.partition {
			t.Errorf("user %s in partitions %d and %d", r.key, p, r.partition)
		}
		partitionOf[r.key] = r.partition
		byUser[r.key] = append(byUser[r.key], r)
	}
	for _, w := range want {
		recs := byUser[w.GetUserId()]
		if len(recs) == 0 {
			t.Errorf("missing record %v", w)
			continue
		}
		if !proto.Equal(recs[0].event, w) {
			t.Errorf("record of user %s =\n  %v\nwant\n  %v", w.GetUserId(), recs[0].event, w)
		}
		byUser[w.GetUserId()] = recs[1:]
	}
}

// checkV7 asserts ids are server-made: UUIDv7, increasing.
func checkV7(t *testing.T, ids ...string) {
	t.Helper()
	prev := ""
	for _, id := range ids {
		u, err := uuid.Parse(id)
		if err != nil || u.Version() != 7 || u.String() != id {
			t.Errorf("event id %q is not a canonical UUIDv7", id)
		}
		if id <= prev {
			t.Errorf("event id %q does not sort after %q", id, prev)
		}
		prev = id
	}
}

func TestPostStatusSeedEndpoint(t *testing.T) {
	hs := newHarness(t, nil)
	statuses := map[string]pulsev1.Status{
		"online":    pulsev1.Status_STATUS_ONLINE,
		"idle":      pulsev1.Status_STATUS_IDLE,
		"offline":   pulsev1.Status_STATUS_OFFLINE,
		"invisible": pulsev1.Status_STATUS_INVISIBLE,
	}
	var want []*pulsev1.Event
	var ids []string
	for i, s := range []string{"online", "idle", "offline", "invisible"} {
		user := fmt.Sprintf("user-%d", i)
		res := hs.post("/status", fmt.Sprintf(`{"userId": %q, "status": %q}`, user, s))
		if res.status != http.StatusOK || res.body != `{"success":true,"message":"Status updated successfully."}` {
			t.Fatalf("POST /status %s = %d %s", s, res.status, res.body)
		}
		if ct := res.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("Content-Type = %q", ct)
		}
		want = append(want, &pulsev1.Event{
			UserId:       user,
			Kind:         pulsev1.Kind_KIND_STATUS,
			Status:       statuses[s],
			DeviceId:     "default",
			ReceivedAtUs: nowUs,
			Source:       pulsev1.Source_SOURCE_API,
		})
	}
	got := hs.consume(len(want))
	// The seed's response carries no id; take the server-made ids from the records.
	for _, r := range got {
		for _, w := range want {
			if w.UserId == r.event.GetUserId() {
				w.EventId = r.event.GetEventId()
				ids = append(ids, w.EventId)
			}
		}
	}
	for _, id := range ids {
		checkV7(t, id)
	}
	checkRecords(t, got, want)
	if n := testutil.ToFloat64(hs.h.accepted.WithLabelValues("status")); n != 4 {
		t.Errorf("accepted status events = %v, want 4", n)
	}
}

func TestPostEventsBatch(t *testing.T) {
	hs := newHarness(t, nil)
	body := `{"events": [
		{"eventId": "client-1", "userId": "42", "status": "online", "deviceId": "phone",
		 "occurredAt": "2025-03-14T15:09:20.123456789Z"},
		{"userId": "42", "kind": "heartbeat", "deviceId": "phone"},
		{"userId": "0b9d3c5e-7f1a-4c2b-9e8d-1a2b3c4d5e6f", "kind": "activity", "occurredAt": "2025-03-14T16:14:26.5358979+01:00"},
		{"userId": "42", "kind": "status", "status": "invisible", "eventId": "client-4",
		 "occurredAt": "2025-03-14T15:04:26.535897Z"},
		{"userId": "ünïcödé", "status": "idle", "occurredAt": "2025-03-14T15:09:00Z"}
	]}`
	res := hs.post("/v1/events", body)
	if res.status != http.StatusAccepted {
		t.Fatalf("POST /v1/events = %d %s", res.status, res.body)
	}
	var out eventsResponse
	if err := json.Unmarshal([]byte(res.body), &out); err != nil {
		t.Fatal(err)
	}
	if out.Accepted != 5 || len(out.EventIDs) != 5 || out.EventIDs[0] != "client-1" || out.EventIDs[3] != "client-4" {
		t.Fatalf("response = %s", res.body)
	}
	checkV7(t, out.EventIDs[1], out.EventIDs[2], out.EventIDs[4])
	wantBody := fmt.Sprintf(`{"accepted":5,"eventIds":["client-1",%q,%q,"client-4",%q]}`, out.EventIDs[1], out.EventIDs[2], out.EventIDs[4])
	if res.body != wantBody {
		t.Errorf("body = %s, want %s", res.body, wantBody)
	}

	api := pulsev1.Source_SOURCE_API
	want := []*pulsev1.Event{
		{EventId: "client-1", UserId: "42", Kind: pulsev1.Kind_KIND_STATUS, Status: pulsev1.Status_STATUS_ONLINE,
			DeviceId: "phone", OccurredAtUs: 1741964960_123456, ReceivedAtUs: nowUs, Source: api},
		{EventId: out.EventIDs[1], UserId: "42", Kind: pulsev1.Kind_KIND_HEARTBEAT,
			DeviceId: "phone", ReceivedAtUs: nowUs, Source: api},
		// +01:00 read as UTC, truncated to µs: 5 minutes ahead, exactly the allowed skew.
		{EventId: out.EventIDs[2], UserId: "0b9d3c5e-7f1a-4c2b-9e8d-1a2b3c4d5e6f", Kind: pulsev1.Kind_KIND_ACTIVITY,
			DeviceId: "default", OccurredAtUs: 1741965266_535897, ReceivedAtUs: nowUs, Source: api},
		// 5 minutes behind: the other edge of the skew.
		{EventId: "client-4", UserId: "42", Kind: pulsev1.Kind_KIND_STATUS, Status: pulsev1.Status_STATUS_INVISIBLE,
			DeviceId: "default", OccurredAtUs: 1741964666_535897, ReceivedAtUs: nowUs, Source: api},
		{EventId: out.EventIDs[4], UserId: "ünïcödé", Kind: pulsev1.Kind_KIND_STATUS, Status: pulsev1.Status_STATUS_IDLE,
			DeviceId: "default", OccurredAtUs: 1741964940_000000, ReceivedAtUs: nowUs, Source: api},
	}
	checkRecords(t, hs.consume(len(want)), want)

	for kind, n := range map[string]float64{"status": 3, "heartbeat": 1, "activity": 1} {
		if got := testutil.ToFloat64(hs.h.accepted.WithLabelValues(kind)); got != n {
			t.Errorf("accepted %s events = %v, want %v", kind, got, n)
		}
	}
	if got := testutil.CollectAndCount(hs.h.producer.Latency); got != 1 {
		t.Errorf("latency series = %d, want 1 (acked)", got)
	}
}

func TestPostEventsFullBatch(t *testing.T) {
	hs := newHarness(t, map[string]string{"PULSE_INGEST_MAX_BATCH": "3"})
	res := hs.post("/v1/events", `{"events":[{"userId":"a","status":"online"},{"userId":"b","status":"online"},{"userId":"c","kind":"heartbeat"}]}`)
	if res.status != http.StatusAccepted {
		t.Fatalf("batch at the limit = %d %s", res.status, res.body)
	}
	if n := hs.endOffset(); n != 3 {
		t.Fatalf("topic holds %d records, want 3", n)
	}
}

func TestPostHeartbeat(t *testing.T) {
	hs := newHarness(t, nil)
	res := hs.post("/v1/heartbeat", `{"userId": "u-7", "deviceId": "tablet", "occurredAt": "2025-03-14T15:09:26Z", "eventId": "hb-1"}`)
	if res.status != http.StatusAccepted || res.body != `{"eventId":"hb-1"}` {
		t.Fatalf("POST /v1/heartbeat = %d %s", res.status, res.body)
	}
	res = hs.post("/v1/heartbeat", `{"userId": "u-7"}`)
	var out heartbeatResponse
	if err := json.Unmarshal([]byte(res.body), &out); err != nil || res.status != http.StatusAccepted {
		t.Fatalf("POST /v1/heartbeat = %d %s", res.status, res.body)
	}
	checkV7(t, out.EventID)
	if res.body != fmt.Sprintf(`{"eventId":%q}`, out.EventID) {
		t.Errorf("body = %s", res.body)
	}
	checkRecords(t, hs.consume(2), []*pulsev1.Event{
		{EventId: "hb-1", UserId: "u-7", Kind: pulsev1.Kind_KIND_HEARTBEAT, DeviceId: "tablet",
			OccurredAtUs: 1741964966_000000, ReceivedAtUs: nowUs, Source: pulsev1.Source_SOURCE_API},
		{EventId: out.EventID, UserId: "u-7", Kind: pulsev1.Kind_KIND_HEARTBEAT, DeviceId: "default",
			ReceivedAtUs: nowUs, Source: pulsev1.Source_SOURCE_API},
	})
	if n := testutil.ToFloat64(hs.h.accepted.WithLabelValues("heartbeat")); n != 2 {
		t.Errorf("accepted heartbeats = %v, want 2", n)
	}
}

func badRequest(field, message string) string {
	b, _ := json.Marshal(httpserver.BadRequest(field, message))
	return `{"error":` + string(b) + `}`
}

func TestInvalidRequestsProduceNothing(t *testing.T) {
	hs := newHarness(t, nil)
	long := strings.Repeat("x", 129)
	events := func(es ...string) string { return `{"events":[` + strings.Join(es, ",") + `]}` }
	ok := `{"userId":"u1","status":"online"}`
	many := make([]string, 1001)
	for i := range many {
		many[i] = ok
	}
	huge := `{"userId":"u1","status":"online","pad":"` + strings.Repeat("p", 1<<20) + `"}`

	tests := []struct {
		name, path, contentType, body string
		chunked                       bool
		status                        int
		want                          string
	}{
		{name: "bad status", path: "/status", body: `{"userId":"u1","status":"away"}`,
			status: 400, want: badRequest("status", "must be one of online, idle, offline, invisible")},
		{name: "missing status", path: "/status", body: `{"userId":"u1"}`,
			status: 400, want: badRequest("status", "is required for a status event")},
		{name: "missing userId", path: "/status", body: `{"status":"online"}`,
			status: 400, want: badRequest("userId", "is required")},
		{name: "null userId", path: "/v1/heartbeat", body: `{"userId":null}`,
			status: 400, want: badRequest("userId", "must not be null: leave it out for its default")},
		{name: "null occurredAt", path: "/v1/heartbeat", body: `{"userId":"u1","occurredAt":null}`,
			status: 400, want: badRequest("occurredAt", "must not be null: leave it out for its default")},
		{name: "null deviceId in a batch", path: "/v1/events", body: `{"events":[{"userId":"u1","status":"online"},{"userId":"u1","status":"online","deviceId":null}]}`,
			status: 400, want: badRequest("events[1].deviceId", "must not be null: leave it out for its default")},
		{name: "null status on the seed route", path: "/status", body: `{"userId":"u1","status":null}`,
			status: 400, want: badRequest("status", "must not be null: leave it out for its default")},
		{name: "empty userId", path: "/status", body: `{"userId":"","status":"online"}`,
			status: 400, want: badRequest("userId", "must not be empty")},
		{name: "too long userId", path: "/status", body: `{"userId":"` + long + `","status":"online"}`,
			status: 400, want: badRequest("userId", "must be at most 128 bytes, got 129")},
		{name: "control char in userId", path: "/status", body: `{"userId":"u\u0007","status":"online"}`,
			status: 400, want: badRequest("userId", "must not contain control or format characters (Unicode categories Cc and Cf), got U+0007 at byte 1")},
		{name: "bidi override in userId", path: "/status", body: `{"userId":"u\u202e1","status":"online"}`,
			status: 400, want: badRequest("userId", "must not contain control or format characters (Unicode categories Cc and Cf), got U+202E at byte 1")},
		{name: "unknown field", path: "/status", body: `{"userId":"u1","status":"online","mood":"happy"}`,
			status: 400, want: badRequest("mood", `unknown field "mood"`)},
		{name: "unknown field in batch", path: "/v1/events", body: events(ok, `{"userId":"u1","status":"online","device":"x"}`),
			status: 400, want: badRequest("events[1].device", `unknown field "device"`)},
		{name: "unknown top-level field in batch", path: "/v1/events", body: `{"events":[` + ok + `],"atomic":true}`,
			status: 400, want: badRequest("atomic", `unknown field "atomic"`)},
		{name: "heartbeat with status field", path: "/v1/heartbeat", body: `{"userId":"u1","status":"online"}`,
			status: 400, want: badRequest("status", `unknown field "status"`)},
		{name: "skew future", path: "/v1/events", body: events(`{"userId":"u1","status":"online","occurredAt":"2025-03-14T15:14:26.535898Z"}`),
			status: 400, want: badRequest("events[0].occurredAt", "is 5m0.000001s ahead of the server clock; at most 5m0s of skew is allowed")},
		{name: "skew past", path: "/v1/events", body: events(ok, `{"userId":"u1","kind":"activity","occurredAt":"2025-03-14T14:09:26.535897Z"}`),
			status: 400, want: badRequest("events[1].occurredAt", "is 1h0m0s behind the server clock; at most 5m0s of skew is allowed")},
		{name: "skew on heartbeat", path: "/v1/heartbeat", body: `{"userId":"u1","occurredAt":"2026-03-14T15:09:26Z"}`,
			status: 400, want: badRequest("occurredAt", "is 8759h59m59.464103s ahead of the server clock; at most 5m0s of skew is allowed")},
		{name: "occurredAt not a time", path: "/v1/heartbeat", body: `{"userId":"u1","occurredAt":"yesterday"}`,
			status: 400, want: badRequest("occurredAt", `must be an RFC 3339 time such as 2024-05-01T12:30:00.250Z, got "yesterday"`)},
		{name: "oversize body", path: "/status", body: huge,
			status: 413, want: `{"error":{"code":"too_large","message":"the body must be at most 1048576 bytes"}}`},
		{name: "oversize chunked body", path: "/v1/events", body: huge, chunked: true,
			status: 413, want: `{"error":{"code":"too_large","message":"the body must be at most 1048576 bytes"}}`},
		{name: "batch over max", path: "/v1/events", body: events(many...),
			status: 400, want: badRequest("events", "must hold at most 1000 events, got 1001")},
		{name: "empty batch", path: "/v1/events", body: `{"events":[]}`,
			status: 400, want: badRequest("events", "must hold at least one event")},
		{name: "no events", path: "/v1/events", body: `{}`,
			status: 400, want: badRequest("events", "must hold at least one event")},
		{name: "kind heartbeat with status", path: "/v1/events", body: events(`{"userId":"u1","kind":"heartbeat","status":"online"}`),
			status: 400, want: badRequest("events[0].status", "only status events carry a status; kind is heartbeat")},
		{name: "kind activity with status", path: "/v1/events", body: events(`{"userId":"u1","kind":"activity","status":"idle"}`),
			status: 400, want: badRequest("events[0].status", "only status events carry a status; kind is activity")},
		{name: "unknown kind", path: "/v1/events", body: events(`{"userId":"u1","kind":"typing"}`),
			status: 400, want: badRequest("events[0].kind", "must be one of status, heartbeat, activity")},
		{name: "bad event late in a valid batch", path: "/v1/events", body: events(ok, ok, `{"userId":"u2","status":"busy"}`, ok),
			status: 400, want: badRequest("events[2].status", "must be one of online, idle, offline, invisible")},
		{name: "empty deviceId", path: "/v1/events", body: events(`{"userId":"u1","status":"online","deviceId":""}`),
			status: 400, want: badRequest("events[0].deviceId", "must not be empty")},
		{name: "too long eventId", path: "/v1/heartbeat", body: `{"userId":"u1","eventId":"` + long + `"}`,
			status: 400, want: badRequest("eventId", "must be at most 128 bytes, got 129")},
		{name: "malformed JSON", path: "/status", body: `{"userId": "u1" "status": "online"}`,
			status: 400, want: badRequest("body", `malformed JSON at byte 17: invalid character '"' after object key:value pair`)},
		{name: "truncated JSON", path: "/v1/events", body: `{"events":[{"userId":"u1"`,
			status: 400, want: badRequest("body", "malformed JSON: unexpected end of input")},
		{name: "trailing data", path: "/status", body: ok + ` {"userId":"u2","status":"online"}`,
			status: 400, want: badRequest("body", "unexpected data after the JSON object")},
		{name: "trailing garbage", path: "/status", body: ok + `]`,
			status: 400, want: badRequest("body", "unexpected data after the JSON object")},
		{name: "wrong type", path: "/status", body: `{"userId":42,"status":"online"}`,
			status: 400, want: badRequest("userId", "must be a string, got number")},
		{name: "wrong type in batch", path: "/v1/events", body: events(ok, `{"userId":"u1","status":true}`),
			status: 400, want: badRequest("events[1].status", "must be a string, got bool")},
		{name: "events not an array", path: "/v1/events", body: `{"events":{"userId":"u1"}}`,
			status: 400, want: badRequest("events", "must be an array, got object")},
		{name: "event not an object", path: "/v1/events", body: events(ok, `"u1"`),
			status: 400, want: badRequest("events[1]", "must be a JSON object, got a string")},
		{name: "null event", path: "/v1/events", body: events(`null`),
			status: 400, want: badRequest("events[0]", "must be a JSON object, got null")},
		{name: "body an array", path: "/v1/events", body: `[` + ok + `]`,
			status: 400, want: badRequest("body", "must be a JSON object, got an array")},
		{name: "empty body", path: "/status", body: ``,
			status: 400, want: badRequest("body", "is empty; want a JSON object")},
		{name: "wrong content type", path: "/status", body: ok, contentType: "text/plain",
			status: 415, want: `{"error":{"code":"unsupported_media_type","message":"Content-Type must be application/json, got \"text/plain\""}}`},
		{name: "form content type", path: "/v1/events", body: events(ok), contentType: "application/x-www-form-urlencoded",
			status: 415, want: `{"error":{"code":"unsupported_media_type","message":"Content-Type must be application/json, got \"application/x-www-form-urlencoded\""}}`},
		{name: "no content type", path: "/v1/heartbeat", body: `{"userId":"u1"}`, contentType: "-",
			status: 415, want: `{"error":{"code":"unsupported_media_type","message":"Content-Type must be application/json, got \"\""}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, tt.path, strings.NewReader(tt.body))
			if tt.chunked {
				req.ContentLength = -1
			}
			ct := tt.contentType
			switch ct {
			case "":
				ct = "application/json; charset=utf-8"
			case "-":
				ct = ""
			}
			res := hs.do(req, ct)
			if res.status != tt.status || res.body != tt.want {
				t.Errorf("POST %s = %d %s\nwant %d %s", tt.path, res.status, res.body, tt.status, tt.want)
			}
			if n := hs.endOffset(); n != 0 {
				t.Fatalf("topic holds %d records after a refused request", n)
			}
			if n := hs.client.BufferedProduceRecords(); n != 0 {
				t.Fatalf("%d records buffered after a refused request", n)
			}
		})
	}
	reasons := map[int]string{400: "invalid_request", 413: "too_large", 415: "unsupported_media_type"}
	want := map[string]float64{}
	for _, tt := range tests {
		want[reasons[tt.status]]++
	}
	for reason, n := range want {
		if got := testutil.ToFloat64(hs.h.rejected.WithLabelValues(reason)); got != n {
			t.Errorf("rejected %s = %v, want %v", reason, got, n)
		}
	}
	if got := testutil.CollectAndCount(hs.h.accepted); got != 0 {
		t.Errorf("accepted series = %d, want none", got)
	}
}

func TestProduceTimeoutIs503(t *testing.T) {
	hs := newHarness(t, map[string]string{"PULSE_INGEST_ACK_TIMEOUT": "300ms"})
	// The broker takes produce requests and never answers them: an ack that never comes.
	hs.cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		hs.cluster.KeepControl()
		return nil, nil, true
	})
	start := time.Now()
	res := hs.post("/v1/events", `{"events":[{"userId":"u1","status":"online","eventId":"e1"},{"userId":"u2","kind":"heartbeat"}]}`)
	took := time.Since(start)
	want := `{"error":{"code":"unavailable","message":"Kafka did not acknowledge the events; retry later, reusing any eventId you sent"}}`
	if res.status != http.StatusServiceUnavailable || res.body != want {
		t.Fatalf("POST /v1/events = %d %s\nwant 503 %s", res.status, res.body, want)
	}
	if got := res.header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1", got)
	}
	if took < 300*time.Millisecond || took > 5*time.Second {
		t.Errorf("answered after %v, want about the 300ms ack timeout", took)
	}
	if got := testutil.ToFloat64(hs.h.rejected.WithLabelValues("unavailable")); got != 1 {
		t.Errorf("rejected unavailable = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(hs.h.accepted); got != 0 {
		t.Errorf("accepted series = %d, want none", got)
	}
	if got := testutil.CollectAndCount(hs.h.producer.Latency); got != 1 {
		t.Errorf("latency series = %d, want 1 (failed)", got)
	}
}

func TestKafkaDownIs503(t *testing.T) {
	hs := newHarness(t, map[string]string{"PULSE_INGEST_ACK_TIMEOUT": "300ms"})
	hs.cluster.Close()
	res := hs.post("/status", `{"userId":"u1","status":"online"}`)
	if res.status != http.StatusServiceUnavailable || res.header.Get("Retry-After") != "1" ||
		res.body != `{"error":{"code":"unavailable","message":"Kafka did not acknowledge the events; retry later, reusing any eventId you sent"}}` {
		t.Fatalf("POST /status with Kafka down = %d %v %s", res.status, res.header, res.body)
	}
}

// The clock stands still in the harness, so buckets never refill: what a limit
// admits and refuses is exact.
func TestRateLimits(t *testing.T) {
	hs := newHarness(t, map[string]string{"PULSE_INGEST_USER_RATE": "2", "PULSE_INGEST_USER_BURST": "3",
		"PULSE_INGEST_KEY_RATE": "10", "PULSE_INGEST_MAX_BATCH": "10"})
	for i := range 3 {
		if res := hs.post("/v1/heartbeat", `{"userId":"u-1"}`); res.status != http.StatusAccepted {
			t.Fatalf("heartbeat %d = %d %s", i, res.status, res.body)
		}
	}
	res := hs.post("/v1/heartbeat", `{"userId":"u-1"}`)
	want := `{"error":{"code":"rate_limited","message":"user \"u-1\" is over its rate of 2 events/s (PULSE_INGEST_USER_RATE); retry after Retry-After seconds"}}`
	if res.status != http.StatusTooManyRequests || res.body != want || res.header.Get("Retry-After") != "1" {
		t.Fatalf("4th heartbeat = %d %s (Retry-After %q), want 429 %s, Retry-After 1", res.status, res.body, res.header.Get("Retry-After"), want)
	}
	// Four events for one user in one request can never fit a bucket of 3.
	res = hs.post("/v1/events", `{"events":[{"userId":"u-2","kind":"activity"},{"userId":"u-2","kind":"activity"},{"userId":"u-2","kind":"activity"},{"userId":"u-2","kind":"activity"}]}`)
	want = `{"error":{"code":"too_large","message":"4 events for user \"u-2\" in one request; at most 3 (PULSE_INGEST_USER_BURST); send fewer events per request"}}`
	if res.status != http.StatusRequestEntityTooLarge || res.body != want || res.header.Get("Retry-After") != "" {
		t.Fatalf("oversized batch = %d %s (Retry-After %q), want 413 %s", res.status, res.body, res.header.Get("Retry-After"), want)
	}
	// The key (anonymous here) took 3 of its 10; the refused requests took nothing.
	if res := hs.post("/v1/events", `{"events":[{"userId":"u-3","kind":"activity"},{"userId":"u-4","kind":"activity"}]}`); res.status != http.StatusAccepted {
		t.Fatalf("2 more events = %d %s", res.status, res.body)
	}
	if res := hs.post("/v1/events", `{"events":[{"userId":"u-5","kind":"activity"},{"userId":"u-6","kind":"activity"},{"userId":"u-7","kind":"activity"},{"userId":"u-8","kind":"activity"},{"userId":"u-9","kind":"activity"}]}`); res.status != http.StatusAccepted {
		t.Fatalf("5 more events = %d %s", res.status, res.body)
	}
	res = hs.post("/v1/heartbeat", `{"userId":"u-10"}`)
	if res.status != http.StatusTooManyRequests || res.header.Get("Retry-After") != "1" ||
		res.body != `{"error":{"code":"rate_limited","message":"key anonymous is over its rate of 10 events/s (PULSE_INGEST_KEY_RATE); retry after Retry-After seconds"}}` {
		t.Fatalf("11th event of the key = %d %s", res.status, res.body)
	}
	if n := hs.endOffset(); n != 10 {
		t.Fatalf("topic holds %d records, want the 10 admitted", n)
	}
	if n := testutil.ToFloat64(hs.h.rejected.WithLabelValues("rate_limited")); n != 2 {
		t.Errorf("rejected rate_limited = %v, want 2", n)
	}
	if n := testutil.ToFloat64(hs.h.rejected.WithLabelValues("too_large")); n != 1 {
		t.Errorf("rejected too_large = %v, want 1 (the batch that never fits)", n)
	}
}
