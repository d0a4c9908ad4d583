package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
)

// The cost table, as docs/design.md's Security section and the OpenAPI document
// state it.
func TestCostTable(t *testing.T) {
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	midnight := at("2026-11-01T00:00:00Z")
	for _, tt := range []struct {
		name      string
		got, want int
	}{
		{"a status", costRequest, 1},
		{"POST /statuses of 1 id", statusesCost(1, false), 1},
		{"POST /statuses of 10 ids", statusesCost(10, false), 1},
		{"POST /statuses of 11 ids", statusesCost(11, false), 2},
		{"POST /statuses of 1,000 ids", statusesCost(1000, false), 100},
		{"POST /statuses of 0 ids", statusesCost(0, false), 1},
		{"POST /statuses?at= of 1 id", statusesCost(1, true), 21},
		{"POST /statuses?at= of 100 ids", statusesCost(100, true), 120},
		{"filter of 10,000 ids", filterCost(10_000), 10},
		{"filter of 1 id", filterCost(1), 1},
		{"listing of 100", pageCost(100, false), 1},
		{"listing of 1,000", pageCost(1000, false), 10},
		{"listing of 1,000 at=", pageCost(1000, true), 30},
		{"an at= answer", costAt, 20},
		{"timeline of a day from midnight", timelineCost(midnight, midnight.Add(day)), 1},
		{"timeline of a day from noon", timelineCost(midnight.Add(12*time.Hour), midnight.Add(36*time.Hour)), 2},
		{"timeline of 31 days", timelineCost(midnight, midnight.Add(31*day)), 31},
		{"timeline of a minute", timelineCost(midnight, midnight.Add(time.Minute)), 1},
		{"concurrency of an hour", concurrencyCost(midnight, midnight.Add(time.Hour)), 10},
		{"concurrency of 31 days", concurrencyCost(midnight, midnight.Add(31*day)), 310},
		{"sessions from mid-November to mid-January", sessionsCost(at("2026-11-15T00:00:00Z"), at("2027-01-15T00:00:00Z")), 3},
		{"sessions of November", sessionsCost(midnight, at("2026-12-01T00:00:00Z")), 1},
		{"uniques of 400 days", uniquesCost(midnight, midnight.Add(400*day), false), 400},
		{"a group's uniques of 400 days", uniquesCost(midnight, midnight.Add(400*day), true), 401},
		{"a group's uniques of a day", uniquesCost(midnight, midnight.Add(day), true), 2},
		{"a group's concurrency of an hour, 16 shards", groupConcurrencyCost(midnight, midnight.Add(time.Hour), 16), 117},
		{"a group's concurrency of a day, 16 shards", groupConcurrencyCost(midnight, midnight.Add(day), 16), 2325},
		{"a group's concurrency of an hour, 1 shard", groupConcurrencyCost(midnight, midnight.Add(time.Hour), 1), 27},
		{"a group's concurrency of 61 s from :30, 1 shard", groupConcurrencyCost(midnight.Add(30*time.Second), midnight.Add(91*time.Second), 1), 22},
		{"a group's concurrency of 11 minutes, 2 shards", groupConcurrencyCost(midnight, midnight.Add(11*time.Minute), 2), 25},
		{"a group with no member", groupConcurrencyCost(midnight, midnight.Add(day), 0), 21},
		{"a user's days over two years", userDaysCost(at("2025-10-20T00:00:00Z"), at("2026-11-23T00:00:00Z")), 2},
		{"every user's day, a page of 100", pageCost(100, false), 1},
		// 2025-10-19 to 2026-11-24 10:00: 402 days, 14 months, 2 years, and the four reads of the first page.
		{"an export's first page, 400 days back", exportCost(at("2025-10-19T00:00:00Z"), at("2026-11-24T10:00:00Z"), true), 422},
		{"an export's next page, 6 days left", exportCost(at("2025-10-19T00:00:00Z"), at("2025-10-24T10:00:00Z"), false), 6},
		{"an export's next page, at its range's start", exportCost(at("2025-10-19T00:00:00Z"), at("2025-10-19T00:00:00.001Z"), false), 1},
	} {
		if tt.got != tt.want {
			t.Errorf("%s costs %d, want %d", tt.name, tt.got, tt.want)
		}
	}
}

// testLimits are readLimits with small buckets, a frozen clock, and the credential
// read from the X-Test-Key and X-Test-User headers.
func testLimits(t *testing.T, cfg LimitsConfig) (*readLimits, *time.Time) {
	t.Helper()
	l := newReadLimits(cfg, prometheus.NewRegistry())
	now := time.Unix(1_800_000_000, 0)
	l.now = func() time.Time { return now }
	l.principal = func(c echo.Context) auth.Principal {
		if u := c.Request().Header.Get("X-Test-User"); u != "" {
			return auth.Principal{Name: "user:" + u, UserID: u}
		}
		return auth.Principal{Name: c.Request().Header.Get("X-Test-Key")}
	}
	return l, &now
}

// spend runs one metered request costing cost as key (or as user's token).
func spend(l *readLimits, key, user string, cost int) error {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("X-Test-Key", key)
	req.Header.Set("X-Test-User", user)
	c := echo.New().NewContext(req, httptest.NewRecorder())
	return l.meter(func(c echo.Context) error { return l.charge(c, cost) })(c)
}

func wantRateLimited(t *testing.T, err error, what string) *httpserver.Error {
	t.Helper()
	var e *httpserver.Error
	if !errors.As(err, &e) || e.Status != http.StatusTooManyRequests || e.Code != "rate_limited" || e.RetryAfter < time.Second {
		t.Fatalf("%s: %v, want a 429 rate_limited with Retry-After", what, err)
	}
	return e
}

func TestChargeTakesEachRequestsCostFromItsCredential(t *testing.T) {
	l, now := testLimits(t, LimitsConfig{KeyRate: 1, KeyBurst: 10, UserRate: 1, UserBurst: 3, RateUsers: 10, HistoryReads: 1, HistoryReadsPerRequest: 1, HistoryWait: time.Second})

	// A key: ten reads, then a 429 naming the variable, then one a second.
	for i := range 10 {
		if err := spend(l, "reader", "", 1); err != nil {
			t.Fatalf("read %d of the burst: %v", i, err)
		}
	}
	e := wantRateLimited(t, spend(l, "reader", "", 1), "the 11th read")
	if want := "key reader is over its rate of 1 reads/s (PULSE_QUERY_KEY_RATE); this request costs 1; retry after Retry-After seconds"; e.Message != want {
		t.Errorf("message %q, want %q", e.Message, want)
	}
	*now = now.Add(time.Second)
	if err := spend(l, "reader", "", 1); err != nil {
		t.Fatalf("a read a second later: %v", err)
	}

	// Another key has its own bucket, which an expensive route drains by its cost.
	for i := range 2 {
		if err := spend(l, "reader-2", "", 5); err != nil {
			t.Fatalf("expensive request %d: %v", i, err)
		}
	}
	wantRateLimited(t, spend(l, "reader-2", "", 1), "a read after two requests of 5")

	// A request costing more than the burst takes the whole burst: it runs on a full
	// bucket, and the next waits for the whole of it.
	if err := spend(l, "analyst", "", 310); err != nil {
		t.Fatalf("a request above the burst on a full bucket: %v", err)
	}
	e = wantRateLimited(t, spend(l, "analyst", "", 1), "a read after a request above the burst")
	if e.RetryAfter != time.Second {
		t.Errorf("Retry-After %v after draining the burst, want 1s", e.RetryAfter)
	}

	// User tokens: a bucket per user, with the user rate; one user's reads leave
	// another's alone.
	for i := range 3 {
		if err := spend(l, "", "alice", 1); err != nil {
			t.Fatalf("alice's read %d: %v", i, err)
		}
	}
	e = wantRateLimited(t, spend(l, "", "alice", 1), "alice's 4th read")
	if want := `the user token of "alice" is over its rate of 1 reads/s (PULSE_QUERY_USER_RATE); this request costs 1; retry after Retry-After seconds`; e.Message != want {
		t.Errorf("message %q, want %q", e.Message, want)
	}
	if err := spend(l, "", "bob", 1); err != nil {
		t.Fatalf("bob's read while alice is limited: %v", err)
	}

	if got := testutil.ToFloat64(l.refusals.WithLabelValues(reasonKeyRate)); got != 3 {
		t.Errorf("key_rate refusals = %v, want 3", got)
	}
	if got := testutil.ToFloat64(l.refusals.WithLabelValues(reasonUserRate)); got != 1 {
		t.Errorf("user_rate refusals = %v, want 1", got)
	}
}

// A handler's later charge brings the request to its total: the meter's one read is
// not taken twice.
func TestChargeBringsTheRequestToItsTotal(t *testing.T) {
	l, _ := testLimits(t, LimitsConfig{KeyRate: 1, KeyBurst: 10, UserRate: 1, UserBurst: 1, RateUsers: 10, HistoryReads: 1, HistoryReadsPerRequest: 1, HistoryWait: time.Second})
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("X-Test-Key", "k")
	c := echo.New().NewContext(req, httptest.NewRecorder())
	err := l.meter(func(c echo.Context) error {
		if err := l.charge(c, costAt); err != nil { // 20, above the burst: takes all 10
			return err
		}
		return l.charge(c, statusesCost(5, true)) // 25: nothing more to take
	})(c)
	if err != nil {
		t.Fatalf("a request charged twice within the burst: %v", err)
	}
	wantRateLimited(t, spend(l, "k", "", 1), "the next read")
}

// Unlimited rates (0) and requests without a credential (the open routes) cost
// nothing.
func TestChargeUnlimitedAndOpenRoutes(t *testing.T) {
	l, _ := testLimits(t, LimitsConfig{KeyRate: 0, KeyBurst: 1, UserRate: 1, UserBurst: 1, RateUsers: 10, HistoryReads: 1, HistoryReadsPerRequest: 1, HistoryWait: time.Second})
	for range 100 {
		if err := spend(l, "k", "", 1000); err != nil {
			t.Fatalf("an unlimited key: %v", err)
		}
		if err := spend(l, "", "", 1000); err != nil {
			t.Fatalf("no credential: %v", err)
		}
	}
}

// A request's reads run at most PULSE_QUERY_HISTORY_READS_PER_REQUEST at once, and
// the instance's PULSE_QUERY_HISTORY_READS: a request takes its first slot waiting,
// the others only if free, so requests sharing few slots all progress.
func TestLeasesBoundReadsPerRequestAndInTotal(t *testing.T) {
	l, _ := testLimits(t, LimitsConfig{KeyRate: 1, KeyBurst: 1, UserRate: 1, UserBurst: 1, RateUsers: 1,
		HistoryReads: 3, HistoryReadsPerRequest: 2, HistoryWait: 10 * time.Second})
	var inFlight, most, mostPerRequest atomic.Int32
	read := func(mine *atomic.Int32) func(context.Context, int) error {
		return func(context.Context, int) error {
			n, r := inFlight.Add(1), mine.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			for m := mostPerRequest.Load(); r > m && !mostPerRequest.CompareAndSwap(m, r); m = mostPerRequest.Load() {
			}
			time.Sleep(time.Millisecond)
			mine.Add(-1)
			inFlight.Add(-1)
			return nil
		}
	}
	var wg sync.WaitGroup
	for req := range 5 {
		wg.Go(func() {
			ls, err := l.lease(context.Background(), 40)
			if err != nil {
				t.Errorf("request %d: %v", req, err)
				return
			}
			defer ls.end()
			var mine atomic.Int32
			if err := ls.each(context.Background(), 40, read(&mine)); err != nil {
				t.Errorf("request %d: %v", req, err)
			}
		})
	}
	wg.Wait()
	if most.Load() > 3 || mostPerRequest.Load() > 2 {
		t.Fatalf("at most %d reads at once in total, %d in one request; want at most 3 and 2", most.Load(), mostPerRequest.Load())
	}
	if l.reads.InUse() != 0 {
		t.Fatalf("%d slots still taken", l.reads.InUse())
	}
	// One slot and a request wanting four: it runs with the one it has.
	one, _ := testLimits(t, LimitsConfig{HistoryReads: 1, HistoryReadsPerRequest: 4, HistoryWait: time.Millisecond})
	ls, err := one.lease(context.Background(), 4)
	if err != nil || ls.n != 1 {
		t.Fatalf("a lease of 4 from 1 slot: %+v, %v", ls, err)
	}
	ls.end()
}

// A request whose first slot does not free up within PULSE_QUERY_HISTORY_WAIT is a
// 503 with Retry-After, counted as history_busy; a failed read stops the others.
func TestLeaseBusyAndFailingReads(t *testing.T) {
	l, _ := testLimits(t, LimitsConfig{KeyRate: 1, KeyBurst: 1, UserRate: 1, UserBurst: 1, RateUsers: 1,
		HistoryReads: 1, HistoryReadsPerRequest: 4, HistoryWait: 20 * time.Millisecond})
	hold, err := l.lease(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.lease(context.Background(), 1)
	var e *httpserver.Error
	if !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable || e.RetryAfter == 0 || !isRefusal(err) ||
		e.Message != "this instance runs as many history reads as it may (PULSE_QUERY_HISTORY_READS, 1); retry after Retry-After seconds" {
		t.Fatalf("a lease with every slot taken: %v, want a 503 with Retry-After", err)
	}

	boom := errors.New("cassandra says no")
	var ran atomic.Int32
	err = hold.each(context.Background(), 1000, func(ctx context.Context, i int) error {
		ran.Add(1)
		if i == 3 {
			return boom
		}
		return ctx.Err()
	})
	// One slot: the calls run one after another, and none after the failure.
	if !errors.Is(err, boom) || ran.Load() != 4 {
		t.Fatalf("each = %v after %d calls, want the failure and the rest cancelled", err, ran.Load())
	}

	// The request's own deadline is its error, not a refusal.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := hold.each(ctx, 5, func(context.Context, int) error { return nil }); !errors.Is(err, context.Canceled) || isRefusal(err) {
		t.Fatalf("each with an ended context = %v", err)
	}
	hold.end()
	if l.reads.InUse() != 0 {
		t.Fatalf("%d slots still taken", l.reads.InUse())
	}
}
