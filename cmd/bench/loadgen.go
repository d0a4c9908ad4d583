package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/pulse-presence/pulse/cmd/internal/loadreport"
)

// Steps read cmd/loadgen's -json report.
type (
	lgReport  = loadreport.Report
	Quantiles = loadreport.Quantiles
)

// load is one loadgen run.
type load struct {
	name     string // file names in raw/
	duration time.Duration
	warmup   time.Duration
	args     []string // workload flags
}

// loadResult is what a run produced.
type loadResult struct {
	report     lgReport
	cpuSeconds float64 // loadgen's own user+system time
	started    time.Time
	from       time.Time // start of the measured window
	ended      time.Time // when loadgen exited
}

// runLoad runs loadgen once; its table and stderr go to raw/<name>.txt and its JSON
// to raw/<name>.json. On ctx's end loadgen gets SIGINT and still writes its report.
func runLoad(ctx context.Context, bin, ingest, query, rawDir string, users int, l load) (loadResult, error) {
	jsonPath := filepath.Join(rawDir, l.name+".json")
	out, err := os.Create(filepath.Join(rawDir, l.name+".txt"))
	if err != nil {
		return loadResult{}, err
	}
	defer out.Close()
	args := append([]string{
		"-ingest", ingest, "-query", query, "-quiet", "-json", jsonPath,
		"-users", strconv.Itoa(users),
		"-duration", l.duration.String(), "-warmup", l.warmup.String(),
	}, l.args...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = 30 * time.Second
	fmt.Fprintf(out, "$ loadgen %q\n", args)
	res := loadResult{started: time.Now()}
	res.from = res.started.Add(l.warmup)
	err = cmd.Run()
	res.ended = time.Now()
	if ps := cmd.ProcessState; ps != nil {
		res.cpuSeconds = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	if err != nil && ctx.Err() == nil {
		return res, fmt.Errorf("loadgen %s: %w (see %s)", l.name, err, out.Name())
	}
	b, rerr := os.ReadFile(jsonPath)
	if rerr != nil {
		if err != nil {
			return res, fmt.Errorf("loadgen %s: %w", l.name, err)
		}
		return res, fmt.Errorf("loadgen %s wrote no report: %w", l.name, rerr)
	}
	if err := json.Unmarshal(b, &res.report); err != nil {
		return res, fmt.Errorf("decoding %s: %w", jsonPath, err)
	}
	if res.report.Version != 1 {
		return res, fmt.Errorf("%s: report version %d, bench reads version 1", jsonPath, res.report.Version)
	}
	return res, ctx.Err()
}
