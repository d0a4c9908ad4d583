package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/platform/limits"
)

// What one credential may ask of query (docs/design.md, Security): every request
// costs its route's reads (costs.go) from a token bucket of its API key, or of its
// user token's user, the buckets of ingest's rates (internal/platform/limits); and the history and
// at= routes read Cassandra only while holding read slots, a few per request and a
// bounded number on the instance, so no client's ranges or batches can take every
// core or every connection to Cassandra.

// Refusal reasons, the values of pulse_query_requests_refused_total's reason label:
// a fixed set, so no request can add a series.
const (
	reasonKeyRate    = "key_rate"
	reasonUserRate   = "user_rate"
	reasonBusy       = "history_busy"
	reasonTooManyIDs = "too_many_ids"
	reasonRange      = "range_too_long"
)

var refusalReasons = []string{reasonKeyRate, reasonUserRate, reasonBusy, reasonTooManyIDs, reasonRange}

// refusal is an answer that a limit refused, with the reason it is counted under.
type refusal struct {
	reason string
	err    *httpserver.Error
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// refused marks e as a limit's refusal of the given reason.
func refused(reason string, e *httpserver.Error) error { return &refusal{reason: reason, err: e} }

// isRefusal says whether err is, or wraps, a limit's refusal: an answer of its own,
// which the history routes' error mapping passes through unchanged.
func isRefusal(err error) bool {
	var r *refusal
	return errors.As(err, &r)
}

// readLimits holds query's buckets and read slots.
type readLimits struct {
	cfg       LimitsConfig
	keyRates  *limits.Rates
	userRates *limits.Rates
	reads     *limits.Slots
	refusals  *prometheus.CounterVec
	// now and principal are the clock and the request's credential; tests replace
	// them.
	now       func() time.Time
	principal func(echo.Context) auth.Principal
}

// rateKeys bounds the API keys whose buckets query remembers: keys are few.
const rateKeys = 100_000

func newReadLimits(cfg LimitsConfig, reg prometheus.Registerer) *readLimits {
	l := &readLimits{
		cfg:       cfg,
		keyRates:  limits.NewRates(cfg.KeyRate, cfg.KeyBurst, rateKeys),
		userRates: limits.NewRates(cfg.UserRate, cfg.UserBurst, cfg.RateUsers),
		reads:     limits.NewSlots(cfg.HistoryReads),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_query_requests_refused_total",
			Help: "Query requests a limit refused, by reason: key_rate and user_rate (429), history_busy (503: no Cassandra read slot in time), too_many_ids and range_too_long (400).",
		}, []string{"reason"}),
		now:       time.Now,
		principal: auth.PrincipalOf,
	}
	for _, r := range refusalReasons {
		l.refusals.WithLabelValues(r)
	}
	reg.MustRegister(l.refusals, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pulse_query_history_reads_in_flight",
		Help: "Cassandra reads of the history and at= routes running now, of PULSE_QUERY_HISTORY_READS.",
	}, func() float64 { return float64(l.reads.InUse()) }))
	return l
}

// billKey holds a request's bill in its echo.Context.
const billKey = "pulse.query.bill"

// bill is what a request has paid so far, in reads.
type bill struct{ paid int }

// meter charges every request that carries a credential the cost every route has
// (costRequest) before its handler runs, and counts the refusals of every limit by
// reason. It must run after the guard, which names the principal; the open routes
// (probes, metrics, the document) have none and cost nothing.
func (l *readLimits) meter(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if l.principal(c).Name == "" {
			return next(c)
		}
		c.Set(billKey, &bill{})
		err := l.charge(c, costRequest)
		if err == nil {
			err = next(c)
		}
		var r *refusal
		if errors.As(err, &r) {
			l.refusals.WithLabelValues(r.reason).Inc()
		}
		return err
	}
}

// charge brings what the request has paid up to total reads, taking the difference
// from its credential's bucket, or refuses it with a 429 and Retry-After. A request
// costing more than the bucket's burst takes the whole burst, so it still runs when
// the bucket is full. Requests the meter did not see (unit tests without the guard)
// are free.
func (l *readLimits) charge(c echo.Context, total int) error {
	b, _ := c.Get(billKey).(*bill)
	if l == nil || b == nil {
		return nil
	}
	p := l.principal(c)
	rates, key, variable, reason := l.keyRates, p.Name, "PULSE_QUERY_KEY_RATE", reasonKeyRate
	rate, who := l.cfg.KeyRate, "key "+p.Name
	if p.UserID != "" {
		rates, key, variable, reason = l.userRates, p.UserID, "PULSE_QUERY_USER_RATE", reasonUserRate
		rate, who = l.cfg.UserRate, fmt.Sprintf("the user token of %q", p.UserID)
	}
	n := min(total, rates.Burst()) - b.paid
	if n <= 0 {
		return nil
	}
	_, wait, err := rates.Reserve(key, n, l.now())
	if err != nil || wait > 0 {
		return refused(reason, &httpserver.Error{Status: http.StatusTooManyRequests, Code: "rate_limited",
			Message:    fmt.Sprintf("%s is over its rate of %d reads/s (%s); this request costs %d; retry after Retry-After seconds", who, rate, variable, total),
			RetryAfter: max(wait, time.Second)})
	}
	b.paid += n
	return nil
}

// historyRetryBusy is what a request refused for want of a read slot is told to
// wait: the reads holding them end within PULSE_QUERY_HISTORY_TIMEOUT.
const historyRetryBusy = time.Second

// lease is the read slots one request holds for its Cassandra work, and so the
// most reads it runs at once.
type lease struct {
	n       int
	release []func()
}

// lease takes up to want slots (at most PULSE_QUERY_HISTORY_READS_PER_REQUEST) for
// one request: the first waiting at most PULSE_QUERY_HISTORY_WAIT, past which the
// request is a 503 with Retry-After (another instance, or this one a moment later,
// may have room); the others only if they are free now. A request holding a slot
// never waits for another, so it cannot refuse itself, and it always progresses.
func (l *readLimits) lease(ctx context.Context, want int) (*lease, error) {
	if l == nil {
		return &lease{n: 1}, nil
	}
	want = min(max(want, 1), max(l.cfg.HistoryReadsPerRequest, 1))
	first, err := l.reads.Acquire(ctx, l.cfg.HistoryWait)
	if errors.Is(err, limits.ErrBusy) {
		return nil, refused(reasonBusy, httpserver.Unavailable(fmt.Sprintf(
			"this instance runs as many history reads as it may (PULSE_QUERY_HISTORY_READS, %d); retry after Retry-After seconds",
			l.reads.Size()), historyRetryBusy))
	}
	if err != nil {
		return nil, fmt.Errorf("waiting for a history read slot: %w", err)
	}
	ls := &lease{n: 1, release: []func(){first}}
	for ls.n < want {
		more, ok := l.reads.TryAcquire()
		if !ok {
			break
		}
		ls.n++
		ls.release = append(ls.release, more)
	}
	return ls, nil
}

// end gives the slots back.
func (ls *lease) end() {
	for _, r := range ls.release {
		r()
	}
}

// each runs fn(ctx, i) for i in [0, n), as many at once as the lease holds slots.
// The first error cancels the calls not yet done and is returned.
func (ls *lease) each(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for range min(ls.n, n) {
		wg.Go(func() {
			for i := range next {
				if ctx.Err() != nil {
					continue // failed or ended: what is still handed out is not read
				}
				if err := fn(ctx, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
						cancel()
					}
					mu.Unlock()
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first == nil {
		first = ctx.Err() // the request's own deadline, before every call ran
	}
	return first
}
