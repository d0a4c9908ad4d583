package auth

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulse-presence/pulse/internal/platform/httpserver"
)

// memTickets is a TicketStore in memory, with Redis's SET NX and GETDEL semantics.
type memTickets struct {
	mu   sync.Mutex
	m    map[string][]byte
	fail error
}

func newMemTickets() *memTickets { return &memTickets{m: map[string][]byte{}} }

func (s *memTickets) Put(_ context.Context, key string, value []byte, _ time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return false, s.fail
	}
	if _, ok := s.m[key]; ok {
		return false, nil
	}
	s.m[key] = value
	return true, nil
}

func (s *memTickets) Take(_ context.Context, key string) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return nil, false, s.fail
	}
	v, ok := s.m[key]
	delete(s.m, key)
	return v, ok, nil
}

// ticketServer is a guarded service whose /feed takes tickets of t; /feed answers
// who it acts as and whether it may watch bob.
func ticketServer(t *testing.T, tickets *Tickets) (*echo.Echo, *Authenticator) {
	t.Helper()
	a, err := New(Config{KeysFile: keysFile(t, Line("r", ScopeRead, readKey), Line("op", ScopeOperator, operatorKey)),
		JWT: JWTConfig{HS256Secret: hsSecret}})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		var he *httpserver.Error
		if !errors.As(err, &he) {
			he = &httpserver.Error{Status: 500, Code: "internal"}
		}
		_ = c.JSON(he.Status, map[string]any{"error": he})
	}
	a.Guard(prometheus.NewRegistry(), ScopeRead, "/feed").TicketRoutes(tickets, "/feed").Install(e)
	e.GET("/feed", func(c echo.Context) error {
		p := PrincipalOf(c)
		return c.String(http.StatusOK, p.Name+" operator="+map[bool]string{true: "yes", false: "no"}[p.Has(ScopeOperator)]+
			" bob="+map[bool]string{true: "yes", false: "no"}[p.MayWatch("bob")])
	})
	return e, a
}

func get(e *echo.Echo, target string) (int, string) {
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	return rec.Code, strings.TrimSpace(rec.Body.String())
}

// A ticket opens the feed once, as the principal that asked for it, and only within
// its time.
func TestTicketsAreSingleUseShortLivedAndCarryThePrincipal(t *testing.T) {
	now := time.Now()
	tickets := NewTickets(newMemTickets(), 30*time.Second, time.Second)
	tickets.now = func() time.Time { return now }
	e, a := ticketServer(t, tickets)
	issue := func(cred string) string {
		t.Helper()
		p, err := a.Authenticate(cred)
		if err != nil {
			t.Fatal(err)
		}
		tk, until, err := tickets.Issue(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(tk, ticketPrefix) || len(tk) < len(ticketPrefix)+43 {
			t.Fatalf("ticket %q: want %s and 256 bits in base64url", tk, ticketPrefix)
		}
		if p.Expires.IsZero() && !until.Equal(now.Add(30*time.Second)) {
			t.Fatalf("ticket until %v, want now + 30s", until)
		}
		return tk
	}

	op := issue(operatorKey)
	if code, body := get(e, "/feed?ticket="+op); code != 200 || body != "op operator=yes bob=yes" {
		t.Fatalf("first use: %d %s, want the operator key's principal", code, body)
	}
	if code, _ := get(e, "/feed?ticket="+op); code != 401 {
		t.Fatalf("second use: %d, want 401", code)
	}

	alice := hsToken(t, hsSecret, jwt.MapClaims{"sub": "alice", "iat": now.Unix(), "exp": now.Add(10 * time.Second).Unix(), WatchClaim: []string{"bob"}})
	tk := issue(alice)
	if code, body := get(e, "/feed?ticket="+tk); code != 200 || body != "user:alice operator=no bob=yes" {
		t.Fatalf("a user token's ticket: %d %s, want alice, who may watch bob", code, body)
	}
	if _, until, _ := tickets.Issue(context.Background(), mustAuth(t, a, alice)); !until.Equal(now.Add(10 * time.Second).Truncate(time.Second)) {
		t.Errorf("a ticket of a token expiring in 10s lives until %v, want the token's exp", until)
	}

	late := issue(readKey)
	now = now.Add(30 * time.Second)
	if code, _ := get(e, "/feed?ticket="+late); code != 401 {
		t.Fatalf("a ticket at its expiry: %d, want 401", code)
	}
}

func mustAuth(t *testing.T, a *Authenticator, cred string) Principal {
	t.Helper()
	p, err := a.Authenticate(cred)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// What the store holds names the principal but is never the ticket, nor a credential.
func TestTicketStoreHoldsNoSecret(t *testing.T) {
	store := newMemTickets()
	tickets := NewTickets(store, 30*time.Second, time.Second)
	_, a := ticketServer(t, tickets)
	tk, _, err := tickets.Issue(context.Background(), mustAuth(t, a, readKey))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range store.m {
		if strings.Contains(k, tk) || strings.Contains(string(v), tk) || strings.Contains(string(v), readKey) {
			t.Fatalf("the store holds %s = %s: the ticket or the key", k, v)
		}
		var r ticketRecord
		if err := json.Unmarshal(v, &r); err != nil || r.Name != "r" {
			t.Fatalf("record %s: %v", v, err)
		}
	}
}

// A ticket stands for a credential that must still be valid: a key removed from the
// file since takes its tickets with it. A store that fails is a 503, not a 401.
func TestTicketOfARevokedKeyOrAFailingStore(t *testing.T) {
	store := newMemTickets()
	tickets := NewTickets(store, 30*time.Second, time.Second)
	e, a := ticketServer(t, tickets)
	tk, _, err := tickets.Issue(context.Background(), mustAuth(t, a, readKey))
	if err != nil {
		t.Fatal(err)
	}
	p := mustAuth(t, a, readKey)
	p.digest[0] ^= 1 // as if the key had left the file
	other, _, err := tickets.Issue(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get(e, "/feed?ticket="+other); code != 401 || !strings.Contains(body, "no longer valid") {
		t.Fatalf("a revoked key's ticket: %d %s, want 401", code, body)
	}
	store.fail = errors.New("connection refused")
	if code, _ := get(e, "/feed?ticket="+tk); code != http.StatusServiceUnavailable {
		t.Fatalf("with the store down: %d, want 503", code)
	}
}
