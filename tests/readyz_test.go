package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/tests/harness"
	"github.com/redis/go-redis/v9"
)

// redisCalls is how many times the Redis at addr ran cmd since its stats were reset.
func redisCalls(t *testing.T, rdb *redis.Client, cmd string) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`cmdstat_` + cmd + `:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// /readyz answers from a probe at most a second old, however many ask, and a failed
// check says "<check> unavailable" to the network and the reason only in the log.
func TestReadyzIsCachedAndSaysNoBackendDetail(t *testing.T) {
	port := harness.FreePort(t)
	addr, stopRedis := startRedis(t, port)
	env := harness.NewTopics(t, 2).Env
	env["PULSE_REDIS_ADDR"] = addr
	env["PULSE_READY_CHECK_TIMEOUT"] = "1s"
	query := harness.StartService(t, "query", env)
	harness.Eventually(t, 15*time.Second, func() string {
		if code, _ := readyz(t, query); code != http.StatusOK {
			return "query /readyz = " + strconv.Itoa(code)
		}
		return ""
	})

	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if code, _ := harness.Get(t, query.URL+"/readyz"); code != http.StatusOK {
					t.Errorf("/readyz = %d under load", code)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	pings := redisCalls(t, rdb, "ping")
	t.Logf("800 /readyz in %v made %d PINGs", elapsed, pings)
	if limit := int(elapsed.Seconds()) + 2; pings > limit {
		t.Errorf("800 /readyz in %v made %d Redis PINGs, want at most %d (one probe a second)", elapsed, pings, limit)
	}

	stopRedis()
	harness.Eventually(t, 15*time.Second, func() string {
		if code, _ := readyz(t, query); code != http.StatusServiceUnavailable {
			return "query /readyz = " + strconv.Itoa(code) + " with Redis down, want 503"
		}
		return ""
	})
	code, body := harness.Get(t, query.URL+"/readyz")
	var rep readyReport
	if err := json.Unmarshal([]byte(body), &rep); err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	for _, c := range rep.Checks {
		if c.Name == "redis" && (c.OK || c.Error != "redis unavailable") {
			t.Errorf("redis check = %+v, want failed with exactly \"redis unavailable\"", c)
		}
	}
	for _, leak := range []string{strconv.Itoa(port), "dial", "refused", "127.0.0.1"} {
		if strings.Contains(body, leak) {
			t.Errorf("/readyz body tells the network %q: %s", leak, body)
		}
	}
	harness.Eventually(t, 5*time.Second, func() string {
		if !strings.Contains(query.Out.String(), "readiness check failed") {
			return "the log has no \"readiness check failed\" line with the reason"
		}
		return ""
	})
}
