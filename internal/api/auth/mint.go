package auth

import (
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// UserToken is what MintUserToken signs: a user token as the services verify it.
type UserToken struct {
	// User is the subject, the user id the token acts for; Watch the other users it
	// may watch on the change feed (WatchClaim).
	User  string
	Watch []string
	// Issuer and Audience, when set, become iss and aud.
	Issuer, Audience string
	// TTL is how long the token lives after Now; at most DefaultJWTMaxAge unless the
	// verifier allows more (PULSE_JWT_MAX_AGE).
	TTL time.Duration
	Now time.Time
}

// MintUserToken signs t with the HS256 secret, as a platform's own login service would:
// the development verifier of the local stack and pulsectl token use it.
func MintUserToken(secret string, t UserToken) (string, error) {
	if len(secret) < minHS256Secret {
		return "", fmt.Errorf("the HS256 secret must be at least %d bytes", minHS256Secret)
	}
	if err := presence.ValidateID(t.User, presence.MaxUserIDLen); err != nil {
		return "", fmt.Errorf("user: %w", err)
	}
	if len(t.Watch) > maxWatch {
		return "", fmt.Errorf("%d users to watch, at most %d", len(t.Watch), maxWatch)
	}
	for i, id := range t.Watch {
		if err := presence.ValidateID(id, presence.MaxUserIDLen); err != nil {
			return "", fmt.Errorf("watch[%d]: %w", i, err)
		}
	}
	if t.TTL <= 0 {
		return "", errors.New("the TTL must be positive")
	}
	claims := userClaims{RegisteredClaims: jwt.RegisteredClaims{
		Subject:   t.User,
		Issuer:    t.Issuer,
		IssuedAt:  jwt.NewNumericDate(t.Now),
		ExpiresAt: jwt.NewNumericDate(t.Now.Add(t.TTL)),
	}, Watch: t.Watch}
	if t.Audience != "" {
		claims.Audience = jwt.ClaimStrings{t.Audience}
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
}
