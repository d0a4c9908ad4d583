package steps

import (
	"context"
	"fmt"

	"github.com/pulse-presence/pulse/cmd/bench/internal/harness"
	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
)

// The ingest phases.
var (
	Batch  = harness.Phase{Name: "batch", Before: "the batched steps", Title: "batched ingest steps", Run: runMode("batched")}
	Single = harness.Phase{Name: "single", Before: "the single-event steps", Title: "single ingest steps", Run: runMode("single")}
	Half   = harness.Phase{Name: "half", Before: "the half-max phase", Title: "reads and freshness at half the highest batched rate",
		Run: func(ctx context.Context, env *harness.Env) (err error) {
			env.Res.Half, err = halfMax(ctx, env)
			return err
		}}
)

// runMode steps one ingest mode; the batched one then steps again without history.
func runMode(mode string) func(context.Context, *harness.Env) error {
	return func(ctx context.Context, env *harness.Env) error {
		m, err := stepMode(ctx, env, mode)
		if mode == "single" {
			env.Res.Single = m
		} else {
			env.Res.Batched = m
		}
		if err != nil || mode == "single" || !env.Cfg.WithoutHistory {
			return err
		}
		if err := withoutHistory(ctx, env); err != nil {
			return fmt.Errorf("batched steps without history: %w", err)
		}
		return nil
	}
}

// WarmUp runs a short load that is not measured, at half the first batched rate. A
// service that just started first rebuilds its duplicate horizon by re-reading the
// last minutes of the log, and folds nothing meanwhile; the warm-up's events queue
// behind that rebuild, so waiting for the groups to be idle afterwards waits for it
// too. It also fills connection pools.
func WarmUp(ctx context.Context, env *harness.Env) error {
	rate := env.Cfg.BatchRates[0] / 2
	fmt.Fprintf(env.Out, "==> warming up: %s events/s batched for %s\n", report.Num(rate), env.Cfg.WarmupRun)
	_, err := env.RunLoad(ctx, harness.Load{Name: "warmup", Duration: env.Cfg.WarmupRun,
		Args: append(batchArgs(env, rate), "-fresh-rate", "5", "-fresh-poll", env.Cfg.FreshPoll.String(), "-seed", "999")})
	return err
}

// withoutHistory runs the batched steps again with history paused (SIGSTOP), so the
// live path's capacity with history can be compared with its capacity alone, in the
// same run. History resumes afterwards, whatever happens, and the phases after wait
// for it to catch up on what it missed.
func withoutHistory(ctx context.Context, env *harness.Env) error {
	env.Idle(ctx, "", true)
	if err := env.Stack.Pause("history"); err != nil {
		env.Note("the batched steps without history did not run: %v", err)
		return nil
	}
	env.HistoryPaused = true
	defer func() {
		if err := env.Stack.Resume("history"); err != nil {
			env.Note("resuming history: %v", err)
		}
		env.HistoryPaused = false
	}()
	fmt.Fprintln(env.Out, "==> batched ingest steps with history paused")
	m, err := stepMode(ctx, env, "batched")
	env.Res.BatchedWithoutHistory = m
	return err
}
