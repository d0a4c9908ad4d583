package health

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestRunReportsEveryCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		checks := []Check{
			{Name: "ok", Func: func(context.Context) error { return nil }},
			{Name: "down", Func: func(context.Context) error { return errors.New("connection refused") }},
			{Name: "hung", Func: func(ctx context.Context) error {
				<-ctx.Done() // a dependency that never answers
				return ctx.Err()
			}},
		}
		start := time.Now()
		rep := Run(context.Background(), 2*time.Second, checks)
		if got := time.Since(start); got != 2*time.Second {
			t.Errorf("Run took %v, want exactly the 2s timeout", got)
		}
		if rep.Ready {
			t.Error("Ready = true with two failing checks")
		}
		want := []struct {
			name string
			ok   bool
			err  string
		}{
			{"ok", true, ""},
			{"down", false, "connection refused"},
			{"hung", false, context.DeadlineExceeded.Error()},
		}
		if len(rep.Checks) != len(want) {
			t.Fatalf("got %d results, want %d", len(rep.Checks), len(want))
		}
		for i, w := range want {
			r := rep.Checks[i]
			if r.Name != w.name || r.OK != w.ok || r.Error != w.err {
				t.Errorf("check %d = {%s %v %q}, want {%s %v %q}", i, r.Name, r.OK, r.Error, w.name, w.ok, w.err)
			}
		}
	})
}

func TestRunAllHealthy(t *testing.T) {
	rep := Run(context.Background(), time.Second, []Check{
		{Name: "a", Func: func(context.Context) error { return nil }},
		{Name: "b", Func: func(context.Context) error { return nil }},
	})
	if !rep.Ready || len(rep.Checks) != 2 {
		t.Fatalf("report = %+v, want ready with 2 checks", rep)
	}
}

// However many ask at once, the checks run once per interval; a failed check says
// only "<name> unavailable" and its reason goes to the log.
func TestProberProbesOncePerIntervalAndHidesReasons(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var probes atomic.Int32
		var logged strings.Builder
		logger := slog.New(slog.NewTextHandler(&logged, nil))
		p := NewProber([]Check{{Name: "redis", Func: func(ctx context.Context) error {
			probes.Add(1)
			time.Sleep(100 * time.Millisecond) // a slow dependency: callers meanwhile wait for this probe
			return errors.New("dial tcp 10.0.0.7:6379: connection refused")
		}}}, time.Second, time.Second, logger)
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				rep := p.Report(context.Background())
				if rep.Ready || len(rep.Checks) != 1 || rep.Checks[0].Error != "redis unavailable" {
					t.Errorf("report = %+v, want not ready, redis unavailable", rep)
				}
			})
		}
		wg.Wait()
		time.Sleep(500 * time.Millisecond)
		p.Report(context.Background())
		if n := probes.Load(); n != 1 {
			t.Errorf("51 reports within a second probed %d times, want 1", n)
		}
		time.Sleep(time.Second)
		p.Report(context.Background())
		if n := probes.Load(); n != 2 {
			t.Errorf("a report a second later made %d probes in all, want 2", n)
		}
		if !strings.Contains(logged.String(), "10.0.0.7:6379: connection refused") {
			t.Errorf("the log lacks the reason: %s", logged.String())
		}
	})
}
