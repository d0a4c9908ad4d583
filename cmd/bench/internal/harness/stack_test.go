package harness

import (
	"context"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeProcess starts a process whose command line carries home, as the stack's
// processes do, and records its pid where stack.sh keeps name's.
func fakeProcess(t *testing.T, home, name string) *os.Process {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.Args[0] = filepath.Join(home, "bin", "pulse-"+name)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	if err := os.WriteFile(filepath.Join(home, "run", name+".pid"), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return cmd.Process
}

// TestStackPidsAndAlive reads pids through the real stack.sh against a stack folder
// of fake processes: one whose pid file names a process that is gone is not running.
func TestStackPidsAndAlive(t *testing.T) {
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	kafka := fakeProcess(t, home, "kafka")
	ingest := fakeProcess(t, home, "ingest")
	if err := os.WriteFile(filepath.Join(home, "run", "history.pid"), []byte("999999999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newStack(Config{Root: root, Home: home}, io.Discard)
	ctx := context.Background()
	pids, err := s.pids(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"kafka": kafka.Pid, "ingest": ingest.Pid}; !maps.Equal(pids, want) {
		t.Fatalf("pids = %v, want %v", pids, want)
	}
	if err := s.findServers(ctx); err == nil || !strings.Contains(err.Error(), "redis, cassandra not found") {
		t.Fatalf("findServers without redis and cassandra: %v", err)
	}

	s.procs["ingest"] = process{pid: ingest.Pid}
	s.procs["query"] = process{} // answers without a pid file: never judged dead
	if err := s.Alive(ctx); err != nil {
		t.Fatalf("alive with ingest running: %v", err)
	}
	ingest.Kill()
	ingest.Wait()
	if err := s.Alive(ctx); err == nil || !strings.HasPrefix(err.Error(), "ingest exited during the run") {
		t.Fatalf("alive after ingest exited: %v", err)
	}
}
