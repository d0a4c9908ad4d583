package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
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
		out, err := exec.Command(filepath.Join("..", "deploy", "local", "stack.sh"), "up").CombinedOutput()
		if err != nil {
			t.Fatalf("starting the stack again: %v\n%s", err, out)
		}
	}
	t.Cleanup(restart)
	return restart
}
