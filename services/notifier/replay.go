package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/platform/consume"
	"github.com/pulse-presence/pulse/pkg/webhook"
)

// replayWorker delivers one partition of the replay topic (PULSE_TOPIC_WEBHOOKS): the
// batches `pulsectl dlq replay` took from the dead-letter topic, each to the endpoint
// its key names, one after the other. A batch that fails again is dead-lettered again.
type replayWorker struct {
	n         *notifier
	topic     string
	partition int32
	logger    *slog.Logger
}

var _ consume.Worker = (*replayWorker)(nil)

func (w *replayWorker) Run(ctx context.Context, recs <-chan []*kgo.Record) error {
	for {
		select {
		case batch, ok := <-recs:
			if !ok {
				return nil
			}
			for _, r := range batch {
				if err := w.replay(ctx, r); err != nil {
					return nil // only ctx ends a replay: the partition is lost or closing
				}
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				if err := w.n.commit(cctx, r.Topic, r.Partition, r.Offset+1); err != nil && ctx.Err() == nil {
					w.logger.Warn("committing", "offset", r.Offset+1, "err", err)
				}
				cancel()
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// replay delivers r's batch; it returns an error only when ctx ended first.
func (w *replayWorker) replay(ctx context.Context, r *kgo.Record) error {
	id := string(r.Key)
	b, err := webhook.Decode(r.Value)
	if err == nil && b.Endpoint != id {
		err = fmt.Errorf("the batch is for endpoint %q, the record's key names %q", b.Endpoint, id)
	}
	if err != nil {
		w.n.m.skipped.Inc()
		w.logger.Warn("skipping a replay record that is not a webhook batch", "offset", r.Offset, "err", err)
		return nil
	}
	find := func() *Endpoint {
		for _, ep := range w.n.endpoints.Load().list {
			if ep.ID == id {
				return ep
			}
		}
		return nil
	}
	ep := find()
	if ep == nil {
		w.n.m.skipped.Inc()
		w.logger.Warn("skipping a replayed batch of an endpoint no longer configured", "endpoint", id, "batch", b.ID)
		return nil
	}
	current := func() *Endpoint {
		if e := find(); e != nil {
			return e
		}
		return ep
	}
	w.n.m.replayed.WithLabelValues(id).Inc()
	err = w.n.sender.deliver(ctx, current, b.ID, r.Value)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err == nil:
		w.n.m.deliveries.WithLabelValues(id, outcomeDelivered).Inc()
		w.n.m.changes.WithLabelValues(id, outcomeDelivered).Add(float64(len(b.Changes)))
		return nil
	}
	return w.n.deadLetter(ctx, w.logger, w.partition, id, r.Offset, r.Value, len(b.Changes),
		errors.Join(err, errors.New("replayed from "+w.topic+" offset "+strconv.FormatInt(r.Offset, 10))))
}
