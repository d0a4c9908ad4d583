package harness

import (
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

	"github.com/pulse-presence/pulse/cmd/bench/internal/probe"
	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
)

// The stack's servers and Pulse's services, in stack.sh's names. The optional services
// run on the stack too, but only a phase that asks for one (UseService) needs it.
var (
	serverNames      = []string{"redis", "kafka", "cassandra"}
	serviceNames     = []string{"ingest", "aggregator", "history", "query"}
	optionalServices = []string{"notifier"}
)

// process is one process bench watches; pid 0 for a service that answers but has no
// pid file, whose CPU is then not measured.
type process struct {
	pid     int
	started bool // by bench, which then stops it
}

// Stack is the local stack as deploy/local/stack.sh keeps it. Its pid files and the
// way services are started belong to the script alone, so bench asks the script which
// processes run and has it start and stop the services bench needs.
type Stack struct {
	cfg     Config
	http    *http.Client
	procs   map[string]process
	started []string // services bench asked the script to start
	log     io.Writer
}

func newStack(cfg Config, log io.Writer) *Stack {
	return &Stack{
		cfg:   cfg,
		http:  &http.Client{Timeout: 5 * time.Second, Transport: cfg.Transport()},
		procs: map[string]process{},
		log:   log,
	}
}

// URL is a service's base URL: https for ingest and query when they serve TLS (-https);
// aggregator and history serve plain HTTP.
func (s *Stack) URL(service string) string {
	scheme := "http"
	if s.cfg.HTTPS && (service == "ingest" || service == "query") {
		scheme = "https"
	}
	return scheme + "://127.0.0.1:" + strconv.Itoa(s.cfg.Ports.Service(service))
}

func (s *Stack) loadgenBin() string { return filepath.Join(s.cfg.Home, "bin", "loadgen") }

// script runs a subcommand of stack.sh on bench's stack, with the settings bench was
// given for the services it starts.
func (s *Stack) script(ctx context.Context, args ...string) *exec.Cmd {
	return s.command(ctx, append(os.Environ(),
		"PULSE_HOME="+s.cfg.Home,
		"PULSE_KEYSPACE="+s.cfg.Keyspace,
		"PULSE_REDIS_PREFIX="+s.cfg.Prefix,
		"PULSE_AGGREGATOR_GROUP="+s.cfg.AggGroup,
		"PULSE_HISTORY_GROUP="+s.cfg.HistGroup,
		"PULSE_TOPIC_EVENTS="+s.cfg.Events,
		"PULSE_TOPIC_CHANGES="+s.cfg.Changes,
		// Profiles only when asked for: the endpoint exposes internals.
		"PULSE_PPROF="+strconv.FormatBool(s.cfg.Profile),
		// Services started on a busy machine right after `stack.sh up` can be slow to
		// become ready.
		"PULSE_SERVICES_WAIT_TIMEOUT=90s",
	), args...)
}

// ClusterScript runs stack.sh on the cluster topology, in its own home: bench's own
// stack settings name the single topology's folder and ports.
func (s *Stack) ClusterScript(ctx context.Context, args ...string) *exec.Cmd {
	return s.command(ctx, append(EnvironWithoutPulse(), "PULSE_TOPOLOGY=cluster"), args...)
}

func (s *Stack) command(ctx context.Context, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.cfg.Root, "deploy", "local", "stack.sh"), args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = s.cfg.Root, env, s.log, s.log
	return cmd
}

// EnvironWithoutPulse is bench's environment without Pulse's variables, for processes
// bench configures itself.
func EnvironWithoutPulse() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PULSE_") })
}

// pids asks stack.sh for the pid of every process of the stack that runs.
func (s *Stack) pids(ctx context.Context) (map[string]int, error) {
	return pidsOf(s.script(ctx, "pids"))
}

// ClusterPids is pids on the cluster topology.
func (s *Stack) ClusterPids(ctx context.Context) (map[string]int, error) {
	return pidsOf(s.ClusterScript(ctx, "pids"))
}

func pidsOf(cmd *exec.Cmd) (map[string]int, error) {
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("stack.sh pids: %w", err)
	}
	pids := map[string]int{}
	for line := range strings.Lines(out.String()) {
		name, pid, _ := strings.Cut(strings.TrimSpace(line), " ")
		if n, err := strconv.Atoi(pid); err == nil {
			pids[name] = n
		}
	}
	return pids, nil
}

// findServers records the stack's servers; every one must be running.
func (s *Stack) findServers(ctx context.Context) error {
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
			strings.Join(missing, ", "), filepath.Join(s.cfg.Home, "run"))
	}
	return nil
}

// buildLoadgen compiles loadgen beside the services' binaries; Go's build cache makes
// it quick after the first time.
func (s *Stack) buildLoadgen(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", s.loadgenBin(), "./cmd/loadgen")
	cmd.Dir = s.cfg.Root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building ./cmd/loadgen: %w\n%s", err, b)
	}
	return nil
}

// healthy reports whether url answers with 200.
func (s *Stack) healthy(ctx context.Context, url string) bool {
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
func (s *Stack) ensureServices(ctx context.Context) error {
	for _, name := range serviceNames {
		if !s.healthy(ctx, s.URL(name)+"/healthz") {
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
			fmt.Fprintf(s.log, "    %-10s started (pid %d), log %s\n", name, p.pid, filepath.Join(s.cfg.Home, "logs", name+".log"))
		case p.pid == 0:
			fmt.Fprintf(s.log, "    %-10s answers on %s but has no pid file: its CPU is not measured\n", name, s.URL(name))
		default:
			fmt.Fprintf(s.log, "    %-10s running (pid %d), used as is\n", name, p.pid)
		}
	}
	return s.waitReady(ctx, serviceNames...)
}

// UseService makes one of the optional services part of the run, for the phase that
// needs it: a running one is used as is, one that does not answer is started by
// stack.sh and stopped at the end with the others bench started. Its CPU is watched
// from then on.
func (s *Stack) UseService(ctx context.Context, name string) error {
	if !slices.Contains(optionalServices, name) {
		return fmt.Errorf("%s is not an optional service of the stack", name)
	}
	if _, ok := s.procs[name]; ok {
		return nil
	}
	started := !s.healthy(ctx, s.URL(name)+"/healthz")
	if started {
		if err := s.script(ctx, "services", name).Run(); err != nil {
			return fmt.Errorf("starting %s with stack.sh: %w", name, err)
		}
		s.started = append(s.started, name)
	}
	pids, err := s.pids(ctx)
	if err != nil {
		return err
	}
	p := process{pid: pids[name], started: started}
	s.procs[name] = p
	switch {
	case started:
		fmt.Fprintf(s.log, "    %-10s started (pid %d), log %s\n", name, p.pid, filepath.Join(s.cfg.Home, "logs", name+".log"))
	case p.pid == 0:
		fmt.Fprintf(s.log, "    %-10s answers on %s but has no pid file: its CPU is not measured\n", name, s.URL(name))
	default:
		fmt.Fprintf(s.log, "    %-10s running (pid %d), used as is\n", name, p.pid)
	}
	return s.waitReady(ctx, name)
}

// PID is the pid of a watched process of the stack; 0 when unknown.
func (s *Stack) PID(name string) int { return s.procs[name].pid }

// waitReady waits for the services' /readyz, which those found running may not answer
// yet either.
func (s *Stack) waitReady(ctx context.Context, names ...string) error {
	deadline := time.Now().Add(90 * time.Second)
	for _, name := range names {
		for !s.healthy(ctx, s.URL(name)+"/readyz") {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s is not ready at %s/readyz after 90s; see %s", name, s.URL(name), filepath.Join(s.cfg.Home, "logs", name+".log"))
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
func (s *Stack) stopStarted() {
	if err := s.script(context.Background(), append([]string{"stop-services"}, s.started...)...).Run(); err != nil {
		fmt.Fprintf(s.log, "    stack.sh stop-services: %v\n", err)
	}
}

// Pause stops a service's process with SIGSTOP: it keeps its pid, its connections and
// its memory, does nothing until Resume (SIGCONT), and its consumer group hands its
// partitions on (or holds them, with no other member) once its session times out.
func (s *Stack) Pause(name string) error { return s.signal(name, "pause", syscall.SIGSTOP) }

// Resume continues a service paused by Pause.
func (s *Stack) Resume(name string) error { return s.signal(name, "resume", syscall.SIGCONT) }

func (s *Stack) signal(name, verb string, sig syscall.Signal) error {
	p := s.procs[name]
	if p.pid == 0 {
		return fmt.Errorf("%s has no pid file to %s it by", name, verb)
	}
	return syscall.Kill(p.pid, sig)
}

// Alive reports whether every service bench measures still runs, by stack.sh's pid
// files; a service that died mid-run would make every later number meaningless.
func (s *Stack) Alive(ctx context.Context) error {
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
		return fmt.Errorf("%s exited during the run; see %s", strings.Join(dead, ", "), filepath.Join(s.cfg.Home, "logs"))
	}
	return nil
}

// watched is the pid of every watched process.
func (s *Stack) watched() map[string]int {
	pids := map[string]int{}
	for name, p := range s.procs {
		pids[name] = p.pid
	}
	return pids
}

// processes describes every watched process, servers first, with its resident memory
// now.
func (s *Stack) processes() []report.ProcessInfo {
	var out []report.ProcessInfo
	for _, name := range slices.Concat(serverNames, serviceNames, optionalServices) {
		p, ok := s.procs[name]
		if !ok {
			continue
		}
		info := report.ProcessInfo{Name: name, PID: p.pid, StartedByBench: p.started}
		if p.pid != 0 {
			info.RSSBytesAtEnd = probe.RSS(p.pid)
		}
		out = append(out, info)
	}
	return out
}
