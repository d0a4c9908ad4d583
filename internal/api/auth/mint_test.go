package auth

import (
	"strings"
	"testing"
	"time"
)

// A minted token passes the verifier configured with the same secret, issuer and
// audience, for its user and the users it may watch; bad input is refused.
func TestMintUserToken(t *testing.T) {
	secret := strings.Repeat("s", 40)
	a, err := New(Config{JWT: JWTConfig{HS256Secret: secret, Issuer: "pulse-dev", Audience: "pulse"}})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := MintUserToken(secret, UserToken{User: "alice", Watch: []string{"bob"}, Issuer: "pulse-dev", Audience: "pulse",
		TTL: time.Hour, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Authenticate(tok)
	if err != nil || p.UserID != "alice" || !p.MayWatch("bob") || p.MayWatch("carol") {
		t.Fatalf("Authenticate(minted) = %+v, %v; want alice, who may watch bob and not carol", p, err)
	}
	other, err := MintUserToken(secret, UserToken{User: "alice", Issuer: "elsewhere", Audience: "pulse", TTL: time.Hour, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(other); err == nil {
		t.Fatal("a token of another issuer passed")
	}
	for _, tt := range []struct {
		name, secret string
		tok          UserToken
		want         string
	}{
		{"short secret", "short", UserToken{User: "alice", TTL: time.Hour}, "at least 32 bytes"},
		{"no user", secret, UserToken{TTL: time.Hour}, "user:"},
		{"bad watch id", secret, UserToken{User: "alice", Watch: []string{strings.Repeat("x", 200)}, TTL: time.Hour}, "watch[0]"},
		{"no ttl", secret, UserToken{User: "alice"}, "TTL must be positive"},
	} {
		if _, err := MintUserToken(tt.secret, tt.tok); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: MintUserToken = %v, want an error with %q", tt.name, err, tt.want)
		}
	}
}
