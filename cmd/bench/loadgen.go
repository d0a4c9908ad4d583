package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pulse-presence/pulse/cmd/internal/loadreport"
)

// Quantiles are loadgen's latency summaries, which results.json keeps as they are.
type Quantiles = loadreport.Quantiles

// load is one loadgen run.
type load struct {
	name     string // file names in raw/
	duration time.Duration
	warmup   time.Duration
	args     []string // workload flags
}

// loadResult is what a run produced.
type loadResult struct {
	report     loadreport.Report
	cpuSeconds float64   // loadgen's own user+system time
	from       time.Time // start of the measured window
}

// runLoad runs loadgen once against the stack; its table and stderr go to
// raw/<name>.txt and its JSON to raw/<name>.json. On ctx's end loadgen gets SIGINT and
// still writes its report.
func (b *bench) runLoad(ctx context.Context, l load) (loadResult, error) {
	jsonPath := filepath.Join(b.rawDir, l.name+".json")
	out, err := os.Create(filepath.Join(b.rawDir, l.name+".txt"))
	if err != nil {
		return loadResult{}, err
	}
	defer out.Close()
	args := append([]string{
		"-ingest", b.st.url("ingest"), "-query", b.st.url("query"), "-quiet", "-json", jsonPath,
		"-users", strconv.Itoa(b.cfg.users),
		"-duration", l.duration.String(), "-warmup", l.warmup.String(),
	}, l.args...)
	if b.cfg.caFile != "" {
		args = append(args, "-ca", b.cfg.caFile)
	}
	cmd := exec.CommandContext(ctx, b.st.loadgenBin(), args...)
	cmd.Env = append(os.Environ(), devKeys(b.cfg.home, os.Getenv)...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = 30 * time.Second
	fmt.Fprintf(out, "$ loadgen %q\n", args)
	res := loadResult{from: time.Now().Add(l.warmup)}
	err = cmd.Run()
	if ps := cmd.ProcessState; ps != nil {
		res.cpuSeconds = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	if err != nil && ctx.Err() == nil {
		return res, fmt.Errorf("loadgen %s: %w (see %s)", l.name, err, out.Name())
	}
	if res.report, err = loadreport.ReadFile(jsonPath); err != nil {
		return res, fmt.Errorf("loadgen %s's report: %w", l.name, err)
	}
	return res, ctx.Err()
}

// devKeys is the environment giving loadgen the stack's development keys
// (deploy/local/stack.sh makes them under PULSE_HOME/auth/), for each of
// PULSE_PRODUCER_KEY and PULSE_READER_KEY the caller did not set itself.
func devKeys(home string, getenv func(string) string) []string {
	var env []string
	for name, file := range map[string]string{"PULSE_PRODUCER_KEY": "producer.key", "PULSE_READER_KEY": "reader.key"} {
		if getenv(name) != "" {
			continue
		}
		if key, err := os.ReadFile(filepath.Join(home, "auth", file)); err == nil {
			env = append(env, name+"="+strings.TrimSpace(string(key)))
		}
	}
	return env
}

// operatorKey is PULSE_OPERATOR_KEY, else the stack's development operator key.
func operatorKey(home string, getenv func(string) string) string {
	if k := getenv("PULSE_OPERATOR_KEY"); k != "" {
		return k
	}
	b, err := os.ReadFile(filepath.Join(home, "auth", "operator.key"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
