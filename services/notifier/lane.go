package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pulse-presence/pulse/internal/platform/retry"
)

// item is one change routed to an endpoint, as the endpoint's view renders it.
type item struct {
	c      *change
	json   []byte
	routed time.Time
}

// lane delivers one partition's changes to one endpoint, a batch at a time and in
// log order, so a user's changes reach the endpoint in the order they happened. Each
// lane has its own goroutine: a slow or dead endpoint holds back its own lanes only.
type lane struct {
	w  *worker
	ep atomic.Pointer[Endpoint]

	mu      sync.Mutex
	queue   []item // routed, not in a batch yet
	sending []item // the batch being delivered (or dead-lettered)

	wake   chan struct{} // capacity 1: something was queued
	drain  chan struct{} // closed: send what is queued without waiting, then stop
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

func newLane(ctx context.Context, w *worker, ep *Endpoint) *lane {
	l := &lane{w: w, wake: make(chan struct{}, 1), drain: make(chan struct{}), done: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(ctx)
	l.ep.Store(ep)
	return l
}

// push queues it; called by the partition's worker only.
func (l *lane) push(it item) {
	l.mu.Lock()
	l.queue = append(l.queue, it)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// shed takes the oldest queued changes, at most n, when more than limit changes wait:
// the backlog past the limit goes to the dead-letter topic rather than to memory.
func (l *lane) shed(limit, n int) []item {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.queue)+len(l.sending) <= limit {
		return nil
	}
	n = min(n, len(l.queue))
	out := append([]item(nil), l.queue[:n]...)
	l.queue = append(l.queue[:0:0], l.queue[n:]...)
	return out
}

// pending is the offset of the oldest change not yet delivered nor dead-lettered, the
// number of such changes, and when the oldest was produced; ok is false when none.
func (l *lane) pending() (offset int64, n int, produced time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n = len(l.sending) + len(l.queue)
	switch {
	case len(l.sending) > 0:
		return l.sending[0].c.offset, n, l.sending[0].c.produced, true
	case len(l.queue) > 0:
		return l.queue[0].c.offset, n, l.queue[0].c.produced, true
	}
	return 0, 0, time.Time{}, false
}

// run sends batches until the lane is drained or cancelled. A batch goes when it is
// full, when its first change has waited MaxWait, or at once while draining.
func (l *lane) run() {
	defer close(l.done)
	draining := false
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		ep := l.ep.Load()
		l.mu.Lock()
		n := len(l.queue)
		var waited time.Duration
		if n > 0 {
			waited = time.Since(l.queue[0].routed)
		}
		l.mu.Unlock()
		switch {
		case n == 0 && draining:
			return
		case n > 0 && (draining || n >= ep.MaxChanges || waited >= ep.MaxWait):
			if !l.send(ep) {
				return
			}
			continue
		}
		var due <-chan time.Time
		if n > 0 {
			timer.Reset(ep.MaxWait - waited)
			due = timer.C
		}
		select {
		case <-l.wake:
		case <-due:
		case <-l.drain:
			draining = true
		case <-l.ctx.Done():
			return
		}
		timer.Stop()
	}
}

// send delivers the next batch, or dead-letters it once the endpoint's retry budget
// is spent; it returns false when the lane was cancelled first, leaving the batch
// pending (uncommitted: whoever owns the partition next delivers it).
func (l *lane) send(ep *Endpoint) bool {
	l.mu.Lock()
	n := min(len(l.queue), ep.MaxChanges)
	l.sending = append(l.sending[:0], l.queue[:n]...)
	l.queue = append(l.queue[:0:0], l.queue[n:]...)
	batch := l.sending
	l.mu.Unlock()

	id, body := batchBody(ep.ID, l.w.partition, batch)
	err := l.w.n.sender.deliver(l.ctx, l.ep.Load, id, body)
	if l.ctx.Err() != nil {
		return false
	}
	m := l.w.n.m
	if err == nil {
		now := time.Now()
		m.deliveries.WithLabelValues(ep.ID, outcomeDelivered).Inc()
		m.changes.WithLabelValues(ep.ID, outcomeDelivered).Add(float64(len(batch)))
		lat := m.latency.WithLabelValues(ep.ID)
		for _, it := range batch {
			lat.Observe(now.Sub(it.c.produced).Seconds())
		}
	} else {
		if !errors.Is(err, retry.ErrAttempts) {
			l.w.logger.Error("webhook batch refused for good", "endpoint", ep.ID, "batch", id, "err", err)
		}
		if l.w.n.deadLetter(l.ctx, l.w.logger, l.w.partition, ep.ID, batch[0].c.offset, body, len(batch), err) != nil {
			return false
		}
	}
	l.mu.Lock()
	l.sending = l.sending[:0]
	l.mu.Unlock()
	return true
}

// batchBody is the JSON of a batch: its id ("<partition>-<first offset>-<last
// offset>" of presence.changes) and the changes as rendered.
func batchBody(endpoint string, partition int32, batch []item) (string, []byte) {
	id := strconv.Itoa(int(partition)) + "-" + strconv.FormatInt(batch[0].c.offset, 10) + "-" + strconv.FormatInt(batch[len(batch)-1].c.offset, 10)
	var b bytes.Buffer
	b.WriteString(`{"endpoint":`)
	ej, _ := json.Marshal(endpoint)
	b.Write(ej)
	b.WriteString(`,"id":"` + id + `","changes":[`)
	for i, it := range batch {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(it.json)
	}
	b.WriteString("]}")
	return id, b.Bytes()
}
