// Package auth decides who may call ingest and query (docs/design.md, Security).
//
// Clients send one credential, "Authorization: Bearer <credential>", which is either
// an API key or a user token:
//
//   - API keys belong to trusted back ends. Each has a name and scopes — write
//     (ingest), read (query's public view and feed), operator (the operator view, the
//     firehose and single users' history; it implies read) — and acts for any user.
//     Pulse stores only their SHA-256 digests (Keys), so several can be active at
//     once and be rotated without downtime.
//   - User tokens are JWTs the platform signs (HS256, RS256 or EdDSA). Their subject
//     is a user id, and they act only for that user: post its own events, read its
//     own status, watch its own user and those of its pulse_watch claim.
//
// An Authenticator turns a credential into a Principal; its Middleware guards a
// service's routes and leaves the probes, /metrics and /openapi.json open.
package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pulse-presence/pulse/internal/platform/config"
)

// Scope is a set of permissions of a credential.
type Scope uint8

// The scopes a key may carry.
const (
	// ScopeWrite posts events: ingest's routes.
	ScopeWrite Scope = 1 << iota
	// ScopeRead reads statuses, counts, listings, history aggregates and the feed.
	ScopeRead
	// ScopeOperator sees what users hide (?view=operator, firehose, single users'
	// history); it implies ScopeRead.
	ScopeOperator
)

var scopeNames = []struct {
	s    Scope
	name string
}{{ScopeWrite, "write"}, {ScopeRead, "read"}, {ScopeOperator, "operator"}}

// ParseScopes reads a comma-separated list of scope names: "write", "read,operator".
func ParseScopes(list string) (Scope, error) {
	var s Scope
	for part := range strings.SplitSeq(list, ",") {
		found := false
		for _, n := range scopeNames {
			if part == n.name {
				s |= n.s
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown scope %q: want write, read or operator, comma-separated", part)
		}
	}
	return s, nil
}

// String lists the scopes as ParseScopes reads them.
func (s Scope) String() string {
	var names []string
	for _, n := range scopeNames {
		if s&n.s != 0 {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, ",")
}

// Principal is who a request acts as.
type Principal struct {
	// Name identifies the credential in logs and limits: a key's name, or
	// "user:<id>" for a user token. Never a secret.
	Name string
	// Scopes are what the credential may do.
	Scopes Scope
	// UserID is the subject of a user token, which may act only for that user;
	// empty for API keys, which act for any user.
	UserID string
	// Expires is a user token's exp; zero for API keys.
	Expires time.Time
	// watch are the other users a user token may watch (its pulse_watch claim); a
	// pointer keeps Principal comparable.
	watch *map[string]bool
	// digest is an API key's, by which StillValid finds it among the current keys.
	digest [32]byte
}

// MayWatch reports whether p may watch userID on the change feed: API keys any user,
// a user token its own user and those of its pulse_watch claim.
func (p Principal) MayWatch(userID string) bool {
	if p.UserID == "" || p.UserID == userID {
		return true
	}
	return p.watch != nil && (*p.watch)[userID]
}

// Watchable lists the users p may watch on the change feed: all for an API key (any
// user, ids nil), else a user token's own user and those of its pulse_watch claim.
// The feed sizes what a connection may send by it.
func (p Principal) Watchable() (ids []string, all bool) {
	if p.UserID == "" {
		return nil, true
	}
	ids = []string{p.UserID}
	if p.watch != nil {
		for id := range *p.watch {
			if id != p.UserID {
				ids = append(ids, id)
			}
		}
	}
	return ids, false
}

// Has reports whether p holds scope; operator implies read.
func (p Principal) Has(scope Scope) bool {
	s := p.Scopes
	if s&ScopeOperator != 0 {
		s |= ScopeRead
	}
	return s&scope == scope
}

// anonymous is who a request without credentials is when authentication is off.
var anonymous = Principal{Name: "anonymous", Scopes: ScopeWrite | ScopeRead}

// Config is how a service authenticates requests.
type Config struct {
	// Mode "off" lets requests without credentials through (as an anonymous
	// principal with write and read, never operator); it must be asked for
	// explicitly. "on" (the default) refuses them.
	Mode string
	// KeysFile lists the API keys by digest (ParseKeys); "" for none.
	KeysFile string
	// KeysReload is how often KeysFile is read again (WatchKeys); 0: only at start.
	KeysReload time.Duration
	// OperatorToken declares one operator key by its plain value (deprecated: put
	// the key's digest in KeysFile instead); "" for none.
	OperatorToken string
	JWT           JWTConfig
}

// Off reports whether authentication was turned off explicitly.
func (c Config) Off() bool { return strings.EqualFold(c.Mode, "off") }

// JWTConfig is how user tokens are verified; with neither HS256Secret nor
// PublicKeyFile, user tokens are refused.
type JWTConfig struct {
	HS256Secret   string
	PublicKeyFile string
	// JWKSFile is a JWK Set (JSON) of public keys, chosen by each token's kid.
	JWKSFile string
	Issuer   string
	Audience string
	// AudienceWaived lets a JWK Set verify tokens without Audience. A JWK Set is most
	// often an identity provider's, whose tokens for every other application of the
	// platform it also signs; without an audience any of them would pass here.
	AudienceWaived bool
	Leeway         time.Duration
	// MaxAge bounds how long after its iat a user token is accepted, whatever its
	// exp says: a token minted with a far exp stays a bounded risk.
	MaxAge time.Duration
}

// Environment variables of the settings, for messages that name them.
const (
	ModeEnv          = "PULSE_AUTH"
	KeysFileEnv      = "PULSE_API_KEYS_FILE"
	OperatorTokenEnv = "PULSE_OPERATOR_TOKEN"
)

// minHS256Secret is the shortest HMAC secret accepted: RFC 7518 §3.2 wants a key at
// least as long as the hash.
const minHS256Secret = 32

// minOperatorToken is the shortest operator token accepted.
const minOperatorToken = 16

// Vars are the authentication rows of a service's configuration table.
func Vars(c *Config) []*config.Var {
	return config.Group("auth",
		config.String(&c.Mode, ModeEnv, "on",
			"off lets requests without credentials through with write and read (never operator) and logs a warning every minute; on refuses to start without keys or a token verifier",
			config.OneOf("on", "off")),
		config.String(&c.KeysFile, KeysFileEnv, "",
			"file of API keys, one `<name> <scopes> sha256:<hex digest>` a line (pulsectl keys new prints one); read at start and every PULSE_API_KEYS_RELOAD"),
		config.Duration(&c.KeysReload, "PULSE_API_KEYS_RELOAD", 10*time.Second,
			"how often PULSE_API_KEYS_FILE is read again, so keys are added and removed without a restart (a bad file keeps the previous keys); 0: only at start",
			config.NotNegative),
		config.String(&c.OperatorToken, OperatorTokenEnv, "",
			"deprecated: one operator key given in plain text; prefer a line with scope operator in PULSE_API_KEYS_FILE",
			validOperatorToken).Secret(),
		config.String(&c.JWT.HS256Secret, "PULSE_JWT_HS256_SECRET", "",
			"shared secret verifying HS256 user tokens; empty: no HS256",
			func(s string) (string, bool) {
				return fmt.Sprintf("want empty or at least %d bytes", minHS256Secret), s == "" || len(s) >= minHS256Secret
			}).Secret(),
		config.String(&c.JWT.PublicKeyFile, "PULSE_JWT_PUBLIC_KEY_FILE", "",
			"PEM public key (RSA: RS256, Ed25519: EdDSA) verifying user tokens; empty: none"),
		config.String(&c.JWT.JWKSFile, "PULSE_JWT_JWKS_FILE", "",
			"JWK Set file (JSON) of public keys verifying user tokens by their kid (RS256/384/512, PS256, ES256/384, EdDSA); read again every PULSE_API_KEYS_RELOAD, so keys rotate without a restart; empty: none"),
		config.String(&c.JWT.Issuer, "PULSE_JWT_ISSUER", "", "iss every user token must carry; empty: not checked"),
		config.String(&c.JWT.Audience, "PULSE_JWT_AUDIENCE", "",
			"an aud every user token must carry; empty: not checked, which a JWK Set allows only with PULSE_JWT_AUDIENCE_WAIVED"),
		config.Bool(&c.JWT.AudienceWaived, "PULSE_JWT_AUDIENCE_WAIVED", false,
			"true lets PULSE_JWT_JWKS_FILE verify tokens without PULSE_JWT_AUDIENCE (an identity provider's keys also sign other applications' tokens)"),
		config.Duration(&c.JWT.Leeway, "PULSE_JWT_LEEWAY", 30*time.Second,
			"clock skew allowed on a user token's exp, nbf and iat", config.Between(0, 5*time.Minute)),
		config.Duration(&c.JWT.MaxAge, "PULSE_JWT_MAX_AGE", 24*time.Hour,
			"longest a user token is accepted after its iat (which every token must carry), whatever its exp",
			config.Between(time.Minute, 90*24*time.Hour)),
	)
}

func validOperatorToken(token string) (string, bool) {
	return fmt.Sprintf("want empty or at least %d characters", minOperatorToken), token == "" || len(token) >= minOperatorToken
}

// ErrNoCredentials is New's error when nothing could authenticate a request and
// authentication is not off.
var ErrNoCredentials = errors.New("no API keys (" + KeysFileEnv + ") and no user token verifier (PULSE_JWT_HS256_SECRET, PULSE_JWT_PUBLIC_KEY_FILE, PULSE_JWT_JWKS_FILE) configured: " +
	"nobody could call this service; configure one, or set " + ModeEnv + "=off to run open")

// Authenticator turns credentials into principals.
type Authenticator struct {
	off  bool
	keys atomic.Pointer[Keys]
	jwt  *verifier

	keysFile      string
	keysSum       [32]byte // SHA-256 of the keys file as last loaded; zero while it is unreadable
	keysFileBad   atomic.Bool
	operatorToken string
}

// New builds the Authenticator of cfg, reading its files. It refuses a configuration
// that would authenticate nobody unless cfg.Off.
func New(cfg Config) (*Authenticator, error) {
	a := &Authenticator{off: cfg.Off(), keysFile: cfg.KeysFile, operatorToken: cfg.OperatorToken}
	if _, err := a.ReloadKeys(); err != nil {
		return nil, err
	}
	v, err := newVerifier(cfg.JWT)
	if err != nil {
		return nil, err
	}
	a.jwt = v
	if !a.off && a.keys.Load().Len() == 0 && a.jwt == nil {
		return nil, ErrNoCredentials
	}
	return a, nil
}

// Off reports whether requests without credentials are let through.
func (a *Authenticator) Off() bool { return a.off }

// Describe is what the start-up log says of the configuration: counts and
// algorithms, never a secret.
func (a *Authenticator) Describe() []any {
	algs := []string{}
	if a.jwt != nil {
		algs = a.jwt.methods
	}
	return []any{"auth_off", a.off, "api_keys", a.keys.Load().Len(), "user_token_algs", algs}
}

// ErrUnknownKey is Authenticate's error for a key no configured digest matches.
var ErrUnknownKey = errors.New("unknown API key")

// Authenticate returns who cred — the text after "Bearer " — belongs to. A JWT
// (three dot-separated parts) is verified as a user token; anything else is looked
// up as an API key.
func (a *Authenticator) Authenticate(cred string) (Principal, error) {
	if strings.Count(cred, ".") == 2 {
		if a.jwt == nil {
			return Principal{}, errors.New("user tokens are not accepted by this service (no verifier configured)")
		}
		sub, watch, exp, err := a.jwt.verify(cred)
		if err != nil {
			return Principal{}, err
		}
		p := Principal{Name: "user:" + sub, Scopes: ScopeWrite | ScopeRead, UserID: sub, Expires: exp}
		if len(watch) > 0 {
			set := make(map[string]bool, len(watch))
			for _, id := range watch {
				set[id] = true
			}
			p.watch = &set
		}
		return p, nil
	}
	p, ok := a.keys.Load().Lookup(cred)
	if !ok {
		return Principal{}, ErrUnknownKey
	}
	return p, nil
}

// Errors of StillValid.
var (
	ErrKeyRevoked   = errors.New("the API key was removed from the keys file")
	ErrTokenExpired = errors.New("the user token has expired")
)

// StillValid tells whether p, authenticated earlier, would still be accepted at now:
// its key is still among the keys (the file is read again every PULSE_API_KEYS_RELOAD),
// its token not past its exp. Long-lived connections ask it as they go, so that a
// revoked key or an expired token does not keep watching.
func (a *Authenticator) StillValid(p Principal, now time.Time) error {
	switch {
	case p.UserID != "":
		if !p.Expires.IsZero() && !now.Before(p.Expires) {
			return ErrTokenExpired
		}
	case p.digest != [32]byte{}:
		if _, ok := a.keys.Load().byDigest[p.digest]; !ok {
			return ErrKeyRevoked
		}
	}
	return nil
}

// WarnWhileOff logs, at once and then every interval until ctx ends, that the service
// accepts requests without credentials. It returns at once when authentication is on.
func (a *Authenticator) WarnWhileOff(ctx context.Context, logger *slog.Logger, interval time.Duration) {
	if !a.off {
		return
	}
	warn := func() {
		logger.Warn("authentication is off ("+ModeEnv+"=off): anyone who reaches this service may write and read any user's presence",
			"api_keys", a.keys.Load().Len())
	}
	warn()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			warn()
		}
	}
}

// ErrKeysFileUnreadable is ReloadKeys's error, after a first load, for a keys file
// that cannot be read (removed, renamed, no longer permitted).
var ErrKeysFileUnreadable = errors.New("API keys file unreadable")

// ReloadKeys reads the keys file again and, when its content changed, serves the
// keys it now lists (the deprecated operator token included). A file that cannot be
// parsed leaves the keys as they were and is reported. A file that cannot be read
// fails closed: at start it is New's error; later no key of the file is valid any
// more (only PULSE_OPERATOR_TOKEN, which is not in it, stays) until it can be read
// again, and the error wraps ErrKeysFileUnreadable, with changed true the first time.
// A key removed by removing the file must not outlive it (docs/design.md, Security).
func (a *Authenticator) ReloadKeys() (changed bool, err error) {
	k := &Keys{byDigest: map[[32]byte]Principal{}, names: map[string]bool{}}
	var sum [32]byte
	if a.keysFile != "" {
		raw, err := os.ReadFile(a.keysFile)
		if err != nil {
			err = fmt.Errorf("%w: %s: %w", ErrKeysFileUnreadable, KeysFileEnv, err)
			if a.keys.Load() == nil {
				return false, err
			}
			a.keysFileBad.Store(true)
			if a.keysSum == ([32]byte{}) {
				return false, err // already failed closed
			}
			if err := a.addOperatorToken(k); err != nil {
				return false, err
			}
			a.keysSum = [32]byte{}
			a.keys.Store(k)
			return true, err
		}
		sum = sha256.Sum256(raw)
		if a.keys.Load() != nil && sum == a.keysSum {
			return false, nil
		}
		if k, err = ParseKeys(bytes.NewReader(raw), a.keysFile); err != nil {
			a.keysFileBad.Store(true)
			return false, err
		}
	}
	if err := a.addOperatorToken(k); err != nil {
		return false, err
	}
	a.keysSum = sum
	a.keys.Store(k)
	a.keysFileBad.Store(false)
	return true, nil
}

func (a *Authenticator) addOperatorToken(k *Keys) error {
	if a.operatorToken == "" {
		return nil
	}
	if err := k.add(Principal{Name: "operator-token", Scopes: ScopeOperator}, Digest(a.operatorToken)); err != nil {
		return fmt.Errorf("%s: %w", OperatorTokenEnv, err)
	}
	return nil
}

// WatchKeys reloads the keys file every interval until ctx ends, logging each change
// and each file it refused; it returns at once without a file or with interval 0.
// Rotation then needs no restart: add the new key's line, move the clients, remove
// the old line.
func (a *Authenticator) WatchKeys(ctx context.Context, logger *slog.Logger, interval time.Duration) {
	jwks := a.jwt != nil && a.jwt.jwksFile != ""
	if (a.keysFile == "" && !jwks) || interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if a.keysFile != "" {
			changed, err := a.ReloadKeys()
			switch {
			case errors.Is(err, ErrKeysFileUnreadable):
				if changed {
					logger.Error("API keys file unreadable; no key is valid until it can be read again", "file", a.keysFile, "err", err)
				}
			case err != nil:
				logger.Warn("API keys file refused; keeping the previous keys", "err", err)
			case changed:
				logger.Info("API keys reloaded", "file", a.keysFile, "api_keys", a.keys.Load().Len())
			}
		}
		if jwks {
			changed, err := a.jwt.reloadJWKS()
			switch {
			case err != nil:
				logger.Warn("JWK Set file refused; keeping the previous keys", "err", err)
			case changed:
				logger.Info("JWK Set reloaded", "file", a.jwt.jwksFile)
			}
		}
	}
}
