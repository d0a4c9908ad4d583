package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// process is one process bench watches; pid 0 for a service that answers but has no
// pid file, whose CPU is then not measured.
type process struct {
	pid     int
	started bool // by bench, which then stops it
}

// stack is the local stack as deploy/local/stack.sh keeps it. Its pid files and the
// way services are started belong to the script alone, so bench asks the script which
// processes run and has it start and stop the services bench needs.
type stack struct {
	cfg     config
	http    *http.Client
	procs   map[string]process
	started []string // services bench asked the script to start
	log     io.Writer
}

func newStack(cfg config, log io.Writer) *stack {
	return &stack{
		cfg:   cfg,
		http:  &http.Client{Timeout: 5 * time.Second, Transport: cfg.transport()},
		procs: map[string]process{},
		log:   log,
	}
}

// url is a service's base URL: https for ingest and query when they serve TLS (-https);
// aggregator and history serve plain HTTP.
func (s *stack) url(service string) string {
	scheme := "http"
	if s.cfg.https && (service == "ingest" || service == "query") {
		scheme = "https"
	}
	return scheme + "://127.0.0.1:" + strconv.Itoa(s.cfg.ports.service(service))
}

// transport is bench's HTTP transport: no proxy (bench measures Pulse, never a proxy
// in between), trusting the system's roots and -ca.
func (c config) transport() *http.Transport {
	return &http.Transport{Proxy: nil, TLSClientConfig: c.tls}
}

func (s *stack) loadgenBin() string { return filepath.Join(s.cfg.home, "bin", "loadgen") }

// script runs a subcommand of stack.sh on bench's stack, with the settings bench was
// given for the services it starts.
func (s *stack) script(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.cfg.root, "deploy", "local", "stack.sh"), args...)
	cmd.Dir = s.cfg.root
	cmd.Env = append(os.Environ(),
		"PULSE_HOME="+s.cfg.home,
		"PULSE_KEYSPACE="+s.cfg.keyspace,
		"PULSE_REDIS_PREFIX="+s.cfg.prefix,
		"PULSE_AGGREGATOR_GROUP="+s.cfg.aggGroup,
		"PULSE_HISTORY_GROUP="+s.cfg.histGrp,
		"PULSE_TOPIC_EVENTS="+s.cfg.events,
		"PULSE_TOPIC_CHANGES="+s.cfg.changes,
		// Profiles only when asked for: the endpoint exposes internals.
		"PULSE_PPROF="+strconv.FormatBool(s.cfg.profile),
		// Services started on a busy machine right after `stack.sh up` can be slow to
		// become ready.
		"PULSE_SERVICES_WAIT_TIMEOUT=90s",
	)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	return cmd
}

// pids asks stack.sh for the pid of every process of the stack that runs.
func (s *stack) pids(ctx context.Context) (map[string]int, error) {
	cmd := s.script(ctx, "pids")
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("stack.sh pids: %w", err)
	}
	pids := map[string]int{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		name, pid, _ := strings.Cut(sc.Text(), " ")
		if n, err := strconv.Atoi(pid); err == nil {
			pids[name] = n
		}
	}
	return pids, nil
}

// findServers records the stack's servers; every one must be running.
func (s *stack) findServers(ctx context.Context) error {
	pids, err := s.pids(ctx)
	if err != nil {
		return err
	}
	var missing []string
	for _, name := range serverNames {
		if pids[name] == 0 {
			missing = append(missing, name)
			continue
		}
		s.procs[name] = process{pid: pids[name]}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the stack is not running (%s not found in %s): run `deploy/local/stack.sh up` or `make up`",
			strings.Join(missing, ", "), filepath.Join(s.cfg.home, "run"))
	}
	return nil
}

// buildLoadgen compiles loadgen beside the services' binaries; Go's build cache makes
// it quick after the first time.
func (s *stack) buildLoadgen(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", s.loadgenBin(), "./cmd/loadgen")
	cmd.Dir = s.cfg.root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building ./cmd/loadgen: %w\n%s", err, b)
	}
	return nil
}

// healthy reports whether url answers with 200.
func (s *stack) healthy(ctx context.Context, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
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

// ensureServices uses each service that already answers and has stack.sh start the
// others, which it then stops at the end (stopStarted).
func (s *stack) ensureServices(ctx context.Context) error {
	for _, name := range serviceNames {
		if !s.healthy(ctx, s.url(name)+"/healthz") {
			s.started = append(s.started, name)
		}
	}
	if len(s.started) > 0 {
		if err := s.script(ctx, append([]string{"services"}, s.started...)...).Run(); err != nil {
			return fmt.Errorf("starting %s with stack.sh: %w", strings.Join(s.started, ", "), err)
		}
	}
	pids, err := s.pids(ctx)
	if err != nil {
		return err
	}
	for _, name := range serviceNames {
		p := process{pid: pids[name], started: slices.Contains(s.started, name)}
		s.procs[name] = p
		switch {
		case p.started:
			fmt.Fprintf(s.log, "    %-10s started (pid %d), log %s\n", name, p.pid, filepath.Join(s.cfg.home, "logs", name+".log"))
		case p.pid == 0:
			fmt.Fprintf(s.log, "    %-10s answers on %s but has no pid file: its CPU is not measured\n", name, s.url(name))
		default:
			fmt.Fprintf(s.log, "    %-10s running (pid %d), used as is\n", name, p.pid)
		}
	}
	return s.waitReady(ctx)
}

// waitReady waits for every service's /readyz, which those found running may not
// answer yet either.
func (s *stack) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(90 * time.Second)
	for _, name := range serviceNames {
		for !s.healthy(ctx, s.url(name)+"/readyz") {
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

// stopStarted has stack.sh stop the services bench started (SIGTERM, up to 20 s to
// drain, then SIGKILL); processes bench found running are left alone. It runs after a
// Ctrl-C too, so it does not take the run's context.
func (s *stack) stopStarted() {
	if err := s.script(context.Background(), append([]string{"stop-services"}, s.started...)...).Run(); err != nil {
		fmt.Fprintf(s.log, "    stack.sh stop-services: %v\n", err)
	}
}

// pause stops a service's process with SIGSTOP: it keeps its pid, its connections and
// its memory, does nothing until resume, and its consumer group hands its partitions
// on (or holds them, with no other member) once its session times out.
func (s *stack) pause(name string) error {
	p := s.procs[name]
	if p.pid == 0 {
		return fmt.Errorf("%s has no pid file to pause it by", name)
	}
	return syscall.Kill(p.pid, syscall.SIGSTOP)
}

// resume continues a service paused by pause.
func (s *stack) resume(name string) error {
	p := s.procs[name]
	if p.pid == 0 {
		return fmt.Errorf("%s has no pid file to resume it by", name)
	}
	return syscall.Kill(p.pid, syscall.SIGCONT)
}

// alive reports whether every service bench measures still runs, by stack.sh's pid
// files; a service that died mid-run would make every later number meaningless.
func (s *stack) alive(ctx context.Context) error {
	pids, err := s.pids(ctx)
	if err != nil {
		return err
	}
	var dead []string
	for _, name := range serviceNames {
		if p := s.procs[name]; p.pid != 0 && pids[name] != p.pid {
			dead = append(dead, name)
		}
	}
	if len(dead) > 0 {
		return fmt.Errorf("%s exited during the run; see %s", strings.Join(dead, ", "), filepath.Join(s.cfg.home, "logs"))
	}
	return nil
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

// processes describes every watched process, servers first, with its resident memory
// now.
func (s *stack) processes() []ProcessInfo {
	var out []ProcessInfo
	for _, name := range slices.Concat(serverNames, serviceNames) {
		p, ok := s.procs[name]
		if !ok {
			continue
		}
		info := ProcessInfo{Name: name, PID: p.pid, StartedByBench: p.started}
		if t, err := readProc(strconv.Itoa(p.pid)); err == nil && p.pid != 0 {
			info.RSSBytesAtEnd = t.RSSPages * int64(os.Getpagesize())
		}
		out = append(out, info)
	}
	return out
}
