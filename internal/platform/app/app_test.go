package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/pulse-presence/pulse/internal/platform/config"
)

// testTable is a service's table in miniature: a secret and a checked number.
func testTable() []*config.Var {
	var (
		token   string
		workers int
	)
	return config.Group("x",
		config.String(&token, "PULSE_TEST_TOKEN", "", "a secret").Secret(),
		config.Int(&workers, "PULSE_TEST_WORKERS", 4, "workers", config.Positive),
	)
}

func TestHelpListsLoggingThenTheTable(t *testing.T) {
	var b strings.Builder
	if err := Help(&b, "x", testTable()); err != nil {
		t.Fatal(err)
	}
	help := b.String()
	var order []int
	for _, line := range []string{
		"Usage: pulse-x [-help]\n",
		"\nlogging:\n  PULSE_LOG_LEVEL (default info)\n      least severe level logged; want debug, info, warn or error\n",
		"  PULSE_LOG_FORMAT (default json)\n",
		"\nx:\n  PULSE_TEST_TOKEN (secret, no default)\n      a secret\n",
		"  PULSE_TEST_WORKERS (default 4)\n      workers; must be positive\n",
	} {
		i := strings.Index(help, line)
		if i < 0 {
			t.Fatalf("help lacks %q:\n%s", line, help)
		}
		order = append(order, i)
	}
	for i := 1; i < len(order); i++ {
		if order[i] < order[i-1] {
			t.Fatalf("help lists its parts out of order:\n%s", help)
		}
	}
}

func TestWantsHelp(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"-help"}, true},
		{[]string{"--help"}, true},
		{[]string{"-h"}, true},
		{[]string{"serve", "--h"}, true},
		{[]string{"help"}, false},
		{[]string{"-helpful"}, false},
	} {
		if got := wantsHelp(tt.args); got != tt.want {
			t.Errorf("wantsHelp(%q) = %v, want %v", tt.args, got, tt.want)
		}
	}
}

// mainEnv names the arguments a child process passes to Main; set, the test binary
// runs Main instead of the tests (TestMain), so no test of its own skips.
const mainEnv = "APP_TEST_MAIN_ARGS"

func TestMain(m *testing.M) {
	args, ok := os.LookupEnv(mainEnv)
	if !ok {
		os.Exit(m.Run())
	}
	os.Args = append([]string{"pulse-x"}, strings.Fields(args)...)
	table := testTable()
	Main("x", table, func(ctx context.Context, logger *slog.Logger, env *config.Env) error {
		fmt.Println("run called")
		env.Load(table...)
		return env.Err()
	})
}

// runMain runs Main in a child process with args and the environment env (no other
// PULSE_ variable), returning its exit code, stdout and stderr.
func runMain(t *testing.T, args string, env ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PULSE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, append(env, mainEnv+"="+args)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

// -help prints every variable and exits 0 without running the service, even when the
// environment holds bad values.
func TestMainHelpExitsWithoutRunning(t *testing.T) {
	for _, args := range []string{"-help", "--help"} {
		code, stdout, stderr := runMain(t, args, "PULSE_TEST_WORKERS=0")
		if code != 0 || strings.Contains(stdout, "run called") {
			t.Fatalf("%s: exit %d, stdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
		}
		for _, name := range []string{"PULSE_LOG_LEVEL", "PULSE_LOG_FORMAT", "PULSE_TEST_TOKEN", "PULSE_TEST_WORKERS"} {
			if !strings.Contains(stdout, "\n  "+name+" (") {
				t.Errorf("%s does not list %s:\n%s", args, name, stdout)
			}
		}
	}
}

// Bad logging variables stop Main before the service runs, with every bad variable of
// the table named too.
func TestMainNamesEveryBadVariableWhenLoggingIsBad(t *testing.T) {
	code, stdout, stderr := runMain(t, "", "PULSE_LOG_LEVEL=loud", "PULSE_TEST_WORKERS=0", "PULSE_TEST_TOKEN=hunter2")
	if code != 2 || strings.Contains(stdout, "run called") {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{`pulse-x: configuration: PULSE_LOG_LEVEL="loud": want debug, info, warn or error`, "PULSE_TEST_WORKERS=0: must be positive"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "hunter2") {
		t.Errorf("stderr shows the secret:\n%s", stderr)
	}
}

// With good logging variables the service runs, and its own bad variables end it with
// exit status 1 and every one of them named.
func TestMainRunsTheService(t *testing.T) {
	code, stdout, stderr := runMain(t, "", "PULSE_LOG_FORMAT=text", "PULSE_TEST_WORKERS=0")
	if code != 1 || !strings.Contains(stdout, "run called") || !strings.Contains(stderr, "PULSE_TEST_WORKERS=0: must be positive") {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if code, stdout, stderr := runMain(t, "", "PULSE_LOG_FORMAT=text"); code != 0 || !strings.Contains(stderr, "service stopped") {
		t.Fatalf("good settings: exit %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}
