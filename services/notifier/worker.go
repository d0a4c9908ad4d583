package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/platform/consume"
	"github.com/pulse-presence/pulse/internal/platform/deadletter"
	"github.com/pulse-presence/pulse/internal/platform/retry"
)

// worker routes one partition of presence.changes to the lanes of the endpoints that
// want each change, and commits the partition's offset up to the oldest change some
// lane has not delivered nor dead-lettered yet (docs/webhooks.md, Delivery). A crash
// therefore re-delivers, and never loses.
type worker struct {
	n         *notifier
	topic     string
	partition int32
	logger    *slog.Logger

	lanes   map[string]*lane
	version uint64
	// last is the offset of the last record routed (-1: none yet); committed is the
	// offset last committed (the next to read).
	last      int64
	committed int64
}

var _ consume.Worker = (*worker)(nil)

// Run routes every batch as it comes, commits every CommitInterval, and on revoke
// lets the lanes send what they hold (for at most the drain timeout) before the last
// commit. On loss (ctx cancelled) it stops its lanes and commits nothing.
func (w *worker) Run(ctx context.Context, recs <-chan []*kgo.Record) error {
	w.lanes, w.last, w.committed = map[string]*lane{}, -1, -1
	tick := time.NewTicker(w.n.cfg.CommitInterval)
	defer tick.Stop()
	laneCtx, cancelLanes := context.WithCancel(context.Background())
	defer func() {
		cancelLanes()
		for _, l := range w.lanes {
			<-l.done
			w.n.unregister(l)
		}
	}()
	for {
		select {
		case batch, ok := <-recs:
			if !ok {
				w.drain(ctx)
				w.commit(ctx)
				return nil
			}
			w.sync(laneCtx)
			for _, r := range batch {
				w.route(ctx, r)
			}
		case <-tick.C:
			w.sync(laneCtx)
			w.commit(ctx)
		case <-ctx.Done():
			return nil
		}
	}
}

// sync brings the lanes in line with the endpoints in force: a new endpoint gets a
// lane from the next change on, a removed one's lane stops with what it held, and a
// changed one's lane uses the new settings from its next batch.
func (w *worker) sync(ctx context.Context) {
	set := w.n.endpoints.Load()
	if set.version == w.version {
		return
	}
	w.version = set.version
	keep := map[string]bool{}
	for _, ep := range set.list {
		keep[ep.ID] = true
		if l, ok := w.lanes[ep.ID]; ok {
			l.ep.Store(ep)
			continue
		}
		l := newLane(ctx, w, ep)
		w.lanes[ep.ID] = l
		w.n.register(l, ep.ID)
		go l.run()
	}
	for id, l := range w.lanes {
		if !keep[id] {
			l.cancel()
			<-l.done
			w.n.unregister(l)
			delete(w.lanes, id)
		}
	}
}

// route hands r's change to every lane whose endpoint wants it.
func (w *worker) route(ctx context.Context, r *kgo.Record) {
	w.last = r.Offset
	c, err := decodeChange(r)
	if err != nil {
		// History dead-letters such records (presence.changes.dlq); here they are
		// only counted.
		w.n.m.skipped.Inc()
		w.logger.Warn("skipping a record that is not a change", "offset", r.Offset, "err", err)
		return
	}
	now := time.Now()
	for _, l := range w.lanes {
		ep := l.ep.Load()
		if !c.visible(ep.Operator) || !ep.Filter.matches(c, c.status(ep.Operator)) {
			continue
		}
		l.push(item{c: c, json: c.json(ep.Operator, now), routed: now})
		if shed := l.shed(w.n.cfg.MaxBacklog, ep.MaxChanges); len(shed) > 0 {
			_, body := batchBody(ep.ID, w.partition, shed)
			_ = w.n.deadLetter(ctx, w.logger, w.partition, ep.ID, shed[0].c.offset, body, len(shed),
				fmt.Errorf("more than %d changes waited for the endpoint (PULSE_NOTIFIER_MAX_BACKLOG)", w.n.cfg.MaxBacklog))
		}
	}
}

// deadLetter writes a batch of changes changes the endpoint did not take to the
// dead-letter topic, keyed by the endpoint so that its dead batches stay in order, and
// waits for Kafka's ack; it retries until ctx ends. `pulsectl dlq replay` sends the
// batch to the replay topic, which the notifier delivers to the endpoint again.
func (n *notifier) deadLetter(ctx context.Context, logger *slog.Logger, partition int32, endpoint string, firstOffset int64, body []byte, changes int, reason error) error {
	r := deadletter.Record(&kgo.Record{
		Topic: n.cfg.WebhooksTopic, Partition: partition, Offset: firstOffset,
		Key: []byte(endpoint), Value: body,
	}, "notifier", reason, time.Now())
	err := retry.Do(ctx, retry.Policy{TryTimeout: 10 * time.Second}, logger, "dead-lettering a webhook batch", func(ctx context.Context) error {
		return n.produce(ctx, r)
	}, "endpoint", endpoint)
	if err != nil {
		return err
	}
	n.m.deliveries.WithLabelValues(endpoint, outcomeDead).Inc()
	n.m.changes.WithLabelValues(endpoint, outcomeDead).Add(float64(changes))
	logger.Warn("webhook batch dead-lettered", "endpoint", endpoint, "changes", changes, "reason", reason)
	return nil
}

// drain lets every lane send what it holds at once and waits for them, for at most
// the drain timeout (within the consumer's revoke timeout); then cancels them.
func (w *worker) drain(ctx context.Context) {
	for _, l := range w.lanes {
		close(l.drain)
	}
	deadline := time.NewTimer(w.n.cfg.drainTimeout())
	defer deadline.Stop()
	for _, l := range w.lanes {
		select {
		case <-l.done:
		case <-deadline.C:
			for _, l := range w.lanes {
				l.cancel()
			}
			<-l.done
		case <-ctx.Done():
			return
		}
	}
}

// commit commits the offset after the last change every lane is done with.
func (w *worker) commit(ctx context.Context) {
	upTo := w.last
	for _, l := range w.lanes {
		if off, _, _, ok := l.pending(); ok && off-1 < upTo {
			upTo = off - 1
		}
	}
	if upTo+1 <= w.committed || upTo < 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := w.n.commit(cctx, w.topic, w.partition, upTo+1)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			w.logger.Warn("committing", "offset", upTo+1, "err", err)
		}
		return
	}
	w.committed = upTo + 1
}
