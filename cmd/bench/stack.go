package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The stack's servers and Pulse's services, in stack.sh's names.
var (
	serverNames  = []string{"redis", "kafka", "cassandra"}
	serviceNames = []string{"ingest", "aggregator", "history", "query"}
)

// process is one process bench watches: a server or service of the stack, found by
// its pid file, or a service bench started.
type process struct {
	name    string
	pid     int
	started bool // by bench, which then stops it
	cmd     *exec.Cmd
	done    chan struct{}
	logFile *os.File
}

// stack finds, starts and stops the processes of the local stack.
type stack struct {
	cfg   config
	http  *http.Client
	procs map[string]*process
	log   io.Writer
}

func newStack(cfg config, log io.Writer) *stack {
	return &stack{
		cfg:   cfg,
		http:  &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}},
		procs: map[string]*process{},
		log:   log,
	}
}

func (s *stack) url(service string) string {
	return "http://127.0.0.1:" + strconv.Itoa(s.cfg.ports.service(service))
}

func (s *stack) runDir() string { return filepath.Join(s.cfg.home, "run") }
func (s *stack) binDir() string { return filepath.Join(s.cfg.home, "bin") }

// marker is what a live process's command line must hold for its pid file to be
// trusted, as in stack.sh: so a recycled pid is never signalled or measured.
func (s *stack) marker(name string) string {
	if name == "redis" {
		return ":" + strconv.Itoa(s.cfg.ports.redis)
	}
	return s.cfg.home
}

// pidOf returns the live pid recorded for name, 0 when there is none.
func (s *stack) pidOf(name string) int {
	b, err := os.ReadFile(filepath.Join(s.runDir(), name+".pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || !bytes.Contains(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}), []byte(s.marker(name))) {
		return 0
	}
	return pid
}

// findServers records the stack's servers; every one must be running.
func (s *stack) findServers() error {
	var missing []string
	for _, name := range serverNames {
		pid := s.pidOf(name)
		if pid == 0 {
			missing = append(missing, name)
			continue
		}
		s.procs[name] = &process{name: name, pid: pid}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the stack is not running (%s not found in %s): run `deploy/local/stack.sh up` or `make up`",
			strings.Join(missing, ", "), s.runDir())
	}
	return nil
}

// build compiles the services and loadgen into the stack's bin folder, as stack.sh
// does; Go's build cache makes it quick after the first time.
func (s *stack) build(ctx context.Context) error {
	if err := os.MkdirAll(s.binDir(), 0o755); err != nil {
		return err
	}
	targets := map[string]string{"loadgen": "./cmd/loadgen"}
	for _, name := range serviceNames {
		targets["pulse-"+name] = "./services/" + name
	}
	for _, out := range []string{"loadgen", "pulse-ingest", "pulse-aggregator", "pulse-history", "pulse-query"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(s.binDir(), out), targets[out])
		cmd.Dir = s.cfg.root
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %w\n%s", targets[out], err, b)
		}
	}
	return nil
}

func (s *stack) loadgenBin() string { return filepath.Join(s.binDir(), "loadgen") }

// healthy reports whether url answers path with 200.
func (s *stack) healthy(ctx context.Context, url, path string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+path, nil)
	if err != nil {
		return false
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// ensureServices uses each service that already answers and starts the others.
func (s *stack) ensureServices(ctx context.Context) error {
	for _, name := range serviceNames {
		if s.healthy(ctx, s.url(name), "/healthz") {
			pid := s.pidOf(name)
			s.procs[name] = &process{name: name, pid: pid}
			if pid == 0 {
				fmt.Fprintf(s.log, "    %-10s answers on %s but has no pid file: its CPU is not measured\n", name, s.url(name))
			} else {
				fmt.Fprintf(s.log, "    %-10s running (pid %d), used as is\n", name, pid)
			}
			continue
		}
		p, err := s.start(name)
		if err != nil {
			return err
		}
		s.procs[name] = p
		fmt.Fprintf(s.log, "    %-10s started (pid %d), log %s\n", name, p.pid, p.logFile.Name())
	}
	deadline := time.Now().Add(90 * time.Second)
	for _, name := range serviceNames {
		for !s.healthy(ctx, s.url(name), "/readyz") {
			if p := s.procs[name]; p.started {
				select {
				case <-p.done:
					return fmt.Errorf("%s exited at start; see %s", name, p.logFile.Name())
				default:
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s is not ready at %s/readyz after 90s; see %s", name, s.url(name), filepath.Join(s.cfg.home, "logs", name+".log"))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// start launches one service on the stack's ports, in a session of its own (so a
// Ctrl-C meant for bench reaches only bench, which then stops it in order), logging
// where stack.sh logs it and recording its pid where stack.sh would, so `make down`
// and `make status` see it too.
func (s *stack) start(name string) (*process, error) {
	logPath := filepath.Join(s.cfg.home, "logs", name+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(lf, "\n--- %s started by bench %s ---\n", name, time.Now().UTC().Format(time.RFC3339))
	p := s.cfg.ports
	cmd := exec.Command(filepath.Join(s.binDir(), "pulse-"+name))
	cmd.Env = append(os.Environ(),
		"PULSE_HTTP_ADDR=127.0.0.1:"+strconv.Itoa(p.service(name)),
		"PULSE_KAFKA_BROKERS=127.0.0.1:"+strconv.Itoa(p.kafka),
		"PULSE_REDIS_ADDR=127.0.0.1:"+strconv.Itoa(p.redis),
		"PULSE_REDIS_PREFIX="+s.cfg.prefix,
		"PULSE_CASSANDRA_HOSTS=127.0.0.1",
		"PULSE_CASSANDRA_PORT="+strconv.Itoa(p.cassandra),
		"PULSE_CASSANDRA_KEYSPACE="+s.cfg.keyspace,
		"PULSE_AGGREGATOR_GROUP="+s.cfg.aggGroup,
		"PULSE_HISTORY_GROUP="+s.cfg.histGrp,
		"PULSE_TOPIC_EVENTS="+s.cfg.events,
		"PULSE_TOPIC_CHANGES="+s.cfg.changes,
		// Profiles only when asked for: the endpoint exposes internals.
		"PULSE_PPROF="+strconv.FormatBool(s.cfg.profile),
	)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	proc := &process{name: name, pid: cmd.Process.Pid, started: true, cmd: cmd, done: make(chan struct{}), logFile: lf}
	go func() { cmd.Wait(); close(proc.done) }()
	if err := os.MkdirAll(s.runDir(), 0o755); err == nil {
		os.WriteFile(filepath.Join(s.runDir(), name+".pid"), []byte(strconv.Itoa(proc.pid)+"\n"), 0o644)
	}
	return proc, nil
}

// stopStarted stops the services bench started, in stack.sh's order: SIGTERM, up to
// 20 s to drain, then SIGKILL. Processes bench found running are left alone.
func (s *stack) stopStarted() {
	for _, name := range serviceNames {
		p := s.procs[name]
		if p == nil || !p.started {
			continue
		}
		fmt.Fprintf(s.log, "    stopping %-10s (pid %d)", name, p.pid)
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			fmt.Fprintln(s.log, " stopped")
		case <-time.After(20 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
			fmt.Fprintln(s.log, " killed after 20s")
		}
		p.logFile.Close()
		pidFile := filepath.Join(s.runDir(), name+".pid")
		if b, err := os.ReadFile(pidFile); err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(p.pid) {
			os.Remove(pidFile)
		}
	}
}

// anyStarted reports whether bench started a service.
func (s *stack) anyStarted() bool {
	for _, p := range s.procs {
		if p.started {
			return true
		}
	}
	return false
}

// cpu reads the CPU seconds of every watched process with a pid, and of bench.
func (s *stack) cpu(ticks float64) cpuSnapshot {
	snap := cpuSnapshot{}
	for name, p := range s.procs {
		if p.pid == 0 {
			continue
		}
		if t, err := readProc(strconv.Itoa(p.pid)); err == nil {
			snap[name] = float64(t.UserTicks+t.SysTicks) / ticks
		}
	}
	if t, err := readProc("self"); err == nil {
		snap["bench"] = float64(t.UserTicks+t.SysTicks) / ticks
	}
	if busy, steal, ok := machineCPU(ticks); ok {
		snap[machineKey], snap[stealKey] = busy, steal
	}
	return snap
}

// Keys of a cpuSnapshot that are not processes: the whole machine's busy and stolen
// CPU seconds.
const (
	machineKey = "machine"
	stealKey   = "steal"
)

// rss reads the resident memory of every watched process, in bytes.
func (s *stack) rss() map[string]int64 {
	page := int64(os.Getpagesize())
	out := map[string]int64{}
	for name, p := range s.procs {
		if p.pid == 0 {
			continue
		}
		if t, err := readProc(strconv.Itoa(p.pid)); err == nil {
			out[name] = t.RSSPages * page
		}
	}
	return out
}

// alive reports whether every service bench relies on still runs; a service that
// died mid-run would make every later number meaningless.
func (s *stack) alive() error {
	var dead []string
	for _, name := range serviceNames {
		p := s.procs[name]
		if p == nil {
			continue
		}
		if p.started {
			select {
			case <-p.done:
				dead = append(dead, name)
			default:
			}
			continue
		}
		if p.pid != 0 && syscall.Kill(p.pid, 0) != nil {
			dead = append(dead, name)
		}
	}
	if len(dead) > 0 {
		return errors.New(strings.Join(dead, ", ") + " exited during the run; see " + filepath.Join(s.cfg.home, "logs"))
	}
	return nil
}
