package health

import (
	"context"
	"errors"
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
