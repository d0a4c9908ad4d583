package dashboard

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

func serve(t *testing.T, e *echo.Echo, method, target string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec
}

// The page's files are served before routing (so without credentials), / and
// /dashboard lead to the page, and the page names only files it embeds.
func TestPageIsServed(t *testing.T) {
	e := echo.New()
	guarded := 0
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { guarded++; return echo.ErrUnauthorized }
	})
	Mount(e, nil)
	for _, target := range []string{"/", "/dashboard"} {
		if rec := serve(t, e, http.MethodGet, target); rec.Code != http.StatusFound || rec.Header().Get("Location") != Prefix {
			t.Errorf("GET %s = %d Location %q, want 302 to %s", target, rec.Code, rec.Header().Get("Location"), Prefix)
		}
	}
	rec := serve(t, e, http.MethodGet, Prefix)
	page := rec.Body.String()
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") || !strings.Contains(page, "<title>Pulse dashboard</title>") {
		t.Fatalf("GET %s = %d %s:\n%.200s", Prefix, rec.Code, rec.Header().Get("Content-Type"), page)
	}
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"#]+)"`).FindAllStringSubmatch(page, -1)
	if len(refs) < 2 {
		t.Fatalf("the page names %d files", len(refs))
	}
	for _, m := range refs {
		if strings.Contains(m[1], "//") {
			t.Errorf("the page loads %s from elsewhere: it must work without the internet", m[1])
			continue
		}
		if rec := serve(t, e, http.MethodGet, Prefix+m[1]); rec.Code != http.StatusOK || rec.Body.Len() == 0 {
			t.Errorf("GET %s%s = %d", Prefix, m[1], rec.Code)
		}
	}
	if rec := serve(t, e, http.MethodGet, Prefix+"app.js"); !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/javascript") {
		t.Errorf("app.js is served as %q", rec.Header().Get("Content-Type"))
	}
	if rec := serve(t, e, http.MethodGet, Prefix+"nothing.js"); rec.Code != http.StatusNotFound {
		t.Errorf("GET a file the page lacks = %d, want 404", rec.Code)
	}
	if guarded != 0 {
		t.Errorf("the page's files went through the route middleware %d times", guarded)
	}
	// Other routes still go through it.
	if rec := serve(t, e, http.MethodGet, PipelinePath); rec.Code != http.StatusUnauthorized || guarded != 1 {
		t.Errorf("GET %s = %d after %d guard calls, want the guard's 401", PipelinePath, rec.Code, guarded)
	}
	if rec := serve(t, e, http.MethodPost, "/"); rec.Code == http.StatusFound {
		t.Errorf("POST / redirected")
	}
}

// No secret is written into the page's files: credentials come only from what the
// person at the browser pastes.
func TestPageHoldsNoSecret(t *testing.T) {
	for _, name := range []string{"index.html", "app.js", "app.css"} {
		b, err := files.ReadFile("static/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if m := regexp.MustCompile(`pulse_[A-Za-z0-9_-]{20,}|eyJ[A-Za-z0-9_-]{10,}\.`).Find(b); m != nil {
			t.Errorf("%s holds what looks like a credential: %s", name, m)
		}
	}
}

func TestPeersVariable(t *testing.T) {
	if _, ok := validPeers(DefaultPeers()); !ok {
		t.Fatalf("the defaults %v do not parse", DefaultPeers())
	}
	for _, bad := range [][]string{{"http://127.0.0.1:1/metrics"}, {"a=ftp://x/metrics"}, {"a=http://x/m", "a=http://y/m"}, {"=http://x/m"}} {
		if _, ok := validPeers(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The pipeline view reads every peer under one deadline, parses their metrics and
// says which did not answer; it reports a state being rebuilt.
func TestPipelineReadsPeers(t *testing.T) {
	peerReg := prometheus.NewRegistry()
	lag := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pulse_consume_lag_records", Help: "h"}, []string{"topic"})
	lag.WithLabelValues("presence.events").Set(42)
	dlq := prometheus.NewCounter(prometheus.CounterOpts{Name: "pulse_aggregator_dead_letters_total", Help: "h"})
	dlq.Add(3)
	rebuilds := prometheus.NewCounter(prometheus.CounterOpts{Name: "pulse_aggregator_rebuilds_total", Help: "h"})
	flush := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pulse_aggregator_flush_seconds", Help: "h", Buckets: []float64{.01, .1}})
	flush.Observe(.005)
	flush.Observe(.05)
	dep := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pulse_dependency_up", Help: "h"}, []string{"dependency"})
	dep.WithLabelValues("redis").Set(1)
	dep.WithLabelValues("kafka").Set(0)
	peerReg.MustRegister(lag, dlq, rebuilds, flush, dep)
	good := httptest.NewServer(promhttp.HandlerFor(peerReg, promhttp.HandlerOpts{}))
	defer good.Close()
	stuck := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stuck:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(stuck)
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = io.WriteString(w, "pulse_x{ 1\n")
	}))
	defer broken.Close()

	self := prometheus.NewRegistry()
	ready := prometheus.NewGauge(prometheus.GaugeOpts{Name: "pulse_feed_ready", Help: "h"})
	ready.Set(1)
	self.MustRegister(ready)
	p, err := NewPipeline(Config{Timeout: 300 * time.Millisecond, Peers: []string{
		"aggregator=" + good.URL + "/metrics", "history=" + slow.URL + "/metrics", "ingest=" + broken.URL + "/metrics",
	}}, self, func(context.Context) error { return statestore.ErrRebuilding }, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	h := p.Read(context.Background())
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Read took %v with a 300ms deadline", took)
	}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		State    StateHealth
		Services []struct {
			Name, Error  string
			Up           bool
			Lag          map[string]float64
			DeadLetters  *float64
			Rebuilds     *float64
			Dependencies map[string]bool
			Freshness    []struct {
				Metric     string
				Count      uint64
				SumSeconds float64
				Buckets    [][2]float64
			}
		}
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !got.State.Rebuilding || got.State.OK {
		t.Errorf("state = %+v, want rebuilding", got.State)
	}
	if len(got.Services) != 4 {
		t.Fatalf("%d services in %s", len(got.Services), b)
	}
	q, agg, hist, ing := got.Services[0], got.Services[1], got.Services[2], got.Services[3]
	if q.Name != "query" || !q.Up || !q.Dependencies["feed"] {
		t.Errorf("query = %+v", q)
	}
	if agg.Name != "aggregator" || !agg.Up || agg.Lag["presence.events"] != 42 || agg.DeadLetters == nil || *agg.DeadLetters != 3 ||
		agg.Rebuilds == nil || *agg.Rebuilds != 0 || !agg.Dependencies["redis"] || agg.Dependencies["kafka"] {
		t.Errorf("aggregator = %s", b)
	}
	if len(agg.Freshness) != 1 || agg.Freshness[0].Count != 2 || agg.Freshness[0].Buckets[0] != [2]float64{.01, 1} {
		t.Errorf("aggregator freshness = %+v", agg.Freshness)
	}
	if hist.Up || !strings.Contains(hist.Error, "no answer within 300ms") {
		t.Errorf("a peer past the deadline = %+v", hist)
	}
	if ing.Up || !strings.Contains(ing.Error, "parsing") {
		t.Errorf("a peer answering nonsense = %+v", ing)
	}
}
