package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/pulse-presence/pulse/internal/api/auth"
)

// keys new prints a key and the line that declares it: the line finds the key, with
// the scopes asked for, and holds only its digest.
func TestKeysNew(t *testing.T) {
	var out bytes.Buffer
	if err := runKeys(context.Background(), []string{"new", "-scope", "read,operator", "-name", "dashboard"}, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	if len(lines) < 4 {
		t.Fatalf("output:\n%s", out.String())
	}
	key, line := strings.TrimSpace(lines[1]), strings.TrimSpace(lines[3])
	if strings.Contains(line, key) || !strings.HasPrefix(line, "dashboard read,operator sha256:") {
		t.Fatalf("line %q for key %q", line, key)
	}
	keys, err := auth.ParseKeys(strings.NewReader(line), "out")
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := keys.Lookup(key); !ok || p.Name != "dashboard" || p.Scopes != auth.ScopeRead|auth.ScopeOperator || p.UserID != "" {
		t.Fatalf("Lookup = %+v %v", p, ok)
	}
	for _, args := range [][]string{{"new"}, {"new", "-scope", "admin"}, {"old"}, {"new", "-scope", "write", "-name", "a,b"}} {
		if err := runKeys(context.Background(), args, &out); err == nil {
			t.Errorf("keys %v: no error", args)
		}
	}
}
