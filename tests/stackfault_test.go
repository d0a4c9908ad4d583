package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stackHome is where the local stack keeps its pid files: PULSE_HOME, as stack.sh
// reads it, else the repository's .pulse.
func stackHome() string {
	if h := os.Getenv("PULSE_HOME"); h != "" {
		return h
	}
	return filepath.Join("..", ".pulse")
}

// stackPID is the pid of one of the local stack's servers (kafka, cassandra, redis).
func stackPID(t *testing.T, server string) int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(stackHome(), "run", server+".pid"))
	if err != nil {
		t.Fatalf("reading %s's pid (the test stops the local stack's %s): %v", server, server, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatalf("%s pid %q: %v", server, raw, err)
	}
	return pid
}

// stackPIDs are the pids of every node of one of the local stack's servers: the one
// process of the single stack (run/kafka.pid), or each node of the cluster topology
// (run/kafka-1.pid, run/kafka-2.pid, …). A test that stops them all takes the whole
// server down on either topology.
func stackPIDs(t *testing.T, server string) []int {
	t.Helper()
	if _, err := os.Stat(filepath.Join(stackHome(), "run", server+".pid")); err == nil {
		return []int{stackPID(t, server)}
	}
	var pids []int
	for n := 1; ; n++ {
		if _, err := os.Stat(filepath.Join(stackHome(), "run", fmt.Sprintf("%s-%d.pid", server, n))); err != nil {
			break
		}
		pids = append(pids, stackPID(t, fmt.Sprintf("%s-%d", server, n)))
	}
	if len(pids) == 0 {
		t.Fatalf("no pid file of %s in %s (the test stops the local stack's %s)", server, filepath.Join(stackHome(), "run"), server)
	}
	return pids
}

// signalAll sends sig to every pid, failing the test on the first that cannot take it.
func signalAll(t *testing.T, what string, pids []int, sig syscall.Signal) {
	t.Helper()
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatalf("%s (pid %d): %v", what, pid, err)
		}
	}
}

// stackRestarter starts the stack's stopped servers again, once: at the returned
// function's first call, or when the test ends, whichever comes first, so the stack
// is whole for the tests after this one whatever happens.
func stackRestarter(t *testing.T) (restart func()) {
	t.Helper()
	done := false
	restart = func() {
		if done {
			return
		}
		done = true
		// stack.sh up waits for the servers itself (PULSE_WAIT_TIMEOUT, 240 s); the
		// deadline here ends a restart that hangs past that instead of the whole run,
		// and WaitDelay stops waiting for the output of a child that keeps it open.
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join("..", "deploy", "local", "stack.sh"), "up")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 10 * time.Second
		started := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("starting the stack again (%v): %v\n%s", time.Since(started).Round(time.Second), err, out)
		}
	}
	t.Cleanup(restart)
	return restart
}
