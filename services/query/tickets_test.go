package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/platform/servertest"
)

// memTickets is a ticket store that keeps nothing: enough for the routes' tests,
// which never redeem.
type memTickets struct{}

func (memTickets) Put(context.Context, string, []byte, time.Duration) (bool, error) { return true, nil }
func (memTickets) Take(context.Context, string) ([]byte, bool, error)               { return nil, false, nil }

// POST /v1/watch/tickets answers a ticket and its expiry, never cached.
func TestIssueTicketAnswer(t *testing.T) {
	srv := newTestServer(t, offlineStore(t))
	rec := httptest.NewRecorder()
	srv.Echo.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, TicketsPath, nil))
	var a ticketAnswer
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &a) != nil || len(a.Ticket) < 40 {
		t.Fatalf("POST %s = %d %s, want a ticket", TicketsPath, rec.Code, rec.Body)
	}
	if d := time.Until(a.ExpiresAt); d <= 0 || d > time.Minute {
		t.Errorf("expiresAt %v is %v away, want within the ticket TTL (1m here)", a.ExpiresAt, d)
	}
	if cc := rec.Header().Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", cc)
	}
}

// Redis keeps a ticket once (SET NX), gives it once (GETDEL) and forgets it at its TTL.
func TestRedisTicketsTakeOnce(t *testing.T) {
	rdb, prefix := servertest.Redis(t, nil)
	s := redisTickets{rdb: rdb, prefix: prefix}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ok, err := s.Put(ctx, "k", []byte("v"), time.Minute); !ok || err != nil {
		t.Fatalf("Put = %v, %v", ok, err)
	}
	if ok, err := s.Put(ctx, "k", []byte("w"), time.Minute); ok || err != nil {
		t.Fatalf("second Put of k = %v, %v; want false: a ticket is never overwritten", ok, err)
	}
	if v, found, err := s.Take(ctx, "k"); string(v) != "v" || !found || err != nil {
		t.Fatalf("Take = %q %v %v", v, found, err)
	}
	if _, found, err := s.Take(ctx, "k"); found || err != nil {
		t.Fatalf("second Take = %v %v; want not found", found, err)
	}
	if ok, err := s.Put(ctx, "short", []byte("v"), 50*time.Millisecond); !ok || err != nil {
		t.Fatalf("Put = %v, %v", ok, err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, found, err := s.Take(ctx, "short"); found || err != nil {
		t.Fatalf("Take past the TTL = %v %v; want not found", found, err)
	}
}
