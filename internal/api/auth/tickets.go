package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// TicketParam is the query parameter carrying a ticket on the routes of TicketRoutes.
const TicketParam = "ticket"

// ticketPrefix starts every ticket, so a ticket pasted where a key belongs is
// recognisable (and never taken for a JWT: it holds no dot).
const ticketPrefix = "pwt_"

// ticketBytes is a ticket's randomness: 256 bits, beyond guessing within its seconds.
const ticketBytes = 32

// ErrBadTicket is Redeem's error for a ticket that is unknown, already used or
// expired: the three are one answer, so a client learns nothing about other tickets.
var ErrBadTicket = errors.New("unknown, used or expired ticket: ask POST /v1/watch/tickets for a new one")

// TicketStore keeps tickets between the instance that issued one and the instance
// that redeems it, which may be another (docs/design.md, Security).
type TicketStore interface {
	// Put stores value under key for ttl unless key is already there; it reports
	// whether it stored it.
	Put(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error)
	// Take returns the value of key and removes it in one step, so two requests
	// can never both take it; found is false when there is none.
	Take(ctx context.Context, key string) (value []byte, found bool, err error)
}

// Tickets issues and redeems the change feed's tickets: short-lived, single-use
// stand-ins for a credential, which a browser may put in a URL (WebSocket and
// EventSource cannot send headers) instead of its key or token. A ticket acts as the
// Principal that asked for it: the same name, scopes, user, watch list and expiry, so
// the same limits and the same re-authorization apply to the connection it opens.
type Tickets struct {
	store   TicketStore
	ttl     time.Duration
	timeout time.Duration
	now     func() time.Time
	random  io.Reader
}

// NewTickets makes tickets valid for ttl, kept in store; each store call runs under
// timeout.
func NewTickets(store TicketStore, ttl, timeout time.Duration) *Tickets {
	return &Tickets{store: store, ttl: ttl, timeout: timeout, now: time.Now, random: rand.Reader}
}

// ticketRecord is what the store holds for a ticket: the Principal, field by field
// (never a credential: a key's digest is what the keys file holds too), and when the
// ticket ends.
type ticketRecord struct {
	Name    string    `json:"name"`
	Scopes  Scope     `json:"scopes"`
	UserID  string    `json:"userId,omitempty"`
	Expires time.Time `json:"expires,omitzero"`
	Watch   []string  `json:"watch,omitempty"`
	Digest  string    `json:"digest,omitempty"`
	Until   time.Time `json:"until"`
}

// Issue makes a ticket acting as p, valid until the returned time: the ticket's TTL
// from now, or p's own expiry if sooner.
func (t *Tickets) Issue(ctx context.Context, p Principal) (string, time.Time, error) {
	raw := make([]byte, ticketBytes)
	if _, err := io.ReadFull(t.random, raw); err != nil {
		return "", time.Time{}, fmt.Errorf("making a ticket: %w", err)
	}
	ticket := ticketPrefix + base64.RawURLEncoding.EncodeToString(raw)
	until := t.now().Add(t.ttl)
	if !p.Expires.IsZero() && p.Expires.Before(until) {
		until = p.Expires
	}
	value, err := json.Marshal(recordOf(p, until))
	if err != nil {
		return "", time.Time{}, fmt.Errorf("encoding a ticket: %w", err)
	}
	ttl := until.Sub(t.now())
	if ttl <= 0 {
		return "", time.Time{}, ErrTokenExpired
	}
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	stored, err := t.store.Put(ctx, TicketKey(ticket), value, ttl)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("storing a ticket: %w", err)
	}
	if !stored { // 256 random bits met an existing ticket: the random source is broken
		return "", time.Time{}, errors.New("storing a ticket: its key exists already")
	}
	return ticket, until, nil
}

// Redeem takes ticket, once: the Principal it acts as, ErrBadTicket when it is
// unknown, already taken or past its time, or the store's error.
func (t *Tickets) Redeem(ctx context.Context, ticket string) (Principal, error) {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	value, found, err := t.store.Take(ctx, TicketKey(ticket))
	if err != nil {
		return Principal{}, fmt.Errorf("taking a ticket: %w", err)
	}
	if !found {
		return Principal{}, ErrBadTicket
	}
	var r ticketRecord
	if err := json.Unmarshal(value, &r); err != nil {
		return Principal{}, fmt.Errorf("decoding a ticket: %w", err)
	}
	// The store's expiry ends a ticket too; this check keeps the promise exact
	// whatever the store's clock and granularity.
	if !t.now().Before(r.Until) {
		return Principal{}, ErrBadTicket
	}
	return r.principal()
}

// TicketKey is the store's key of ticket: a digest, so what the store holds (and a
// dump or a MONITOR of it shows) cannot be presented as a ticket.
func TicketKey(ticket string) string {
	sum := sha256.Sum256([]byte(ticket))
	return hex.EncodeToString(sum[:])
}

func recordOf(p Principal, until time.Time) ticketRecord {
	r := ticketRecord{Name: p.Name, Scopes: p.Scopes, UserID: p.UserID, Expires: p.Expires, Until: until}
	if p.watch != nil {
		for id := range *p.watch {
			r.Watch = append(r.Watch, id)
		}
	}
	if p.digest != [32]byte{} {
		r.Digest = hex.EncodeToString(p.digest[:])
	}
	return r
}

func (r ticketRecord) principal() (Principal, error) {
	p := Principal{Name: r.Name, Scopes: r.Scopes, UserID: r.UserID, Expires: r.Expires}
	if len(r.Watch) > 0 {
		set := make(map[string]bool, len(r.Watch))
		for _, id := range r.Watch {
			set[id] = true
		}
		p.watch = &set
	}
	if r.Digest != "" {
		d, err := hex.DecodeString(r.Digest)
		if err != nil || len(d) != len(p.digest) {
			return Principal{}, errors.New("decoding a ticket: bad key digest")
		}
		copy(p.digest[:], d)
	}
	return p, nil
}
