package auth

import (
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// FuzzAuthenticate: whatever follows "Bearer ", authentication answers a principal or
// an error and never panics; a principal comes only from a known key or a token signed
// with the secret, and a user token names a valid user.
func FuzzAuthenticate(f *testing.F) {
	secret := strings.Repeat("s", 32)
	a, err := New(Config{JWT: JWTConfig{HS256Secret: secret}, OperatorToken: "operator-token-0123456789"})
	if err != nil {
		f.Fatal(err)
	}
	good, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}).SignedString([]byte(secret))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"", good, good + "x", "operator-token-0123456789", "a.b.c", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.",
		strings.Repeat("A", 5000), good[:len(good)/2]} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cred string) {
		p, err := a.Authenticate(cred)
		if err != nil {
			return
		}
		if cred != "operator-token-0123456789" && cred != good {
			// Any other token that verifies must be signed with the secret: the fuzzer
			// cannot forge one, so reaching here means a token check let one through.
			if _, perr := jwt.Parse(cred, func(*jwt.Token) (any, error) { return []byte(secret), nil },
				jwt.WithValidMethods([]string{"HS256"})); perr != nil {
				t.Fatalf("%q authenticated as %+v but does not verify: %v", cred, p, perr)
			}
		}
	})
}

// FuzzParseKeys: any keys file parses or is refused with an error, never a panic, and
// a parsed file's keys are all distinct digests.
func FuzzParseKeys(f *testing.F) {
	k, _ := NewKey()
	f.Add(Line("svc", ScopeWrite, k) + "\n# comment\n\n")
	f.Add("name read,operator sha256:" + strings.Repeat("ab", 32))
	f.Add("x write sha256:zz")
	f.Add("only-two fields")
	f.Fuzz(func(t *testing.T, text string) {
		keys, err := ParseKeys(strings.NewReader(text), "fuzz")
		if err != nil {
			return
		}
		if keys.Len() > strings.Count(text, "\n")+1 {
			t.Fatalf("%d keys from %d lines", keys.Len(), strings.Count(text, "\n")+1)
		}
	})
}
