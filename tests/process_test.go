package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// service is a Pulse binary running as a child process of the test.
type service struct {
	name string
	url  string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error // the process's exit error, once done is closed
}

// syncBuffer collects a child's output; the test reads it while the child writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startService runs the named binary with env on a free loopback port and waits until
// it answers /healthz. The cleanup stops it with SIGTERM and fails the test unless it
// exits cleanly (status 0) within the shutdown deadline.
func startService(t *testing.T, name string, env map[string]string) *service {
	t.Helper()
	port := freePort(t)
	s := &service{name: name, url: fmt.Sprintf("http://127.0.0.1:%d", port), out: &syncBuffer{}, done: make(chan struct{})}
	serviceAt.Store(fmt.Sprintf("127.0.0.1:%d", port), name)
	s.cmd = exec.Command(binary(name))
	s.cmd.Env = append(os.Environ(), "PULSE_HTTP_ADDR=127.0.0.1:"+strconv.Itoa(port))
	for k, v := range env {
		s.cmd.Env = append(s.cmd.Env, k+"="+v)
	}
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { s.err = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() { s.stop(t) })

	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-s.done:
			t.Fatalf("%s exited before it answered (%v); output:\n%s", name, s.err, s.out)
		default:
		}
		if code, _ := get(t, s.url+"/healthz"); code == http.StatusOK {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer /healthz in 30s; output:\n%s", name, s.out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *service) stop(t *testing.T) {
	t.Helper()
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		if s.err != nil {
			t.Errorf("%s did not exit cleanly on SIGTERM: %v; output:\n%s", s.name, s.err, s.out)
		}
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		t.Errorf("%s did not stop within 20s of SIGTERM; output:\n%s", s.name, s.out)
	}
}

// get fetches url with a deadline and returns the status code and body; code 0 means
// the request itself failed.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := keyedClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// eventually polls cond every 100ms until it returns "" or timeout passes, then fails
// with cond's last complaint.
func eventually(t *testing.T, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freshCount GETs a /v1/online/count URL until the answer was read from Redis after
// this call began, so it reflects every state the caller saw before calling: query
// answers counts from a read it refreshes every PULSE_QUERY_COUNTS_INTERVAL.
func freshCount(t *testing.T, target, token string) (int, []byte) {
	t.Helper()
	since := time.Now()
	deadline := since.Add(5 * time.Second)
	for {
		code, body := onlineDo(t, http.MethodGet, target, token, nil)
		var c struct {
			AsOf time.Time `json:"asOf"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &c) != nil {
			return code, body
		}
		if !c.AsOf.Before(since) {
			return code, body
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s still answers counts read at %v, 5s after %v", target, c.AsOf, since)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// onlineDo sends a request, with token as bearer when it is set (else the reader key).
func onlineDo(t *testing.T, method, target, token string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, target, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := keyedClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	return res.StatusCode, out
}

func buildBinaries(dir string) error {
	const mod = "github.com/pulse-presence/pulse"
	// faulttest builds in the aggregator's crash point (services/aggregator/crash.go),
	// which production binaries do not have.
	cmd := exec.Command("go", "build", "-tags", "faulttest", "-o", dir+string(filepath.Separator),
		mod+"/services/ingest", mod+"/services/aggregator", mod+"/services/history",
		mod+"/services/query", mod+"/cmd/pulsectl")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

// binary is the path of a built command: ingest, aggregator, history, query, pulsectl.
func binary(name string) string {
	return filepath.Join(binDir, name)
}

// binDir holds the service binaries TestMain builds once for the whole package.
var binDir string

// runMain builds the binaries and the keys file into a temporary directory, runs
// the tests and returns their exit code, for TestMain.
func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "pulse-it-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	binDir = dir
	defer os.RemoveAll(dir)
	if err := buildBinaries(dir); err != nil {
		fmt.Fprintln(os.Stderr, "building binaries:", err)
		return 1
	}
	if err := writeKeysFile(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
