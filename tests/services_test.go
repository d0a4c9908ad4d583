package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/stores/statestore"
	"github.com/pulse-presence/pulse/tests/harness"
)

type readyReport struct {
	Ready  bool `json:"ready"`
	Checks []struct {
		Name  string `json:"name"`
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	} `json:"checks"`
}

func readyz(t *testing.T, s *harness.Service) (int, readyReport) {
	t.Helper()
	code, body := harness.Get(t, s.URL+"/readyz")
	var rep readyReport
	if code != 0 {
		if err := json.Unmarshal([]byte(body), &rep); err != nil {
			t.Fatalf("%s /readyz body %q: %v", s.Name, body, err)
		}
	}
	return code, rep
}

func checkNames(rep readyReport) []string {
	var names []string
	for _, c := range rep.Checks {
		names = append(names, c.Name)
	}
	return names
}

// Every service starts against the real stack, checks each of its dependencies on
// /readyz, serves /metrics, and exits 0 on SIGTERM (the cleanup asserts that).
func TestServicesAreReadyAgainstTheStack(t *testing.T) {
	deps := map[string][]string{
		"ingest":     {"kafka"},
		"aggregator": {"kafka", "redis", "state"},
		"history":    {"kafka", "cassandra"},
		"query":      {"redis", "state"},
		"notifier":   {"kafka"},
	}
	// Topics, groups and Redis prefix of their own: a service under test must not join
	// the groups of a pipeline running on the same stack, nor write its state.
	env := harness.NewTopics(t, 2).Env
	for name, want := range deps {
		t.Run(name, func(t *testing.T) {
			s := harness.StartService(t, name, env)
			var rep readyReport
			harness.Eventually(t, 20*time.Second, func() string {
				var code int
				code, rep = readyz(t, s)
				if code != http.StatusOK {
					return name + " /readyz = " + strconv.Itoa(code)
				}
				return ""
			})
			if !rep.Ready || !reflect.DeepEqual(checkNames(rep), want) {
				t.Fatalf("%s /readyz = %+v, want ready with checks %v", name, rep, want)
			}
			if name == "aggregator" {
				// The shards it registered are whole once it took its partitions, which
				// query's state check reads after it stopped.
				store := statestore.New(stateRDB(t, harness.RedisAddr()), env["PULSE_REDIS_PREFIX"])
				harness.Eventually(t, 30*time.Second, func() string {
					if err := store.CheckShards(context.Background(), 2); err != nil {
						return err.Error()
					}
					return ""
				})
			}
			code, metrics := harness.Get(t, s.URL+"/metrics")
			if code != http.StatusOK {
				t.Fatalf("%s /metrics = %d", name, code)
			}
			for _, dep := range want {
				line := `pulse_dependency_up{dependency="` + dep + `"} 1`
				if !strings.Contains(metrics, line) {
					t.Errorf("%s /metrics lacks %q", name, line)
				}
			}
			if code, body := harness.Get(t, s.URL+"/healthz"); code != http.StatusOK || strings.TrimSpace(body) != `{"status":"ok"}` {
				t.Errorf("%s /healthz = %d %s", name, code, body)
			}
		})
	}
}

// startRedis runs a private redis-server on a free port, so stopping it cannot disturb
// the shared stack. It returns the address and a function that stops it.
func startRedis(t *testing.T, port int) (addr string, stop func()) {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found (make up installs it): %v", err)
	}
	dir := t.TempDir()
	cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop = func() {
		select {
		case <-done:
			return
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(stop)
	return "127.0.0.1:" + strconv.Itoa(port), stop
}

// /readyz turns 503 naming redis while Redis is down, and 200 again once it is back.
func TestReadyzFailsWhileRedisIsDown(t *testing.T) {
	port := harness.FreePort(t)
	addr, stopRedis := startRedis(t, port)
	env := harness.NewTopics(t, 2).Env
	env["PULSE_REDIS_ADDR"] = addr
	env["PULSE_READY_CHECK_TIMEOUT"] = "1s"
	svcs := []*harness.Service{harness.StartService(t, "query", env), harness.StartService(t, "aggregator", env)}

	waitReady := func(want int) {
		for _, s := range svcs {
			harness.Eventually(t, 15*time.Second, func() string {
				if code, _ := readyz(t, s); code != want {
					return s.Name + " /readyz = " + strconv.Itoa(code) + ", want " + strconv.Itoa(want)
				}
				return ""
			})
		}
	}
	waitReady(http.StatusOK)

	stopRedis()
	waitReady(http.StatusServiceUnavailable)
	for _, s := range svcs {
		_, rep := readyz(t, s)
		for _, c := range rep.Checks {
			if c.Name == "redis" && (c.OK || c.Error == "") {
				t.Errorf("%s redis check = %+v, want failed with the reason", s.Name, c)
			}
			if c.Name == "kafka" && !c.OK {
				t.Errorf("%s kafka check failed while only Redis is down: %s", s.Name, c.Error)
			}
		}
	}
	// Back on the same port: the services reconnect without a restart.
	startRedis(t, port)
	waitReady(http.StatusOK)
}

// A bad setting stops a service at start with the variable named, exit status 1.
func TestServiceRefusesBadConfig(t *testing.T) {
	cmd := exec.Command(harness.Binary("ingest"))
	cmd.Env = append(os.Environ(), "PULSE_INGEST_ACK_TIMEOUT=-1s", "PULSE_KAFKA_BROKERS=", "PULSE_LOG_FORMAT=text")
	out, err := cmd.CombinedOutput()
	exit, ok := err.(*exec.ExitError)
	if !ok || exit.ExitCode() != 1 {
		t.Fatalf("ingest with bad config: err=%v, want exit status 1; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "PULSE_INGEST_ACK_TIMEOUT=-1s: must be positive") {
		t.Errorf("output does not name the bad variable:\n%s", out)
	}
}

// With Redis unresponsive and a window waiting to be written, SIGTERM still stops the
// aggregator within its revoke timeout, leaving the window uncommitted; once Redis
// answers again the next aggregator applies it, so nothing acknowledged is lost.
func TestAggregatorStopsInTimeWhileRedisHangs(t *testing.T) {
	port := harness.FreePort(t)
	addr, _ := startRedis(t, port)
	p := harness.NewTopics(t, 2)
	p.Env["PULSE_REDIS_ADDR"] = addr
	p.Env["PULSE_AGGREGATOR_REVOKE_TIMEOUT"] = "3s"
	for _, name := range []string{"ingest", "aggregator", "query"} {
		p.Start(t, name)
	}
	before, during := "before-"+p.Run, "during-"+p.Run
	p.Send(t, before, "status", "online", "phone")
	p.WaitStatus(t, before, "online")

	// Every Redis command now waits 12s: the aggregator's window write times out and
	// is retried while the next event's window waits.
	rdb := stateRDB(t, addr)
	if err := rdb.Do(t.Context(), "CLIENT", "PAUSE", "12000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	p.Send(t, during, "status", "online", "phone")
	p.Send(t, before, "status", "offline", "phone")
	time.Sleep(time.Second)
	start := time.Now()
	p.Svc["aggregator"].Stop(t)
	// The revoke timeout (3s) plus leaving the group; far below the 12s pause.
	if d := time.Since(start); d > 7*time.Second {
		t.Errorf("the aggregator took %v to stop while Redis hung, want about the 3s revoke timeout", d)
	}
	time.Sleep(time.Until(paused.Add(12 * time.Second)))
	p.Start(t, "aggregator")
	p.WaitStatus(t, during, "online")
	p.WaitStatus(t, before, "offline")
}
