package main

import (
	"context"
	"fmt"
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

// sampleLag samples lag every interval in the background until the function it
// returns is called, which answers the samples taken and how many reads failed.
func sampleLag(ctx context.Context, l *lagReader, every time.Duration) (finish func() ([]lagSample, int)) {
	var samples []lagSample
	errs := 0
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if s, err := l.sample(ctx); err != nil {
				errs++
			} else {
				samples = append(samples, s)
			}
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() ([]lagSample, int) {
		close(stop)
		<-done
		return samples, errs
	}
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
