package tests

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/pulse-presence/pulse/tests/harness"
)

// Ids with a character of Unicode category Cc (C0 and C1 controls) or Cf (bidi
// overrides, zero-width characters) are refused with a 400 naming the field, and
// nothing of the request reaches the log; query refuses them too.
func TestIDsRefuseControlAndFormatCharacters(t *testing.T) {
	p := harness.NewTopics(t, 2)
	p.Start(t, "ingest")
	p.Start(t, "query")
	ing, q := p.Svc["ingest"].URL, p.Svc["query"].URL
	bad := map[string]string{
		"U+202E right-to-left override": "ali\u202ece",
		"U+200B zero-width space":       "ali\u200bce",
		"U+0085 next line (C1)":         "ali\u0085ce",
		"U+FEFF byte order mark":        "\ufeffalice",
		"U+2066 left-to-right isolate":  "ali\u2066ce",
		"U+E0041 tag latin A":           "alice\U000E0041",
	}
	type refusal struct {
		Error struct {
			Code, Message, Field string
		} `json:"error"`
	}
	for name, id := range bad {
		t.Run(name, func(t *testing.T) {
			cases := []struct {
				method, url, body, field string
			}{
				{"POST", ing + "/status", batchless(map[string]any{"userId": id, "status": "online"}), "userId"},
				{"POST", ing + "/v1/events", batchJSON(t, map[string]any{"userId": "ok", "status": "online"}, map[string]any{"userId": id, "status": "online"}), "events[1].userId"},
				{"POST", ing + "/v1/events", batchJSON(t, map[string]any{"userId": "ok", "status": "online", "deviceId": id}), "events[0].deviceId"},
				{"POST", ing + "/v1/events", batchJSON(t, map[string]any{"userId": "ok", "status": "online", "eventId": id}), "events[0].eventId"},
				{"POST", ing + "/v1/heartbeat", batchless(map[string]any{"userId": id}), "userId"},
				{"GET", q + "/status/" + urlPath(id), "", "userId"},
				{"GET", q + "/v1/users/" + urlPath(id) + "/status", "", "userId"},
				{"POST", q + "/statuses", batchless(map[string]any{"userIds": []string{"ok", id}}), "userIds[1]"},
				{"POST", q + "/v1/online/filter", batchless(map[string]any{"userIds": []string{id}}), "userIds[0]"},
			}
			for _, c := range cases {
				key := harness.TestKeys.Producer
				if strings.HasPrefix(c.url, q) {
					key = harness.TestKeys.Reader
				}
				code, _, body := authDo(t, c.method, c.url, key, c.body)
				var r refusal
				if code != http.StatusBadRequest || json.Unmarshal([]byte(body), &r) != nil ||
					r.Error.Code != "invalid_request" || r.Error.Field != c.field || !strings.Contains(r.Error.Message, "control or format characters") {
					t.Errorf("%s %s = %d %s, want 400 invalid_request field %s saying control or format characters", c.method, c.url, code, body, c.field)
				}
			}
		})
	}
	if recs := harness.ReadTopic(t, p.Events); len(recs) != 0 {
		t.Fatalf("refused ids reached Kafka: %d partitions hold records", len(recs))
	}
}

func batchless(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// urlPath escapes id as one path segment.
func urlPath(id string) string { return url.PathEscape(id) }
