// Package present is the present phase: many present sockets (GET /v1/watch?present=)
// held open on one query instance of the phase's own, each the presence of one user's
// device. It measures the memory each socket costs, the CPU each socket heartbeat
// costs (a ping, its pong and the heartbeat event acknowledged by Kafka), the
// heartbeats/s that reach presence.events, and the offline events/s when every socket
// closes at once.
package present

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/pulse-presence/pulse/cmd/bench/internal/harness"
	"github.com/pulse-presence/pulse/cmd/bench/internal/probe"
	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
	"github.com/pulse-presence/pulse/internal/api/auth"
)

// Phase holds Cfg.PresentSockets present sockets on a query instance started for it.
var Phase = harness.Phase{Name: "present", Before: "the present sockets", Title: "present sockets on one query instance",
	Run: func(ctx context.Context, env *harness.Env) (err error) {
		env.Res.Present, err = run(ctx, env)
		return err
	}}

// The query instance's metrics the phase reads.
const (
	eventsMetric  = "pulse_query_present_events_total"
	latencyMetric = "pulse_query_present_produce_duration_seconds"
	heapMetric    = "go_memstats_heap_inuse_bytes"
)

func run(ctx context.Context, env *harness.Env) (*report.PresentResult, error) {
	cfg := env.Cfg
	n := cfg.PresentSockets
	res := &report.PresentResult{Sockets: n, HeartbeatSeconds: cfg.PresentHeartbeat.Seconds(), WindowSeconds: cfg.PresentWindow.Seconds()}

	q, err := startQuery(ctx, env)
	if err != nil {
		return nil, err
	}
	defer q.stop()
	base := "http://" + q.addr

	m0, err := probe.Scrape(ctx, env.HTTP, base)
	if err != nil {
		return nil, err
	}
	rss0, heap0 := probe.RSS(q.pid()), m0.Sum(heapMetric)

	// Opening: 64 at a time, each with a user token of its own user.
	conns := make([]*websocket.Conn, n)
	var failed atomic.Int64
	var firstErr atomic.Value
	opened := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	for range 64 {
		wg.Go(func() {
			for i := range next {
				c, err := dial(ctx, q, i)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				conns[i] = c
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	res.OpenSeconds = time.Since(opened).Seconds()
	res.OpenFailed = failed.Load()
	if res.OpenFailed > 0 {
		closeAll(conns, websocket.StatusNormalClosure)
		return res, fmt.Errorf("%d of %d present sockets did not open; the first: %v", res.OpenFailed, n, firstErr.Load())
	}
	fmt.Fprintf(env.Out, "    %s sockets open in %.1f s\n", report.Num(float64(n)), res.OpenSeconds)

	// Memory once the opening's garbage is collected.
	time.Sleep(3 * time.Second)
	m1, err := probe.Scrape(ctx, env.HTTP, base)
	if err != nil {
		return res, err
	}
	res.RSSBytesPerSocket = float64(probe.RSS(q.pid())-rss0) / float64(n)
	res.HeapBytesPerSocket = (m1.Sum(heapMetric) - heap0) / float64(n)

	// The steady state: every socket pinged every PresentHeartbeat.
	cpu0, _ := probe.ProcessCPU(q.pid())
	start := time.Now()
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(cfg.PresentWindow):
	}
	cpu1, _ := probe.ProcessCPU(q.pid())
	elapsed := time.Since(start).Seconds()
	m2, err := probe.Scrape(ctx, env.HTTP, base)
	if err != nil {
		return res, err
	}
	beats := m2.Sum(eventsMetric, "kind", "heartbeat", "outcome", "acked") - m1.Sum(eventsMetric, "kind", "heartbeat", "outcome", "acked")
	res.HeartbeatsPerSecond = beats / elapsed
	res.ExpectedPerSecond = float64(n) / cfg.PresentHeartbeat.Seconds()
	res.QueryCores = (cpu1 - cpu0) / elapsed
	if beats > 0 {
		res.CPUMicrosPerHeartbeat = (cpu1 - cpu0) / beats * 1e6
	}
	lat := probe.BucketDelta(m1.Buckets(latencyMetric, "outcome", "acked"), m2.Buckets(latencyMetric, "outcome", "acked"))
	res.AckP50Ms, res.AckP99Ms = probe.Quantile(lat, 0.5)*1e3, probe.Quantile(lat, 0.99)*1e3
	res.Refused = int64(m2.Sum(eventsMetric, "outcome", "rate_limited") + m2.Sum(eventsMetric, "outcome", "failed"))
	fmt.Fprintf(env.Out, "    %s heartbeats/s (of %s expected), %.1f µs of query CPU each, %.2f cores; ack p50 %.1f ms, p99 %.1f ms\n",
		report.Num(res.HeartbeatsPerSecond), report.Num(res.ExpectedPerSecond), res.CPUMicrosPerHeartbeat, res.QueryCores, res.AckP50Ms, res.AckP99Ms)

	// Every client closes at once: each close is the device's offline event.
	offline0 := m2.Sum(eventsMetric, "kind", "status", "outcome", "acked")
	closed := time.Now()
	closeAll(conns, websocket.StatusNormalClosure)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		m, err := probe.Scrape(ctx, env.HTTP, base)
		if err != nil {
			return res, err
		}
		got := m.Sum(eventsMetric, "kind", "status", "outcome", "acked") - offline0
		if got >= float64(n) {
			res.OfflineSeconds = time.Since(closed).Seconds()
			res.OfflinePerSecond = got / res.OfflineSeconds
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("%.0f of the %d closed sockets' offline events were acknowledged within 2 minutes (%.0f refused)",
				got, n, m.Sum(eventsMetric, "outcome", "rate_limited")+m.Sum(eventsMetric, "outcome", "failed"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Fprintf(env.Out, "    every socket closed: %s offline events acknowledged in %.2f s, %s/s\n",
		report.Num(float64(n)), res.OfflineSeconds, report.Num(res.OfflinePerSecond))
	return res, nil
}

// closeAll closes every open socket with code, 64 at a time.
func closeAll(conns []*websocket.Conn, code websocket.StatusCode) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, c := range conns {
		if c == nil {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_ = c.Close(code, "bench done")
		})
	}
	wg.Wait()
}

// instance is the phase's query process.
type instance struct {
	cmd    *exec.Cmd
	addr   string
	secret string
	run    string
	done   chan struct{}
}

func (q *instance) pid() int { return q.cmd.Process.Pid }

func (q *instance) stop() {
	_ = q.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-q.done:
	case <-time.After(30 * time.Second):
		_ = q.cmd.Process.Kill()
		<-q.done
	}
}

// dial opens socket i, the present device "bench" of user bench-present-<run>-<i>, and
// keeps reading it.
func dial(ctx context.Context, q *instance, i int) (*websocket.Conn, error) {
	tok, err := auth.MintUserToken(q.secret, auth.UserToken{User: fmt.Sprintf("bench-present-%s-%d", q.run, i), TTL: time.Hour, Now: time.Now()})
	if err != nil {
		return nil, err
	}
	// The dial's context must outlive the socket: net/http closes the connection of a
	// 101 answer when its request's context ends. The handshake is bounded by the
	// transport's timeouts instead.
	c, _, err := websocket.Dial(ctx, "ws://"+q.addr+"/v1/watch?present=bench", &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: &http.Transport{Proxy: nil,
			DialContext:           (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
			ResponseHeaderTimeout: 30 * time.Second}},
		HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
	if err != nil {
		return nil, err
	}
	// Read and drop the feed's messages (a snapshot comes first): only a socket being
	// read answers pings. (CloseRead would close it on that first message.)
	go func() {
		for {
			if _, _, err := c.Read(ctx); err != nil {
				return
			}
		}
	}()
	return c, nil
}

// startQuery builds and starts a query instance on the stack's Kafka and Redis with
// user tokens signed by a secret of the phase's own, room for every socket, and
// PULSE_PRESENT_HEARTBEAT from the flags; it returns once the feed takes connections.
func startQuery(ctx context.Context, env *harness.Env) (*instance, error) {
	cfg := env.Cfg
	bin := filepath.Join(cfg.Home, "bin", "bench-query")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./services/query")
	build.Dir = cfg.Root
	if b, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building ./services/query: %w\n%s", err, b)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	_ = l.Close()
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	q := &instance{addr: addr, secret: hex.EncodeToString(b), run: hex.EncodeToString(b[:4]), done: make(chan struct{})}
	logf, err := os.Create(filepath.Join(env.RawDir, "present-query.log"))
	if err != nil {
		return nil, err
	}
	q.cmd = exec.Command(bin)
	q.cmd.Env = append(harness.EnvironWithoutPulse(),
		"PULSE_HTTP_ADDR="+addr,
		"PULSE_KAFKA_BROKERS=127.0.0.1:"+strconv.Itoa(cfg.Ports.Kafka),
		"PULSE_REDIS_ADDR=127.0.0.1:"+strconv.Itoa(cfg.Ports.Redis),
		"PULSE_CASSANDRA_PORT="+strconv.Itoa(cfg.Ports.Cassandra),
		"PULSE_REDIS_PREFIX="+cfg.Prefix,
		"PULSE_TOPIC_EVENTS="+cfg.Events,
		"PULSE_TOPIC_CHANGES="+cfg.Changes,
		"PULSE_JWT_HS256_SECRET="+q.secret,
		"PULSE_PRESENT_HEARTBEAT="+cfg.PresentHeartbeat.String(),
		"PULSE_FEED_MAX_CONNECTIONS="+strconv.Itoa(cfg.PresentSockets+16),
		"PULSE_FEED_MAX_CONNECTIONS_PER_ADDRESS="+strconv.Itoa(cfg.PresentSockets+16),
	)
	q.cmd.Stdout, q.cmd.Stderr = logf, logf
	if err := q.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting query: %w", err)
	}
	go func() { _ = q.cmd.Wait(); logf.Close(); close(q.done) }()
	// Ready once a present socket opens (the feed answers 503 until it tails the log).
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := dial(ctx, q, -1)
		if err == nil {
			_ = c.Close(websocket.StatusNormalClosure, "ready")
			return q, nil
		}
		select {
		case <-q.done:
			return nil, fmt.Errorf("query exited at start: see %s", filepath.Join(env.RawDir, "present-query.log"))
		default:
		}
		if time.Now().After(deadline) {
			q.stop()
			return nil, fmt.Errorf("query's feed took no present socket within 60 s: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
