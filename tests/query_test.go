package tests

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/tests/harness"
)

// Bad reads get a 400 naming the field; unknown users read as offline with
// lastUpdated null; a Redis outage is a 503 with Retry-After, never a hang.
func TestQueryRejectsBadInputAndSurvivesRedisOutage(t *testing.T) {
	port := harness.FreePort(t)
	addr, stopRedis := startRedis(t, port)
	env := harness.StackEnv()
	env["PULSE_REDIS_ADDR"] = addr
	env["PULSE_REDIS_PREFIX"] = "it-" + harness.RandomID(t)
	env["PULSE_QUERY_MAX_BATCH"] = "3"
	q := harness.StartService(t, "query", env)

	tests := []struct {
		name, method, path, body string
		status                   int
		field                    string
	}{
		{"statuses without userIds", "POST", "/statuses", `{}`, 400, "userIds"},
		{"statuses with a wrong type", "POST", "/statuses", `{"userIds":"alice"}`, 400, "userIds"},
		{"statuses with an unknown field", "POST", "/statuses", `{"userIds":["a"],"all":true}`, 400, "all"},
		{"statuses over the batch limit", "POST", "/statuses", `{"userIds":["a","b","c","d"]}`, 400, "userIds"},
		{"statuses with an empty id", "POST", "/statuses", `{"userIds":["a",""]}`, 400, "userIds[1]"},
		{"user id too long", "GET", "/status/" + strings.Repeat("x", 129), "", 400, "userId"},
		{"v1 user id too long", "GET", "/v1/users/" + strings.Repeat("x", 129) + "/status", "", 400, "userId"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var code int
			var body []byte
			if tt.method == "POST" {
				code, body = harness.PostRaw(t, q.URL+tt.path, "application/json", []byte(tt.body))
			} else {
				c, b := harness.Get(t, q.URL+tt.path)
				code, body = c, []byte(b)
			}
			var res struct {
				Error struct{ Code, Message, Field string } `json:"error"`
			}
			if code != tt.status || json.Unmarshal(body, &res) != nil || res.Error.Field != tt.field {
				t.Fatalf("%s %s = %d %s, want %d naming %q", tt.method, tt.path, code, body, tt.status, tt.field)
			}
		})
	}

	code, body := harness.Get(t, q.URL+"/status/nobody")
	if code != http.StatusOK || strings.TrimSpace(body) != `{"userId":"nobody","status":"offline","lastUpdated":null}` {
		t.Errorf("GET /status/nobody = %d %s", code, body)
	}
	c, b := harness.PostJSON(t, q.URL+"/statuses", map[string]any{"userIds": []string{"x", "y"}})
	if c != http.StatusOK || strings.TrimSpace(string(b)) != `{"statuses":[{"userId":"x","status":"offline","lastUpdated":null},{"userId":"y","status":"offline","lastUpdated":null}]}` {
		t.Errorf("POST /statuses for unknown users = %d %s", c, b)
	}
	c, b = harness.FreshCount(t, q.URL+"/v1/online/count", "")
	var counts struct {
		AsOf time.Time `json:"asOf"`
	}
	if c != http.StatusOK || json.Unmarshal(b, &counts) != nil ||
		strings.TrimSpace(string(b)) != `{"total":0,"byStatus":{"idle":0,"offline":0,"online":0},"registered":0,"asOf":"`+counts.AsOf.Format(time.RFC3339Nano)+`"}` {
		t.Errorf("GET /v1/online/count on empty state = %d %s", c, b)
	}

	// Register a shard count so reads must reach Redis, then take Redis away.
	stateRDB(t, addr).Set(t.Context(), env["PULSE_REDIS_PREFIX"]+":shards", 4, 0)
	stopRedis()
	start := time.Now()
	res, err := harness.KeyedClient.Get(q.URL + "/status/alice")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
		t.Errorf("with Redis down GET /status = %d (Retry-After %q), want 503 with Retry-After", res.StatusCode, res.Header.Get("Retry-After"))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the failed read took %v: reads must fail within their deadline", d)
	}
	// Counts are served from the last read for at most PULSE_QUERY_COUNTS_MAX_AGE (1s),
	// then a count needs Redis too.
	time.Sleep(1500 * time.Millisecond)
	code, body = harness.Get(t, q.URL+"/v1/online/count")
	if code != http.StatusServiceUnavailable {
		t.Errorf("with Redis down for 1.5s GET /v1/online/count = %d %s, want 503", code, body)
	}
}
