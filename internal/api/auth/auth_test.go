package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
)

const (
	writeKey    = "pulse_test-write-key-0000000000000000"
	readKey     = "pulse_test-read-key-00000000000000000"
	operatorKey = "pulse_test-operator-key-0000000000000"
	hsSecret    = "0123456789abcdef0123456789abcdef"
)

func keysFile(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestParseKeys(t *testing.T) {
	path := keysFile(t, "# producers", "", Line("backend", ScopeWrite, writeKey),
		"  "+Line("dashboard", ScopeRead|ScopeOperator, operatorKey)+"  ")
	k, err := LoadKeys(path)
	if err != nil {
		t.Fatal(err)
	}
	if k.Len() != 2 {
		t.Fatalf("Len = %d, want 2", k.Len())
	}
	p, ok := k.Lookup(operatorKey)
	if !ok || p != (Principal{Name: "dashboard", Scopes: ScopeRead | ScopeOperator, digest: Digest(operatorKey)}) {
		t.Fatalf("Lookup(operator key) = %+v, %v", p, ok)
	}
	if _, ok := k.Lookup(readKey); ok {
		t.Fatal("an undeclared key was found")
	}
}

func TestParseKeysNamesTheBadLine(t *testing.T) {
	good := Line("a", ScopeWrite, writeKey)
	for _, tt := range []struct{ line, want string }{
		{"a write", "k line 2: want 3 fields `<name> <scopes> sha256:<hex>`, got 2"},
		{"a admin sha256:00", `k line 2: key a: unknown scope "admin": want write, read or operator, comma-separated`},
		{"b write " + writeKey, "k line 2: key b: the third field must be sha256: and the 64 hex digits of the key's SHA-256 (never the key itself)"},
		{"b write sha256:abcd", "k line 2: key b: the third field must be sha256:"},
		{Line("a", ScopeRead, readKey), "k line 2: key a: name used twice"},
		{Line("b", ScopeRead, writeKey), "k line 2: key b: the same key is declared twice"},
		{"-x write " + strings.Repeat("0", 64), `k line 2: name "-x"`},
	} {
		_, err := ParseKeys(strings.NewReader(good+"\n"+tt.line+"\n"), "k")
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("line %q: err = %v, want prefix %q", tt.line, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), writeKey) {
			t.Errorf("line %q: the error repeats a key: %v", tt.line, err)
		}
	}
}

func TestScopes(t *testing.T) {
	s, err := ParseScopes("read,operator")
	if err != nil || s != ScopeRead|ScopeOperator || s.String() != "read,operator" {
		t.Fatalf("ParseScopes = %v %v", s, err)
	}
	op := Principal{Scopes: ScopeOperator}
	if !op.Has(ScopeRead) || op.Has(ScopeWrite) {
		t.Fatal("operator must imply read and only read")
	}
	if (Principal{Scopes: ScopeRead}).Has(ScopeOperator) {
		t.Fatal("read must not imply operator")
	}
}

func TestNewRefusesToAuthenticateNobody(t *testing.T) {
	if _, err := New(Config{}); !errors.Is(err, ErrNoCredentials) {
		t.Fatalf("New(no keys) = %v, want ErrNoCredentials", err)
	}
	a, err := New(Config{Mode: "off"})
	if err != nil || !a.Off() {
		t.Fatalf("New(off) = %v, %v", a, err)
	}
	if _, err := New(Config{KeysFile: filepath.Join(t.TempDir(), "missing")}); err == nil || !strings.Contains(err.Error(), KeysFileEnv) {
		t.Fatalf("New(missing file) = %v", err)
	}
}

func TestConfigFromEnv(t *testing.T) {
	var c Config
	env := config.NewEnv(config.MapLookup(map[string]string{
		"PULSE_AUTH": "sometimes", "PULSE_JWT_HS256_SECRET": "short", OperatorTokenEnv: "short",
	}))
	env.Load(Vars(&c)...)
	err := env.Err()
	for _, want := range []string{`PULSE_AUTH="sometimes": want one of on, off`, "PULSE_JWT_HS256_SECRET: want empty or at least 32 bytes",
		"PULSE_OPERATOR_TOKEN: want empty or at least 16 characters"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "short") {
		t.Errorf("a secret reached the error: %v", err)
	}
}

// hsToken signs claims with secret, adding iat (now) unless claims name it; a nil
// iat leaves it out.
func hsToken(t *testing.T, secret string, claims jwt.MapClaims) string {
	t.Helper()
	withIAT(claims)
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestUserTokens(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	pemPath := filepath.Join(t.TempDir(), "pub.pem")
	if err := os.WriteFile(pemPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{JWT: JWTConfig{HS256Secret: hsSecret, PublicKeyFile: pemPath, Issuer: "platform", Audience: "pulse"}})
	if err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Hour).Unix()
	claims := func(extra jwt.MapClaims) jwt.MapClaims {
		c := jwt.MapClaims{"sub": "alice", "exp": future, "iat": time.Now().Unix(), "iss": "platform", "aud": "pulse"}
		for k, v := range extra {
			if v == nil {
				delete(c, k)
			} else {
				c[k] = v
			}
		}
		return c
	}
	ed, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims(nil)).SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims(nil)).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	noIAT, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims(jwt.MapClaims{"iat": nil})).SignedString([]byte(hsSecret))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, token, wantErr string
	}{
		{"hs256", hsToken(t, hsSecret, claims(nil)), ""},
		{"no iat", noIAT, "iat is required"},
		{"older than the max age", hsToken(t, hsSecret, claims(jwt.MapClaims{"iat": time.Now().Add(-25 * time.Hour).Unix()})),
			"ago, longer than PULSE_JWT_MAX_AGE (24h0m0s) allows"},
		{"issued in the future", hsToken(t, hsSecret, claims(jwt.MapClaims{"iat": time.Now().Add(time.Hour).Unix()})), "token used before issued"},
		{"eddsa", ed, ""},
		{"expired", hsToken(t, hsSecret, claims(jwt.MapClaims{"exp": time.Now().Add(-time.Hour).Unix()})), "token is expired"},
		{"no exp", hsToken(t, hsSecret, claims(jwt.MapClaims{"exp": nil})), "exp claim is required"},
		{"other secret", hsToken(t, strings.Repeat("x", 32), claims(nil)), "signature is invalid"},
		{"alg none", none, "signing method none is invalid"},
		{"wrong issuer", hsToken(t, hsSecret, claims(jwt.MapClaims{"iss": "evil"})), "token has invalid issuer"},
		{"wrong audience", hsToken(t, hsSecret, claims(jwt.MapClaims{"aud": "other"})), "token has invalid audience"},
		{"no subject", hsToken(t, hsSecret, claims(jwt.MapClaims{"sub": nil})), "sub must be a user id"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := a.Authenticate(tt.token)
			if tt.wantErr == "" {
				if err != nil || bare(p) != (Principal{Name: "user:alice", Scopes: ScopeWrite | ScopeRead, UserID: "alice"}) {
					t.Fatalf("Authenticate = %+v, %v", p, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Authenticate = %+v, %v; want an error with %q", p, err, tt.wantErr)
			}
		})
	}
}

// server is an Echo with a Guard needing scope, a user route and Views, whose
// handlers answer "ok".
func server(t *testing.T, cfg Config, scope Scope) *echo.Echo {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		he, ok := err.(*httpserver.Error)
		if !ok {
			if ee, ok := err.(*echo.HTTPError); ok {
				he = &httpserver.Error{Status: ee.Code, Code: "other"}
			} else {
				he = &httpserver.Error{Status: 500, Code: "internal", Message: err.Error()}
			}
		}
		_ = c.JSON(he.Status, map[string]any{"error": he})
	}
	a.Guard(prometheus.NewRegistry(), scope, "/users/:userId").TicketRoutes(NewTickets(newMemTickets(), 30*time.Second, time.Second), "/feed").Install(e)
	e.Use(Views)
	ok := func(c echo.Context) error {
		return c.String(http.StatusOK, "ok "+PrincipalOf(c).Name+" operator="+map[bool]string{true: "yes", false: "no"}[OperatorView(c)])
	}
	e.GET("/healthz", ok)
	e.GET("/metrics", ok)
	e.GET("/counts", ok)
	e.GET("/users/:userId", ok)
	e.GET("/debug/pprof/*", ok)
	e.GET("/feed", ok)
	return e
}

func TestGuard(t *testing.T) {
	cfg := Config{KeysFile: keysFile(t, Line("w", ScopeWrite, writeKey), Line("r", ScopeRead, readKey), Line("op", ScopeOperator, operatorKey)),
		JWT: JWTConfig{HS256Secret: hsSecret}}
	e := server(t, cfg, ScopeRead)
	alice := hsToken(t, hsSecret, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()})
	expired := hsToken(t, hsSecret, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(-time.Hour).Unix()})
	for _, tt := range []struct {
		name, target, auth string
		code               int
		body, challenge    string
	}{
		{"probe open", "/healthz", "", 200, "ok  operator=no", ""},
		{"metrics open", "/metrics", "", 200, "ok  operator=no", ""},
		{"no credentials", "/counts", "", 401,
			`{"error":{"code":"unauthorized","message":"missing credentials: send Authorization: Bearer \u003cAPI key or user token\u003e"}}`, `Bearer realm="pulse"`},
		{"not bearer", "/counts", "Basic dXNlcjpwdw==", 401,
			`{"error":{"code":"unauthorized","message":"the Authorization header must be ` + "`Bearer \\u003cAPI key or user token\\u003e`" + `"}}`, `Bearer realm="pulse", error="invalid_request"`},
		{"unknown key", "/counts", "Bearer pulse_nope", 401, `{"error":{"code":"unauthorized","message":"unknown API key"}}`, `Bearer realm="pulse", error="invalid_token"`},
		{"expired token", "/counts", "Bearer " + expired, 401, "", `Bearer realm="pulse", error="invalid_token"`},
		{"wrong scope", "/counts", "Bearer " + writeKey, 403,
			`{"error":{"code":"forbidden","message":"key w has scopes \"write\"; this service needs read"}}`, ""},
		{"reader", "/counts", "Bearer " + readKey, 200, "ok r operator=no", ""},
		{"reader asks operator view", "/counts?view=operator", "Bearer " + readKey, 403,
			`{"error":{"code":"forbidden","message":"view=operator needs a key with the operator scope: Authorization: Bearer \u003ckey\u003e"}}`, ""},
		{"operator reads public", "/counts", "bearer " + operatorKey, 200, "ok op operator=no", ""},
		{"operator view", "/counts?view=operator", "Bearer " + operatorKey, 200, "ok op operator=yes", ""},
		{"bad view", "/counts?view=admin", "Bearer " + operatorKey, 400,
			`{"error":{"code":"invalid_request","message":"must be public or operator, got \"admin\"","field":"view"}}`, ""},
		{"profiles need operator", "/debug/pprof/heap", "Bearer " + readKey, 403,
			`{"error":{"code":"forbidden","message":"Go's profiles need a key with the operator scope"}}`, ""},
		{"operator profiles", "/debug/pprof/heap", "Bearer " + operatorKey, 200, "ok op operator=no", ""},
		{"access_token on a feed route is refused", "/feed?access_token=" + readKey, "", 401,
			`{"error":{"code":"unauthorized","message":"a credential in the URL (?access_token=) is refused: send Authorization: Bearer, or on the feed a ticket from POST /v1/watch/tickets as ?ticket="}}`,
			`Bearer realm="pulse", error="invalid_request"`},
		{"access_token elsewhere is refused", "/counts?access_token=" + readKey, "", 401, "", `Bearer realm="pulse", error="invalid_request"`},
		{"unknown ticket", "/feed?ticket=pwt_nope", "", 401, `{"error":{"code":"unauthorized","message":"` + ErrBadTicket.Error() + `"}}`, `Bearer realm="pulse", error="invalid_token"`},
		{"ticket off the feed", "/counts?ticket=pwt_nope", "", 401, "", `Bearer realm="pulse"`},
		{"the header wins", "/feed?access_token=" + readKey, "Bearer " + operatorKey, 200, "ok op operator=no", ""},
		{"user reads self", "/users/alice", "Bearer " + alice, 200, "ok user:alice operator=no", ""},
		{"user reads another", "/users/bob", "Bearer " + alice, 403,
			`{"error":{"code":"forbidden","message":"this user token acts only for its own user; \"bob\" is another"}}`, ""},
		{"user on other route", "/counts", "Bearer " + alice, 403,
			`{"error":{"code":"forbidden","message":"a user token may not call GET /counts; it reads and writes only its own user's status"}}`, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, tt.target, nil)
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)
			if rec.Code != tt.code {
				t.Fatalf("code = %d, want %d; body %s", rec.Code, tt.code, rec.Body)
			}
			if tt.body != "" && strings.TrimSpace(rec.Body.String()) != tt.body {
				t.Errorf("body = %s, want %s", rec.Body, tt.body)
			}
			if got := rec.Header().Get("WWW-Authenticate"); got != tt.challenge {
				t.Errorf("WWW-Authenticate = %q, want %q", got, tt.challenge)
			}
			if tt.target == "/counts?view=operator" && tt.code == 200 && rec.Header().Get("Cache-Control") != "private, no-store" {
				t.Errorf("operator answer without Cache-Control: private, no-store")
			}
		})
	}
}

func TestGuardOff(t *testing.T) {
	e := server(t, Config{Mode: "off", OperatorToken: "operator-token-0123"}, ScopeRead)
	for _, tt := range []struct {
		target, auth string
		code         int
		body         string
	}{
		{"/counts", "", 200, "ok anonymous operator=no"},
		{"/counts?view=operator", "", 403, ""},
		{"/counts?view=operator", "Bearer operator-token-0123", 200, "ok operator-token operator=yes"},
		{"/counts", "Bearer wrong", 401, ""},
	} {
		req := httptest.NewRequest(http.MethodGet, tt.target, nil)
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if rec.Code != tt.code || (tt.body != "" && rec.Body.String() != tt.body) {
			t.Errorf("GET %s (%q) = %d %s, want %d %s", tt.target, tt.auth, rec.Code, rec.Body, tt.code, tt.body)
		}
	}
}

func TestNewKey(t *testing.T) {
	k1, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := NewKey()
	if k1 == k2 || !strings.HasPrefix(k1, "pulse_") || len(k1) != len("pulse_")+43 || strings.Contains(k1, ".") {
		t.Fatalf("NewKey = %q, %q", k1, k2)
	}
	keys, err := ParseKeys(strings.NewReader(Line("new", ScopeWrite, k1)), "line")
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := keys.Lookup(k1); !ok || p.Name != "new" {
		t.Fatalf("the line of a new key does not find it: %+v %v", p, ok)
	}
}

// The keys file is read again when it changes: a rotation needs no restart, and a
// broken file keeps the keys that were served.
func TestReloadKeys(t *testing.T) {
	path := keysFile(t, Line("w", ScopeWrite, writeKey))
	a, err := New(Config{KeysFile: path, OperatorToken: "operator-token-0123"})
	if err != nil {
		t.Fatal(err)
	}
	known := func(key string) bool {
		_, err := a.Authenticate(key)
		return err == nil
	}
	if !known(writeKey) || known(readKey) || !known("operator-token-0123") {
		t.Fatal("the first keys are not served")
	}
	if changed, err := a.ReloadKeys(); changed || err != nil {
		t.Fatalf("reload of an unchanged file: %v, %v", changed, err)
	}
	write := func(lines ...string) {
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(Line("w", ScopeWrite, writeKey), Line("r", ScopeRead, readKey))
	if changed, err := a.ReloadKeys(); !changed || err != nil || !known(writeKey) || !known(readKey) {
		t.Fatalf("both keys of a rotation: %v, %v", changed, err)
	}
	write(Line("r", ScopeRead, readKey))
	if changed, err := a.ReloadKeys(); !changed || err != nil || known(writeKey) || !known(readKey) || !known("operator-token-0123") {
		t.Fatalf("after the old key's removal: %v, %v", changed, err)
	}
	write("r read sha256:nothex")
	if changed, err := a.ReloadKeys(); changed || err == nil || !strings.Contains(err.Error(), "line 1") || !known(readKey) || !a.keysFileBad.Load() {
		t.Fatalf("a broken file: %v, %v; want an error naming line 1, the previous keys kept, the file marked bad", changed, err)
	}

	// A file that disappears fails closed: no key of it is valid until it is back.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if changed, err := a.ReloadKeys(); !changed || !errors.Is(err, ErrKeysFileUnreadable) || known(readKey) || a.keys.Load().Len() != 1 || !a.keysFileBad.Load() {
		t.Fatalf("the file removed: %v, %v; want changed, ErrKeysFileUnreadable, no key of the file valid", changed, err)
	}
	if !known("operator-token-0123") {
		t.Fatal("the operator token, which is not in the file, was dropped with it")
	}
	if changed, err := a.ReloadKeys(); changed || !errors.Is(err, ErrKeysFileUnreadable) || known(readKey) {
		t.Fatalf("the file still gone: %v, %v; want unchanged, ErrKeysFileUnreadable", changed, err)
	}
	write(Line("r", ScopeRead, readKey))
	if changed, err := a.ReloadKeys(); !changed || err != nil || !known(readKey) || a.keysFileBad.Load() {
		t.Fatalf("the file back: %v, %v; want its keys served again", changed, err)
	}
}

// A user token's pulse_watch claim lists the other users it may watch; API keys
// watch anyone.
func TestUserTokenWatchClaim(t *testing.T) {
	a, err := New(Config{JWT: JWTConfig{HS256Secret: hsSecret}})
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).Unix()
	p, err := a.Authenticate(hsToken(t, hsSecret, jwt.MapClaims{"sub": "alice", "exp": exp, "pulse_watch": []string{"bob", "carol"}}))
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{"alice": true, "bob": true, "carol": true, "dave": false} {
		if p.MayWatch(id) != want {
			t.Errorf("MayWatch(%s) = %v, want %v", id, !want, want)
		}
	}
	plain, err := a.Authenticate(hsToken(t, hsSecret, jwt.MapClaims{"sub": "alice", "exp": exp}))
	if err != nil || plain.MayWatch("bob") || !plain.MayWatch("alice") {
		t.Fatalf("without the claim: %+v %v; want only alice", plain, err)
	}
	if !(Principal{Name: "k", Scopes: ScopeRead}).MayWatch("anyone") {
		t.Fatal("an API key may watch anyone")
	}
	if _, err := a.Authenticate(hsToken(t, hsSecret, jwt.MapClaims{"sub": "alice", "exp": exp, "pulse_watch": []string{"ok", ""}})); err == nil ||
		!strings.Contains(err.Error(), "pulse_watch[1]") {
		t.Fatalf("an empty id in pulse_watch: %v", err)
	}
}

// withIAT gives claims an iat of now unless they name one; a nil one is removed.
func withIAT(claims jwt.MapClaims) {
	if v, ok := claims["iat"]; !ok {
		claims["iat"] = time.Now().Unix()
	} else if v == nil {
		delete(claims, "iat")
	}
}

// bare is p without its expiry, for comparing principals of tokens minted at
// different moments.
func bare(p Principal) Principal {
	p.Expires = time.Time{}
	return p
}

// A key removed from the file is no longer valid once the file is read again; a user
// token stops being valid at its exp, or MaxAge after its iat if sooner.
func TestStillValid(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api-keys")
	key1, key2 := strings.Repeat("a", 32), strings.Repeat("b", 32)
	write := func(keys ...string) {
		var lines []string
		for i, k := range keys {
			lines = append(lines, Line(fmt.Sprintf("k%d", i), ScopeRead, k))
		}
		if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(key1, key2)
	secret := strings.Repeat("s", 32)
	a, err := New(Config{KeysFile: file, JWT: JWTConfig{HS256Secret: secret, MaxAge: 2 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	p1, err := a.Authenticate(key1)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := a.StillValid(p1, now); err != nil {
		t.Fatalf("a current key: %v", err)
	}
	write(key2)
	if _, err := a.ReloadKeys(); err != nil {
		t.Fatal(err)
	}
	if err := a.StillValid(p1, now); !errors.Is(err, ErrKeyRevoked) {
		t.Fatalf("a removed key: %v, want ErrKeyRevoked", err)
	}
	tok, err := MintUserToken(secret, UserToken{User: "alice", TTL: 5 * time.Hour, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Authenticate(tok)
	if err != nil {
		t.Fatal(err)
	}
	// MaxAge (2h) plus the leeway (0 here) comes before the exp (5h).
	if want := now.Add(2 * time.Hour).Truncate(time.Second); !p.Expires.Equal(want) {
		t.Fatalf("Expires = %v, want %v", p.Expires, want)
	}
	if err := a.StillValid(p, p.Expires.Add(-time.Second)); err != nil {
		t.Fatalf("before its end: %v", err)
	}
	if err := a.StillValid(p, p.Expires); !errors.Is(err, ErrTokenExpired) {
		t.Fatalf("at its end: %v, want ErrTokenExpired", err)
	}
}

// RouteScope makes one method of a read service's route need the write scope: a
// writer may call it and no other route, a reader every other route and not it.
func TestGuardRouteScope(t *testing.T) {
	a, err := New(Config{KeysFile: keysFile(t, Line("w", ScopeWrite, writeKey), Line("r", ScopeRead, readKey))})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		he, _ := err.(*httpserver.Error)
		if he == nil {
			he = &httpserver.Error{Status: 500, Code: "internal", Message: err.Error()}
		}
		_ = c.JSON(he.Status, map[string]any{"error": he})
	}
	a.Guard(prometheus.NewRegistry(), ScopeRead).RouteScope(ScopeWrite, "PUT /groups/:id").Install(e)
	ok := func(c echo.Context) error { return c.String(http.StatusOK, "ok "+PrincipalOf(c).Name) }
	e.GET("/groups/:id", ok)
	e.PUT("/groups/:id", ok)
	for _, tt := range []struct {
		method, key string
		code        int
		body        string
	}{
		{http.MethodPut, writeKey, 200, "ok w"},
		{http.MethodPut, readKey, 403, `{"error":{"code":"forbidden","message":"key r has scopes \"read\"; PUT /groups/:id needs write"}}`},
		{http.MethodGet, readKey, 200, "ok r"},
		{http.MethodGet, writeKey, 403, `{"error":{"code":"forbidden","message":"key w has scopes \"write\"; this service needs read"}}`},
	} {
		req := httptest.NewRequest(tt.method, "/groups/team-a", nil)
		req.Header.Set("Authorization", "Bearer "+tt.key)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if rec.Code != tt.code || strings.TrimSpace(rec.Body.String()) != tt.body {
			t.Errorf("%s with key %q = %d %s, want %d %s", tt.method, tt.key[:8], rec.Code, rec.Body, tt.code, tt.body)
		}
	}
}
