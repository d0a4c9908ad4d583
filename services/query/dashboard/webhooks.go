package dashboard

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// The notifier's metrics (services/notifier, webhook delivery), each labelled by the
// endpoint's id but the count of endpoints.
const (
	// deliveries: POSTs by outcome (delivered: a 2xx; failed: retried or dead-lettered
	// next; dead: a batch dead-lettered).
	notifierDeliveries = "pulse_notifier_deliveries_total"
	// changes by outcome (delivered, dead).
	notifierChanges = "pulse_notifier_changes_total"
	// latency: a change produced to presence.changes to the receiver's 2xx.
	notifierLatency = "pulse_notifier_latency_seconds"
	// backlog: changes routed to the endpoint, neither delivered nor dead-lettered.
	notifierBacklog = "pulse_notifier_backlog_changes"
	// oldest pending: the age of the oldest of those, 0 when none.
	notifierOldestPending = "pulse_notifier_oldest_pending_seconds"
	notifierEndpoints     = "pulse_notifier_endpoints"
)

// Endpoint states.
const (
	EndpointOK      = "ok"
	EndpointBehind  = "behind"
	EndpointFailing = "failing"
)

// BehindAfter is how old an endpoint's oldest pending change may be before the
// endpoint is behind: PulseWebhookEndpointBehind's threshold
// (deploy/observability/alerts.yaml).
const BehindAfter = 5 * time.Minute

// recentWindow is the least span the recent figures of an endpoint cover once the
// pipeline view has read the notifier for that long: they compare the notifier's
// counters with a read between one and two windows ago, so that a page refreshing
// every few seconds does not judge an endpoint by the few POSTs of one interval.
const recentWindow = time.Minute

// EndpointHealth is one webhook endpoint's condition, from the notifier's metrics.
type EndpointHealth struct {
	ID string `json:"id"`
	// State is ok, behind (its oldest pending change is older than BehindAfter) or
	// failing (over the recent span, more of its POSTs failed than succeeded, or changes
	// were dead-lettered); failing wins over behind. Reason says why it is not ok.
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// Delivered and Dead are the changes delivered to it and dead-lettered since the
	// notifier started.
	Delivered float64 `json:"delivered"`
	Dead      float64 `json:"dead"`
	// Backlog is the changes waiting for it; OldestPendingSeconds the age of the oldest
	// of them (0 when none): its lag.
	Backlog              float64 `json:"backlog"`
	OldestPendingSeconds float64 `json:"oldestPendingSeconds"`
	// Recent is what happened lately, the span State judges.
	Recent EndpointRecent `json:"recent"`
}

// EndpointRecent is an endpoint's figures over the recent span: since an earlier read
// of this query instance (WindowSeconds ago), or, absent WindowSeconds, since the
// notifier started (the first read, or after its counters went back: a restart, or
// another notifier pod behind the URL).
type EndpointRecent struct {
	WindowSeconds     *float64 `json:"windowSeconds,omitempty"`
	AttemptsDelivered float64  `json:"attemptsDelivered"`
	AttemptsFailed    float64  `json:"attemptsFailed"`
	Dead              float64  `json:"dead"`
	// LatencyP99Seconds is the upper bound of the latency histogram's bucket holding the
	// 99th percentile of the changes delivered in the span (the largest bound, with
	// LatencyP99AboveBuckets, when it lies beyond); with LatencyMeanSeconds absent when
	// none was delivered.
	LatencyP99Seconds      *float64 `json:"latencyP99Seconds,omitempty"`
	LatencyP99AboveBuckets bool     `json:"latencyP99AboveBuckets,omitempty"`
	LatencyMeanSeconds     *float64 `json:"latencyMeanSeconds,omitempty"`
}

// endpointCounters are an endpoint's cumulative counters at one read.
type endpointCounters struct {
	at                time.Time
	attemptsDelivered float64
	attemptsFailed    float64
	dead              float64
	latency           histogram
}

type histogram struct {
	count   float64
	sum     float64
	bounds  []float64 // upper bounds, +Inf excluded
	buckets []float64 // cumulative counts, by bound
}

// endpointReads are the reads an endpoint's recent figures compare with: old, at least
// recentWindow before young once there are two, and young, the latest to start a span.
type endpointReads struct{ old, young *endpointCounters }

// summarizeNotifier reads the notifier's metrics into s.Endpoints and the cumulative
// counters by endpoint, which judgeEndpoints turns into the recent figures and states.
func summarizeNotifier(s *ServiceHealth, fams []*dto.MetricFamily) map[string]*endpointCounters {
	var counters map[string]*endpointCounters
	byID := map[string]*EndpointHealth{}
	endpoint := func(id string) (*EndpointHealth, *endpointCounters) {
		if byID[id] == nil {
			byID[id] = &EndpointHealth{ID: id}
			if counters == nil {
				counters = map[string]*endpointCounters{}
			}
			counters[id] = &endpointCounters{}
		}
		return byID[id], counters[id]
	}
	for _, mf := range fams {
		name := mf.GetName()
		if !strings.HasPrefix(name, "pulse_notifier_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := labelsOf(m)
			if name == notifierEndpoints {
				v := value(m)
				s.EndpointsConfigured = &v
				continue
			}
			id, ok := labels["endpoint"]
			if !ok {
				continue
			}
			e, c := endpoint(id)
			switch name {
			case notifierDeliveries:
				switch labels["outcome"] {
				case "delivered":
					c.attemptsDelivered += value(m)
				case "failed":
					c.attemptsFailed += value(m)
				}
			case notifierChanges:
				switch labels["outcome"] {
				case "delivered":
					e.Delivered += value(m)
				case "dead":
					e.Dead += value(m)
					c.dead += value(m)
				}
			case notifierBacklog:
				e.Backlog += value(m)
			case notifierOldestPending:
				e.OldestPendingSeconds = math.Max(e.OldestPendingSeconds, value(m))
			case notifierLatency:
				if h := m.GetHistogram(); h != nil {
					c.latency.add(h)
				}
			}
		}
	}
	for _, e := range byID {
		s.Endpoints = append(s.Endpoints, *e)
	}
	sort.Slice(s.Endpoints, func(i, j int) bool { return s.Endpoints[i].ID < s.Endpoints[j].ID })
	return counters
}

// add sums a histogram into h (one per label set; the notifier has one an endpoint).
func (h *histogram) add(m *dto.Histogram) {
	h.count += float64(m.GetSampleCount())
	h.sum += m.GetSampleSum()
	i := 0
	for _, b := range m.GetBucket() {
		if math.IsInf(b.GetUpperBound(), 1) {
			continue
		}
		if i == len(h.bounds) {
			h.bounds = append(h.bounds, b.GetUpperBound())
			h.buckets = append(h.buckets, 0)
		}
		h.buckets[i] += float64(b.GetCumulativeCount())
		i++
	}
}

// judgeEndpoints fills the recent figures and the state of a peer's endpoints, from
// their counters now and the reads kept from earlier ones, and keeps this read.
func (p *Pipeline) judgeEndpoints(peer string, s *ServiceHealth, now map[string]*endpointCounters, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	kept := p.endpointReads[peer]
	next := map[string]*endpointReads{}
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		cur := now[e.ID]
		cur.at = at
		r := kept[e.ID]
		if r == nil || r.young == nil || cur.before(r.young) {
			r = &endpointReads{} // first read, or the counters went back: start again
		}
		if r.young == nil || at.Sub(r.young.at) >= recentWindow {
			r.old, r.young = r.young, cur
		}
		var base *endpointCounters
		switch {
		case r.old != nil:
			base = r.old
		case r.young != cur:
			base = r.young // the span grows to recentWindow from the first read
		}
		next[e.ID] = r
		e.Recent = cur.since(base)
		e.State, e.Reason = judge(e)
	}
	if p.endpointReads == nil {
		p.endpointReads = map[string]map[string]*endpointReads{}
	}
	p.endpointReads[peer] = next // endpoints gone from the metrics are forgotten
}

// before reports whether a counter of c is below b's: the notifier restarted, or
// another of its pods answered.
func (c *endpointCounters) before(b *endpointCounters) bool {
	return c.attemptsDelivered < b.attemptsDelivered || c.attemptsFailed < b.attemptsFailed ||
		c.dead < b.dead || c.latency.count < b.latency.count
}

// since is what happened between base and c; nil base: since the notifier started.
func (c *endpointCounters) since(base *endpointCounters) EndpointRecent {
	if base == nil {
		base = &endpointCounters{at: c.at}
	}
	r := EndpointRecent{
		AttemptsDelivered: c.attemptsDelivered - base.attemptsDelivered,
		AttemptsFailed:    c.attemptsFailed - base.attemptsFailed,
		Dead:              c.dead - base.dead,
	}
	if base.at.Before(c.at) {
		w := c.at.Sub(base.at).Seconds()
		r.WindowSeconds = &w
	}
	n := c.latency.count - base.latency.count
	if n <= 0 || len(c.latency.bounds) == 0 {
		return r
	}
	mean := (c.latency.sum - base.latency.sum) / n
	r.LatencyMeanSeconds = &mean
	p99 := c.latency.bounds[len(c.latency.bounds)-1]
	r.LatencyP99AboveBuckets = true
	for i, le := range c.latency.bounds {
		cum := c.latency.buckets[i]
		if i < len(base.latency.buckets) {
			cum -= base.latency.buckets[i]
		}
		if cum >= 0.99*n {
			p99, r.LatencyP99AboveBuckets = le, false
			break
		}
	}
	r.LatencyP99Seconds = &p99
	return r
}

// judge is an endpoint's state and the reason for it.
func judge(e *EndpointHealth) (string, string) {
	r := e.Recent
	span := "since the notifier started"
	if r.WindowSeconds != nil {
		span = fmt.Sprintf("in the last %.0f s", *r.WindowSeconds)
	}
	var why []string
	if attempts := r.AttemptsDelivered + r.AttemptsFailed; r.AttemptsFailed > r.AttemptsDelivered {
		why = append(why, fmt.Sprintf("%.0f of %.0f POSTs failed", r.AttemptsFailed, attempts))
	}
	if r.Dead > 0 {
		why = append(why, fmt.Sprintf("%.0f changes dead-lettered", r.Dead))
	}
	if len(why) > 0 {
		return EndpointFailing, strings.Join(why, ", ") + " " + span
	}
	if e.OldestPendingSeconds > BehindAfter.Seconds() {
		return EndpointBehind, fmt.Sprintf("its oldest pending change is %.0f s old (over %.0f s)", e.OldestPendingSeconds, BehindAfter.Seconds())
	}
	return EndpointOK, ""
}
