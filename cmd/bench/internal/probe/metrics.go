package probe

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one scrape of a /metrics page, by metric family name.
type Metrics map[string]*dto.MetricFamily

// ParseMetrics reads the text exposition format the services serve.
func ParseMetrics(r io.Reader) (Metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// matching is the samples of family name that carry every label of want (pairs of
// name, value; an absent label reads as "").
func (m Metrics) matching(name string, want []string) []*dto.Metric {
	var out []*dto.Metric
	for _, s := range m[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range s.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		ok := true
		for i := 0; i+1 < len(want); i += 2 {
			ok = ok && labels[want[i]] == want[i+1]
		}
		if ok {
			out = append(out, s)
		}
	}
	return out
}

// Sum adds the values of the counter, gauge or untyped samples named name with the
// labels of want.
func (m Metrics) Sum(name string, want ...string) float64 {
	var t float64
	for _, s := range m.matching(name, want) {
		t += s.GetCounter().GetValue() + s.GetGauge().GetValue() + s.GetUntyped().GetValue()
	}
	return t
}

// Bucket is one cumulative histogram bucket.
type Bucket struct {
	le    float64
	count float64
}

// Buckets sums histogram name's buckets with the labels of want by upper bound,
// sorted by it (so several label sets, e.g. two topics, merge into one histogram).
func (m Metrics) Buckets(name string, want ...string) []Bucket {
	by := map[float64]float64{}
	for _, s := range m.matching(name, want) {
		for _, b := range s.GetHistogram().GetBucket() {
			// A histogram's counts are all whole or all float; the other reads 0.
			by[b.GetUpperBound()] += float64(b.GetCumulativeCount()) + b.GetCumulativeCountFloat()
		}
	}
	out := make([]Bucket, 0, len(by))
	for le, c := range by {
		out = append(out, Bucket{le, c})
	}
	slices.SortFunc(out, func(a, b Bucket) int { return cmp.Compare(a.le, b.le) })
	return out
}

// BucketDelta is end − start per upper bound: the histogram of what happened between
// two scrapes.
func BucketDelta(start, end []Bucket) []Bucket {
	prev := map[float64]float64{}
	for _, b := range start {
		prev[b.le] = b.count
	}
	out := make([]Bucket, len(end))
	for i, b := range end {
		out[i] = Bucket{b.le, math.Max(0, b.count-prev[b.le])}
	}
	return out
}

// Quantile estimates the q-quantile of cumulative buckets the way Prometheus's
// histogram_quantile does: linear within the Bucket it falls in, the upper bound of
// the highest finite Bucket when it falls in +Inf. NaN without observations.
func Quantile(bs []Bucket, q float64) float64 {
	if len(bs) == 0 {
		return math.NaN()
	}
	total := bs[len(bs)-1].count
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for i, b := range bs {
		if b.count >= rank {
			if math.IsInf(b.le, 1) {
				if i > 0 {
					return bs[i-1].le
				}
				return math.NaN()
			}
			if b.count == below {
				return b.le
			}
			return lower + (b.le-lower)*(rank-below)/(b.count-below)
		}
		lower, below = b.le, b.count
	}
	return bs[len(bs)-1].le
}

// Scrape reads url's /metrics page.
func Scrape(ctx context.Context, c *http.Client, url string) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s/metrics: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s/metrics: HTTP %d", url, resp.StatusCode)
	}
	return ParseMetrics(resp.Body)
}
