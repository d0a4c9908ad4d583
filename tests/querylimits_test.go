package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/tests/harness"
)

// TestQueryRateLimitsAndCaps: query charges every request its route's cost in reads
// from a bucket of its API key, or of its user token's user (docs/design.md,
// Security). Over it the answer is a 429 rate_limited with Retry-After; batches,
// at= answers and history ranges drain the bucket by their cost; one user's reads
// leave another's bucket alone; and the caps on at= batches and history ranges are
// 400s naming what to change. Each refusal is counted by reason.
func TestQueryRateLimitsAndCaps(t *testing.T) {
	p := harness.NewTopics(t, 2)
	for k, v := range map[string]string{
		"PULSE_QUERY_KEY_RATE": "1", "PULSE_QUERY_KEY_BURST": "30",
		"PULSE_QUERY_USER_RATE": "1", "PULSE_QUERY_USER_BURST": "3",
		"PULSE_QUERY_AT_MAX_BATCH": "5",
	} {
		p.Env[k] = v
	}
	p.Start(t, "query")
	q := p.Svc["query"]
	user := func(s string) string { return p.Run + "-" + s }
	status := func(cred, id string) (int, http.Header, string) {
		return authDo(t, http.MethodGet, q.URL+"/status/"+url.PathEscape(id), cred, "")
	}
	// admitted sends requests until one is refused and says how many were admitted,
	// and what the refusal was; a bucket refills at 1 read a second meanwhile.
	admitted := func(send func() (int, http.Header, string)) (n int, elapsed time.Duration, code int, h http.Header, body string) {
		start := time.Now()
		for n = 0; n < 200; n++ {
			if code, h, body = send(); code != http.StatusOK {
				return n, time.Since(start), code, h, body
			}
		}
		t.Fatalf("200 requests admitted, want a refusal")
		return
	}
	wantAdmitted := func(what string, n int, elapsed time.Duration, burst, cost int) {
		t.Helper()
		most := (burst + int(elapsed/time.Second) + 1) / cost
		if n < burst/cost || n > most {
			t.Errorf("%s: %d admitted in %v, want %d (a burst of %d at %d reads each)", what, n, elapsed, burst/cost, burst, cost)
		}
	}
	wantLimited := func(what string, code int, h http.Header, body, message string) {
		t.Helper()
		want := `{"error":{"code":"rate_limited","message":"` + message + `"}}`
		if code != http.StatusTooManyRequests || body != want {
			t.Fatalf("%s: %d %s\nwant 429 %s", what, code, body, want)
		}
		if secs, err := strconv.Atoi(h.Get("Retry-After")); err != nil || secs < 1 {
			t.Fatalf("%s: Retry-After %q, want whole seconds", what, h.Get("Retry-After"))
		}
	}

	// A reader key: its burst of single reads, then a 429; after Retry-After, reads again.
	n, elapsed, code, h, body := admitted(func() (int, http.Header, string) { return status(harness.TestKeys.Reader, user("a")) })
	wantAdmitted("single reads of it-reader", n, elapsed, 30, 1)
	wantLimited("it-reader past its burst", code, h, body,
		"key it-reader is over its rate of 1 reads/s (PULSE_QUERY_KEY_RATE); this request costs 1; retry after Retry-After seconds")
	secs, _ := strconv.Atoi(h.Get("Retry-After"))
	time.Sleep(time.Duration(secs) * time.Second)
	if code, _, body := status(harness.TestKeys.Reader, user("a")); code != http.StatusOK {
		t.Fatalf("it-reader after Retry-After: %d %s", code, body)
	}

	// A batch costs a read per 10 ids: three of 100 ids take another key's burst of 30.
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = user(fmt.Sprint("b", i))
	}
	batch, _ := json.Marshal(map[string]any{"userIds": ids})
	n, elapsed, code, h, body = admitted(func() (int, http.Header, string) {
		return authDo(t, http.MethodPost, q.URL+"/statuses", harness.TestKeys.Reader2, string(batch))
	})
	wantAdmitted("batches of 100 ids", n, elapsed, 30, 10)
	// The fourth finds the bucket empty at the first read every request costs.
	wantLimited("it-reader-2 past its burst", code, h, body,
		"key it-reader-2 is over its rate of 1 reads/s (PULSE_QUERY_KEY_RATE); this request costs 1; retry after Retry-After seconds")

	// History ranges and at= cost more: two days of concurrency are 20 reads, after
	// which an at= count (20) does not fit while a plain count (1) still does.
	from := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -2)
	conc := fmt.Sprintf("%s/v1/stats/concurrency?from=%s&to=%s", q.URL, from.Format(time.RFC3339), from.AddDate(0, 0, 2).Format(time.RFC3339))
	if code, _, body := authDo(t, http.MethodGet, conc, harness.TestKeys.Operator, ""); code == http.StatusTooManyRequests {
		t.Fatalf("two days of concurrency on a full bucket: %d %s", code, body)
	}
	at := url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
	code, h, body = authDo(t, http.MethodGet, q.URL+"/v1/online/count?at="+at, harness.TestKeys.Operator, "")
	wantLimited("an at= count after two days of concurrency", code, h, body,
		"key it-operator is over its rate of 1 reads/s (PULSE_QUERY_KEY_RATE); this request costs 20; retry after Retry-After seconds")
	if code, _, body := authDo(t, http.MethodGet, q.URL+"/v1/online/count", harness.TestKeys.Operator, ""); code != http.StatusOK {
		t.Fatalf("a plain count with the reads left: %d %s", code, body)
	}

	// Caps: a history range longer than the route allows, and more ids than
	// PULSE_QUERY_AT_MAX_BATCH with at=, are 400s saying what to change.
	long := fmt.Sprintf("%s/v1/users/%s/timeline?view=operator&from=%s&to=%s", q.URL, user("a"),
		from.AddDate(0, 0, -30).Format(time.RFC3339), from.AddDate(0, 0, 2).Format(time.RFC3339))
	code, _, body = authDo(t, http.MethodGet, long, harness.TestKeys.Operator, "")
	if code != http.StatusBadRequest || !strings.Contains(body, "spans more than 31 days, the most one request may cover; split the range") {
		t.Errorf("a timeline of 32 days: %d %s, want a 400 naming the cap", code, body)
	}
	carol := user("carol")
	six, _ := json.Marshal(map[string]any{"userIds": []string{carol, carol, carol, carol, carol, carol}})
	code, _, body = authDo(t, http.MethodPost, q.URL+"/statuses?at="+at, userToken(t, carol, time.Now().Add(time.Hour), harness.TestKeys.Hs256), string(six))
	if want := `{"error":{"code":"invalid_request","message":"at most 5 user ids per request with at= (PULSE_QUERY_AT_MAX_BATCH), got 6","field":"userIds"}}`; code != http.StatusBadRequest || body != want {
		t.Errorf("six ids with at=: %d %s\nwant 400 %s", code, body, want)
	}

	// User tokens: a bucket per user, of PULSE_QUERY_USER_BURST (3); alice's reads
	// leave bob's bucket whole.
	alice, bob := user("alice"), user("bob")
	aliceToken := userToken(t, alice, time.Now().Add(time.Hour), harness.TestKeys.Hs256)
	bobToken := userToken(t, bob, time.Now().Add(time.Hour), harness.TestKeys.Hs256)
	n, elapsed, code, h, body = admitted(func() (int, http.Header, string) { return status(aliceToken, alice) })
	wantAdmitted("alice's reads", n, elapsed, 3, 1)
	wantLimited("alice past her burst", code, h, body,
		`the user token of \"`+alice+`\" is over its rate of 1 reads/s (PULSE_QUERY_USER_RATE); this request costs 1; retry after Retry-After seconds`)
	for i := range 3 {
		if code, _, body := status(bobToken, bob); code != http.StatusOK {
			t.Fatalf("bob's read %d while alice is limited: %d %s", i, code, body)
		}
	}

	for reason, least := range map[string]int{"key_rate": 3, "user_rate": 1, "too_many_ids": 1, "range_too_long": 1} {
		v, err := strconv.ParseFloat(metric(t, q, `pulse_query_requests_refused_total{reason="`+reason+`"}`), 64)
		if err != nil || v < float64(least) {
			t.Errorf("pulse_query_requests_refused_total{reason=%q} = %v (%v), want at least %d", reason, v, err, least)
		}
	}
}

// TestQueryHistoryReadsAreBounded: the history routes' Cassandra reads hold the
// instance's PULSE_QUERY_HISTORY_READS slots; with one slot and a wait of a
// millisecond, concurrent range requests find it taken, and those that waited too
// long are 503s with Retry-After naming the variable, counted as history_busy, while
// the others are answered.
func TestQueryHistoryReadsAreBounded(t *testing.T) {
	p := harness.NewTopics(t, 2)
	p.Env["PULSE_QUERY_HISTORY_READS"] = "1"
	p.Env["PULSE_QUERY_HISTORY_WAIT"] = "1ms"
	p.Start(t, "query")
	q := p.Svc["query"]
	from := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -30)
	conc := fmt.Sprintf("%s/v1/stats/concurrency?from=%s&to=%s", q.URL, from.Format(time.RFC3339), from.AddDate(0, 0, 31).Format(time.RFC3339))
	// Query connects to Cassandra in the background.
	harness.Eventually(t, 60*time.Second, func() string {
		if code, body := harness.Get(t, conc); code != http.StatusOK {
			return fmt.Sprintf("concurrency before the test: %d %s", code, body)
		}
		return ""
	})
	type answer struct {
		code int
		h    http.Header
		body string
	}
	var busy, ok int
	for round := 0; round < 5 && busy == 0; round++ {
		answers := make(chan answer, 16)
		for range 16 {
			go func() {
				code, h, body := authDo(t, http.MethodGet, conc, harness.TestKeys.Reader, "")
				answers <- answer{code, h, body}
			}()
		}
		for range 16 {
			a := <-answers
			switch {
			case a.code == http.StatusOK:
				ok++
			case a.code == http.StatusServiceUnavailable && a.h.Get("Retry-After") != "" &&
				strings.Contains(a.body, "runs as many history reads as it may (PULSE_QUERY_HISTORY_READS, 1)"):
				busy++
			default:
				t.Fatalf("a concurrency range among 16 at once: %d %s", a.code, a.body)
			}
		}
	}
	if busy == 0 || ok == 0 {
		t.Fatalf("%d answered, %d busy: want both, one slot shared by 16 requests at once", ok, busy)
	}
	if v, _ := strconv.ParseFloat(metric(t, q, `pulse_query_requests_refused_total{reason="history_busy"}`), 64); v != float64(busy) {
		t.Errorf("history_busy refusals = %v, want %d", v, busy)
	}
	t.Logf("%d answered, %d refused as busy", ok, busy)
}
