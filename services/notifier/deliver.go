package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/pulse-presence/pulse/internal/platform/retry"
	"github.com/pulse-presence/pulse/pkg/webhook"
)

// maxResponseRead is how much of a receiver's answer is read (and dropped) so the
// connection can be reused.
const maxResponseRead = 64 << 10

// sender posts batches to endpoints.
type sender struct {
	client *http.Client
	logger *slog.Logger
	m      *metrics
	now    func() time.Time
}

func newSender(logger *slog.Logger, m *metrics) *sender {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return &sender{
		// Redirects are not followed: a receiver moves by a change of the file, and
		// a redirect must not carry a signed batch elsewhere.
		client: &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		logger: logger,
		m:      m,
		now:    time.Now,
	}
}

// deliver posts body to the endpoint until it answers 2xx, its retry budget is spent
// (an error wrapping retry.ErrAttempts) or ctx ends. Each attempt reads the endpoint
// anew, so a reloaded URL or secret applies from the next attempt; the budget is the
// one in force when the batch was first tried.
func (s *sender) deliver(ctx context.Context, endpoint func() *Endpoint, batchID string, body []byte) error {
	ep := endpoint()
	attempt := 0
	p := retry.Policy{
		Initial: ep.InitialBackoff, Max: ep.MaxBackoff, TryTimeout: ep.Timeout,
		MaxAttempts: ep.Attempts, LogEvery: time.Minute,
	}
	return retry.Do(ctx, p, s.logger, "delivering a webhook batch", func(ctx context.Context) error {
		attempt++
		return s.post(ctx, endpoint(), batchID, attempt, body)
	}, "endpoint", ep.ID, "batch", batchID)
}

// post is one attempt. Any answer but 2xx is retried: a receiver's 4xx is as often a
// deploy in progress as a lasting refusal, and the dead-letter topic keeps what the
// budget could not deliver.
func (s *sender) post(ctx context.Context, ep *Endpoint, batchID string, attempt int, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, bytes.NewReader(body))
	if err != nil {
		return retry.Permanent(errors.New("building the request: the endpoint's url is not usable"))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "pulse-notifier")
	req.Header.Set(webhook.SignatureHeader, webhook.Sign(ep.Secret, s.now(), body))
	req.Header.Set(webhook.BatchHeader, batchID)
	req.Header.Set(webhook.AttemptHeader, strconv.Itoa(attempt))
	start := time.Now()
	res, err := s.client.Do(req)
	s.m.attemptSeconds.WithLabelValues(ep.ID).Observe(time.Since(start).Seconds())
	if err != nil {
		s.m.deliveries.WithLabelValues(ep.ID, outcomeFailed).Inc()
		return scrub(err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, maxResponseRead))
	_ = res.Body.Close()
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		return nil
	}
	s.m.deliveries.WithLabelValues(ep.ID, outcomeFailed).Inc()
	err = fmt.Errorf("the endpoint answered %d", res.StatusCode)
	if d, ok := retryAfter(res.Header.Get("Retry-After"), s.now()); ok {
		return retry.After(err, d)
	}
	return err
}

// scrub drops the URL from a transport error: it may hold the receiver's credential,
// and errors reach the log.
func scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if errors.Is(ue.Err, context.DeadlineExceeded) {
			return errors.New("no answer within the endpoint's timeout")
		}
		return fmt.Errorf("posting: %w", ue.Err)
	}
	return err
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
