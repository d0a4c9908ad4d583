package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// lagReader reads the consumer lag of the aggregator's and history's groups from
// Kafka (committed offsets against the partitions' ends).
type lagReader struct {
	cl                *kgo.Client
	adm               *kadm.Client
	aggGroup, histGrp string
	events, changes   string
}

func newLagReader(cfg config) (*lagReader, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(fmt.Sprintf("127.0.0.1:%d", cfg.ports.kafka)))
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return &lagReader{cl: cl, adm: kadm.NewClient(cl), aggGroup: cfg.aggGroup, histGrp: cfg.histGrp,
		events: cfg.events, changes: cfg.changes}, nil
}

func (l *lagReader) close() { l.cl.Close() }

// lagSample is the groups' lag at one instant, in records.
type lagSample struct {
	At             time.Time
	Aggregator     int64 // on the events topic
	HistoryEvents  int64
	HistoryChanges int64
}

// sample reads both groups' lag at once.
func (l *lagReader) sample(ctx context.Context) (lagSample, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lags, err := l.adm.Lag(ctx, l.aggGroup, l.histGrp)
	if err != nil {
		return lagSample{}, fmt.Errorf("reading consumer lag: %w", err)
	}
	s := lagSample{At: time.Now()}
	for _, g := range []string{l.aggGroup, l.histGrp} {
		d, ok := lags[g]
		if !ok {
			return s, fmt.Errorf("consumer group %s: not found", g)
		}
		if err := d.Error(); err != nil {
			return s, fmt.Errorf("consumer group %s: %w", g, err)
		}
	}
	byTopic := func(g, topic string) int64 {
		var t int64
		for _, p := range lags[g].Lag[topic] {
			if p.Lag > 0 {
				t += p.Lag
			}
		}
		return t
	}
	s.Aggregator = byTopic(l.aggGroup, l.events)
	s.HistoryEvents = byTopic(l.histGrp, l.events)
	s.HistoryChanges = byTopic(l.histGrp, l.changes)
	return s, nil
}

// partitions is the events topic's partition count.
func (l *lagReader) partitions(ctx context.Context) (int, error) {
	td, err := l.adm.ListTopics(ctx, l.events)
	if err != nil {
		return 0, fmt.Errorf("describing %s: %w", l.events, err)
	}
	t, ok := td[l.events]
	if !ok || t.Err != nil {
		return 0, fmt.Errorf("describing %s: %v", l.events, t.Err)
	}
	return len(t.Partitions), nil
}

// lagSampler samples lag every interval in the background until stopped.
type lagSampler struct {
	mu      sync.Mutex
	samples []lagSample
	errs    int
	stop    chan struct{}
	done    chan struct{}
}

func startSampler(ctx context.Context, l *lagReader, every time.Duration) *lagSampler {
	s := &lagSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			smp, err := l.sample(ctx)
			s.mu.Lock()
			if err != nil {
				s.errs++
			} else {
				s.samples = append(s.samples, smp)
			}
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// finish stops sampling and returns the samples taken.
func (s *lagSampler) finish() ([]lagSample, int) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, s.errs
}

// LagSummary is the aggregator's lag over a measured window.
type LagSummary struct {
	Known bool  `json:"known"`
	Start int64 `json:"start"`
	End   int64 `json:"end"`
	Max   int64 `json:"max"`
}

// summarize picks from samples the first at or after from, the last at or before
// to, and the largest between them; with fewer than two samples in the window the
// growth cannot be judged.
func summarize(samples []lagSample, from, to time.Time, pick func(lagSample) int64) LagSummary {
	var in []lagSample
	for _, s := range samples {
		if !s.At.Before(from) && !s.At.After(to) {
			in = append(in, s)
		}
	}
	if len(in) < 2 {
		return LagSummary{}
	}
	sum := LagSummary{Known: true, Start: pick(in[0]), End: pick(in[len(in)-1])}
	for _, s := range in {
		sum.Max = max(sum.Max, pick(s))
	}
	return sum
}
