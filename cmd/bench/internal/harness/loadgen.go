package harness

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

// Load is one loadgen run.
type Load struct {
	Name             string // file names in raw/
	Duration, Warmup time.Duration
	Args             []string // workload flags
}

// LoadResult is what a run produced.
type LoadResult struct {
	Report     loadreport.Report
	CPUSeconds float64   // loadgen's own user+system time
	From       time.Time // start of the measured window
}

// RunLoad runs loadgen once against the stack; its table and stderr go to
// raw/<name>.txt and its JSON to raw/<name>.json. On ctx's end loadgen gets SIGINT and
// still writes its report.
func (e *Env) RunLoad(ctx context.Context, l Load) (LoadResult, error) {
	jsonPath := filepath.Join(e.RawDir, l.Name+".json")
	out, err := os.Create(filepath.Join(e.RawDir, l.Name+".txt"))
	if err != nil {
		return LoadResult{}, err
	}
	defer out.Close()
	args := append([]string{
		"-ingest", e.Stack.URL("ingest"), "-query", e.Stack.URL("query"), "-quiet", "-json", jsonPath,
		"-users", strconv.Itoa(e.Cfg.Users),
		"-duration", l.Duration.String(), "-warmup", l.Warmup.String(),
	}, l.Args...)
	if e.Cfg.CAFile != "" {
		args = append(args, "-ca", e.Cfg.CAFile)
	}
	cmd := exec.CommandContext(ctx, e.Stack.loadgenBin(), args...)
	cmd.Env = append(os.Environ(), devKeys(e.Cfg.Home, os.Getenv)...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = 30 * time.Second
	fmt.Fprintf(out, "$ loadgen %q\n", args)
	res := LoadResult{From: time.Now().Add(l.Warmup)}
	err = cmd.Run()
	if ps := cmd.ProcessState; ps != nil {
		res.CPUSeconds = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	if err != nil && ctx.Err() == nil {
		return res, fmt.Errorf("loadgen %s: %w (see %s)", l.Name, err, out.Name())
	}
	if res.Report, err = loadreport.ReadFile(jsonPath); err != nil {
		return res, fmt.Errorf("loadgen %s's report: %w", l.Name, err)
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

// OperatorKey is PULSE_OPERATOR_KEY, else the stack's development operator key.
func OperatorKey(home string, getenv func(string) string) string {
	if k := getenv("PULSE_OPERATOR_KEY"); k != "" {
		return k
	}
	b, err := os.ReadFile(filepath.Join(home, "auth", "operator.key"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
