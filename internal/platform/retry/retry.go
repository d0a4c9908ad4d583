// Package retry runs an operation until it succeeds, with exponential backoff and
// jitter. It is the one way Pulse retries a dependency: every loop that waits out a
// Kafka, Redis or Cassandra outage goes through Do, so they share the same backoff, the
// same per-try deadline and the same logging schedule.
//
// An outage can last minutes, and a partition worker retries for as long as it lasts.
// Logging every attempt would flood the log; logging none would hide the outage. Do logs
// the first failure, then at most one line per Policy.LogEvery with the attempts made so
// far, and one line when the operation succeeds again. Metrics (Policy.OnRetry) see every
// failure.
package retry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"
)

// Policy is how Do retries. The zero value is usable: 50 ms doubling to 5 s, no per-try
// deadline, a log line at most every 10 s.
type Policy struct {
	// Initial is the first backoff; each failure doubles it up to Max.
	Initial time.Duration
	// Max caps the backoff.
	Max time.Duration
	// TryTimeout bounds each try; 0 leaves the try to ctx's deadline alone.
	TryTimeout time.Duration
	// LogEvery is the least time between two "still failing" log lines.
	LogEvery time.Duration
	// OnRetry, when set, is called after every failed try that will be retried (a
	// metric counter, typically).
	OnRetry func(attempt int, err error)
	// MaxAttempts, when positive, bounds the tries: after that many failures Do gives
	// up with an error wrapping ErrAttempts and the last failure. 0: no bound (a
	// dependency's outage is waited out, however long).
	MaxAttempts int
}

// ErrAttempts is wrapped by Do's error when Policy.MaxAttempts tries failed.
var ErrAttempts = errors.New("retry budget spent")

const (
	defaultInitial  = 50 * time.Millisecond
	defaultMax      = 5 * time.Second
	defaultLogEvery = 10 * time.Second
)

func (p Policy) withDefaults() Policy {
	if p.Initial <= 0 {
		p.Initial = defaultInitial
	}
	if p.Max <= 0 {
		p.Max = defaultMax
	}
	if p.Max < p.Initial {
		p.Max = p.Initial
	}
	if p.LogEvery <= 0 {
		p.LogEvery = defaultLogEvery
	}
	return p
}

// permanent marks an error that retrying cannot fix.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent wraps err so that Do returns it at once instead of retrying: for failures
// that no amount of waiting repairs (a record that cannot be decoded, a bad setting).
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

// after asks for a longer wait before the next try.
type after struct {
	err error
	d   time.Duration
}

func (a after) Error() string { return a.err.Error() }
func (a after) Unwrap() error { return a.err }

// After wraps err so that Do waits at least d before the next try, up to Policy.Max:
// for a server that said when to come back (HTTP's Retry-After).
func After(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return after{err, d}
}

// IsPermanent reports whether err, or an error it wraps, was marked Permanent.
func IsPermanent(err error) bool {
	var p permanent
	return errors.As(err, &p)
}

// Do runs op until it returns nil, returns a Permanent error, or ctx ends. Between tries
// it sleeps a backoff drawn uniformly from [b/2, b], b doubling from Initial to Max, so
// that the many partitions of one process that lost the same server do not retry in
// step. It never sleeps past ctx's deadline: when the next try could not start before
// the deadline, Do returns at once.
//
// The error Do returns wraps ctx's error (errors.Is(err, context.Canceled) holds) or the
// permanent error, and names what was being done and the last failure. logger may be nil;
// attrs are added to its lines (the partition, say).
func Do(ctx context.Context, p Policy, logger *slog.Logger, what string, op func(context.Context) error, attrs ...any) error {
	p = p.withDefaults()
	backoff := p.Initial
	var (
		started   = time.Now()
		lastLog   time.Time
		lastErr   error
		loggedAny bool
	)
	for attempt := 1; ; attempt++ {
		err := try(ctx, p.TryTimeout, op)
		if err == nil {
			if loggedAny && logger != nil {
				logger.Info("recovered", append([]any{"op", what, "attempts", attempt,
					"after", time.Since(started).Round(time.Millisecond)}, attrs...)...)
			}
			return nil
		}
		if IsPermanent(err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
		}
		lastErr = err
		if p.MaxAttempts > 0 && attempt >= p.MaxAttempts {
			return fmt.Errorf("%s: %w after %d attempts: %w", what, ErrAttempts, attempt, err)
		}
		if p.OnRetry != nil {
			p.OnRetry(attempt, err)
		}
		sleep := backoff/2 + rand.N(backoff/2+1)
		var a after
		if errors.As(err, &a) && a.d > sleep {
			sleep = min(a.d, p.Max)
		}
		if logger != nil && (lastLog.IsZero() || time.Since(lastLog) >= p.LogEvery) {
			logger.Warn("retrying", append([]any{"op", what, "attempt", attempt,
				"failing_for", time.Since(started).Round(time.Millisecond), "next_in", sleep.Round(time.Millisecond),
				"err", err}, attrs...)...)
			lastLog, loggedAny = time.Now(), true
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < sleep {
			return fmt.Errorf("%s: %w (last error: %v)", what, context.DeadlineExceeded, lastErr)
		}
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), lastErr)
		case <-t.C:
		}
		backoff = min(2*backoff, p.Max)
	}
}

func try(ctx context.Context, timeout time.Duration, op func(context.Context) error) error {
	if timeout <= 0 {
		return op(ctx)
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return op(tctx)
}
