package tests

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/tests/harness"
)

// TestUserTokenAgeIsBounded: a user token must carry iat, and one issued longer ago
// than PULSE_JWT_MAX_AGE is refused whatever its exp says, against a running query.
// A token minted as pulsectl token mints it passes.
func TestUserTokenAgeIsBounded(t *testing.T) {
	p := harness.NewTopics(t, 1)
	p.Env["PULSE_JWT_MAX_AGE"] = "1h"
	p.Start(t, "query")
	alice := p.Run + "-alice"
	target := p.Svc["query"].URL + "/status/" + alice
	sign := func(claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(harness.TestKeys.Hs256))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	exp := time.Now().Add(48 * time.Hour).Unix()
	minted, err := auth.MintUserToken(harness.TestKeys.Hs256, auth.UserToken{User: alice, TTL: time.Hour, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, token string
		code        int
		body        string
	}{
		{"minted", minted, http.StatusOK, `"status":"offline"`},
		{"fresh", sign(jwt.MapClaims{"sub": alice, "exp": exp, "iat": time.Now().Unix()}), http.StatusOK, `"status":"offline"`},
		{"no iat", sign(jwt.MapClaims{"sub": alice, "exp": exp}), http.StatusUnauthorized, `"code":"unauthorized"`},
		{"older than the max age", sign(jwt.MapClaims{"sub": alice, "exp": exp, "iat": time.Now().Add(-2 * time.Hour).Unix()}),
			http.StatusUnauthorized, `"code":"unauthorized"`},
	} {
		code, _, body := authDo(t, http.MethodGet, target, tt.token, "")
		if code != tt.code || !strings.Contains(body, tt.body) {
			t.Errorf("%s: GET /status = %d %s, want %d with %s", tt.name, code, body, tt.code, tt.body)
		}
	}
}
