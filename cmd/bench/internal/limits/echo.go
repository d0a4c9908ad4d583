package limits

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/pulse-presence/pulse/cmd/bench/internal/harness"
	"github.com/pulse-presence/pulse/cmd/bench/internal/probe"
	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
)

// bareStatus is the POST /status body, as ingest reads it.
type bareStatus struct {
	UserID *string `json:"userId"`
	Status *string `json:"status"`
}

// bareEcho is an Echo server whose only route decodes a POST /status body the way
// ingest reads it (httpserver.ReadBody, httpserver.DecodeObject) and answers 202:
// no validation, no Kafka, no middleware.
func bareEcho() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.POST("/status", func(c echo.Context) error {
		body, err := httpserver.ReadBody(c, 1<<20)
		if err != nil {
			return err
		}
		var in bareStatus
		if err := httpserver.DecodeObject(body, &in, ""); err != nil {
			return err
		}
		return c.NoContent(http.StatusAccepted)
	})
	return e
}

// echoLimit starts the bare handler in bench's process on a free port and steps
// loadgen's single-event load over -limits-echo-rates, each step as long as a single
// step, until one falls behind (ingest's criteria: accepted and failed requests).
func echoLimit(ctx context.Context, env *harness.Env) (*report.EchoLimit, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: bareEcho(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer env.Cleanup(ctx, 5*time.Second, "stopping the bare Echo handler's server", srv.Shutdown)
	url := "http://" + ln.Addr().String()
	res := &report.EchoLimit{}
	cpus := float64(env.Res.Machine.CPUs)
	for i, rate := range env.Cfg.LimitsEchoRates {
		name := fmt.Sprintf("limits-echo-%03d-%.0f", i+1, rate)
		before := env.CPU()
		start := time.Now()
		lr, err := env.RunLoad(ctx, harness.Load{Name: name, Duration: env.Cfg.SingleTime, Warmup: env.Cfg.Warmup, Args: []string{
			"-single-rate", strconv.FormatFloat(rate, 'f', -1, 64), "-read-rate", "0", "-fresh-rate", "0", "-seed", strconv.Itoa(i + 1),
			"-ingest", url, // after bench's own -ingest: the last one counts
		}})
		wall := time.Since(start).Seconds()
		if err != nil {
			return res, err
		}
		st := report.EchoStep{OfferedEventsPerSec: rate, Raw: filepath.Join("raw", name+".json")}
		if w, ok := lr.Report.Workload("single"); ok {
			st.AcceptedEventsPerSec, st.Ms = w.EventsPerSec, w.LatencyMs
			if w.Scheduled > 0 {
				st.FailedFraction = float64(w.Failed()) / float64(w.Scheduled)
			}
		}
		if wall > 0 {
			st.LoadgenCores = lr.CPUSeconds / wall
			st.BenchCores = probe.Delta(before, env.CPU())["bench"] / wall
			if cpus > 0 {
				st.LoadgenMachineShare = st.LoadgenCores / cpus
			}
		}
		st.KeptUp = st.AcceptedEventsPerSec >= env.Cfg.Crit.MinAccepted*rate && st.FailedFraction <= env.Cfg.Crit.MaxFailed
		res.Steps = append(res.Steps, st)
		res.PeakAcceptedEventsPerSec = max(res.PeakAcceptedEventsPerSec, st.AcceptedEventsPerSec)
		fmt.Fprintf(env.Out, "      bare Echo at %s/s: %s accepted, p99 %s, loadgen %.2f cores (%.0f%% of the machine): %s\n",
			report.Num(rate), report.Num(st.AcceptedEventsPerSec), report.FmtMs(st.Ms.P99, st.Ms.Count), st.LoadgenCores, 100*st.LoadgenMachineShare,
			map[bool]string{true: "kept up", false: "fell behind"}[st.KeptUp])
		if !st.KeptUp {
			break
		}
		res.MaxOfferedEventsPerSec, res.MaxAcceptedEventsPerSec = rate, st.AcceptedEventsPerSec
	}
	if len(res.Steps) == 0 {
		return nil, errors.New("no step ran")
	}
	return res, nil
}
