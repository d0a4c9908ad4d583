package auth

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulse-presence/pulse/internal/platform/httpserver"
)

// openPaths answer without credentials: probes must work without secrets, the
// metrics scraper is kept off the public network by the deployment, and the API's
// description is public.
var openPaths = map[string]bool{
	"/healthz":      true,
	"/readyz":       true,
	"/metrics":      true,
	"/openapi.json": true,
}

// principalKey holds, in the Echo context, who the request acts as.
const principalKey = "pulse.principal"

// Guard is the authentication middleware of one service.
type Guard struct {
	a     *Authenticator
	scope Scope
	// userRoutes are the route templates a user token may call; on those with a
	// :userId parameter it must be the token's subject.
	userRoutes map[string]bool
	// ticketRoutes take a single-use ticket from ?ticket= (TicketRoutes).
	ticketRoutes map[string]bool
	// routeScopes are the routes, "METHOD template", that need another scope than
	// the service's (RouteScope).
	routeScopes map[string]Scope
	tickets     *Tickets
	refused     *prometheus.CounterVec
}

// Guard builds the middleware of a service whose routes need scope. User tokens may
// call only userRoutes (route templates such as "/v1/users/:userId/status"); every
// other route answers them 403. The refusals are counted on reg.
func (a *Authenticator) Guard(reg prometheus.Registerer, scope Scope, userRoutes ...string) *Guard {
	g := &Guard{a: a, scope: scope, userRoutes: map[string]bool{}, ticketRoutes: map[string]bool{}, routeScopes: map[string]Scope{},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_auth_refused_total",
			Help: "Requests refused by authentication (401) or authorization (403), by status code.",
		}, []string{"code"}),
	}
	for _, r := range userRoutes {
		g.userRoutes[r] = true
	}
	reg.MustRegister(g.refused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pulse_auth_keys_loaded",
			Help: "API keys accepted now (the keys file's, plus PULSE_OPERATOR_TOKEN when set); 0 with the file unreadable: no key is valid.",
		}, func() float64 { return float64(a.keys.Load().Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pulse_auth_keys_file_ok",
			Help: "1 when the last read of PULSE_API_KEYS_FILE loaded it (or none is configured); 0 when it was unreadable (no key valid) or refused (the previous keys kept).",
		}, func() float64 {
			if a.keysFileBad.Load() {
				return 0
			}
			return 1
		}),
	)
	return g
}

// AccessTokenParam is RFC 6750 §2.3's query parameter for a credential, which Pulse
// refuses: a key or user token lives for months or hours, and a URL is kept in
// proxies' logs, the browser's history and Referer headers.
const AccessTokenParam = "access_token"

// TicketRoutes lets routes take a ticket of t from ?ticket= when the request has no
// Authorization header: browsers' WebSocket and EventSource cannot set headers, so
// they ask for a ticket with the header first (POST /v1/watch/tickets) and put only
// the ticket, single-use and valid for seconds, in the URL.
func (g *Guard) TicketRoutes(t *Tickets, routes ...string) *Guard {
	g.tickets = t
	for _, r := range routes {
		g.ticketRoutes[r] = true
	}
	return g
}

// RouteScope makes routes ("METHOD template", such as "PUT /v1/groups/:groupId/members")
// need scope instead of the service's: a read service's few writes.
func (g *Guard) RouteScope(scope Scope, routes ...string) *Guard {
	for _, r := range routes {
		g.routeScopes[r] = scope
	}
	return g
}

// Install makes g check every route of e.
func (g *Guard) Install(e *echo.Echo) { e.Use(g.Middleware) }

// Middleware authenticates the request and checks its scope; the open paths pass
// untouched. A missing or bad credential is a 401 with WWW-Authenticate: Bearer, a
// valid one without the scope or the user a 403.
func (g *Guard) Middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if openPaths[c.Path()] {
			return next(c)
		}
		p, err := g.authenticate(c)
		if err == nil {
			err = g.authorize(c, p)
		}
		if err != nil {
			if e, ok := err.(*httpserver.Error); ok {
				g.refused.WithLabelValues(fmt.Sprint(e.Status)).Inc()
			}
			return err
		}
		c.Set(principalKey, p)
		httpserver.SetPrincipal(c, p.Name)
		return next(c)
	}
}

func (g *Guard) authenticate(c echo.Context) (Principal, error) {
	h := c.Request().Header.Get(echo.HeaderAuthorization)
	if h == "" && c.QueryParam(AccessTokenParam) != "" {
		return Principal{}, unauthorized(c, "invalid_request",
			"a credential in the URL (?access_token=) is refused: send Authorization: Bearer, or on the feed a ticket from POST /v1/watch/tickets as ?ticket=")
	}
	if h == "" && g.ticketRoutes[c.Path()] && c.QueryParam(TicketParam) != "" {
		return g.redeem(c, c.QueryParam(TicketParam))
	}
	if h == "" {
		if g.a.off {
			return anonymous, nil
		}
		return Principal{}, unauthorized(c, "", "missing credentials: send Authorization: Bearer <API key or user token>")
	}
	cred, ok := bearer(h)
	if !ok {
		return Principal{}, unauthorized(c, "invalid_request", "the Authorization header must be `Bearer <API key or user token>`")
	}
	p, err := g.a.Authenticate(cred)
	if err != nil {
		return Principal{}, unauthorized(c, "invalid_token", err.Error())
	}
	return p, nil
}

// redeem authenticates a request by its ticket, which it uses up. The Principal it
// stands for must still be valid: a key removed, or a token expired, since the ticket
// was issued takes the ticket with it.
func (g *Guard) redeem(c echo.Context, ticket string) (Principal, error) {
	p, err := g.tickets.Redeem(c.Request().Context(), ticket)
	switch {
	case errors.Is(err, ErrBadTicket):
		return Principal{}, unauthorized(c, "invalid_token", err.Error())
	case err != nil:
		// The store's error stays in the server's log; the client learns to retry.
		return Principal{}, fmt.Errorf("redeeming a feed ticket: %w: %w", err,
			httpserver.Unavailable("tickets cannot be checked right now", time.Second))
	}
	if err := g.a.StillValid(p, time.Now()); err != nil {
		return Principal{}, unauthorized(c, "invalid_token", "the ticket's credential is no longer valid: "+err.Error())
	}
	return p, nil
}

func (g *Guard) authorize(c echo.Context, p Principal) error {
	if strings.HasPrefix(c.Path(), "/debug/pprof") {
		if !p.Has(ScopeOperator) {
			return Forbidden("Go's profiles need a key with the operator scope")
		}
		return nil
	}
	if need, ok := g.routeScopes[c.Request().Method+" "+c.Path()]; ok {
		if !p.Has(need) {
			return Forbidden(fmt.Sprintf("key %s has scopes %q; %s %s needs %s", p.Name, p.Scopes, c.Request().Method, c.Path(), need))
		}
	} else if !p.Has(g.scope) {
		return Forbidden(fmt.Sprintf("key %s has scopes %q; this service needs %s", p.Name, p.Scopes, g.scope))
	}
	if p.UserID == "" {
		return nil
	}
	if !g.userRoutes[c.Path()] {
		return Forbidden(fmt.Sprintf("a user token may not call %s %s; it reads and writes only its own user's status", c.Request().Method, c.Path()))
	}
	for _, name := range c.ParamNames() {
		if name == "userId" {
			return forUser(p, c.Param(name))
		}
	}
	return nil
}

// unauthorized is a 401 with the challenge of RFC 6750: errCode, when set, says what
// was wrong with the credential.
func unauthorized(c echo.Context, errCode, message string) error {
	challenge := `Bearer realm="pulse"`
	if errCode != "" {
		challenge += `, error="` + errCode + `"`
	}
	c.Response().Header().Set(echo.HeaderWWWAuthenticate, challenge)
	return &httpserver.Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: message}
}

// Forbidden is the 403 of a valid credential that may not do what was asked.
func Forbidden(message string) *httpserver.Error {
	return &httpserver.Error{Status: http.StatusForbidden, Code: "forbidden", Message: message}
}

// bearer extracts the credential of an "Authorization: Bearer <credential>" header.
func bearer(h string) (string, bool) {
	scheme, cred, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	cred = strings.TrimSpace(cred)
	return cred, cred != ""
}

// PrincipalOf is who the request acts as; the zero Principal (no scope) on routes
// the Guard does not check.
func PrincipalOf(c echo.Context) Principal {
	p, _ := c.Get(principalKey).(Principal)
	return p
}

// ForUser is nil when the request may act for userID: any user for an API key, only
// its subject for a user token; else a 403 naming the field.
func ForUser(c echo.Context, userID string) error { return forUser(PrincipalOf(c), userID) }

func forUser(p Principal, userID string) error {
	if p.UserID == "" || p.UserID == userID {
		return nil
	}
	return Forbidden(fmt.Sprintf("this user token acts only for its own user; %q is another", userID))
}

// Views a request may ask for with ?view=.
const (
	ViewPublic   = "public"
	ViewOperator = "operator"
)

// Views checks ?view= on every route of a reading service: absent or "public" is
// everyone's view; "operator" needs the operator scope (else 403) and is answered
// with Cache-Control: private, no-store; anything else is a 400 naming view.
// Readers see invisible users as offline (docs/design.md, Event model); operators —
// support staff, moderation tools — may see the real state. It runs after the Guard.
func Views(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		switch c.QueryParam("view") {
		case "", ViewPublic:
		case ViewOperator:
			if !IsOperator(c) {
				return Forbidden("view=operator needs a key with the operator scope: Authorization: Bearer <key>")
			}
			// Operator answers show what users hide; no cache may keep them.
			c.Response().Header().Set(echo.HeaderCacheControl, "private, no-store")
		default:
			return httpserver.BadRequest("view", fmt.Sprintf("must be %s or %s, got %q", ViewPublic, ViewOperator, c.QueryParam("view")))
		}
		return next(c)
	}
}

// IsOperator reports whether the request carries the operator scope.
func IsOperator(c echo.Context) bool { return PrincipalOf(c).Has(ScopeOperator) }

// OperatorView reports whether the request asked for, and may have, the operator
// view: invisible users shown as invisible, with their devices and times.
func OperatorView(c echo.Context) bool {
	return IsOperator(c) && c.QueryParam("view") == ViewOperator
}
