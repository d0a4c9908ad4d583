package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// scaleGoal is the registered-user count the counts target is stated at.
const scaleGoal = 10_000_000

// run is the whole benchmark: find the stack, start what is missing, run the phases,
// write the results (also after a failed phase or a Ctrl-C, with what was measured).
func run(ctx context.Context, args []string) error {
	cfg, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	out := io.Writer(os.Stdout)
	started := time.Now().UTC()
	dir := filepath.Join(cfg.outDir, started.Format("20060102T150405Z"))
	rawDir := filepath.Join(dir, "raw")
	if err := os.MkdirAll(rawDir, 0o755); err != nil {
		return err
	}
	res := &Results{Version: 1, StartedAt: started, Quick: cfg.quick, Config: cfg.flags, Profiles: []string{}, Notes: []string{}}
	res.Machine = machine(ctx, cfg)
	fmt.Fprintf(out, "==> pulse bench: results go to %s\n", dir)

	st := newStack(cfg, out)
	if err := st.findServers(ctx); err != nil {
		return err
	}
	fmt.Fprintln(out, "==> building loadgen")
	if err := st.buildLoadgen(ctx); err != nil {
		return err
	}
	fmt.Fprintln(out, "==> services")
	defer func() {
		if len(st.started) > 0 && !cfg.keepServices {
			fmt.Fprintln(out, "==> stopping the services bench started")
			st.stopStarted()
		}
	}()
	if err := st.ensureServices(ctx); err != nil {
		return err
	}
	lr, err := newLagReader(cfg)
	if err != nil {
		return err
	}
	defer lr.close()
	b := &bench{cfg: cfg, st: st, lag: lr, http: &http.Client{Timeout: 10 * time.Second, Transport: cfg.transport()},
		ticks: clockTicks(), dir: dir, rawDir: rawDir, out: out, res: res}
	if !cfg.profile {
		b.note("no CPU profiles: run with -profile (services bench starts then get PULSE_PPROF=1; running ones need it set)")
	}

	phaseErr := b.phases(ctx)
	if phaseErr != nil {
		b.note("the run stopped early: %v", phaseErr)
	}

	b.noteOthers()
	res.History = historyCheck(res.Batched, cfg.historyAt)
	res.Ratios = limitRatios(res)
	res.Targets = evaluate(res, scaleGoal)
	res.Processes = st.processes()
	res.FinishedAt = time.Now().UTC()
	command := "go run ./cmd/bench " + strings.Join(args, " ")
	if err := b.write(command); err != nil {
		return err
	}
	if phaseErr != nil && ctx.Err() == nil {
		return phaseErr
	}
	return nil
}

// phases runs the phases asked for, in order.
func (b *bench) phases(ctx context.Context) error {
	if b.cfg.warmupRun > 0 {
		rate := b.cfg.batchRates[0] / 2
		fmt.Fprintf(b.out, "==> warming up: %s events/s batched for %s\n", num(rate), b.cfg.warmupRun)
		if err := b.warmUp(ctx, rate); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	// Every phase starts from caught-up consumers: a step that fell behind leaves a
	// backlog whose catching up would otherwise load the next phase.
	idle := func(before string) {
		fmt.Fprintf(b.out, "==> waiting up to %s for the aggregator and history to be idle\n", b.cfg.idleWait)
		b.waitIdle(ctx, before)
	}
	for _, p := range []struct {
		phase, mode, before string
		into                **ModeResult
	}{
		{"batch", "batched", "the batched steps", &b.res.Batched},
		{"single", "single", "the single-event steps", &b.res.Single},
	} {
		if !b.cfg.phases[p.phase] {
			continue
		}
		idle(p.before)
		fmt.Fprintf(b.out, "==> %s ingest steps\n", p.mode)
		m, err := b.stepMode(ctx, p.mode)
		*p.into = m
		if err != nil {
			return fmt.Errorf("%s steps: %w", p.mode, err)
		}
		if p.phase == "batch" && b.cfg.withoutHistory {
			if err := b.batchedWithoutHistory(ctx); err != nil {
				return fmt.Errorf("batched steps without history: %w", err)
			}
		}
	}
	if b.cfg.phases["half"] {
		idle("the half-max phase")
		fmt.Fprintln(b.out, "==> reads and freshness at half the highest batched rate")
		h, err := b.halfMax(ctx)
		if err != nil {
			return fmt.Errorf("half-max phase: %w", err)
		}
		b.res.Half = h
	}
	if b.cfg.phases["rebuild"] {
		idle("the rebuild")
		fmt.Fprintln(b.out, "==> every shard rebuilt from the log (guarantee 10)")
		r, err := b.rebuild(ctx)
		if err != nil {
			return fmt.Errorf("rebuild phase: %w", err)
		}
		b.res.Rebuild = r
	}
	if b.cfg.phases["limits"] {
		idle("the limits")
		fmt.Fprintln(b.out, "==> the engines' own limits, on the same servers")
		l, err := b.limits(ctx)
		b.res.Limits = l
		if err != nil {
			return fmt.Errorf("limits phase: %w", err)
		}
	}
	if b.cfg.phases["scaleout"] {
		idle("the scale-out runs")
		fmt.Fprintln(b.out, "==> scale-out: the same records folded by one aggregator, then two")
		s, err := b.scaleOut(ctx)
		b.res.ScaleOut = s
		if err != nil {
			return fmt.Errorf("scaleout phase: %w", err)
		}
	}
	if b.cfg.phases["scale"] {
		// The bulk load does not go through the consumers, but its counts are timed on
		// the same cores a catching-up history would load.
		idle("the scale phase")
		fmt.Fprintf(b.out, "==> counts and memory at scale (%d users)\n", b.cfg.scaleUsers)
		s, err := b.scale(ctx)
		if err != nil {
			return fmt.Errorf("scale phase: %w", err)
		}
		b.res.Scale = s
	}
	return nil
}

// warmUp runs a short load that is not measured. A service that just started first
// rebuilds its duplicate horizon by re-reading the last minutes of the log, and folds
// nothing meanwhile; the warm-up's events queue behind that rebuild, so waiting for
// the groups to be idle afterwards waits for it too (lag alone cannot show a rebuild
// when nothing new arrives). It also fills connection pools and JIT caches.
func (b *bench) warmUp(ctx context.Context, rate float64) error {
	_, err := b.runLoad(ctx, load{
		name: "warmup", duration: b.cfg.warmupRun,
		args: append(b.batchArgs(rate), "-fresh-rate", "5", "-fresh-poll", b.cfg.freshPoll.String(), "-seed", "999"),
	})
	return err
}

// noteOthers warns when other work took a noticeable share of the machine during the
// steps: every number then understates what Pulse does alone.
func (b *bench) noteOthers() {
	var sum, stolen, n float64
	for _, s := range allSteps(b.res) {
		if s.Machine.Known {
			sum, stolen, n = sum+s.Machine.OtherCores, stolen+s.Machine.StolenCores, n+1
		}
	}
	if s := b.res.Scale; s != nil {
		for _, l := range []Layout{s.Pulse, s.Baseline} {
			if m := l.CountsMachine; m.Known && m.BusyCores > 0.8*float64(b.res.Machine.CPUs) {
				b.note("counts under %s were timed while the machine's cores were %.0f%% busy (%.2f cores in processes bench does not watch): their tails show CPU contention as much as Redis",
					l.Prefix, 100*m.BusyCores/float64(b.res.Machine.CPUs), m.OtherCores)
			}
		}
	}
	if n > 0 && (sum/n > 0.25 || stolen/n > 0.25) {
		b.note("other work shared the machine during the steps: on average %.2f cores went to processes bench does not watch and %.2f were stolen by the hypervisor (of %d); the rates and latencies understate Pulse on an otherwise idle machine",
			sum/n, stolen/n, b.res.Machine.CPUs)
	}
}

// batchedWithoutHistory runs the batched steps again with history paused (SIGSTOP),
// so the live path's capacity with history can be compared with its capacity alone,
// in the same run. History resumes afterwards, whatever happens, and the phases after
// wait for it to catch up on what it missed.
func (b *bench) batchedWithoutHistory(ctx context.Context) error {
	fmt.Fprintf(b.out, "==> waiting up to %s for the aggregator to be idle\n", b.cfg.idleWait)
	b.waitIdleAggregator(ctx)
	if err := b.st.pause("history"); err != nil {
		b.note("the batched steps without history did not run: %v", err)
		return nil
	}
	b.historyPaused = true
	defer func() {
		if err := b.st.resume("history"); err != nil {
			b.note("resuming history: %v", err)
		}
		b.historyPaused = false
	}()
	fmt.Fprintln(b.out, "==> batched ingest steps with history paused")
	m, err := b.stepMode(ctx, "batched")
	b.res.BatchedWithoutHistory = m
	return err
}

// waitIdleAggregator waits, for at most -idle-wait, until the aggregator has no more
// than a few windows of records to catch up on.
func (b *bench) waitIdleAggregator(ctx context.Context) {
	start := time.Now()
	for time.Since(start) < b.cfg.idleWait && ctx.Err() == nil {
		if s, err := b.lag.sample(ctx); err == nil && s.Aggregator <= lagGrowthFloor {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	b.note("the aggregator was still behind after %s", b.cfg.idleWait)
}

// waitIdle waits, for at most -idle-wait, until neither consumer group has more
// than a few windows of records to catch up on, so the phase that follows (named by
// before) does not pay for a backlog; whatever is left is noted, since it weighs on it.
func (b *bench) waitIdle(ctx context.Context, before string) {
	start := time.Now()
	var last lagSample
	for {
		s, err := b.lag.sample(ctx)
		if err == nil {
			last = s
			if s.Aggregator <= lagGrowthFloor && s.HistoryEvents+s.HistoryChanges <= lagGrowthFloor {
				return
			}
		}
		if time.Since(start) >= b.cfg.idleWait || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	if last.Aggregator > lagGrowthFloor {
		b.note("the aggregator was still %d records behind before %s (after %s)", last.Aggregator, before, b.cfg.idleWait)
	}
	if h := last.HistoryEvents + last.HistoryChanges; h > lagGrowthFloor {
		b.note("history was still %d records behind before %s (after %s); catching up on it loaded Cassandra meanwhile, and history's lag includes it", h, before, b.cfg.idleWait)
	}
}

// write puts results.json, results.md and latency.png into the results folder and
// prints the targets and the folder.
func (b *bench) write(command string) error {
	var errs []error
	if err := writeJSON(filepath.Join(b.dir, "results.json"), b.res); err != nil {
		errs = append(errs, err)
	}
	if err := writePlot(filepath.Join(b.dir, "latency.png"), b.res.Batched, b.res.Single); err != nil {
		errs = append(errs, fmt.Errorf("drawing latency.png: %w", err))
	}
	var md strings.Builder
	if err := writeMarkdown(&md, b.res, command); err != nil {
		errs = append(errs, err)
	}
	if err := os.WriteFile(filepath.Join(b.dir, "results.md"), []byte(md.String()), 0o644); err != nil {
		errs = append(errs, err)
	}
	// The targets table, as the folder has it.
	text := md.String()
	if i := strings.Index(text, "## Targets"); i >= 0 {
		rest := text[i:]
		if j := strings.Index(rest[3:], "\n## "); j >= 0 {
			rest = rest[:j+3]
		}
		fmt.Fprintln(b.out)
		fmt.Fprint(b.out, rest)
	}
	fmt.Fprintf(b.out, "\nresults: %s\n", b.dir)
	return errors.Join(errs...)
}

// machine describes where the run happens.
func machine(ctx context.Context, cfg config) Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseUint(f[1], 10, 64)
				m.MemoryBytes = kb * 1024
			}
		}
	}
	git := func(args ...string) string {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = cfg.root
		b, err := cmd.Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	m.GitCommit = git("rev-parse", "--short", "HEAD")
	m.GitDirty = git("status", "--porcelain", "--untracked-files=no") != ""
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", cfg.ports.redis)})
	defer rdb.Close()
	if v, err := rdb.ConfigGet(ctx, "appendonly").Result(); err == nil {
		m.RedisAOF = v["appendonly"]
	}
	return m
}
