package auth

import (
	"crypto"
	"errors"
	"fmt"
	"os"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pulse-presence/pulse/pkg/presence"
)

// verifier checks user tokens with golang-jwt: only the algorithms of the configured
// keys are accepted (never "none", never HS256 signed with a public key), exp is
// required, and iss and aud when configured.
type verifier struct {
	hmac    []byte
	pub     crypto.PublicKey
	pubAlg  string
	methods []string
	parser  *jwt.Parser
}

// newVerifier returns nil when c configures no key.
func newVerifier(c JWTConfig) (*verifier, error) {
	if c.HS256Secret == "" && c.PublicKeyFile == "" {
		return nil, nil
	}
	v := &verifier{}
	if c.HS256Secret != "" {
		v.hmac = []byte(c.HS256Secret)
		v.methods = append(v.methods, jwt.SigningMethodHS256.Alg())
	}
	if c.PublicKeyFile != "" {
		pemBytes, err := os.ReadFile(c.PublicKeyFile)
		if err != nil {
			return nil, fmt.Errorf("PULSE_JWT_PUBLIC_KEY_FILE: %w", err)
		}
		if k, err := jwt.ParseRSAPublicKeyFromPEM(pemBytes); err == nil {
			v.pub, v.pubAlg = k, jwt.SigningMethodRS256.Alg()
		} else if k, err := jwt.ParseEdPublicKeyFromPEM(pemBytes); err == nil {
			v.pub, v.pubAlg = k, jwt.SigningMethodEdDSA.Alg()
		} else {
			return nil, fmt.Errorf("PULSE_JWT_PUBLIC_KEY_FILE %s: want a PEM RSA or Ed25519 public key", c.PublicKeyFile)
		}
		v.methods = append(v.methods, v.pubAlg)
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(v.methods), jwt.WithExpirationRequired(), jwt.WithLeeway(c.Leeway)}
	if c.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(c.Issuer))
	}
	if c.Audience != "" {
		opts = append(opts, jwt.WithAudience(c.Audience))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

// WatchClaim names the claim listing, besides the subject, the users a user token
// may watch on the change feed (a friends list, say).
const WatchClaim = "pulse_watch"

// maxWatch bounds the users of WatchClaim.
const maxWatch = 10_000

// userClaims are the claims Pulse reads from a user token.
type userClaims struct {
	jwt.RegisteredClaims
	Watch []string `json:"pulse_watch,omitempty"`
}

// verify checks a user token and returns its subject, the user id it acts for, and
// the other users it may watch.
func (v *verifier) verify(raw string) (string, []string, error) {
	var claims userClaims
	if _, err := v.parser.ParseWithClaims(raw, &claims, v.key); err != nil {
		return "", nil, fmt.Errorf("invalid user token: %w", err)
	}
	if err := presence.ValidateID(claims.Subject, presence.MaxUserIDLen); err != nil {
		return "", nil, fmt.Errorf("invalid user token: sub must be a user id: %w", err)
	}
	if len(claims.Watch) > maxWatch {
		return "", nil, fmt.Errorf("invalid user token: %s lists %d users, at most %d", WatchClaim, len(claims.Watch), maxWatch)
	}
	for i, id := range claims.Watch {
		if err := presence.ValidateID(id, presence.MaxUserIDLen); err != nil {
			return "", nil, fmt.Errorf("invalid user token: %s[%d]: %w", WatchClaim, i, err)
		}
	}
	return claims.Subject, claims.Watch, nil
}

// key picks the verification key by the token's algorithm, which the parser has
// already checked against the allowed methods.
func (v *verifier) key(t *jwt.Token) (any, error) {
	switch alg := t.Method.Alg(); {
	case alg == jwt.SigningMethodHS256.Alg() && v.hmac != nil:
		return v.hmac, nil
	case alg == v.pubAlg && v.pub != nil:
		return v.pub, nil
	}
	return nil, errors.New("no key for the token's algorithm")
}
