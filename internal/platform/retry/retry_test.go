package retry

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

var errDown = errors.New("server down")

// failing returns an op that fails n times, then succeeds, recording when each try ran.
func failing(n int, at *[]time.Time) func(context.Context) error {
	return func(context.Context) error {
		*at = append(*at, time.Now())
		if len(*at) <= n {
			return errDown
		}
		return nil
	}
}

func TestDoBacksOffExponentiallyWithJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var at []time.Time
		retries := 0
		p := Policy{Initial: 100 * time.Millisecond, Max: 400 * time.Millisecond, OnRetry: func(int, error) { retries++ }}
		if err := Do(t.Context(), p, nil, "op", failing(5, &at)); err != nil {
			t.Fatalf("Do = %v, want nil", err)
		}
		if len(at) != 6 || retries != 5 {
			t.Fatalf("tries = %d, retries = %d; want 6 and 5", len(at), retries)
		}
		// Backoffs 100, 200, 400, 400, 400 ms; each sleep lies in [b/2, b].
		want := []time.Duration{100, 200, 400, 400, 400}
		for i, b := range want {
			b *= time.Millisecond
			gap := at[i+1].Sub(at[i])
			if gap < b/2 || gap > b {
				t.Errorf("sleep %d = %v, want within [%v, %v]", i, gap, b/2, b)
			}
		}
	})
}

func TestDoStopsWhenContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		tries := 0
		err := Do(ctx, Policy{}, nil, "writing window", func(context.Context) error { tries++; return errDown })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Do = %v, want context.Canceled", err)
		}
		if !strings.Contains(err.Error(), "writing window") || !strings.Contains(err.Error(), "server down") {
			t.Errorf("error %q should name the operation and the last failure", err)
		}
		if tries < 2 {
			t.Errorf("tries = %d, want several within a second", tries)
		}
	})
}

func TestDoNeverSleepsPastTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		start := time.Now()
		err := Do(ctx, Policy{Initial: 2 * time.Second, Max: 2 * time.Second}, nil, "op",
			func(context.Context) error { return errDown })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do = %v, want DeadlineExceeded", err)
		}
		// Sleeps are in [1s, 2s]: a second try fits before 3 s, a third never starts
		// a sleep that would outlast the deadline.
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("Do returned after %v, past the 3s deadline", took)
		}
	})
}

func TestDoBoundsEachTry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tries := 0
		err := Do(t.Context(), Policy{TryTimeout: 200 * time.Millisecond}, nil, "op", func(ctx context.Context) error {
			tries++
			if tries == 1 {
				<-ctx.Done() // a hung server: only the try's deadline ends it
				return ctx.Err()
			}
			return nil
		})
		if err != nil || tries != 2 {
			t.Fatalf("Do = %v after %d tries, want nil after 2", err, tries)
		}
	})
}

func TestDoReturnsPermanentErrorsAtOnce(t *testing.T) {
	bad := errors.New("undecodable")
	tries := 0
	err := Do(t.Context(), Policy{}, nil, "decoding", func(context.Context) error { tries++; return Permanent(bad) })
	if !errors.Is(err, bad) || !IsPermanent(err) || tries != 1 {
		t.Fatalf("Do = %v after %d tries, want the permanent error after 1", err, tries)
	}
	if Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
}

func TestDoLogsOnItsOwnSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&buf, nil))
		start := time.Now()
		// Fails for about 35 s with backoff capped at 1 s: dozens of tries, four
		// warnings (at 0 s and then once per 10 s), one "recovered".
		err := Do(t.Context(), Policy{Max: time.Second, LogEvery: 10 * time.Second}, logger, "loading shard",
			func(context.Context) error {
				if time.Since(start) < 35*time.Second {
					return errDown
				}
				return nil
			}, "partition", 7)
		if err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		if n := strings.Count(out, "msg=retrying"); n != 4 {
			t.Errorf("%d retry lines, want 4:\n%s", n, out)
		}
		if n := strings.Count(out, "msg=recovered"); n != 1 {
			t.Errorf("%d recovered lines, want 1:\n%s", n, out)
		}
		if !strings.Contains(out, "partition=7") || !strings.Contains(out, "op=\"loading shard\"") {
			t.Errorf("log lines lack the caller's attributes:\n%s", out)
		}
	})
}

func TestDoLogsNothingWhenTheFirstTrySucceeds(t *testing.T) {
	var buf bytes.Buffer
	if err := Do(t.Context(), Policy{}, slog.New(slog.NewTextHandler(&buf, nil)), "op", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 0 {
		t.Errorf("logged %q", buf.String())
	}
}

func TestDoGivesUpAfterMaxAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var at []time.Time
		err := Do(t.Context(), Policy{Initial: 10 * time.Millisecond, MaxAttempts: 3}, nil, "post", failing(5, &at))
		if !errors.Is(err, ErrAttempts) || !errors.Is(err, errDown) || len(at) != 3 {
			t.Fatalf("Do = %v after %d tries; want ErrAttempts wrapping %v after 3", err, len(at), errDown)
		}
		at = nil
		if err := Do(t.Context(), Policy{Initial: 10 * time.Millisecond, MaxAttempts: 3}, nil, "post", failing(2, &at)); err != nil || len(at) != 3 {
			t.Fatalf("Do = %v after %d tries; want nil after 3", err, len(at))
		}
	})
}

func TestDoWaitsWhatTheServerAsksUpToMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var at []time.Time
		asks := []time.Duration{3 * time.Second, time.Minute}
		op := func(context.Context) error {
			at = append(at, time.Now())
			if n := len(at); n <= len(asks) {
				return After(errDown, asks[n-1])
			}
			return nil
		}
		if err := Do(t.Context(), Policy{Initial: 10 * time.Millisecond, Max: 10 * time.Second}, nil, "post", op); err != nil {
			t.Fatal(err)
		}
		// 3 s as asked; a minute asked, capped at Max.
		if g1, g2 := at[1].Sub(at[0]), at[2].Sub(at[1]); g1 != 3*time.Second || g2 != 10*time.Second {
			t.Fatalf("waits %v, %v; want 3s, 10s", g1, g2)
		}
	})
}
