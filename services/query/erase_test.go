package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// An erasure names a valid user id (400 otherwise, as every route naming a user), and
// is answered only once Kafka acknowledged it: with no broker, a 503 to retry, never a
// 202.
func TestEraseValidatesAndWaitsForKafka(t *testing.T) {
	srv := newTestServer(t, offlineStore(t))
	r := call(t, srv, http.MethodDelete, "/v1/users/a%01b", "", true)
	if r.code != http.StatusBadRequest || !strings.Contains(r.body, `"userId`) {
		t.Errorf("DELETE of a bad id = %d %s; want 400 naming userId", r.code, r.body)
	}
	r = call(t, srv, http.MethodDelete, "/v1/users/"+strings.Repeat("x", 129), "", true)
	if r.code != http.StatusBadRequest {
		t.Errorf("DELETE of a 129-byte id = %d %s; want 400", r.code, r.body)
	}
	r = call(t, srv, http.MethodDelete, "/v1/users/alice", "", true)
	if r.code != http.StatusServiceUnavailable {
		t.Errorf("DELETE with Kafka away = %d %s; want 503", r.code, r.body)
	}
}

// The erase route needs the operator scope, whatever the view.
func TestEraseNeedsTheOperatorScope(t *testing.T) {
	found := false
	for _, r := range operatorWriteRoutes {
		found = found || r == http.MethodDelete+" "+userPath
	}
	if !found {
		t.Fatalf("operatorWriteRoutes = %v lacks DELETE %s", operatorWriteRoutes, userPath)
	}
}

// Every erasure the guard lets through is audited, whatever answers it: the action,
// the user once their id is valid, the credential's name (never its secret) and the
// status, at info.
func TestEraseIsAudited(t *testing.T) {
	var log bytes.Buffer
	srv := newTestServerLogging(t, offlineStore(t), nil, &log)
	for _, tc := range []struct {
		target, user string
		code         int
	}{
		{"/v1/users/a%01b", "", http.StatusBadRequest},
		{"/v1/users/bob", "bob", http.StatusServiceUnavailable}, // Kafka away
	} {
		before := len(auditLines(t, log.String()))
		if r := call(t, srv, http.MethodDelete, tc.target, "", true); r.code != tc.code {
			t.Errorf("DELETE %s = %d %s; want %d", tc.target, r.code, r.body, tc.code)
		}
		lines := auditLines(t, log.String())
		if len(lines) != before+1 {
			t.Errorf("DELETE %s: %d audit lines, want one", tc.target, len(lines)-before)
			continue
		}
		want := map[string]any{"level": "INFO", "msg": "audit", "action": "erase", "user": tc.user,
			"credential": "operator-token", "status": float64(tc.code)}
		a, _ := json.Marshal(lines[len(lines)-1])
		b, _ := json.Marshal(want)
		if !bytes.Equal(a, b) {
			t.Errorf("DELETE %s: audit line %s, want %s", tc.target, a, b)
		}
	}
	if strings.Contains(log.String(), testToken) {
		t.Errorf("the log shows the operator token:\n%s", log.String())
	}
}
