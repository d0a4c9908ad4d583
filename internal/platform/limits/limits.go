// Package limits holds the edge's limits on what one client may take: events (or
// query's reads, by cost) per second per key or user (token buckets from
// golang.org/x/time/rate, kept in a bounded LRU so unknown keys cannot grow memory),
// concurrent connections per instance and per key, and slots bounding the backend
// reads in flight on an instance (docs/design.md, Security).
package limits

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Rates is a token bucket per key: perSecond events a second on average, up to
// burst at once. Past maxKeys the least recently used full bucket is forgotten, which
// costs nothing: a forgotten key starts again from a full bucket. A bucket in debt
// (below its burst) is never forgotten, since forgetting it would refill it: a client
// could otherwise reset its own debt by posting for enough other keys. Memory then
// exceeds maxKeys only by the buckets in debt at once, which the admitted rate
// bounds: a bucket is in debt for its taken events / perSecond seconds, so the keys
// admitting R events a second hold about R / perSecond buckets in debt.
type Rates struct {
	limit rate.Limit
	burst int
	max   int

	mu      sync.Mutex
	lru     *list.List // of *entry, most recent first
	buckets map[string]*list.Element
}

type entry struct {
	key string
	lim *rate.Limiter
}

// NewRates returns the buckets; perSecond 0 means no limit (Reserve always admits).
func NewRates(perSecond, burst, maxKeys int) *Rates {
	return &Rates{limit: rate.Limit(perSecond), burst: max(burst, 1), max: max(maxKeys, 1),
		lru: list.New(), buckets: map[string]*list.Element{}}
}

// Unlimited reports whether r admits everything.
func (r *Rates) Unlimited() bool { return r.limit == 0 }

// Burst is the most events one request may carry for one key.
func (r *Rates) Burst() int { return r.burst }

// Len is the number of keys remembered.
func (r *Rates) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.buckets)
}

func (r *Rates) limiter(key string, now time.Time) *rate.Limiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	if el, ok := r.buckets[key]; ok {
		r.lru.MoveToFront(el)
		return el.Value.(*entry).lim
	}
	r.evict(now)
	lim := rate.NewLimiter(r.limit, r.burst)
	r.buckets[key] = r.lru.PushFront(&entry{key: key, lim: lim})
	return lim
}

// evictTries bounds the buckets one new key looks at to make room, so making room
// costs O(1) however many buckets are in debt.
const evictTries = 8

// evict makes room for one more bucket within max: it forgets least recently used
// buckets that are full, and moves one in debt to the front instead (kept; it is
// looked at again once the others have been).
func (r *Rates) evict(now time.Time) {
	for tries := 0; len(r.buckets) >= r.max && tries < evictTries; tries++ {
		oldest := r.lru.Back()
		e := oldest.Value.(*entry)
		if e.lim.TokensAt(now) < float64(r.burst) {
			r.lru.MoveToFront(oldest)
			continue
		}
		r.lru.Remove(oldest)
		delete(r.buckets, e.key)
	}
}

// Grant is n events taken from a key's bucket at a time, which a later refusal of
// the same request gives back.
type Grant struct {
	res *rate.Reservation
	at  time.Time
}

// Cancel returns the events of g to their bucket.
func (g Grant) Cancel() {
	if g.res != nil {
		g.res.CancelAt(g.at)
	}
}

// ErrTooMany is the refusal of a request carrying more events for one key than the
// burst: no wait would admit it.
var ErrTooMany = errors.New("more events in one request than the burst allows")

// Reserve takes n events for key at now. When the bucket lacks them it takes
// nothing and returns how long to wait before they would be there; with n above the
// burst it returns ErrTooMany.
func (r *Rates) Reserve(key string, n int, now time.Time) (Grant, time.Duration, error) {
	if r.limit == 0 || n <= 0 {
		return Grant{}, 0, nil
	}
	if n > r.burst {
		return Grant{}, 0, ErrTooMany
	}
	res := r.limiter(key, now).ReserveN(now, n)
	if !res.OK() {
		return Grant{}, 0, ErrTooMany
	}
	if wait := res.DelayFrom(now); wait > 0 {
		res.CancelAt(now)
		return Grant{}, wait, nil
	}
	return Grant{res: res, at: now}, 0, nil
}

// Conns counts the open long-lived connections of an instance, in total, per
// credential and per remote address.
type Conns struct {
	max, perAddr int

	mu     sync.Mutex
	total  int
	byKey  map[string]int
	byAddr map[string]int
}

// NewConns bounds connections to max on the instance and perAddr per remote address;
// 0 is no bound. Each Acquire names its credential's own bound.
func NewConns(max, perAddr int) *Conns {
	return &Conns{max: max, perAddr: perAddr, byKey: map[string]int{}, byAddr: map[string]int{}}
}

// Refusals of Acquire.
var (
	ErrInstanceFull = errors.New("this instance holds as many feed connections as it may")
	ErrKeyFull      = errors.New("this key holds as many feed connections as it may")
	ErrAddrFull     = errors.New("this address holds as many feed connections as it may")
)

// Acquire counts a new connection of key, which may hold keyMax (0: no bound), from
// addr, or refuses it; release, called once when the connection ends, uncounts it.
func (c *Conns) Acquire(key string, keyMax int, addr string) (release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.max > 0 && c.total >= c.max:
		return nil, ErrInstanceFull
	case keyMax > 0 && c.byKey[key] >= keyMax:
		return nil, ErrKeyFull
	case c.perAddr > 0 && c.byAddr[addr] >= c.perAddr:
		return nil, ErrAddrFull
	}
	c.total++
	c.byKey[key]++
	c.byAddr[addr]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.total--
			if c.byKey[key]--; c.byKey[key] == 0 {
				delete(c.byKey, key)
			}
			if c.byAddr[addr]--; c.byAddr[addr] == 0 {
				delete(c.byAddr, addr)
			}
		})
	}, nil
}

// Open is the number of connections counted.
func (c *Conns) Open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// Slots bounds the work in flight on an instance, such as query's Cassandra reads: at
// most n at once, and a caller waits a bounded time for one.
type Slots struct {
	ch chan struct{}
}

// NewSlots returns n slots (at least one).
func NewSlots(n int) *Slots { return &Slots{ch: make(chan struct{}, max(n, 1))} }

// ErrBusy is the refusal of Acquire when no slot freed up within its wait.
var ErrBusy = errors.New("every slot stayed taken for the whole wait")

// Acquire takes a slot, waiting at most wait for one (and no longer than ctx);
// release, called once when the work ends, gives it back. Past the wait it returns
// ErrBusy, so a caller can tell a busy instance (retry later) from its own deadline
// (ctx's error).
func (s *Slots) Acquire(ctx context.Context, wait time.Duration) (release func(), err error) {
	if release, ok := s.TryAcquire(); ok {
		return release, nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case s.ch <- struct{}{}:
		return s.releaser(), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, ErrBusy
	}
}

// TryAcquire takes a slot if one is free now.
func (s *Slots) TryAcquire() (release func(), ok bool) {
	select {
	case s.ch <- struct{}{}:
		return s.releaser(), true
	default:
		return nil, false
	}
}

func (s *Slots) releaser() func() {
	var once sync.Once
	return func() { once.Do(func() { <-s.ch }) }
}

// InUse is the number of slots taken.
func (s *Slots) InUse() int { return len(s.ch) }

// Size is the number of slots.
func (s *Slots) Size() int { return cap(s.ch) }
