package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// An answer of the recent past that is not final says so under the table, never in
// CSV; a final one and the present say nothing.
func TestOnlineSaysWhenAnAnswerIsProvisional(t *testing.T) {
	final := map[string]any{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ans := map[string]any{"total": 3, "byStatus": map[string]int{"online": 2, "idle": 1}}
		if f, ok := final[r.URL.Query().Get("at")]; ok {
			ans["final"] = f
		}
		_ = json.NewEncoder(w).Encode(ans)
	}))
	defer srv.Close()
	final["2026-11-27T06:00:00Z"], final["2026-11-20T06:00:00Z"] = false, true
	env := func(k string) string {
		if k == "PULSE_QUERY_URL" {
			return srv.URL
		}
		return ""
	}
	const table = "STATUS  USERS\nonline  2\nidle    1\ntotal   3\n"
	const note = "provisional: the instant is inside history's lateness; a change that reaches history late may still alter this answer\n"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-count", "-at", "2026-11-27T06:00:00Z"}, table + note},
		{[]string{"-count", "-at", "2026-11-27T06:00:00Z", "-csv"}, "STATUS,USERS\nonline,2\nidle,1\ntotal,3\n"},
		{[]string{"-count", "-at", "2026-11-20T06:00:00Z"}, table},
		{[]string{"-count"}, table},
	} {
		var out bytes.Buffer
		if err := runOnlineEnv(t.Context(), c.args, &out, env); err != nil {
			t.Fatalf("online %v: %v", c.args, err)
		}
		if out.String() != c.want {
			t.Errorf("online %v =\n%s\nwant\n%s", c.args, out.String(), c.want)
		}
	}
}
