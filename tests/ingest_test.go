package tests

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/tests/harness"
)

// Every class of bad input gets a 400 (or 413/415) naming the field, and nothing of
// the request reaches Kafka: the topic is read back and must hold only the one good
// event posted at the end.
func TestIngestRejectsBadInputAndWritesNothing(t *testing.T) {
	p := newIngestOnly(t)
	url := p.Svc["ingest"].URL
	now := time.Now().UTC()
	old := now.Add(-time.Hour)
	future := now.Add(time.Hour)
	long := strings.Repeat("x", 129)
	good := map[string]any{"userId": "u1", "status": "online"}

	tests := []struct {
		name   string
		path   string
		body   string
		status int
		field  string
	}{
		{"bad status", "/status", `{"userId":"u1","status":"busy"}`, 400, "status"},
		{"missing user", "/status", `{"status":"online"}`, 400, "userId"},
		{"user id too long", "/status", `{"userId":"` + long + `","status":"online"}`, 400, "userId"},
		{"control character", "/status", `{"userId":"a\u0001b","status":"online"}`, 400, "userId"},
		{"unknown field", "/status", `{"userId":"u1","status":"online","mood":"happy"}`, 400, "mood"},
		{"malformed JSON", "/status", `{"userId":`, 400, "body"},
		{"wrong type", "/status", `{"userId":42,"status":"online"}`, 400, "userId"},
		{"trailing data", "/status", `{"userId":"u1","status":"online"} {}`, 400, "body"},
		{"one bad event in a batch", "/v1/events", batchJSON(t, good, good, map[string]any{"userId": "u2", "status": "nope"}), 400, "events[2].status"},
		{"occurredAt too old", "/v1/events", batchJSON(t, map[string]any{"userId": "u1", "status": "online", "occurredAt": old}), 400, "events[0].occurredAt"},
		{"occurredAt in the future", "/v1/events", batchJSON(t, map[string]any{"userId": "u1", "status": "online", "occurredAt": future}), 400, "events[0].occurredAt"},
		{"heartbeat with status", "/v1/events", batchJSON(t, map[string]any{"userId": "u1", "kind": "heartbeat", "status": "online"}), 400, "events[0].status"},
		{"unknown kind", "/v1/events", batchJSON(t, map[string]any{"userId": "u1", "kind": "typing"}), 400, "events[0].kind"},
		{"device id too long", "/v1/events", batchJSON(t, map[string]any{"userId": "u1", "status": "online", "deviceId": long}), 400, "events[0].deviceId"},
		{"empty batch", "/v1/events", `{"events":[]}`, 400, "events"},
		{"batch too large", "/v1/events", batchJSON(t, repeat(good, 1001)...), 400, "events"},
		{"heartbeat without user", "/v1/heartbeat", `{"deviceId":"phone"}`, 400, "userId"},
		{"body too large", "/v1/events", `{"events":[` + strings.Repeat(`{"userId":"u1","status":"online"},`, 40000) + `{"userId":"u1","status":"online"}]}`, 413, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := harness.PostRaw(t, url+tt.path, "application/json", []byte(tt.body))
			var res struct {
				Error struct {
					Code    string `json:"code"`
					Message string `json:"message"`
					Field   string `json:"field"`
				} `json:"error"`
			}
			if code != tt.status || json.Unmarshal(body, &res) != nil {
				t.Fatalf("POST %s = %d %s, want %d", tt.path, code, body, tt.status)
			}
			if res.Error.Field != tt.field || res.Error.Message == "" {
				t.Errorf("error = %+v, want field %q and a message", res.Error, tt.field)
			}
		})
	}
	code, body := harness.PostRaw(t, url+"/status", "text/plain", []byte(`{"userId":"u1","status":"online"}`))
	if code != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain body = %d %s, want 415", code, body)
	}

	// Nothing so far may be in the log; one good event must be, alone.
	if recs := harness.ReadTopic(t, p.Events); len(recs) != 0 {
		t.Fatalf("bad requests reached Kafka: %d partitions hold records", len(recs))
	}
	if code, body := harness.PostJSON(t, url+"/status", good); code != http.StatusOK {
		t.Fatalf("good POST /status = %d %s", code, body)
	}
	n := 0
	for _, recs := range harness.LoggedEvents(t, p.Events) {
		for _, e := range recs {
			n++
			if e.UserId != "u1" || e.DeviceId != "default" || e.Kind.String() != "KIND_STATUS" || e.Status.String() != "STATUS_ONLINE" {
				t.Errorf("logged event = %v", e)
			}
		}
	}
	if n != 1 {
		t.Fatalf("the log holds %d events, want the 1 good one", n)
	}
}

func repeat(e map[string]any, n int) []map[string]any {
	out := make([]map[string]any, n)
	for i := range out {
		out[i] = e
	}
	return out
}

func batchJSON(t *testing.T, events ...map[string]any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"events": events})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// newIngestOnly is a pipeline with just ingest: topics of its own and no consumers.
func newIngestOnly(t *testing.T) *harness.Pipeline {
	t.Helper()
	p := harness.NewTopics(t, 4)
	p.Start(t, "ingest")
	return p
}
