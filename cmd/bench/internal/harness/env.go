// Package harness is what every phase of cmd/bench runs on: the Env (configuration,
// the stack, the lag reader, the results being filled in), the Phase type, and
// the stack's and loadgen's processes.
package harness

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
	"strings"
	"time"

	"github.com/pulse-presence/pulse/cmd/bench/internal/plot"
	"github.com/pulse-presence/pulse/cmd/bench/internal/probe"
	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
	"github.com/pulse-presence/pulse/internal/platform/redisx"
)

// Phase is one part of the benchmark. Before it runs, the consumers get to catch up
// (Idle, with Before naming it) and Title heads its output; Run records what it
// measured in env.Res.
type Phase struct {
	Name, Before, Title string
	Run                 func(ctx context.Context, env *Env) error
	// OwnProcesses says the phase starts every Pulse process it measures, on the
	// stack's servers: a run of such phases alone needs none of the stack's services.
	OwnProcesses bool
}

// Env is what every phase uses.
type Env struct {
	Cfg         Config
	Stack       *Stack
	Lag         *probe.Lag
	HTTP        *http.Client
	Dir, RawDir string // the results folder and its raw/
	Out         io.Writer
	Res         *report.Results
	// HistoryPaused: history is stopped (SIGSTOP) and is neither scraped nor judged.
	HistoryPaused bool
}

// Open makes the results folder, finds the stack and, when some phase runs on the
// stack's services (Config.Services), builds loadgen and starts the services that do
// not answer; Close stops those again.
func Open(ctx context.Context, cfg Config, out io.Writer) (*Env, error) {
	started := time.Now().UTC()
	dir := filepath.Join(cfg.OutDir, started.Format("20060102T150405Z"))
	e := &Env{Cfg: cfg, Dir: dir, RawDir: filepath.Join(dir, "raw"), Out: out, Stack: newStack(cfg, out),
		HTTP: &http.Client{Timeout: 10 * time.Second, Transport: cfg.Transport()},
		Res:  &report.Results{Version: 1, StartedAt: started, Quick: cfg.Quick, Config: cfg.Flags, Profiles: []string{}, Notes: []string{}}}
	if err := os.MkdirAll(e.RawDir, 0o755); err != nil {
		return nil, err
	}
	e.Res.Machine = machine(ctx, cfg)
	fmt.Fprintf(out, "==> pulse bench: results go to %s\n", dir)
	if err := e.Stack.findServers(ctx); err != nil {
		return nil, err
	}
	var err error
	if cfg.Services {
		fmt.Fprintln(out, "==> building loadgen")
		if err := e.Stack.buildLoadgen(ctx); err != nil {
			return nil, err
		}
		fmt.Fprintln(out, "==> services")
		err = e.Stack.ensureServices(ctx)
	} else {
		fmt.Fprintln(out, "==> services: none used (every phase asked for starts the Pulse processes it measures)")
	}
	if err == nil {
		e.Lag, err = probe.NewLag(fmt.Sprintf("127.0.0.1:%d", cfg.Ports.Kafka), cfg.AggGroup, cfg.HistGroup, cfg.Events, cfg.Changes)
	}
	if err != nil {
		e.Close()
		return nil, err
	}
	if cfg.Services && !cfg.Profile {
		e.Note("no CPU profiles: run with -profile (services bench starts then get PULSE_PPROF=1; running ones need it set)")
	}
	return e, nil
}

// Close stops the services bench started, unless -keep-services.
func (e *Env) Close() {
	if e.Lag != nil {
		e.Lag.Close()
	}
	if len(e.Stack.started) > 0 && !e.Cfg.KeepServices {
		fmt.Fprintln(e.Out, "==> stopping the services bench started")
		e.Stack.stopStarted()
	}
}

// Finish judges the results and writes results.json, results.md and latency.png.
func (e *Env) Finish(command string) error {
	e.noteOthers()
	report.Finish(e.Res, e.Cfg.HistoryAt)
	e.Res.Processes = e.Stack.processes()
	e.Res.FinishedAt = time.Now().UTC()
	err := report.Write(e.Dir, e.Res, command, e.Out)
	if perr := plot.Write(filepath.Join(e.Dir, "latency.png"), e.Res.Batched, e.Res.Single); perr != nil {
		err = errors.Join(err, fmt.Errorf("drawing latency.png: %w", perr))
	}
	fmt.Fprintf(e.Out, "\nresults: %s\n", e.Dir)
	return err
}

func (e *Env) Note(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	e.Res.Notes = append(e.Res.Notes, msg)
	fmt.Fprintln(e.Out, "    note:", msg)
}

// Cleanup runs undo within limit, even after ctx ended (a Ctrl-C must not leave a
// phase's throwaway data behind), and notes its failure as what failed.
func (e *Env) Cleanup(ctx context.Context, limit time.Duration, what string, undo func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit)
	defer cancel()
	err := undo(cctx)
	if err != nil {
		e.Note("%s: %v", what, err)
	}
	return err
}

// CPU reads the CPU seconds of every watched process, bench and the machine.
func (e *Env) CPU() probe.CPU { return probe.Snapshot(e.Stack.watched()) }

// waitLag polls the groups' lag every interval until ok holds, for at most limit; it
// answers the last sample, how long it waited and whether ok held.
func (e *Env) waitLag(ctx context.Context, limit, every time.Duration, ok func(probe.LagSample) bool) (probe.LagSample, time.Duration, bool) {
	start := time.Now()
	var last probe.LagSample
	for {
		if s, err := e.Lag.Sample(ctx); err == nil {
			if last = s; ok(s) {
				return s, time.Since(start), true
			}
		}
		if time.Since(start) >= limit || ctx.Err() != nil {
			return last, time.Since(start), false
		}
		select {
		case <-ctx.Done():
		case <-time.After(every):
		}
	}
}

// Settle waits until the aggregator's lag is at most threshold records, for at most
// limit; it reports how long that took and whether it happened.
func (e *Env) Settle(ctx context.Context, threshold int64, limit time.Duration) (time.Duration, bool) {
	_, d, ok := e.waitLag(ctx, limit, 500*time.Millisecond, func(s probe.LagSample) bool { return s.Aggregator <= threshold })
	return d, ok
}

// Idle waits, for at most -idle-wait, until neither consumer group (only the
// aggregator's, withoutHistory) has more than a few windows of records to catch up
// on, so the phase that follows (named by before) does not pay for a backlog; what is
// left is noted, since it weighs on it.
func (e *Env) Idle(ctx context.Context, before string, withoutHistory bool) {
	fmt.Fprintf(e.Out, "==> waiting up to %s for the aggregator%s to be idle\n", e.Cfg.IdleWait, map[bool]string{false: " and history"}[withoutHistory])
	floor := int64(report.LagGrowthFloor)
	last, _, ok := e.waitLag(ctx, e.Cfg.IdleWait, time.Second, func(s probe.LagSample) bool {
		return s.Aggregator <= floor && (withoutHistory || s.HistoryEvents+s.HistoryChanges <= floor)
	})
	if ok {
		return
	}
	if withoutHistory {
		e.Note("the aggregator was still behind after %s", e.Cfg.IdleWait)
		return
	}
	if last.Aggregator > floor {
		e.Note("the aggregator was still %d records behind before %s (after %s)", last.Aggregator, before, e.Cfg.IdleWait)
	}
	if h := last.HistoryEvents + last.HistoryChanges; h > floor {
		e.Note("history was still %d records behind before %s (after %s); catching up on it loaded Cassandra meanwhile, and history's lag includes it", h, before, e.Cfg.IdleWait)
	}
}

// noteOthers warns when other work took a noticeable share of the machine during the
// steps: every number then understates what Pulse does alone.
func (e *Env) noteOthers() {
	var sum, stolen, n float64
	for _, s := range report.AllSteps(e.Res) {
		if s.Machine.Known {
			sum, stolen, n = sum+s.Machine.OtherCores, stolen+s.Machine.StolenCores, n+1
		}
	}
	cpus := float64(e.Res.Machine.CPUs)
	if s := e.Res.Scale; s != nil {
		for _, l := range []report.Layout{s.Pulse, s.Baseline} {
			if m := l.CountsMachine; m.Known && m.BusyCores > 0.8*cpus {
				e.Note("counts under %s were timed while the machine's cores were %.0f%% busy (%.2f cores in processes bench does not watch): their tails show CPU contention as much as Redis",
					l.Prefix, 100*m.BusyCores/cpus, m.OtherCores)
			}
		}
	}
	if n > 0 && (sum/n > 0.25 || stolen/n > 0.25) {
		e.Note("other work shared the machine during the steps: on average %.2f cores went to processes bench does not watch and %.2f were stolen by the hypervisor (of %d); the rates and latencies understate Pulse on an otherwise idle machine",
			sum/n, stolen/n, e.Res.Machine.CPUs)
	}
}

// machine describes where the run happens.
func machine(ctx context.Context, cfg Config) report.Machine {
	m := report.Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), MemoryBytes: probe.MemoryBytes()}
	git := func(args ...string) string {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = cfg.Root
		b, _ := cmd.Output()
		return strings.TrimSpace(string(b))
	}
	m.GitCommit = git("rev-parse", "--short", "HEAD")
	m.GitDirty = git("status", "--porcelain", "--untracked-files=no") != ""
	rdb := redisx.NewClient(redisx.Config{Addrs: []string{fmt.Sprintf("127.0.0.1:%d", cfg.Ports.Redis)}})
	defer rdb.Close()
	if v, err := rdb.ConfigGet(ctx, "appendonly").Result(); err == nil {
		m.RedisAOF = v["appendonly"]
	}
	return m
}
