package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
)

// TicketsPath is the route that issues the feed's tickets.
const TicketsPath = "/v1/watch/tickets"

// ticketTimeout bounds each Redis call of a ticket: issuing one, or taking it when a
// feed connection opens.
const ticketTimeout = time.Second

// ticketTTLVar is the ticket lifetime's row of query's configuration table.
func ticketTTLVar(ttl *time.Duration) *config.Var {
	return config.Duration(ttl, "PULSE_WATCH_TICKET_TTL", 30*time.Second,
		"how long a ticket of POST /v1/watch/tickets stays valid (once) for opening the change feed as ?ticket=; never longer than its credential",
		config.Between(time.Second, 10*time.Minute))
}

// redisTickets keeps the feed's tickets in Redis, where every query instance finds
// them: a browser may issue a ticket on one instance and open the feed, through the
// load balancer, on another. SET NX PX stores one for its lifetime, GETDEL takes it
// once, atomically, so two connections can never both use it (docs/design.md,
// Security). Keys are <prefix>:watch-ticket:<SHA-256 of the ticket>, single keys in
// any Redis Cluster slot.
type redisTickets struct {
	rdb    redis.UniversalClient
	prefix string
}

func (r redisTickets) key(k string) string { return r.prefix + ":watch-ticket:" + k }

func (r redisTickets) Put(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	err := r.rdb.SetArgs(ctx, r.key(key), value, redis.SetArgs{Mode: "NX", TTL: ttl}).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return err == nil, err
}

func (r redisTickets) Take(ctx context.Context, key string) ([]byte, bool, error) {
	v, err := r.rdb.GetDel(ctx, r.key(key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	return v, err == nil, err
}

// installTickets lets the feed's routes take a ticket of t from ?ticket= (g's check,
// before watch.go sees the request) and serves POST /v1/watch/tickets, which issues
// them to callers g has authenticated by their header.
func installTickets(e *echo.Echo, g *auth.Guard, t *auth.Tickets) {
	g.TicketRoutes(t, feedRoutes...)
	e.POST(TicketsPath, issueTicket(t))
}

// ticketAnswer is POST /v1/watch/tickets' answer.
type ticketAnswer struct {
	Ticket    string    `json:"ticket"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// issueTicket answers POST /v1/watch/tickets: a ticket acting as the caller, which
// the Guard has authenticated by its header. The ticket is a secret for its seconds:
// the answer is never cached and the ticket never logged.
func issueTicket(t *auth.Tickets) echo.HandlerFunc {
	return func(c echo.Context) error {
		ticket, until, err := t.Issue(c.Request().Context(), auth.PrincipalOf(c))
		if errors.Is(err, auth.ErrTokenExpired) {
			return auth.Forbidden("the user token expires now; a ticket would outlive it")
		}
		if err != nil { // the server's failure log keeps err; the client learns to retry
			return fmt.Errorf("%w: %w", err, httpserver.Unavailable("tickets cannot be issued right now", time.Second))
		}
		c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
		return httpserver.JSON(c, http.StatusOK, ticketAnswer{Ticket: ticket, ExpiresAt: until.UTC()})
	}
}
