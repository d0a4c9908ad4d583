package probe

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
)

// Lag reads the consumer lag of the aggregator's and history's groups from Kafka
// (committed offsets against the partitions' ends).
type Lag struct {
	cl                *kgo.Client
	Adm               *kadm.Client
	aggGroup, histGrp string
	Events, changes   string
}

func NewLag(broker, aggGroup, histGroup, events, changes string) (*Lag, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return &Lag{cl: cl, Adm: kadm.NewClient(cl), aggGroup: aggGroup, histGrp: histGroup, Events: events, changes: changes}, nil
}

func (l *Lag) Close() { l.cl.Close() }

// LagSample is the groups' lag at one instant, in records.
type LagSample struct {
	At             time.Time
	Aggregator     int64 // on the events topic
	HistoryEvents  int64
	HistoryChanges int64
}

// Sample reads both groups' lag at once.
func (l *Lag) Sample(ctx context.Context) (LagSample, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lags, err := l.Adm.Lag(ctx, l.aggGroup, l.histGrp)
	if err != nil {
		return LagSample{}, fmt.Errorf("reading consumer lag: %w", err)
	}
	s := LagSample{At: time.Now()}
	for _, g := range []string{l.aggGroup, l.histGrp} {
		if d, ok := lags[g]; !ok {
			return s, fmt.Errorf("consumer group %s: not found", g)
		} else if err := d.Error(); err != nil {
			return s, fmt.Errorf("consumer group %s: %w", g, err)
		}
	}
	byTopic := func(g, topic string) int64 {
		var t int64
		for _, p := range lags[g].Lag[topic] {
			t += max(p.Lag, 0)
		}
		return t
	}
	s.Aggregator = byTopic(l.aggGroup, l.Events)
	s.HistoryEvents, s.HistoryChanges = byTopic(l.histGrp, l.Events), byTopic(l.histGrp, l.changes)
	return s, nil
}

// Partitions is the events topic's partition count and replication factor.
func (l *Lag) Partitions(ctx context.Context) (partitions, replicas int, err error) {
	td, err := l.Adm.ListTopics(ctx, l.Events)
	if err != nil {
		return 0, 0, fmt.Errorf("describing %s: %w", l.Events, err)
	}
	t, ok := td[l.Events]
	if !ok || t.Err != nil || len(t.Partitions) == 0 {
		return 0, 0, fmt.Errorf("describing %s: no partitions (%v)", l.Events, t.Err)
	}
	return len(t.Partitions), len(t.Partitions.Sorted()[0].Replicas), nil
}

// SampleEvery samples lag every interval in the background until the function it
// returns is called, which answers the samples taken and how many reads failed.
func (l *Lag) SampleEvery(ctx context.Context, every time.Duration) (finish func() ([]LagSample, int)) {
	var samples []LagSample
	errs := 0
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if s, err := l.Sample(ctx); err != nil {
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
	return func() ([]LagSample, int) {
		close(stop)
		<-done
		return samples, errs
	}
}

// Summarize picks from samples the first at or after from, the last at or before
// to, and the largest between them; with fewer than two samples in the window the
// growth cannot be judged.
func Summarize(samples []LagSample, from, to time.Time, pick func(LagSample) int64) report.LagSummary {
	var in []LagSample
	for _, s := range samples {
		if !s.At.Before(from) && !s.At.After(to) {
			in = append(in, s)
		}
	}
	if len(in) < 2 {
		return report.LagSummary{}
	}
	sum := report.LagSummary{Known: true, Start: pick(in[0]), End: pick(in[len(in)-1])}
	for _, s := range in {
		sum.Max = max(sum.Max, pick(s))
	}
	return sum
}
