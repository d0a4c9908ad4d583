package main

import (
	"bytes"
	"log/slog"
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

// The audit line names the action, the user and the credential, at info.
func TestAuditLine(t *testing.T) {
	var buf bytes.Buffer
	audit(slog.New(slog.NewTextHandler(&buf, nil)), "erase", "bob", "ops-key")
	got := buf.String()
	for _, want := range []string{"level=INFO", "msg=audit", "action=erase", "user=bob", "credential=ops-key"} {
		if !strings.Contains(got, want) {
			t.Errorf("audit line %q lacks %q", got, want)
		}
	}
}
