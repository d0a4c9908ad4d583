package tests

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/pulse-presence/pulse/tests/harness"
)

// What one client may cost a server (docs/design.md, Security): these tests drive the
// real services as an attacker would and check that the cost stays bounded.

// metricSeries counts the samples /metrics of s exposes (each non-comment line is one
// series).
func metricSeries(t *testing.T, s *harness.Service) (int, string) {
	t.Helper()
	code, body := harness.Get(t, s.URL+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("%s /metrics = %d", s.Name, code)
	}
	n := 0
	for _, l := range strings.Split(body, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			n++
		}
	}
	return n, body
}

// rssKB is the resident memory of s's process, from /proc/<pid>/status.
func rssKB(t *testing.T, s *harness.Service) int {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.Cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^VmRSS:\s+(\d+) kB`).FindStringSubmatch(string(raw))
	if m == nil {
		t.Fatalf("no VmRSS in /proc status of %s", s.Name)
	}
	kb, _ := strconv.Atoi(m[1])
	return kb
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// inventedRequests sends n requests with made-up methods to made-up and real paths of
// s, without credentials, from 8 connections.
func inventedRequests(t *testing.T, s *harness.Service, n int) {
	t.Helper()
	paths := []string{"/v1/events", "/status", "/v1/online/count", "/metrics", "/readyz"}
	var wg sync.WaitGroup
	var failed sync.Once
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				path := "/x/" + randomHex(8)
				if i%2 == 0 {
					path = paths[i%len(paths)]
				}
				req, err := http.NewRequest("PROBE"+strconv.Itoa(i), s.URL+path, nil)
				if err != nil {
					failed.Do(func() { t.Errorf("request: %v", err) })
					continue
				}
				res, err := harness.BareClient.Do(req)
				if err != nil {
					failed.Do(func() { t.Errorf("%s %s: %v", req.Method, path, err) })
					continue
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}

// 20,000 requests with invented methods and random paths, without credentials, add
// no series to /metrics and leave ingest's and query's memory where it was: the method
// label is one of a fixed set and the route label a template (docs/design.md, Security).
func TestInventedMethodsAddNoMetricSeries(t *testing.T) {
	p := harness.NewTopics(t, 2)
	p.Start(t, "ingest")
	p.Start(t, "query")
	for _, name := range []string{"ingest", "query"} {
		s := p.Svc[name]
		// A first round makes the series such requests may legitimately create
		// (method "other", codes 404 and 405, refusals) and brings the heap to its
		// working size; a first scrape makes the series of /metrics itself.
		inventedRequests(t, s, 3000)
		metricSeries(t, s)
		series, _ := metricSeries(t, s)
		rss := rssKB(t, s)
		inventedRequests(t, s, 20000)
		after, body := metricSeries(t, s)
		rssAfter := rssKB(t, s)
		t.Logf("%s: %d series before, %d after; VmRSS %d kB before, %d kB after", name, series, after, rss, rssAfter)
		if after != series {
			t.Errorf("%s: /metrics went from %d to %d series after 20,000 invented methods; a sample: %s",
				name, series, after, harness.FirstLines(grepLines(body, "PROBE"), 3))
		}
		if rssAfter-rss > 10*1024 {
			t.Errorf("%s: VmRSS grew by %d kB, want at most 10 MB", name, rssAfter-rss)
		}
	}
}

func grepLines(body, sub string) []string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}
