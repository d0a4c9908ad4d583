package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// metrics is one scrape of a /metrics page.
type metrics []sample

// parseMetrics reads the text exposition format, as far as bench needs it: sample
// lines with optional labels; comments, blank lines and timestamps are skipped.
func parseMetrics(r io.Reader) (metrics, error) {
	var out metrics
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	rest := line
	if i := strings.IndexAny(line, "{ "); i >= 0 && line[i] == '{' {
		s.name = line[:i]
		rest = line[i+1:]
		for {
			rest = strings.TrimLeft(rest, " ,")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.IndexByte(rest, '=')
			if eq < 0 || len(rest) < eq+2 || rest[eq+1] != '"' {
				return s, fmt.Errorf("metrics line %q: bad labels", truncate(line, 120))
			}
			key := strings.TrimSpace(rest[:eq])
			val, n, err := unquoteLabel(rest[eq+1:])
			if err != nil {
				return s, fmt.Errorf("metrics line %q: %w", truncate(line, 120), err)
			}
			s.labels[key] = val
			rest = rest[eq+1+n:]
		}
	} else if i >= 0 {
		s.name, rest = line[:i], line[i:]
	} else {
		return s, fmt.Errorf("metrics line %q: no value", truncate(line, 120))
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return s, fmt.Errorf("metrics line %q: no value", truncate(line, 120))
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return s, fmt.Errorf("metrics line %q: value: %w", truncate(line, 120), err)
	}
	s.value = v
	return s, nil
}

// unquoteLabel reads a quoted label value at the start of s; it returns the value and
// how many bytes the quoted form took.
func unquoteLabel(s string) (string, int, error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			if i+1 >= len(s) {
				return "", 0, fmt.Errorf("unterminated label value")
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			default:
				b.WriteByte(s[i])
			}
		case '"':
			return b.String(), i + 1, nil
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, fmt.Errorf("unterminated label value")
}

// matches reports whether s carries every label of want (pairs of name, value).
func (s sample) matches(want []string) bool {
	for i := 0; i+1 < len(want); i += 2 {
		if s.labels[want[i]] != want[i+1] {
			return false
		}
	}
	return true
}

// sum adds the values of every sample named name with the labels of want.
func (m metrics) sum(name string, want ...string) float64 {
	var t float64
	for _, s := range m {
		if s.name == name && s.matches(want) {
			t += s.value
		}
	}
	return t
}

// bucket is one cumulative histogram bucket.
type bucket struct {
	le    float64
	count float64
}

// buckets sums the <name>_bucket samples with the labels of want by upper bound,
// sorted by it (so several label sets, e.g. two topics, merge into one histogram).
func (m metrics) buckets(name string, want ...string) []bucket {
	by := map[float64]float64{}
	for _, s := range m {
		if s.name != name+"_bucket" || !s.matches(want) {
			continue
		}
		le, err := strconv.ParseFloat(s.labels["le"], 64)
		if err != nil {
			continue
		}
		by[le] += s.value
	}
	out := make([]bucket, 0, len(by))
	for le, c := range by {
		out = append(out, bucket{le, c})
	}
	slices.SortFunc(out, func(a, b bucket) int {
		switch {
		case a.le < b.le:
			return -1
		case a.le > b.le:
			return 1
		}
		return 0
	})
	return out
}

// bucketDelta is end − start per upper bound: the histogram of what happened between
// two scrapes.
func bucketDelta(start, end []bucket) []bucket {
	prev := map[float64]float64{}
	for _, b := range start {
		prev[b.le] = b.count
	}
	out := make([]bucket, len(end))
	for i, b := range end {
		out[i] = bucket{b.le, math.Max(0, b.count-prev[b.le])}
	}
	return out
}

// quantile estimates the q-quantile of cumulative buckets the way Prometheus's
// histogram_quantile does: linear within the bucket it falls in, the upper bound of
// the highest finite bucket when it falls in +Inf. NaN without observations.
func quantile(bs []bucket, q float64) float64 {
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

// scrape reads url's /metrics page.
func scrape(ctx context.Context, c *http.Client, url string) (metrics, error) {
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
	return parseMetrics(resp.Body)
}
