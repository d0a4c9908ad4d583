package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// forget sends DELETE /v1/users/{id} with the operator key and prints the erasure.
func TestForgetCallsTheRouteWithTheOperatorKey(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Method + " " + r.URL.EscapedPath() + " " + r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		w.Write([]byte(`{"userId":"a b","eventId":"e1","erasedAt":"2026-11-22T07:20:00.5Z"}`))
	}))
	defer srv.Close()
	env := map[string]string{"PULSE_QUERY_URL": srv.URL, "PULSE_OPERATOR_KEY": "op-key"}
	var out bytes.Buffer
	if err := runForgetEnv(context.Background(), []string{"a b"}, &out, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if got != "DELETE /v1/users/a%20b Bearer op-key" {
		t.Errorf("request = %q", got)
	}
	if !strings.HasPrefix(out.String(), "erased a b at 2026-11-22T07:20:00.5Z (event e1)") {
		t.Errorf("output = %q", out.String())
	}
	// Without an operator key it refuses before calling.
	env = map[string]string{"PULSE_QUERY_URL": srv.URL, "PULSE_READER_KEY": "r"}
	if err := runForgetEnv(context.Background(), []string{"x"}, &out, func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "PULSE_OPERATOR_KEY") {
		t.Errorf("forget with a reader key = %v", err)
	}
}
