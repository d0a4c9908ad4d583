package dashboard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/platform/ports"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// PipelinePath is the operator's JSON view of the pipeline's health.
const PipelinePath = "/v1/dashboard/pipeline"

// Config is the dashboard's settings.
type Config struct {
	// Peers are the metrics endpoints of the other services, each "name=URL".
	Peers []string
	// Timeout bounds one scrape of every peer together.
	Timeout time.Duration
}

// DefaultPeers are the other services' /metrics on the local stack's ports.
func DefaultPeers() []string {
	return []string{
		"ingest=" + ports.LocalURL(ports.Ingest) + "/metrics",
		"aggregator=" + ports.LocalURL(ports.Aggregator) + "/metrics",
		"history=" + ports.LocalURL(ports.History) + "/metrics",
		"notifier=" + ports.LocalURL(ports.Notifier) + "/metrics",
	}
}

// Vars is the dashboard's part of the query service's configuration table.
func Vars(c *Config) []*config.Var {
	return config.Group("query",
		config.List(&c.Peers, "PULSE_QUERY_PEER_METRICS", DefaultPeers(),
			"the other services' metrics endpoints the dashboard's pipeline view scrapes (GET /v1/dashboard/pipeline), as name=URL, comma-separated",
			validPeers),
		config.Duration(&c.Timeout, "PULSE_QUERY_PEER_METRICS_TIMEOUT", 2*time.Second,
			"deadline of one scrape of every peer's metrics; a peer that does not answer in time is shown down", config.Positive),
	)
}

type peer struct{ name, url string }

// parsePeers reads "name=URL" entries.
func parsePeers(list []string) ([]peer, error) {
	var out []peer
	seen := map[string]bool{}
	for _, s := range list {
		name, raw, ok := strings.Cut(s, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("%q: want name=URL", s)
		}
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%q: want an http or https URL after %s=", s, name)
		}
		if seen[name] {
			return nil, fmt.Errorf("%q: %s is named twice", s, name)
		}
		seen[name] = true
		out = append(out, peer{name: name, url: u.String()})
	}
	return out, nil
}

func validPeers(list []string) (string, bool) {
	_, err := parsePeers(list)
	return "want name=URL entries with http or https URLs, each name once", err == nil
}

// Pipeline answers GET /v1/dashboard/pipeline.
type Pipeline struct {
	peers   []peer
	timeout time.Duration
	client  *http.Client
	// self is this service's own registry, read without a request.
	self prometheus.Gatherer
	// state reports whether the presence state is whole: nil, statestore.ErrRebuilding
	// while the aggregators rebuild shards from the log, or why it could not be read.
	state  func(context.Context) error
	logger *slog.Logger
	// now is the clock of the reads (time.Now; tests set their own).
	now func() time.Time
	// mu guards endpointReads: by peer and endpoint, the notifier's counters at the
	// earlier reads the recent figures compare with (webhooks.go).
	mu            sync.Mutex
	endpointReads map[string]map[string]*endpointReads
}

// NewPipeline builds the pipeline view over cfg's peers and this service's own
// metrics.
func NewPipeline(cfg Config, self prometheus.Gatherer, state func(context.Context) error, logger *slog.Logger) (*Pipeline, error) {
	peers, err := parsePeers(cfg.Peers)
	if err != nil {
		return nil, fmt.Errorf("PULSE_QUERY_PEER_METRICS: %w", err)
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	return &Pipeline{peers: peers, timeout: timeout, self: self, state: state, logger: logger, now: time.Now,
		client: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}}, nil
}

// Health is the pipeline view's answer.
type Health struct {
	At time.Time `json:"at"`
	// State is whether the presence state in Redis is whole (guarantee 10).
	State StateHealth `json:"state"`
	// Services are this service first, then the peers in configuration order.
	Services []ServiceHealth `json:"services"`
}

// StateHealth is the presence state's condition.
type StateHealth struct {
	OK         bool   `json:"ok"`
	Rebuilding bool   `json:"rebuilding"`
	Message    string `json:"message,omitempty"`
}

// ServiceHealth is what one service's metrics say.
type ServiceHealth struct {
	Name string `json:"name"`
	URL  string `json:"url,omitempty"`
	// Up is whether its metrics were read within the deadline; Error says why not.
	Up    bool   `json:"up"`
	Error string `json:"error,omitempty"`
	// Lag is the records its consumers are behind the log, by topic
	// (pulse_consume_lag_records).
	Lag map[string]float64 `json:"lag,omitempty"`
	// DeadLetters is the records it sent to a dead-letter topic since it started.
	DeadLetters *float64 `json:"deadLetters,omitempty"`
	// Rebuilds is the shards it rebuilt from the log since it started.
	Rebuilds *float64 `json:"rebuilds,omitempty"`
	// Dependencies is each dependency's last readiness check (pulse_dependency_up,
	// pulse_history_cassandra_up, pulse_feed_ready).
	Dependencies map[string]bool `json:"dependencies,omitempty"`
	// Freshness is how far behind the live edge each stage runs: latency histograms.
	Freshness []Freshness `json:"freshness,omitempty"`
	// Endpoints is, for the notifier, each webhook endpoint's health by id
	// (pulse_notifier_*), and EndpointsConfigured how many endpoints it read from its
	// endpoints file.
	Endpoints           []EndpointHealth `json:"endpoints,omitempty"`
	EndpointsConfigured *float64         `json:"endpointsConfigured,omitempty"`
}

// Freshness is one latency histogram, cumulative since the service started; the page
// takes differences between two reads for the recent figures.
type Freshness struct {
	Metric string            `json:"metric"`
	Labels map[string]string `json:"labels,omitempty"`
	Count  uint64            `json:"count"`
	Sum    float64           `json:"sumSeconds"`
	// Buckets are [upper bound in seconds, cumulative count] pairs, +Inf excluded.
	Buckets [][2]float64 `json:"buckets"`
}

// freshnessMetrics are the histograms that say how fresh each stage's output is.
var freshnessMetrics = map[string]bool{
	"pulse_ingest_produce_duration_seconds": true, // a request to Kafka's acknowledgement
	"pulse_aggregator_flush_seconds":        true, // a window made durable and its changes produced
	"pulse_history_commit_lag_seconds":      true, // a record's log time to history's commit
	"pulse_feed_delivery_delay_seconds":     true, // a change taking effect to its live delivery
}

func (p *Pipeline) serve(c echo.Context) error {
	if p == nil {
		return httpserver.Unavailable("this instance serves no pipeline view", 5*time.Second)
	}
	if !auth.IsOperator(c) {
		return auth.Forbidden("the pipeline view needs a key with the operator scope: Authorization: Bearer <key>")
	}
	c.Response().Header().Set(echo.HeaderCacheControl, "private, no-store")
	return httpserver.JSON(c, http.StatusOK, p.Read(c.Request().Context()))
}

// Read scrapes every peer at once under the deadline, reads this service's own
// metrics and the state's condition.
func (p *Pipeline) Read(ctx context.Context) Health {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	h := Health{At: p.now().UTC(), Services: make([]ServiceHealth, 1+len(p.peers))}
	var wg sync.WaitGroup
	for i, pr := range p.peers {
		wg.Go(func() {
			s := ServiceHealth{Name: pr.name, URL: pr.url}
			fams, err := p.scrape(ctx, pr.url)
			if err != nil {
				s.Error = err.Error()
			} else {
				s.Up = true
				if endpoints := summarize(&s, fams); endpoints != nil {
					p.judgeEndpoints(pr.name, &s, endpoints, h.At)
				}
			}
			h.Services[1+i] = s
		})
	}
	self := ServiceHealth{Name: "query"}
	if fams, err := p.self.Gather(); err != nil {
		self.Error = err.Error()
	} else {
		self.Up = true
		summarize(&self, fams)
	}
	h.Services[0] = self
	h.State = StateHealth{OK: true}
	if p.state != nil {
		if err := p.state(ctx); errors.Is(err, statestore.ErrRebuilding) {
			h.State = StateHealth{Rebuilding: true, Message: "the aggregators are rebuilding shards from the log; reads of them answer 503 meanwhile"}
		} else if err != nil {
			h.State = StateHealth{Message: "the presence state could not be read: " + err.Error()}
		}
	}
	wg.Wait()
	return h
}

// maxMetricsBytes bounds one peer's answer.
const maxMetricsBytes = 8 << 20

// scrape reads one metrics endpoint and parses it in whichever exposition format it
// answered with.
func (p *Pipeline) scrape(ctx context.Context, target string) ([]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	res, err := p.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("no answer within %v", p.timeout)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its URL is shown beside it
		}
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("answered %s", res.Status)
	}
	dec := expfmt.NewDecoder(io.LimitReader(res.Body, maxMetricsBytes), expfmt.ResponseFormat(res.Header))
	var fams []*dto.MetricFamily
	for {
		mf := new(dto.MetricFamily)
		if err := dec.Decode(mf); errors.Is(err, io.EOF) {
			return fams, nil
		} else if err != nil {
			return nil, fmt.Errorf("parsing its metrics: %w", err)
		}
		fams = append(fams, mf)
	}
}

// summarize picks the figures the page shows out of a service's metric families, and
// returns the notifier's counters by endpoint (nil for another service).
func summarize(s *ServiceHealth, fams []*dto.MetricFamily) map[string]*endpointCounters {
	add := func(dst **float64, v float64) {
		if *dst == nil {
			*dst = new(float64)
		}
		**dst += v
	}
	dep := func(name string, up bool) {
		if s.Dependencies == nil {
			s.Dependencies = map[string]bool{}
		}
		s.Dependencies[name] = up
	}
	for _, mf := range fams {
		name := mf.GetName()
		for _, m := range mf.GetMetric() {
			labels := labelsOf(m)
			switch {
			case name == "pulse_consume_lag_records":
				if s.Lag == nil {
					s.Lag = map[string]float64{}
				}
				s.Lag[labels["topic"]] += value(m)
			case strings.HasSuffix(name, "_dead_letters_total"):
				add(&s.DeadLetters, value(m))
			case name == "pulse_aggregator_rebuilds_total":
				add(&s.Rebuilds, value(m))
			case name == "pulse_dependency_up":
				dep(labels["dependency"], value(m) == 1)
			case name == "pulse_history_cassandra_up":
				dep("cassandra", value(m) == 1)
			case name == "pulse_query_history_connected":
				dep("history", value(m) == 1)
			case name == "pulse_feed_ready":
				dep("feed", value(m) == 1)
			case freshnessMetrics[name] && m.GetHistogram() != nil:
				hist := m.GetHistogram()
				f := Freshness{Metric: name, Count: hist.GetSampleCount(), Sum: hist.GetSampleSum(), Buckets: [][2]float64{}}
				if len(labels) > 0 {
					f.Labels = labels
				}
				for _, b := range hist.GetBucket() {
					if math.IsInf(b.GetUpperBound(), 1) {
						continue // the text format lists +Inf; the count is its bucket
					}
					f.Buckets = append(f.Buckets, [2]float64{b.GetUpperBound(), float64(b.GetCumulativeCount())})
				}
				s.Freshness = append(s.Freshness, f)
			}
		}
	}
	sort.Slice(s.Freshness, func(i, j int) bool {
		if s.Freshness[i].Metric != s.Freshness[j].Metric {
			return s.Freshness[i].Metric < s.Freshness[j].Metric
		}
		return fmt.Sprint(s.Freshness[i].Labels) < fmt.Sprint(s.Freshness[j].Labels)
	})
	return summarizeNotifier(s, fams)
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// value is a counter's, gauge's or untyped metric's value.
func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}
