package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// jwk is one JSON Web Key as RFC 7517/8037 write them, built by hand so the test
// checks the file format platforms publish, not a library's round trip.
func rsaJWK(kid string, k *rsa.PublicKey) map[string]string {
	b64 := base64.RawURLEncoding.EncodeToString
	return map[string]string{"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
		"n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())}
}

func edJWK(kid string, k ed25519.PublicKey) map[string]string {
	return map[string]string{"kty": "OKP", "crv": "Ed25519", "kid": kid, "alg": "EdDSA", "use": "sig",
		"x": base64.RawURLEncoding.EncodeToString(k)}
}

func writeJWKS(t *testing.T, path string, keys ...map[string]string) {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

func signed(t *testing.T, m jwt.SigningMethod, kid string, key any, claims jwt.MapClaims) string {
	t.Helper()
	withIAT(claims)
	tok := jwt.NewWithClaims(m, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// User tokens verified by a JWK Set file: each key by its kid, RS256 and EdDSA; a
// token naming no key of the set, an unknown kid, a key of the set used for another
// algorithm, or HS256 signed with a public key are refused; a rewritten file is
// served after a reload, and a broken one keeps the previous keys.
func TestUserTokensFromAJWKSet(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	edPub, edPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherRSA, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeJWKS(t, path, rsaJWK("r1", &rsaKey.PublicKey), edJWK("e1", edPub))
	a, err := New(Config{JWT: JWTConfig{JWKSFile: path, AudienceWaived: true}})
	if err != nil {
		t.Fatal(err)
	}
	claims := jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()}
	alice := Principal{Name: "user:alice", Scopes: ScopeWrite | ScopeRead, UserID: "alice"}
	for _, tt := range []struct {
		name, token, wantErr string
	}{
		{"rs256 by kid", signed(t, jwt.SigningMethodRS256, "r1", rsaKey, claims), ""},
		{"eddsa by kid", signed(t, jwt.SigningMethodEdDSA, "e1", edPriv, claims), ""},
		{"no kid", signed(t, jwt.SigningMethodRS256, "", rsaKey, claims), "names no key"},
		{"unknown kid", signed(t, jwt.SigningMethodRS256, "r9", rsaKey, claims), "could not read JWK"},
		{"key not in the set", signed(t, jwt.SigningMethodRS256, "r1", otherRSA, claims), "verification error"},
		{"alg other than the key's", signed(t, jwt.SigningMethodRS384, "r1", rsaKey, claims), "does not match"},
		{"hs256 with the public key", signed(t, jwt.SigningMethodHS256, "r1", rsaKey.PublicKey.N.Bytes(), claims), "signing method HS256 is invalid"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := a.Authenticate(tt.token)
			if tt.wantErr == "" {
				if err != nil || bare(p) != alice {
					t.Fatalf("Authenticate = %+v, %v", p, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Authenticate = %+v, %v; want an error with %q", p, err, tt.wantErr)
			}
		})
	}

	// Rotation: the platform publishes r2 and drops r1.
	writeJWKS(t, path, rsaJWK("r2", &otherRSA.PublicKey))
	if changed, err := a.jwt.reloadJWKS(); !changed || err != nil {
		t.Fatalf("reload = %v, %v", changed, err)
	}
	if _, err := a.Authenticate(signed(t, jwt.SigningMethodRS256, "r1", rsaKey, claims)); err == nil {
		t.Fatal("a token of the dropped key r1 still verifies")
	}
	if p, err := a.Authenticate(signed(t, jwt.SigningMethodRS256, "r2", otherRSA, claims)); err != nil || bare(p) != alice {
		t.Fatalf("a token of the new key r2: %+v, %v", p, err)
	}
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := a.jwt.reloadJWKS(); err == nil {
		t.Fatal("a broken JWK Set file was accepted")
	}
	if _, err := a.Authenticate(signed(t, jwt.SigningMethodRS256, "r2", otherRSA, claims)); err != nil {
		t.Fatalf("after a broken file the previous keys must stay: %v", err)
	}
	if _, err := New(Config{JWT: JWTConfig{JWKSFile: filepath.Join(t.TempDir(), "missing.json"), AudienceWaived: true}}); err == nil ||
		!strings.Contains(err.Error(), "PULSE_JWT_JWKS_FILE") {
		t.Fatalf("a missing JWK Set file: %v, want an error naming PULSE_JWT_JWKS_FILE", err)
	}
}

// A JWK Set without an audience to check is refused at start, unless waived: an
// identity provider's keys also sign other applications' tokens.
func TestJWKSetNeedsAnAudience(t *testing.T) {
	edPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeJWKS(t, path, edJWK("e1", edPub))
	if _, err := New(Config{JWT: JWTConfig{JWKSFile: path}}); err == nil || !strings.Contains(err.Error(), "PULSE_JWT_JWKS_FILE needs PULSE_JWT_AUDIENCE") {
		t.Fatalf("a JWK Set without an audience: %v, want an error naming PULSE_JWT_AUDIENCE", err)
	}
	for _, c := range []JWTConfig{{JWKSFile: path, Audience: "pulse"}, {JWKSFile: path, AudienceWaived: true}} {
		if _, err := New(Config{JWT: c}); err != nil {
			t.Fatalf("New(%+v) = %v", c, err)
		}
	}
}
