package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// A connection's read limit follows what its principal may name: a key maxUsers ids
// of the longest kind, a user token its own and its pulse_watch claim's ids, escaped
// as much as a JSON encoder may.
func TestReadLimitFollowsThePrincipal(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	a, err := auth.New(auth.Config{JWT: auth.JWTConfig{HS256Secret: secret}})
	if err != nil {
		t.Fatal(err)
	}
	principal := func(user string, watch ...string) auth.Principal {
		tok, err := auth.MintUserToken(secret, auth.UserToken{User: user, Watch: watch, TTL: time.Hour, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		p, err := a.Authenticate(tok)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := auth.Principal{Name: "k", Scopes: auth.ScopeRead}
	if got, want := readLimit(key, 10_000), int64(256+10_000*(presence.MaxUserIDLen+8)); got != want {
		t.Fatalf("a key's read limit %d, want %d", got, want)
	}
	friends := []string{"bob", "carol<&>", "dörte", "😀"}
	p := principal("alice", friends...)
	limit := readLimit(p, 10_000)
	// The largest command it may send: every id, each escaped as \uXXXX, spaced.
	var b strings.Builder
	b.WriteString(`{ "op" : "subscribe" , "userIds" : [ `)
	for i, id := range append([]string{"alice"}, friends...) {
		if i > 0 {
			b.WriteString(" , ")
		}
		q, _ := json.Marshal(id)
		b.WriteString(strings.NewReplacer("ö", `\u00f6`, "😀", `\ud83d\ude00`).Replace(string(q)))
	}
	b.WriteString(" ] }")
	if int64(b.Len()) > limit {
		t.Fatalf("the token's largest command is %d bytes, its read limit %d", b.Len(), limit)
	}
	if limit > 1024 {
		t.Fatalf("a token naming 5 short ids reads up to %d bytes", limit)
	}
	if got := readLimit(principal("alice"), 10_000); got > 512 {
		t.Fatalf("a token naming itself only reads up to %d bytes", got)
	}
	if got := readLimit(p, 2); got >= limit {
		t.Fatalf("maxUsers 2 gives %d, not below %d", got, limit)
	}
}
