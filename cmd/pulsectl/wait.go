package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pulse-presence/pulse/cmd/internal/trust"
	"github.com/pulse-presence/pulse/internal/platform/cassx"
	"github.com/pulse-presence/pulse/internal/platform/kafkax"
	"github.com/pulse-presence/pulse/internal/platform/redisx"
)

// target is one server being waited for.
type target struct {
	name  string
	probe func(ctx context.Context) error
	close func()
	pid   int

	mu      sync.Mutex
	readyIn time.Duration // zero until ready
	lastErr error
	exited  bool
}

func (t *target) state() (ready time.Duration, lastErr error, exited bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.readyIn, t.lastErr, t.exited
}

func runWait(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("wait", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 4*time.Minute, "give up after this long")
	redisAddr := fs.String("redis", "", "Redis address to PING")
	kafkaAddr := fs.String("kafka", "", "Kafka broker address for a metadata request")
	cassAddr := fs.String("cassandra", "", "Cassandra host:port for a CQL query")
	httpURLs := fs.String("http", "", "name=baseURL,... of services whose /readyz must answer 200")
	pids := fs.String("pids", "", "name=pid,...: fail at once when a server's process exits")
	logDir := fs.String("logs", "", "folder of <name>.log files; the failing server's tail is printed")
	caFile := trust.Flag(fs, os.Getenv)
	if err := fs.Parse(args); err != nil {
		return err
	}
	pidOf, err := parsePairs(*pids)
	if err != nil {
		return fmt.Errorf("-pids: %w", err)
	}
	targets, err := buildTargets(*redisAddr, *kafkaAddr, *cassAddr, *httpURLs, *caFile)
	if err != nil {
		return err
	}
	if len(targets) == 0 {
		return errors.New("nothing to wait for: give -redis, -kafka, -cassandra or -http")
	}
	for _, t := range targets {
		if p, ok := pidOf[t.name]; ok {
			if t.pid, err = strconv.Atoi(p); err != nil {
				return fmt.Errorf("-pids: %s=%q is not a pid", t.name, p)
			}
		}
		defer t.close()
	}

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			poll(ctx, t, start)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	p := newProgress(stdout)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			p.line(targets, start, true)
			return failure(targets, *timeout, *logDir, stdout)
		case <-tick.C:
			p.line(targets, start, false)
		}
	}
}

// poll probes t every half second until it answers, its process exits, or ctx ends.
func poll(ctx context.Context, t *target, start time.Time) {
	for {
		if t.pid > 0 && syscall.Kill(t.pid, 0) != nil {
			t.mu.Lock()
			t.exited = true
			t.mu.Unlock()
			return
		}
		err := probeWithin(ctx, 3*time.Second, t.probe)
		t.mu.Lock()
		if err == nil {
			t.readyIn = max(time.Since(start), time.Millisecond)
			t.mu.Unlock()
			return
		}
		t.lastErr = err
		t.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// probeWithin runs probe under a deadline of d and returns at the deadline even when
// probe does not: a driver may block past its context (connecting to a server that
// accepts connections while it starts), and wait must end within -timeout. An
// abandoned probe finishes in the background; the command exits soon after.
func probeWithin(ctx context.Context, d time.Duration, probe func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- probe(ctx) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return fmt.Errorf("no answer within %v", d)
	}
}

// failure returns nil when every target is ready, else an error naming each server that
// is not, after printing the tail of its log.
func failure(targets []*target, timeout time.Duration, logDir string, out io.Writer) error {
	var failed []string
	for _, t := range targets {
		ready, lastErr, exited := t.state()
		if ready > 0 {
			continue
		}
		failed = append(failed, t.name)
		reason := fmt.Sprintf("not ready after %v", timeout)
		if exited {
			reason = fmt.Sprintf("process %d exited before it was ready", t.pid)
		}
		fmt.Fprintf(out, "\n%s: %s (last error: %v)\n", t.name, reason, lastErr)
		if logDir != "" {
			printTail(out, filepath.Join(logDir, t.name+".log"), 40)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("not ready: %s", strings.Join(failed, ", "))
	}
	return nil
}

func printTail(out io.Writer, path string, n int) {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(out, "  (no log at %s: %v)\n", path, err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	fmt.Fprintf(out, "--- last %d lines of %s ---\n", len(lines), path)
	for _, l := range lines {
		fmt.Fprintln(out, "  "+l)
	}
}

// progress prints one status line per second: rewritten in place on a terminal, and
// every fifth second as a new line in logs (CI), so neither floods nor goes silent.
type progress struct {
	out   io.Writer
	tty   bool
	ticks int
}

func newProgress(out io.Writer) *progress {
	tty := false
	if f, ok := out.(*os.File); ok {
		if st, err := f.Stat(); err == nil {
			tty = st.Mode()&os.ModeCharDevice != 0
		}
	}
	return &progress{out: out, tty: tty}
}

func (p *progress) line(targets []*target, start time.Time, final bool) {
	p.ticks++
	if !p.tty && !final && p.ticks%5 != 0 {
		return
	}
	parts := make([]string, 0, len(targets))
	for _, t := range targets {
		ready, _, exited := t.state()
		switch {
		case ready > 0:
			parts = append(parts, fmt.Sprintf("%s ready (%.1fs)", t.name, ready.Seconds()))
		case exited:
			parts = append(parts, t.name+" EXITED")
		default:
			parts = append(parts, t.name+" starting")
		}
	}
	text := fmt.Sprintf("    waiting %3ds: %s", int(time.Since(start).Seconds()), strings.Join(parts, ", "))
	switch {
	case p.tty && final:
		fmt.Fprintf(p.out, "\r\033[K%s\n", text)
	case p.tty:
		fmt.Fprintf(p.out, "\r\033[K%s", text)
	default:
		fmt.Fprintln(p.out, text)
	}
}

func buildTargets(redisAddr, kafkaAddr, cassAddr, httpURLs, caFile string) ([]*target, error) {
	var targets []*target
	quiet := slog.New(slog.DiscardHandler)
	if redisAddr != "" {
		rc := redisx.NewClient(redisx.Config{Addrs: []string{redisAddr}, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
		targets = append(targets, &target{
			name:  "redis",
			probe: func(ctx context.Context) error { return redisx.Ping(ctx, rc) },
			close: func() { rc.Close() },
		})
	}
	if kafkaAddr != "" {
		kc, err := kafkax.NewClient(kafkax.Config{
			Brokers: []string{kafkaAddr}, ClientID: "pulsectl",
			DialTimeout: time.Second, RequestTimeout: 2 * time.Second, RetryTimeout: 2 * time.Second,
		}, quiet, nil)
		if err != nil {
			return nil, err
		}
		targets = append(targets, &target{
			name:  "kafka",
			probe: func(ctx context.Context) error { return kafkax.Ping(ctx, kc) },
			close: kc.Close,
		})
	}
	if cassAddr != "" {
		host, port, err := splitHostPort(cassAddr)
		if err != nil {
			return nil, fmt.Errorf("-cassandra: %w", err)
		}
		targets = append(targets, &target{
			name: "cassandra",
			// A session per attempt: the driver refuses to create one while no node answers.
			probe: func(ctx context.Context) error {
				s, err := cassx.NewSession(cassx.Config{Hosts: []string{host}, Port: port, Consistency: "ONE",
					Timeout: 2 * time.Second, ConnectTimeout: 2 * time.Second})
				if err != nil {
					return err
				}
				defer s.Close()
				return cassx.Ping(ctx, s)
			},
			close: func() {},
		})
	}
	services, err := parsePairs(httpURLs)
	if err != nil {
		return nil, fmt.Errorf("-http: %w", err)
	}
	client, err := httpClient(caFile, 3*time.Second)
	if err != nil {
		return nil, err
	}
	for _, name := range sortedKeys(services) {
		url := strings.TrimRight(services[name], "/") + "/readyz"
		targets = append(targets, &target{
			name: name,
			probe: func(ctx context.Context) error {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				if err != nil {
					return err
				}
				res, err := client.Do(req)
				if err != nil {
					return err
				}
				body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					return fmt.Errorf("GET %s: %d %s", url, res.StatusCode, strings.TrimSpace(string(body)))
				}
				return nil
			},
			close: func() {},
		})
	}
	return targets, nil
}

// parsePairs reads "a=1,b=2" into a map; an empty string is an empty map.
func parsePairs(s string) (map[string]string, error) {
	m := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return m, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("%q: want name=value", kv)
		}
		m[k] = v
	}
	return m, nil
}
