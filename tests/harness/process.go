package harness

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

// Service is a Pulse binary running as a child process of the test.
type Service struct {
	Name string
	URL  string
	Cmd  *exec.Cmd
	Out  *SyncBuffer
	Done chan struct{}
	Err  error // the process's exit error, once done is closed
}

// SyncBuffer collects a child's output; the test reads it while the child writes.
type SyncBuffer struct {
	Mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	return b.buf.String()
}

// StartService runs the named binary with env on a free loopback port and waits until
// it answers /healthz. The cleanup stops it with SIGTERM and fails the test unless it
// exits cleanly (status 0) within the shutdown deadline.
func StartService(t *testing.T, name string, env map[string]string) *Service {
	t.Helper()
	port := FreePort(t)
	s := &Service{Name: name, URL: fmt.Sprintf("http://127.0.0.1:%d", port), Out: &SyncBuffer{}, Done: make(chan struct{})}
	ServiceAt.Store(fmt.Sprintf("127.0.0.1:%d", port), name)
	s.Cmd = exec.Command(Binary(name))
	s.Cmd.Env = append(os.Environ(), "PULSE_HTTP_ADDR=127.0.0.1:"+strconv.Itoa(port))
	for k, v := range env {
		s.Cmd.Env = append(s.Cmd.Env, k+"="+v)
	}
	s.Cmd.Stdout, s.Cmd.Stderr = s.Out, s.Out
	if err := s.Cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { s.Err = s.Cmd.Wait(); close(s.Done) }()
	t.Cleanup(func() { s.Stop(t) })

	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-s.Done:
			t.Fatalf("%s exited before it answered (%v); output:\n%s", name, s.Err, s.Out)
		default:
		}
		if code, _ := Get(t, s.URL+"/healthz"); code == http.StatusOK {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer /healthz in 30s; output:\n%s", name, s.Out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *Service) Stop(t *testing.T) {
	t.Helper()
	select {
	case <-s.Done:
		return
	default:
	}
	_ = s.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.Done:
		if s.Err != nil {
			t.Errorf("%s did not exit cleanly on SIGTERM: %v; output:\n%s", s.Name, s.Err, s.Out)
		}
	case <-time.After(20 * time.Second):
		_ = s.Cmd.Process.Kill()
		<-s.Done
		t.Errorf("%s did not stop within 20s of SIGTERM; output:\n%s", s.Name, s.Out)
	}
}

// Get fetches url with a deadline and returns the status code and body; code 0 means
// the request itself failed.
func Get(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := KeyedClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// Eventually polls cond every 100ms until it returns "" or timeout passes, then fails
// with cond's last complaint.
func Eventually(t *testing.T, timeout time.Duration, cond func() string) {
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

// FreshCount GETs a /v1/online/count URL until the answer was read from Redis after
// this call began, so it reflects every state the caller saw before calling: query
// answers counts from a read it refreshes every PULSE_QUERY_COUNTS_INTERVAL.
func FreshCount(t *testing.T, target, token string) (int, []byte) {
	t.Helper()
	since := time.Now()
	deadline := since.Add(5 * time.Second)
	for {
		code, body := OnlineDo(t, http.MethodGet, target, token, nil)
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

// OnlineDo sends a request, with token as bearer when it is set (else the reader key).
func OnlineDo(t *testing.T, method, target, token string, body any) (int, []byte) {
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
	res, err := KeyedClient.Do(req)
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
		mod+"/services/query", mod+"/services/notifier", mod+"/cmd/pulsectl")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

// Binary is the path of a built command: ingest, aggregator, history, query, notifier,
// pulsectl.
func Binary(name string) string {
	return filepath.Join(binDir, name)
}

// binDir holds the service binaries TestMain builds once for the whole package.
var binDir string

// RunMain builds the binaries and the keys file into a temporary directory, runs
// the tests and returns their exit code, for TestMain.
func RunMain(m *testing.M) int {
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
