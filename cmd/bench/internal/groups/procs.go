package groups

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/pulse-presence/pulse/cmd/bench/internal/harness"
	"github.com/pulse-presence/pulse/internal/api/auth"
)

// proc is a process the phase started: a Pulse service or a server of its own.
type proc struct {
	name string
	cmd  *exec.Cmd
	addr string // where it listens
	log  string
	done chan struct{}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to 30 s, then kills.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// freeAddr is a loopback address with a port free now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// build compiles a service of the repository into the stack's bin folder as bin.
func build(ctx context.Context, env *harness.Env, pkg, bin string) (string, error) {
	path := filepath.Join(env.Cfg.Home, "bin", bin)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", path, pkg)
	cmd.Dir = env.Cfg.Root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", pkg, err, b)
	}
	return path, nil
}

// start runs bin with args and the environment vars (and none of bench's PULSE_
// variables), logging into the results' raw folder.
func start(env *harness.Env, name, addr, bin string, args, vars []string) (*proc, error) {
	p := &proc{name: name, addr: addr, log: filepath.Join(env.RawDir, "groups-"+name+".log"), done: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(harness.EnvironWithoutPulse(), vars...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() { _ = p.cmd.Wait(); logf.Close(); close(p.done) }()
	return p, nil
}

// waitReady polls url every 200 ms until it answers 200, for at most limit.
func waitReady(ctx context.Context, c *http.Client, p *proc, url string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
		if err != nil {
			cancel()
			return err
		}
		resp, err := c.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		cancel()
		switch {
		case err == nil && resp.StatusCode == http.StatusOK:
			return nil
		case p.exited():
			return fmt.Errorf("%s exited at start: see %s", p.name, p.log)
		case time.Now().After(deadline):
			return fmt.Errorf("%s not ready at %s after %v: see %s", p.name, url, limit, p.log)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// services are the phase's aggregator and query, on its own topics and Redis prefix.
type services struct {
	aggregator, query *proc
	// key is an API key with the read and write scopes, which only this query accepts.
	key string
}

func (s *services) stop() {
	for _, p := range []*proc{s.query, s.aggregator} {
		if p != nil {
			p.stop()
		}
	}
}

// binaries are the phase's builds of the aggregator and query.
type binaries struct{ aggregator, query string }

// buildServices builds the aggregator and query of the checkout.
func buildServices(ctx context.Context, env *harness.Env) (binaries, error) {
	var b binaries
	var err error
	if b.aggregator, err = build(ctx, env, "./services/aggregator", "bench-groups-aggregator"); err != nil {
		return b, err
	}
	b.query, err = build(ctx, env, "./services/query", "bench-groups-query")
	return b, err
}

// startServices starts an aggregator and a query of the phase's own, and returns
// once both answer /readyz: the aggregator in a consumer group of its own on topics,
// query accepting one API key, with no rate limit on it (the phase measures latency,
// not the limits).
func startServices(ctx context.Context, env *harness.Env, bins binaries, t topics, limit time.Duration) (*services, error) {
	cfg := env.Cfg
	common := []string{
		"PULSE_KAFKA_BROKERS=127.0.0.1:" + strconv.Itoa(cfg.Ports.Kafka),
		"PULSE_REDIS_ADDR=127.0.0.1:" + strconv.Itoa(cfg.Ports.Redis),
		"PULSE_REDIS_PREFIX=" + prefix,
		"PULSE_TOPIC_EVENTS=" + t.events,
		"PULSE_TOPIC_CHANGES=" + t.changes,
	}
	s := &services{}
	ok := false
	defer func() {
		if !ok {
			s.stop()
		}
	}()
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	if s.aggregator, err = start(env, "aggregator", addr, bins.aggregator, nil, append(common,
		"PULSE_HTTP_ADDR="+addr,
		"PULSE_AGGREGATOR_GROUP="+t.group,
		"PULSE_KAFKA_CLIENT_ID=bench-groups",
		// The bulk load is all there is: nothing older to restore from history.
		"PULSE_AGGREGATOR_REBUILD_FROM_HISTORY=false",
		// No bulk-loaded user may go idle or offline during the phase: every count
		// would change under the reads.
		"PULSE_OFFLINE_AFTER=1h",
		"PULSE_IDLE_AFTER=1h",
		// Its live heap is read after a collection forced through /debug/pprof/heap?gc=1
		// (loopback only).
		"PULSE_PPROF=true",
	)); err != nil {
		return nil, err
	}
	if s.key, err = auth.NewKey(); err != nil {
		return nil, err
	}
	keys := filepath.Join(env.RawDir, "groups-keys.txt")
	if err := os.WriteFile(keys, []byte(auth.Line("bench-groups", auth.ScopeRead|auth.ScopeWrite, s.key)+"\n"), 0o600); err != nil {
		return nil, err
	}
	if addr, err = freeAddr(); err != nil {
		return nil, err
	}
	if s.query, err = start(env, "query", addr, bins.query, nil, append(common,
		"PULSE_HTTP_ADDR="+addr,
		"PULSE_CASSANDRA_PORT="+strconv.Itoa(cfg.Ports.Cassandra),
		"PULSE_API_KEYS_FILE="+keys,
		"PULSE_QUERY_KEY_RATE=0",
	)); err != nil {
		return nil, err
	}
	c := &http.Client{Transport: &http.Transport{Proxy: nil}}
	for _, p := range []*proc{s.aggregator, s.query} {
		if err := waitReady(ctx, c, p, "http://"+p.addr+"/readyz", limit); err != nil {
			return nil, err
		}
	}
	ok = true
	return s, nil
}
