package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/stores/historystore"
)

// A presence.changes partition whose shard nobody changes would never move its fold:
// its frontier follows change times, so its past would never become final and every
// point-in-time answer would wait for it. A partition that has read everything its log
// holds, with nothing new for QuietAfter, is instead moved to the clock: any change
// still to come is produced after the end offset was listed, for an event ingest
// accepted within MaxSkew of its clock (or a timeout noticed as it fell due), so it is
// dated no earlier than that instant minus the lateness, the same promise a change
// dated then would make (docs/design.md, History).

// span is a partition's first and end offsets: what its log holds is [start, end).
type span struct{ start, end int64 }

// endOffsets lists presence.changes' first and end offsets for the quiet partitions,
// once for all of them per maxAge.
type endOffsets struct {
	list   func(ctx context.Context) (map[int32]span, error)
	maxAge time.Duration

	mu     sync.Mutex
	asked  time.Time // when the cached offsets were asked for
	cached map[int32]span
}

// end is partition's offsets and the instant they were asked for: the log held no
// record at or past the end then.
func (e *endOffsets) end(ctx context.Context, partition int32) (span, time.Time, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cached == nil || time.Since(e.asked) >= e.maxAge {
		asked := time.Now()
		spans, err := e.list(ctx)
		if err != nil {
			return span{}, time.Time{}, err
		}
		e.cached, e.asked = spans, asked
	}
	sp, ok := e.cached[partition]
	if !ok {
		return span{}, time.Time{}, fmt.Errorf("presence.changes has no partition %d", partition)
	}
	return sp, e.asked, nil
}

// maxQuietStep bounds one move of a fold to the clock: the fold extends its minutes and
// hours up to its time, so a shard quiet for days catches up a day per step.
const maxQuietStep = 23 * time.Hour

// quiet moves a changes partition that has read all its log to the clock. A partition
// that never had a record restores its fold first, from its checkpoint and the log up
// to the end offset. It reports whether the fold moved.
func (w *worker) quiet(ctx context.Context) (moved bool, err error) {
	h := w.h
	lctx, cancel := context.WithTimeout(ctx, h.cfg.Kafka.RetryTimeout)
	sp, asked, err := h.ends.end(lctx, w.partition)
	cancel()
	if err != nil {
		// Not moving costs nothing but freshness; the next tick asks again.
		w.logger.Warn("listing the end offset of a quiet partition", "err", err)
		return false, nil
	}
	end := sp.end
	if !w.started {
		// Records the group will still deliver (from the committed offset on) must come
		// through Run; only a partition with none left starts here: its log is empty
		// (never written, or every record gone with the retention, whatever offset was
		// committed before), or everything in it is committed.
		if c, ok := h.committed(w.topic, w.partition); sp.start < end && (!ok || c < end) {
			return false, nil
		}
		if err := w.restoreRollup(ctx, &kgo.Record{Topic: w.topic, Partition: w.partition, Offset: end}); err != nil {
			return false, err
		}
		w.started, w.next = true, end
	}
	st := w.rollup
	if w.next < end || !asked.After(st.maxAt) {
		return false, nil
	}
	to := asked
	if !st.maxAt.IsZero() && to.Sub(st.maxAt) > maxQuietStep {
		to = st.maxAt.Add(maxQuietStep)
	}
	st.maxAt = to
	st.fold.Advance(to)
	// The rollups and final snapshots follow on their own schedule; readers of the
	// recent past learn at once that nothing happened up to now.
	w.rollupHeld = true
	return true, nil
}

// provisionalRow is the progress row saying every change the partition has received
// is written: readers may answer provisionally up to the latest of them, or up to the
// clock the fold was moved to.
func (w *worker) provisionalRow() *historystore.Batch {
	st := w.rollup
	return historystore.Single(historystore.ProvisionalRow(w.partition, st.maxAt, st.flushTimestamp()))
}
