package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// Bad group reads and writes are 400s naming the field at fault, before anything is
// read or posted: the store here is offline and the broker absent, so a request that
// got further would answer 503.
func TestGroupRoutesRefuseBadInput(t *testing.T) {
	srv := newTestServer(t, offlineStore(t))
	many := make([]string, maxGroupWriteIDs+1)
	for i := range many {
		many[i] = fmt.Sprintf("%q", fmt.Sprint("u", i))
	}
	for _, tc := range []struct {
		method, target, body string
		field, message       string
	}{
		{http.MethodGet, "/v1/groups/team%20a/online/count", "", "groupId", "must be ASCII letters"},
		{http.MethodGet, "/v1/groups/" + strings.Repeat("g", 129) + "/online", "", "groupId", "at most 128 bytes"},
		{http.MethodGet, "/v1/groups/team-a/online/count?limit=3", "", "limit", "unknown parameter"},
		{http.MethodGet, "/v1/groups/team-a/members?status=online", "", "status", "unknown parameter"},
		{http.MethodGet, "/v1/groups/team-a/members?limit=0", "", "limit", "from 1 to 1000"},
		{http.MethodGet, "/v1/groups/team-a/online?status=offline", "", "status", "must be online or idle"},
		{http.MethodPut, "/v1/groups/team-a/members", `{}`, "userIds", "is required"},
		{http.MethodPut, "/v1/groups/team-a/members", `{"userIds":["a","b","a"]}`, "userIds[2]", "is also userIds[0]"},
		{http.MethodPut, "/v1/groups/team-a/members", `{"userIds":["a",""]}`, "userIds[1]", "must not be empty"},
		{http.MethodPut, "/v1/groups/team-a/members", `{"userIds":[` + strings.Join(many, ",") + `]}`, "userIds", "at most 100000 user ids"},
		{http.MethodPut, "/v1/groups/team-a/members", `{"userIds":[],"extra":1}`, "extra", ""},
		{http.MethodPatch, "/v1/groups/team-a/members", `{}`, "add", "add or remove is required"},
		{http.MethodPatch, "/v1/groups/team-a/members", `{"add":["a"],"remove":null}`, "remove", "not null"},
		{http.MethodGet, "/v1/groups/a%25b/online/count", "", "groupId", "at byte 1"},
		{http.MethodPatch, "/v1/groups/team-a/members", `{"add":["a"],"remove":["a"]}`, "remove[0]", "is also add[0]"},
		{http.MethodPatch, "/v1/groups/te$m/members", `{"add":["a"]}`, "groupId", "at byte 2"},
	} {
		r := call(t, srv, tc.method, tc.target, tc.body, false)
		if r.code != http.StatusBadRequest || !strings.Contains(r.body, `"field":"`+tc.field+`"`) || !strings.Contains(r.body, tc.message) {
			t.Errorf("%s %s %.60s = %d %s; want 400 naming %s with %q", tc.method, tc.target, tc.body, r.code, r.body, tc.field, tc.message)
		}
	}
}

// A group read or write that gets past its checks needs Redis; with Redis down it is
// a 503 the client can retry, never an empty group.
func TestGroupRoutesWithoutRedisAre503(t *testing.T) {
	srv := newTestServer(t, offlineStore(t))
	for _, tc := range []struct{ method, target, body string }{
		{http.MethodGet, "/v1/groups/team-a/online/count", ""},
		{http.MethodGet, "/v1/groups/j%40m/online/count", ""}, // escaped more than needed: j@m
		{http.MethodGet, "/v1/groups/team-a/online", ""},
		{http.MethodGet, "/v1/groups/team-a/members", ""},
		{http.MethodPut, "/v1/groups/team-a/members", `{"userIds":["a"]}`},
		{http.MethodPatch, "/v1/groups/team-a/members", `{"add":["a"]}`},
		{http.MethodDelete, "/v1/groups/team-a/members", ""},
	} {
		if r := call(t, srv, tc.method, tc.target, tc.body, false); r.code != http.StatusServiceUnavailable {
			t.Errorf("%s %s = %d %s, want 503", tc.method, tc.target, r.code, r.body)
		}
	}
}
