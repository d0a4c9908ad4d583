package auth

import (
	"crypto"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// verifier checks user tokens with golang-jwt: only the algorithms of the configured
// keys are accepted (never "none", never HS256 signed with a public key), exp and iat
// are required, iat no older than MaxAge, and iss and aud when configured.
type verifier struct {
	hmac    []byte
	pub     crypto.PublicKey
	pubAlg  string
	methods []string
	parser  *jwt.Parser
	// jwksFile, when set, holds a JWK Set whose public keys verify tokens by kid;
	// jwks is the set as last read.
	jwksFile string
	jwks     atomic.Pointer[jwkSet]
	// maxAge and leeway bound a token's age from its iat; now is the clock.
	maxAge, leeway time.Duration
	now            func() time.Time
}

// jwkSet is a JWK Set file as read, with its digest to tell a changed file.
type jwkSet struct {
	keys keyfunc.Keyfunc
	sum  [32]byte
}

// jwksMethods are the algorithms a JWK Set's keys may verify: public-key ones only,
// so a symmetric key in the set can never turn into an HMAC secret.
var jwksMethods = []string{
	jwt.SigningMethodRS256.Alg(), jwt.SigningMethodRS384.Alg(), jwt.SigningMethodRS512.Alg(),
	jwt.SigningMethodPS256.Alg(), jwt.SigningMethodES256.Alg(), jwt.SigningMethodES384.Alg(),
	jwt.SigningMethodEdDSA.Alg(),
}

// newVerifier returns nil when c configures no key.
func newVerifier(c JWTConfig) (*verifier, error) {
	if c.HS256Secret == "" && c.PublicKeyFile == "" && c.JWKSFile == "" {
		return nil, nil
	}
	if c.JWKSFile != "" && c.Audience == "" && !c.AudienceWaived {
		return nil, errors.New("PULSE_JWT_JWKS_FILE needs PULSE_JWT_AUDIENCE: an identity provider's keys also sign " +
			"tokens for other applications, which would pass here; set PULSE_JWT_AUDIENCE_WAIVED=true if the keys are Pulse's alone")
	}
	maxAge := c.MaxAge
	if maxAge <= 0 {
		maxAge = DefaultJWTMaxAge
	}
	v := &verifier{jwksFile: c.JWKSFile, maxAge: maxAge, leeway: c.Leeway, now: time.Now}
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
	if c.JWKSFile != "" {
		if _, err := v.reloadJWKS(); err != nil {
			return nil, err
		}
		for _, m := range jwksMethods {
			if m != v.pubAlg {
				v.methods = append(v.methods, m)
			}
		}
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(v.methods), jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithLeeway(c.Leeway)}
	if c.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(c.Issuer))
	}
	if c.Audience != "" {
		opts = append(opts, jwt.WithAudience(c.Audience))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

// DefaultJWTMaxAge is PULSE_JWT_MAX_AGE's default, and the bound of a JWTConfig made in
// code without one.
const DefaultJWTMaxAge = 24 * time.Hour

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

// verify checks a user token and returns its subject, the user id it acts for, the
// other users it may watch, and when it stops being accepted: its exp, or MaxAge after
// its iat if that comes first (with the leeway).
func (v *verifier) verify(raw string) (string, []string, time.Time, error) {
	var claims userClaims
	fail := func(err error) (string, []string, time.Time, error) { return "", nil, time.Time{}, err }
	if _, err := v.parser.ParseWithClaims(raw, &claims, v.key); err != nil {
		return fail(fmt.Errorf("invalid user token: %w", err))
	}
	if claims.IssuedAt == nil {
		return fail(errors.New("invalid user token: iat is required"))
	}
	if age := v.now().Sub(claims.IssuedAt.Time); age > v.maxAge+v.leeway {
		return fail(fmt.Errorf("invalid user token: issued %s ago, longer than PULSE_JWT_MAX_AGE (%s) allows", age.Round(time.Second), v.maxAge))
	}
	if err := presence.ValidateID(claims.Subject, presence.MaxUserIDLen); err != nil {
		return fail(fmt.Errorf("invalid user token: sub must be a user id: %w", err))
	}
	if len(claims.Watch) > maxWatch {
		return fail(fmt.Errorf("invalid user token: %s lists %d users, at most %d", WatchClaim, len(claims.Watch), maxWatch))
	}
	for i, id := range claims.Watch {
		if err := presence.ValidateID(id, presence.MaxUserIDLen); err != nil {
			return fail(fmt.Errorf("invalid user token: %s[%d]: %w", WatchClaim, i, err))
		}
	}
	until := claims.IssuedAt.Add(v.maxAge + v.leeway)
	if exp := claims.ExpiresAt.Add(v.leeway); exp.Before(until) {
		until = exp
	}
	return claims.Subject, claims.Watch, until, nil
}

// key picks the verification key by the token's algorithm, which the parser has
// already checked against the allowed methods, and for a JWK Set by its kid.
func (v *verifier) key(t *jwt.Token) (any, error) {
	alg := t.Method.Alg()
	switch {
	case alg == jwt.SigningMethodHS256.Alg() && v.hmac != nil:
		return v.hmac, nil
	case alg == v.pubAlg && v.pub != nil && (t.Header["kid"] == nil || v.jwks.Load() == nil):
		return v.pub, nil
	}
	if set := v.jwks.Load(); set != nil && alg != jwt.SigningMethodHS256.Alg() {
		if _, ok := t.Header["kid"].(string); !ok {
			return nil, errors.New("the token names no key (kid) of the JWK Set")
		}
		k, err := set.keys.Keyfunc(t)
		if err != nil {
			return nil, err
		}
		if _, symmetric := k.([]byte); symmetric {
			return nil, errors.New("the JWK Set's key for the token is symmetric")
		}
		return k, nil
	}
	return nil, errors.New("no key for the token's algorithm")
}

// reloadJWKS reads the JWK Set file again and serves the keys it now holds when its
// content changed. A file that cannot be read or parsed keeps the previous keys.
func (v *verifier) reloadJWKS() (changed bool, err error) {
	raw, err := os.ReadFile(v.jwksFile)
	if err != nil {
		return false, fmt.Errorf("PULSE_JWT_JWKS_FILE: %w", err)
	}
	sum := sha256.Sum256(raw)
	if cur := v.jwks.Load(); cur != nil && cur.sum == sum {
		return false, nil
	}
	if !json.Valid(raw) {
		return false, fmt.Errorf("PULSE_JWT_JWKS_FILE %s: not JSON", v.jwksFile)
	}
	kf, err := keyfunc.NewJWKSetJSON(raw)
	if err != nil {
		return false, fmt.Errorf("PULSE_JWT_JWKS_FILE %s: %w", v.jwksFile, err)
	}
	v.jwks.Store(&jwkSet{keys: kf, sum: sum})
	return true, nil
}
