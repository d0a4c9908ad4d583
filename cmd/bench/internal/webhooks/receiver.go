package webhooks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/pulse-presence/pulse/pkg/webhook"
)

// signatureTolerance is how old a signature the receivers take: a receiver's usual
// replay window; the notifier signs each attempt when it makes it.
const signatureTolerance = 5 * time.Minute

// maxBody bounds a request's body: 1,000 changes of a few hundred bytes.
const maxBody = 16 << 20

// receiver is one endpoint's HTTP server on a free loopback port. It verifies every
// request's Pulse-Signature with the endpoint's secret, and records when it first got
// each change and how often.
type receiver struct {
	id, url, secret string
	srv             *http.Server
	done            chan struct{}
	now             func() time.Time

	mu sync.Mutex
	rc receipts
}

// receipts is what a receiver got: each change id's first receipt and count.
type receipts struct {
	first             map[string]time.Time
	count             map[string]int
	requests          int64
	changes           int64 // in requests taken, duplicates included
	invalidSignatures int64
	malformed         int64
}

func newReceiver(id string) (*receiver, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	return &receiver{id: id, secret: hex.EncodeToString(key), now: time.Now,
		rc: receipts{first: map[string]time.Time{}, count: map[string]int{}}}, nil
}

// startReceiver serves a new receiver on 127.0.0.1, at a port the kernel picks.
func startReceiver(id string) (*receiver, error) {
	r, err := newReceiver(id)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r.url = "http://" + ln.Addr().String() + "/webhooks/" + id
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	r.done = make(chan struct{})
	go func() {
		defer close(r.done)
		_ = r.srv.Serve(ln) // ends at close; a server that failed shows as missing changes
	}()
	return r, nil
}

func (r *receiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
	<-r.done
}

// ServeHTTP takes one delivery: the time it arrived is taken before its body is read.
// A request whose signature does not verify is answered 401, one that is not a batch
// for this endpoint 400, and neither counts as delivered (the notifier retries them).
func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	at := r.now()
	body, err := io.ReadAll(io.LimitReader(req.Body, maxBody+1))
	if err == nil && len(body) > maxBody {
		err = errors.New("body too large")
	}
	r.mu.Lock()
	r.rc.requests++
	r.mu.Unlock()
	if err != nil || req.Method != http.MethodPost {
		r.refuse(w, http.StatusBadRequest, false)
		return
	}
	if err := webhook.Verify(req.Header.Get(webhook.SignatureHeader), body, signatureTolerance, at, []byte(r.secret)); err != nil {
		r.refuse(w, http.StatusUnauthorized, true)
		return
	}
	b, err := webhook.Decode(body)
	if err != nil || b.Endpoint != r.id || len(b.Changes) == 0 {
		r.refuse(w, http.StatusBadRequest, false)
		return
	}
	r.mu.Lock()
	for _, c := range b.Changes {
		if _, ok := r.rc.first[c.ID]; !ok {
			r.rc.first[c.ID] = at
		}
		r.rc.count[c.ID]++
	}
	r.rc.changes += int64(len(b.Changes))
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) refuse(w http.ResponseWriter, status int, signature bool) {
	r.mu.Lock()
	if signature {
		r.rc.invalidSignatures++
	} else {
		r.rc.malformed++
	}
	r.mu.Unlock()
	w.WriteHeader(status)
}

// hasAll reports whether every id of want was received.
func (r *receiver) hasAll(want map[string]time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.rc.first) < len(want) {
		return false
	}
	for id := range want {
		if _, ok := r.rc.first[id]; !ok {
			return false
		}
	}
	return true
}

// snapshot is a copy of what the receiver got so far.
func (r *receiver) snapshot() receipts {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.rc
	c.first, c.count = maps.Clone(r.rc.first), maps.Clone(r.rc.count)
	return c
}
