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
)

// lgReport is the part of cmd/loadgen's -json report bench reads (its Report, version 1).
type lgReport struct {
	Version              int          `json:"version"`
	MeasuredSeconds      float64      `json:"measuredSeconds"`
	Interrupted          bool         `json:"interrupted"`
	AcceptedEventsPerSec float64      `json:"acceptedEventsPerSec"`
	Workloads            []lgWorkload `json:"workloads"`
	Freshness            *struct {
		Probes   uint64    `json:"probes"`
		Seen     uint64    `json:"seen"`
		Timeouts uint64    `json:"timeouts"`
		Ms       Quantiles `json:"ms"`
	} `json:"freshness"`
}

type lgWorkload struct {
	Name               string  `json:"name"`
	Endpoint           string  `json:"endpoint"`
	TargetRate         float64 `json:"targetRate"`
	AchievedRate       float64 `json:"achievedRate"`
	TargetEventsPerSec float64 `json:"targetEventsPerSec"`
	EventsPerSec       float64 `json:"eventsPerSec"`
	Scheduled          uint64  `json:"scheduled"`
	OK                 uint64  `json:"ok"`
	Errors             struct {
		C4xx      uint64 `json:"4xx"`
		C5xx      uint64 `json:"5xx"`
		Transport uint64 `json:"transport"`
		Dropped   uint64 `json:"dropped"`
	} `json:"errors"`
	LatencyMs Quantiles `json:"latencyMs"`
}

func (w lgWorkload) failed() uint64 {
	return w.Errors.C4xx + w.Errors.C5xx + w.Errors.Transport + w.Errors.Dropped
}

// Quantiles summarise latencies in milliseconds (loadgen's shape).
type Quantiles struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	Max   float64 `json:"max"`
}

func (r lgReport) workload(name string) (lgWorkload, bool) {
	for _, w := range r.Workloads {
		if w.Name == name {
			return w, true
		}
	}
	return lgWorkload{}, false
}

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
