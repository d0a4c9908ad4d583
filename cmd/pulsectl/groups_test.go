package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeGroups is query's group routes over one group held in memory: membership
// writes answer like query's (PUT posts the difference, PATCH every id given, DELETE
// a leave per member), and become visible to reads only after lag more reads of the
// members, as the aggregator folds them a little later. It records every request.
type fakeGroups struct {
	t      *testing.T
	mu     sync.Mutex
	group  string
	folded []string          // members as reads see them, in listing order
	next   []string          // members once the writes are folded
	lag    int               // member reads before next is folded
	status map[string]string // users' statuses; absent: offline
	// fail answers the n-th write (1-based) with a 503.
	fail int
	log  []string // "METHOD path?query key body"
}

func newFakeGroups(t *testing.T, group string, members ...string) (*fakeGroups, *httptest.Server) {
	f := &fakeGroups{t: t, group: group, folded: members, next: slices.Clone(members), status: map[string]string{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeGroups) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.log)
}

func (f *fakeGroups) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	body := new(bytes.Buffer)
	_, _ = body.ReadFrom(r.Body)
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	f.log = append(f.log, strings.TrimSpace(fmt.Sprintf("%s %s?%s %s %s", r.Method, r.URL.EscapedPath(), r.URL.RawQuery, key, body)))
	w.Header().Set("Content-Type", "application/json")
	fail := func(code int, field, msg string) {
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"error":{"code":"x","message":%q,"field":%q}}`, msg, field)
	}
	prefix := "/v1/groups/" + f.group
	if !strings.HasPrefix(r.URL.Path, prefix+"/") {
		fail(http.StatusBadRequest, "groupId", "unknown group in the fake")
		return
	}
	route := r.Method + " " + strings.TrimPrefix(r.URL.Path, prefix)
	if r.Method != http.MethodGet {
		if key == "" {
			fail(http.StatusUnauthorized, "", "no key")
			return
		}
		if key != "writer" {
			fail(http.StatusForbidden, "", "the key may not write")
			return
		}
		if f.fail--; f.fail == 0 {
			w.Header().Set("Retry-After", "1")
			fail(http.StatusServiceUnavailable, "", "Kafka did not acknowledge the member events; retry the request (it is idempotent)")
			return
		}
	} else if key != "reader" && key != "operator" {
		fail(http.StatusUnauthorized, "", "no key")
		return
	}
	switch route {
	case "PUT /members":
		var req struct{ UserIDs []string }
		f.decode(body.Bytes(), &req)
		joins, leaves := difference(f.next, req.UserIDs)
		f.next = slices.Clone(req.UserIDs)
		fmt.Fprintf(w, `{"groupId":%q,"joins":%d,"leaves":%d}`, f.group, len(joins), len(leaves))
	case "PATCH /members":
		var req patchBody
		f.decode(body.Bytes(), &req)
		f.next = slices.DeleteFunc(f.next, func(id string) bool { return slices.Contains(req.Remove, id) })
		for _, id := range req.Add {
			if !slices.Contains(f.next, id) {
				f.next = append(f.next, id)
			}
		}
		fmt.Fprintf(w, `{"groupId":%q,"joins":%d,"leaves":%d}`, f.group, len(req.Add), len(req.Remove))
	case "DELETE /members":
		fmt.Fprintf(w, `{"groupId":%q,"joins":0,"leaves":%d}`, f.group, len(f.next))
		f.next = []string{}
	case "GET /members":
		if f.lag--; f.lag < 0 {
			f.folded = slices.Clone(f.next)
		}
		ids, next := page(f.folded, r)
		f.write(w, map[string]any{"userIds": ids, "nextCursor": next})
	case "GET /online/count":
		operator := r.URL.Query().Get("view") == "operator"
		by := map[string]uint64{"online": 0, "idle": 0, "offline": 0}
		if operator {
			by["invisible"] = 0
		}
		for _, id := range f.folded {
			st := f.public(id, operator)
			by[st]++
		}
		f.write(w, map[string]any{"groupId": f.group, "total": by["online"] + by["idle"] + by["invisible"], "byStatus": by,
			"members": len(f.folded), "asOf": "2026-11-22T20:00:00Z"})
	case "GET /online":
		operator := r.URL.Query().Get("view") == "operator"
		var present []string
		for _, id := range f.folded {
			st := f.public(id, operator)
			if st != "offline" && (r.URL.Query().Get("status") == "" || r.URL.Query().Get("status") == st) {
				present = append(present, id)
			}
		}
		ids, next := page(present, r)
		users := []map[string]string{}
		for _, id := range ids {
			users = append(users, map[string]string{"userId": id, "status": f.public(id, operator)})
		}
		f.write(w, map[string]any{"users": users, "nextCursor": next})
	default:
		fail(http.StatusNotFound, "", "no route "+route)
	}
}

// public is id's status as the view sees it: invisible is offline to readers.
func (f *fakeGroups) public(id string, operator bool) string {
	st := f.status[id]
	if st == "" || (st == "invisible" && !operator) {
		return "offline"
	}
	return st
}

func (f *fakeGroups) decode(b []byte, v any) {
	if err := json.Unmarshal(b, v); err != nil {
		f.t.Errorf("request body %s: %v", b, err)
	}
}

func (f *fakeGroups) write(w http.ResponseWriter, v any) {
	if err := json.NewEncoder(w).Encode(v); err != nil {
		f.t.Error(err)
	}
}

// page is the page of ids that r's limit and cursor (an offset) ask for.
func page(ids []string, r *http.Request) ([]string, *string) {
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	from, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
	to := min(from+limit, len(ids))
	out := append([]string{}, ids[from:to]...)
	if to == len(ids) {
		return out, nil
	}
	next := strconv.Itoa(to)
	return out, &next
}

// groupsEnv is the environment of a pulsectl run against srv with a writer and a
// reader (or operator) key.
func groupsEnv(srv *httptest.Server, readKey string) func(string) string {
	return func(k string) string {
		switch k {
		case "PULSE_QUERY_URL":
			return srv.URL
		case "PULSE_PRODUCER_KEY":
			return "writer"
		case "PULSE_READER_KEY":
			if readKey == "reader" {
				return readKey
			}
		case "PULSE_OPERATOR_KEY":
			if readKey == "operator" {
				return readKey
			}
		}
		return ""
	}
}

// groupsRun runs pulsectl groups args with stdin and returns what it printed.
func groupsRun(t *testing.T, env func(string) string, stdin string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := runGroupsEnv(context.Background(), args, strings.NewReader(stdin), &out, env)
	return out.String(), err
}

func groupsMust(t *testing.T, env func(string) string, stdin string, args ...string) string {
	t.Helper()
	out, err := groupsRun(t, env, stdin, args...)
	if err != nil {
		t.Fatalf("groups %v: %v", args, err)
	}
	return out
}

// set, add, remove and delete post what they are given with the write key, say what
// query posted, and with -wait print the counts once the members show the write.
func TestGroupsWrites(t *testing.T) {
	f, srv := newFakeGroups(t, "team-a", "old")
	f.status = map[string]string{"alice": "online", "bob": "idle", "carol": "invisible"}
	env := groupsEnv(srv, "reader")
	file := filepath.Join(t.TempDir(), "users.txt")
	if err := os.WriteFile(file, []byte("  bob\r\n\n\tcarol \n"), 0o600); err != nil {
		t.Fatal(err)
	}

	if got, want := groupsMust(t, env, "", "set", "team-a", "alice", "-file", file), "posted 3 joins, 1 leave to team-a\n"; got != want {
		t.Errorf("set = %q, want %q", got, want)
	}
	if got, want := f.requests(), []string{`PUT /v1/groups/team-a/members? writer {"userIds":["alice","bob","carol"]}`}; !slices.Equal(got, want) {
		t.Errorf("set asked %q, want %q", got, want)
	}

	// The write is folded after two reads of the members: -wait reads until then.
	f.lag = 2
	if got, want := groupsMust(t, env, "dave\n", "add", "-wait", "team-a", "-file", "-"), "posted 1 join, 0 leaves to team-a\n"+
		"team-a: 4 members, 1 online, 1 idle, 2 offline\n"; got != want {
		t.Errorf("add -wait =\n%s\nwant\n%s", got, want)
	}
	if got, want := f.requests()[1:], []string{
		`PATCH /v1/groups/team-a/members? writer {"add":["dave"]}`,
		`GET /v1/groups/team-a/members?limit=1000 reader`,
		`GET /v1/groups/team-a/members?limit=1000 reader`,
		`GET /v1/groups/team-a/members?limit=1000 reader`,
		`GET /v1/groups/team-a/online/count? reader`,
	}; !slices.Equal(got, want) {
		t.Errorf("add -wait asked\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The operator key's counts hold invisible users.
	f.lag = 0
	if got, want := groupsMust(t, groupsEnv(srv, "operator"), "", "remove", "team-a", "bob", "dave", "-wait"), "posted 0 joins, 2 leaves to team-a\n"+
		"team-a: 2 members, 1 online, 0 idle, 1 invisible, 0 offline\n"; got != want {
		t.Errorf("remove -wait =\n%s\nwant\n%s", got, want)
	}
	if got, want := groupsMust(t, env, "", "delete", "team-a", "-wait"), "posted 0 joins, 2 leaves to team-a\n"+
		"team-a: 0 members, 0 online, 0 idle, 0 offline\n"; got != want {
		t.Errorf("delete -wait =\n%s\nwant\n%s", got, want)
	}
	if got := f.requests(); !slices.Contains(got, `DELETE /v1/groups/team-a/members? writer`) {
		t.Errorf("delete asked %q", got)
	}
}

// More ids than -batch: set posts the difference with the current members in
// PATCHes (leaves first), never a PUT, and add and remove split theirs.
func TestGroupsBatches(t *testing.T) {
	f, srv := newFakeGroups(t, "big", "a", "b", "c", "x")
	env := groupsEnv(srv, "reader")
	if got, want := groupsMust(t, env, "", "set", "-batch", "2", "big", "a", "b", "d", "e", "f"), "posted 3 joins, 2 leaves to big in 3 requests\n"; got != want {
		t.Errorf("set = %q, want %q", got, want)
	}
	want := []string{
		`GET /v1/groups/big/members?limit=1000 reader`,
		`PATCH /v1/groups/big/members? writer {"remove":["c","x"]}`,
		`PATCH /v1/groups/big/members? writer {"add":["d","e"]}`,
		`PATCH /v1/groups/big/members? writer {"add":["f"]}`,
	}
	if got := f.requests(); !slices.Equal(got, want) {
		t.Errorf("set asked\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got, want := f.next, []string{"a", "b", "d", "e", "f"}; !slices.Equal(got, want) {
		t.Errorf("members after set = %v, want %v", got, want)
	}

	if got, want := groupsMust(t, env, "", "remove", "big", "a", "b", "d", "-batch", "2"), "posted 0 joins, 3 leaves to big in 2 requests\n"; got != want {
		t.Errorf("remove = %q, want %q", got, want)
	}
	if got, want := f.requests()[4:], []string{
		`PATCH /v1/groups/big/members? writer {"remove":["a","b"]}`,
		`PATCH /v1/groups/big/members? writer {"remove":["d"]}`,
	}; !slices.Equal(got, want) {
		t.Errorf("remove asked %q, want %q", got, want)
	}

	// A failure half way says what was posted, and that running again is safe.
	f.fail = 2
	_, err := groupsRun(t, env, "", "add", "big", "p", "q", "r", "-batch", "1")
	if want := "request 2 of 3: PATCH /v1/groups/big/members: 503 Kafka did not acknowledge the member events; retry the request (it is idempotent) " +
		"(retry after 1s); the ones before it posted 1 join, 0 leaves, so run the command again"; err == nil || err.Error() != want {
		t.Errorf("add with a failing second request: %v\nwant %s", err, want)
	}
}

// show prints the counts and every member, following the cursor; online lists the
// present members, page after page.
func TestGroupsReads(t *testing.T) {
	ids := make([]string, 2500)
	for i := range ids {
		ids[i] = fmt.Sprintf("u%04d", i)
	}
	f, srv := newFakeGroups(t, "chan:general", ids...)
	f.status = map[string]string{"u0001": "online", "u1500": "idle", "u2499": "online", "u0002": "invisible"}
	env := groupsEnv(srv, "reader")

	out := groupsMust(t, env, "", "show", "chan:general")
	wantHead := "STATUS   USERS\nonline   2\nidle     1\noffline  2497\ntotal    3\nmembers  2500\n\nMEMBER\nu0000\nu0001\n"
	if !strings.HasPrefix(out, wantHead) || !strings.HasSuffix(out, "\nu2499\n") || strings.Count(out, "\n") != 7+1+2500 {
		t.Errorf("show = %.200s … (%d lines), want it to start with\n%s", out, strings.Count(out, "\n"), wantHead)
	}
	if got, want := f.requests(), []string{
		`GET /v1/groups/chan:general/online/count? reader`,
		`GET /v1/groups/chan:general/members?limit=1000 reader`,
		`GET /v1/groups/chan:general/members?cursor=1000&limit=1000 reader`,
		`GET /v1/groups/chan:general/members?cursor=2000&limit=1000 reader`,
	}; !slices.Equal(got, want) {
		t.Errorf("show asked\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got, want := groupsMust(t, groupsEnv(srv, "operator"), "", "show", "-count", "-csv", "chan:general"),
		"STATUS,USERS\nonline,2\nidle,1\ninvisible,1\noffline,2496\ntotal,4\nmembers,2500\n"; got != want {
		t.Errorf("show -count -csv =\n%s\nwant\n%s", got, want)
	}
	if got, want := groupsMust(t, env, "", "online", "chan:general", "-limit", "2"), "USER   STATUS\nu0001  online\nu1500  idle\nu2499  online\n"; got != want {
		t.Errorf("online =\n%s\nwant\n%s", got, want)
	}
	if got, want := f.requests()[5:], []string{
		`GET /v1/groups/chan:general/online?limit=2 reader`,
		`GET /v1/groups/chan:general/online?cursor=2&limit=2 reader`,
	}; !slices.Equal(got, want) {
		t.Errorf("online asked %q, want %q", got, want)
	}
	if got, want := groupsMust(t, groupsEnv(srv, "operator"), "", "online", "-csv", "-status", "invisible", "chan:general"), "USER,STATUS\nu0002,invisible\n"; got != want {
		t.Errorf("online -status invisible =\n%s\nwant\n%s", got, want)
	}
	if got, want := f.requests()[7], `GET /v1/groups/chan:general/online?limit=1000&status=invisible&view=operator operator`; got != want {
		t.Errorf("online -status asked %q, want %q", got, want)
	}
}

// Bad input is refused before any request, saying where it stands; query's refusals
// come with its message and what to set.
func TestGroupsErrors(t *testing.T) {
	f, srv := newFakeGroups(t, "team-a")
	env := groupsEnv(srv, "reader")
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.txt")
	if err := os.WriteFile(bad, []byte("alice\n\nbob\x07\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dup := filepath.Join(dir, "dup.txt")
	if err := os.WriteFile(dup, []byte("bob\nalice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args  []string
		stdin string
		want  string
	}{
		{nil, "", groupsUsage},
		{[]string{"list", "team-a"}, "", `unknown groups "list"; ` + groupsUsage},
		{[]string{"set"}, "", "usage: pulsectl groups set GROUP [USER...] [-file F] [-wait]"},
		{[]string{"set", "team a", "alice"}, "", `group id "team a": must be ASCII letters, digits and - _ . : @ only, got ' ' at byte 4`},
		{[]string{"set", "team-a"}, "", "no user ids: give them as arguments or with -file; pulsectl groups delete team-a empties the group"},
		{[]string{"add", "team-a", "-file", "-"}, "\n \n", "no user ids: give them as arguments or with -file"},
		{[]string{"add", "team-a", "-file", bad}, "", bad + `:3: user id "bob\a" must not contain control or format characters (Unicode categories Cc and Cf), got U+0007 at byte 3`},
		{[]string{"add", "team-a", "alice", "-file", dup}, "", dup + `:2: user "alice" is also argument 2`},
		{[]string{"add", "team-a", "-file", filepath.Join(dir, "none.txt")}, "", "-file: open " + filepath.Join(dir, "none.txt") + ": no such file or directory"},
		{[]string{"add", "team-a", "a", "-batch", "100001"}, "", "-batch=100001: want 1 to 100000"},
		{[]string{"show", "team-a", "team-b"}, "", `show takes one group id, got ["team-a" "team-b"]; usage: pulsectl groups show GROUP [-count] [-csv]`},
		{[]string{"delete", "team-a", "alice"}, "", `delete takes one group id, got ["team-a" "alice"]; usage: pulsectl groups delete GROUP [-wait]`},
	} {
		_, err := groupsRun(t, env, c.stdin, c.args...)
		if err == nil || err.Error() != c.want {
			t.Errorf("groups %q: %v\nwant %s", c.args, err, c.want)
		}
	}
	if got := f.requests(); len(got) != 0 {
		t.Errorf("bad input made requests: %q", got)
	}

	// Without a write key, or with one that may not write.
	noWriter := func(k string) string {
		if k == "PULSE_PRODUCER_KEY" {
			return ""
		}
		return env(k)
	}
	if _, err := groupsRun(t, noWriter, "", "add", "team-a", "alice"); err == nil ||
		err.Error() != "PATCH /v1/groups/team-a/members: 401 no key (set PULSE_PRODUCER_KEY to a key with the write scope)" {
		t.Errorf("add without a write key: %v", err)
	}
	readerWrites := func(k string) string {
		if k == "PULSE_PRODUCER_KEY" {
			return "reader"
		}
		return env(k)
	}
	if _, err := groupsRun(t, readerWrites, "", "delete", "team-a"); err == nil ||
		err.Error() != "DELETE /v1/groups/team-a/members: 403 the key may not write (PULSE_PRODUCER_KEY must be an API key with the write scope)" {
		t.Errorf("delete with a read key: %v", err)
	}
	noReader := func(k string) string {
		if k == "PULSE_READER_KEY" {
			return ""
		}
		return env(k)
	}
	if _, err := groupsRun(t, noReader, "", "online", "team-a"); err == nil ||
		err.Error() != "/v1/groups/team-a/online: 401 no key (set PULSE_READER_KEY or PULSE_OPERATOR_KEY)" {
		t.Errorf("online without a read key: %v", err)
	}
	// query's 400 names the parameter.
	if _, err := groupsRun(t, env, "", "show", "team-b"); err == nil || err.Error() != "/v1/groups/team-b/online/count: 400 groupId: unknown group in the fake" {
		t.Errorf("show of a group query refuses: %v", err)
	}
	// -wait gives up at -timeout, saying what is missing.
	f.lag = 1 << 30
	_, err := groupsRun(t, env, "", "add", "team-a", "alice", "bob", "-wait", "-timeout", "500ms")
	if want := "the members of team-a do not show the write within -timeout: 2 users are not members yet (alice, bob)"; err == nil || err.Error() != want {
		t.Errorf("add -wait never folded: %v\nwant %s", err, want)
	}
}
