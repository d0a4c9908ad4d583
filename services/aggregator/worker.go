package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/domain/dedupe"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/records"
	"github.com/pulse-presence/pulse/internal/platform/deadletter"
	"github.com/pulse-presence/pulse/internal/platform/retry"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/services/aggregator/internal/timeouts"
)

// worker owns one partition of presence.events, and so one shard of state, while the
// group assigns it here. It folds records into windows and, per window: writes Redis
// (guarded by offset), produces the changes, commits. Nothing else writes the shard.
type worker struct {
	cfg     Config
	topic   string
	cl      *kgo.Client
	store   *statestore.Store
	logger  *slog.Logger
	metrics *metrics
	// readRange re-reads the partition to rebuild the duplicate horizon, and the
	// shard's state when Redis lost it.
	readRange dedupe.ReadRange
	// register records the shard layout again; rebuilding counts the shards being
	// rebuilt in this process, for /readyz.
	register   func(context.Context) error
	rebuilding *atomic.Int32
	// history restores, in a rebuild, the users the log no longer reaches back to;
	// nil when PULSE_AGGREGATOR_REBUILD_FROM_HISTORY is off.
	history history
	// written is called after each window reached Redis and before its changes are
	// produced (the crash point of PULSE_AGGREGATOR_CRASH_AFTER_WRITE); nil: nothing.
	written func()

	st     shardState
	dedupe *dedupe.Window
	// evicted is how many of dedupe's early evictions the metrics have counted.
	evicted  uint64
	timeouts *timeouts.Tracker
	pending  []*kgo.Record
	// committedAt is when the offset was last committed; committedOff is that offset.
	committedAt  time.Time
	committedOff int64
	// now is the clock deadlines are decided by.
	now func() time.Time
}

func (w *worker) Run(ctx context.Context, recs <-chan []*kgo.Record) error {
	if err := w.start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // lost the partition while starting
		}
		return fmt.Errorf("partition %d: %w", w.st.partition, err)
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var opened time.Time // when the open window got its first record
	deadline := time.NewTimer(time.Hour)
	defer deadline.Stop()
	arm := func() {
		if next, ok := w.timeouts.Next(); ok {
			deadline.Reset(max(next.Sub(w.now()), 0))
		} else {
			deadline.Stop()
		}
	}
	arm()
	check := time.NewTicker(w.cfg.StateCheckInterval)
	defer check.Stop()
	for {
		select {
		case <-check.C:
			if err := w.checkState(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			// A window written less than CommitInterval after the last commit leaves
			// its offset uncommitted until the next window; on a partition gone quiet
			// that would be never, and its consumer lag would stay above zero.
			if err := w.commitIfDue(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			arm()
		case batch, ok := <-recs:
			if !ok {
				// Revoked or shutting down: the open window is flushed and committed.
				err := w.flush(ctx)
				if err == nil {
					err = w.commitNow(ctx)
				}
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if w.dedupe == nil && len(batch) > 0 {
				if err := w.rebuildDedupe(ctx, batch[0]); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
			}
			if len(w.pending) == 0 {
				opened = time.Now()
				timer.Reset(w.cfg.MinWindow)
			}
			w.pending = append(w.pending, batch...)
			// Full, or open long enough with nothing more waiting: write it now.
			if len(w.pending) >= w.cfg.MaxWindowRecords || (len(recs) == 0 && time.Since(opened) >= w.cfg.MinWindow) {
				timer.Stop()
				if err := w.flush(ctx); err != nil {
					return err
				}
				arm()
			}
		case <-timer.C:
			// MinWindow passed: write unless more records wait and Window allows
			// taking them into this window first.
			if open := time.Since(opened); len(recs) > 0 && open < w.cfg.Window {
				timer.Reset(w.cfg.Window - open)
				continue
			}
			if err := w.flush(ctx); err != nil {
				return err
			}
			arm()
		case <-deadline.C:
			if err := w.decideTimeouts(ctx); err != nil {
				return err
			}
			arm()
		case <-ctx.Done():
			// Lost: another member may own the partition already; commit nothing.
			return nil
		}
	}
}

// start loads the shard, finishes a window a crash left half done, and rebuilds the
// duplicate horizon from the log.
func (w *worker) start(ctx context.Context) error {
	p := w.st.partition
	var loaded *statestore.ShardState
	if err := w.retry(ctx, "loading shard", func(ctx context.Context) (err error) {
		loaded, err = w.store.LoadShard(ctx, int(p))
		return err
	}); err != nil {
		return err
	}
	w.st.offset, w.st.next, w.st.bitmaps = loaded.Offset, loaded.Next, loaded.Bitmaps
	w.st.groups = newShardGroups(loaded.Groups, loaded.Bitmaps)
	w.st.written = loaded.Offset + 1

	committed, err := w.committed(ctx)
	if err != nil {
		return err
	}
	// Redis may be ahead of the commit: the last window was written but the process
	// died before its changes were produced or its offset committed. Its changes are in
	// the outbox, written atomically with it; produce them again (consumers dedupe by
	// source offset) and commit, so the window's records are not folded twice.
	if ob := loaded.Outbox; ob != nil && ob.LastOffset >= committed && ob.LastOffset == loaded.Offset {
		w.logger.Info("re-producing changes of an uncommitted window", "partition", p,
			"first_offset", ob.FirstOffset, "last_offset", ob.LastOffset, "changes", len(ob.Changes))
		if err := w.produce(ctx, ob.Changes); err != nil {
			return err
		}
	}
	if loaded.Offset >= committed {
		if err := w.commit(ctx, loaded.Offset); err != nil {
			return err
		}
		committed = loaded.Offset + 1
	}
	w.committedOff, w.committedAt = committed, w.now()

	// Redis lost the shard while no one owned it: its bookkeeping is new, yet the
	// group had committed records folded into it. Fold the log up to the commit again
	// (changes of those records were all produced before).
	if loaded.Offset < 0 && committed > 0 {
		// rebuildState leaves the shard whole and its deadlines rebuilt.
		if err := w.rebuildState(ctx, committed-1, committed-1); err != nil {
			return err
		}
	} else if err := w.markWhole(ctx); err != nil {
		return err
	} else if err := w.rebuildDeadlines(ctx); err != nil {
		// Deadlines come from the state, before any new event is applied: users who went
		// silent while no aggregator owned the shard still time out, at once if overdue.
		return err
	}

	w.logger.Info("partition assigned", "partition", p, "state_offset", loaded.Offset,
		"committed", committed, "registered", loaded.Next, "deadlines", w.timeouts.Len())
	return nil
}

// rebuildDedupe remembers the event ids of the horizon before first, the first record
// the group hands this worker, so duplicates stay exact across restarts and
// rebalances.
func (w *worker) rebuildDedupe(ctx context.Context, first *kgo.Record) error {
	const what = "rebuilding the duplicate horizon"
	res, err := dedupe.Rebuild(ctx, dedupe.Spec{
		Read:      w.readRange,
		Topic:     w.topic,
		Partition: w.st.partition,
		Horizon:   w.cfg.DedupeHorizon,
		MaxIDs:    w.cfg.DedupeMaxIDs,
		// Reading a horizon of a busy partition takes far longer than one Redis write.
		Retry: w.policy(what, 2*time.Minute),
		What:  what,
		Now:   w.now,
	}, w.logger, first, func(win *dedupe.Window, e *presence.Event) {
		win.Duplicate(e.UserID, e.ID, e.ReceivedAt)
		if e.Kind == presence.KindErase {
			// The erasure's tombstone survives a restart (docs/design.md, "Erasure").
			win.Erase(e.UserID, e.OccurredAt, e.ReceivedAt)
		}
	})
	if err != nil {
		return err
	}
	w.dedupe, w.evicted = res.Window, 0
	w.logger.Info("duplicate horizon rebuilt", "partition", w.st.partition, "first_offset", first.Offset, "events", res.Events)
	return nil
}

// committed is the group's committed offset for the partition, 0 when none.
func (w *worker) committed(ctx context.Context) (int64, error) {
	var off int64
	err := w.retry(ctx, "fetching committed offset", func(ctx context.Context) error {
		resp, err := kadm.NewClient(w.cl).FetchOffsets(ctx, w.cfg.Group)
		if err != nil {
			return err
		}
		if r, ok := resp.Lookup(w.topic, w.st.partition); ok {
			if r.Err != nil {
				return r.Err
			}
			off = r.At
		}
		return nil
	})
	return max(off, 0), err
}

// flush folds the pending records as one window and makes it durable in the order of
// docs/design.md guarantee 6: Redis, then changes, then the offset commit.
func (w *worker) flush(ctx context.Context) error {
	if len(w.pending) == 0 {
		return nil
	}
	start := time.Now()
	batch := w.pending
	w.pending = nil
	last := batch[len(batch)-1].Offset
	prev := w.st.offset
	win, err := w.foldAndWrite(ctx, batch, false)
	if errors.Is(err, statestore.ErrStateLost) || errors.Is(err, statestore.ErrStateCorrupt) {
		// Redis lost the shard, or holds a state Pulse did not write: fold the log
		// again through this window, producing the changes of this window, which were
		// not produced yet.
		if errors.Is(err, statestore.ErrStateCorrupt) {
			w.logger.Error("a user state in Redis does not decode: rebuilding the shard from the log", "err", err)
		}
		if err := w.rebuildState(ctx, last, prev); err != nil {
			return err
		}
		w.metrics.flushSeconds.Observe(time.Since(start).Seconds())
		return w.commitNow(ctx)
	}
	if err != nil {
		return err
	}
	if win != nil && w.written != nil {
		w.written()
	}
	if win != nil {
		if err := w.produce(ctx, win.Outbox.Changes); err != nil {
			return err
		}
	}
	w.metrics.flushSeconds.Observe(time.Since(start).Seconds())
	return w.commitIfDue(ctx)
}

// commitIfDue commits the last folded offset once CommitInterval has passed since the
// last commit.
func (w *worker) commitIfDue(ctx context.Context) error {
	if w.now().Sub(w.committedAt) < w.cfg.CommitInterval {
		return nil
	}
	return w.commitNow(ctx)
}

// foldAndWrite folds batch into the shard and writes the window to Redis, guarded by
// offset; it returns the window written (nil when the batch held nothing to fold) for
// its changes to be produced. Records Redis holds already only feed the duplicate
// horizon. A shard that lost its state in Redis is statestore.ErrStateLost.
func (w *worker) foldAndWrite(ctx context.Context, batch []*kgo.Record, rebuilding bool) (*statestore.Window, error) {
	last := batch[len(batch)-1].Offset
	recs := make([]record, 0, len(batch))
	ids := make([]string, 0, len(batch))
	seen := make(map[string]struct{}, len(batch))
	var dead []*kgo.Record
	for _, r := range batch {
		e, err := records.DecodeEvent(r)
		if r.Offset <= w.st.offset {
			// Already folded into Redis before a restart; its id still counts for
			// duplicates of it that come later.
			if err == nil {
				w.dedupe.Duplicate(e.UserID, e.ID, e.ReceivedAt)
				if e.Kind == presence.KindErase {
					w.dedupe.Erase(e.UserID, e.OccurredAt, e.ReceivedAt)
				}
			}
			continue
		}
		if err != nil {
			if !rebuilding {
				// Guarantee 11: the record goes to the dead-letter topic, the partition on.
				w.metrics.undecodable.Inc()
				w.logger.Warn("undecodable record sent to the dead-letter topic", "partition", r.Partition, "offset", r.Offset, "err", err)
				dead = append(dead, deadletter.Record(r, "aggregator", err, w.now()))
			}
			continue
		}
		recs = append(recs, record{offset: r.Offset, event: e})
		if _, ok := seen[e.UserID]; !ok {
			seen[e.UserID] = struct{}{}
			ids = append(ids, e.UserID)
		}
	}
	// Dead letters are produced before the window is written: once Redis holds the
	// window, a restart skips its records.
	if len(dead) > 0 {
		if err := w.produceAll(ctx, "producing dead letters", dead, w.metrics.deadLetters); err != nil {
			return nil, err
		}
	}
	if len(recs) == 0 {
		w.st.offset = max(w.st.offset, last)
		return nil, nil
	}
	var users map[string]*presence.User
	if err := w.retry(ctx, "loading users", func(ctx context.Context) (err error) {
		users, err = w.store.LoadUsers(ctx, int(w.st.partition), ids)
		if errors.Is(err, statestore.ErrStateCorrupt) {
			// Retrying reads the same bytes: rebuild the shard instead.
			return retry.Permanent(err)
		}
		return err
	}); err != nil {
		return nil, err
	}
	w.st.tombstones = w.dedupe
	win, stats := fold(&w.st, recs, users, func(e *presence.Event) bool {
		return w.dedupe.Duplicate(e.UserID, e.ID, e.ReceivedAt)
	})
	win.LastOffset, win.Written, win.Rebuilding = last, w.st.written, rebuilding
	if err := w.retry(ctx, "writing window", func(ctx context.Context) error {
		_, err := w.store.WriteWindow(ctx, win)
		if errors.Is(err, statestore.ErrStateLost) {
			return retry.Permanent(err)
		}
		return err
	}); err != nil {
		return nil, err
	}
	w.st.written = last + 1
	w.st.next, w.st.bitmaps = win.Next, win.Bitmaps
	w.st.staged.commit()
	for _, e := range win.Erased {
		w.timeouts.Forget(e.UserID, e.State)
	}
	for id, u := range win.Users {
		w.timeouts.Update(id, u)
	}
	w.metrics.observeWindow(len(recs), stats, len(win.Outbox.Changes))
	if n := w.dedupe.EvictedIDs(); n > w.evicted {
		if w.evicted == 0 {
			w.logger.Warn("the duplicate horizon is full (PULSE_DEDUPE_MAX_IDS): event ids are forgotten before PULSE_DEDUPE_HORIZON",
				"max_ids", w.cfg.DedupeMaxIDs, "ids_span", w.dedupe.IDSpan().Round(time.Second), "horizon", w.cfg.DedupeHorizon)
		}
		w.metrics.dedupeEvicted.Add(float64(n - w.evicted))
		w.evicted = n
	}
	w.st.offset = last
	return win, nil
}

// commitNow commits the last folded offset if it is not committed yet. Offsets need
// not be committed every window: a restart skips records Redis already holds (their
// offsets are at most the shard's), and only the last window's changes can be
// unproduced, which its outbox covers.
func (w *worker) commitNow(ctx context.Context) error {
	if w.st.offset < 0 || w.st.offset < w.committedOff {
		return nil
	}
	if err := w.commit(ctx, w.st.offset); err != nil {
		return err
	}
	w.committedOff, w.committedAt = w.st.offset+1, w.now()
	return nil
}

// decideTimeouts writes every deadline that passed to presence.events as a timeout
// event. The events come back through the log like any other and are applied only if
// nothing newer for the device (or, for idle, no activity) came first.
func (w *worker) decideTimeouts(ctx context.Context) error {
	now := w.now()
	due := w.timeouts.Due(now)
	if len(due) == 0 {
		return nil
	}
	recs := make([]*kgo.Record, len(due))
	for i, d := range due {
		e := d.Event(now)
		// Keyed by user id like every event, so it lands in this partition.
		r, err := records.Event(w.topic, &e)
		if err != nil {
			return err
		}
		recs[i] = r
	}
	return w.produceAll(ctx, "producing timeouts", recs, w.metrics.timeouts)
}

// produce writes changes to presence.changes and waits for every ack.
func (w *worker) produce(ctx context.Context, changes []*pulsev1.Change) error {
	if len(changes) == 0 {
		return nil
	}
	recs := make([]*kgo.Record, len(changes))
	for i, c := range changes {
		r, err := records.Change(w.cfg.Kafka.ChangesTopic, c)
		if err != nil {
			return err
		}
		recs[i] = r
	}
	return w.produceAll(ctx, "producing changes", recs, w.metrics.changes)
}

// produceAll writes recs, retrying until every one is acked, and only then counts
// them: a retried produce must not count its records twice.
func (w *worker) produceAll(ctx context.Context, what string, recs []*kgo.Record, produced prometheus.Counter) error {
	if err := w.retry(ctx, what, func(ctx context.Context) error {
		return w.cl.ProduceSync(ctx, recs...).FirstErr()
	}); err != nil {
		return err
	}
	produced.Add(float64(len(recs)))
	return nil
}

// commit commits offset+1 for the partition: the next record to read.
func (w *worker) commit(ctx context.Context, offset int64) error {
	// CommitRecords commits a record's offset+1; a record made for the purpose lets
	// start commit past a window that Redis holds but the group never committed.
	r := &kgo.Record{Topic: w.topic, Partition: w.st.partition, Offset: offset, LeaderEpoch: -1}
	return w.retry(ctx, "committing offset", func(ctx context.Context) error {
		return w.cl.CommitRecords(ctx, r)
	})
}

// retry runs op, each try under the dependency deadline, until it succeeds or ctx
// ends: a Redis or Kafka outage stalls the partition instead of losing a window.
func (w *worker) retry(ctx context.Context, what string, op func(context.Context) error) error {
	return w.retryWithin(ctx, what, w.cfg.OpTimeout, op)
}

// retryWithin is retry with each try bounded by timeout instead of OpTimeout.
func (w *worker) retryWithin(ctx context.Context, what string, timeout time.Duration, op func(context.Context) error) error {
	return retry.Do(ctx, w.policy(what, timeout), w.logger, what, op)
}

// policy is how the worker retries what: from 50 ms doubling to 5 s, each try bounded
// by timeout, every failure counted by operation.
func (w *worker) policy(what string, timeout time.Duration) retry.Policy {
	return retry.Policy{
		Initial:    50 * time.Millisecond,
		Max:        5 * time.Second,
		TryTimeout: timeout,
		OnRetry:    func(int, error) { w.metrics.retries.WithLabelValues(what).Inc() },
	}
}

// rebuildState folds the partition's log from its start through offset upTo into
// Redis again, after Redis lost the shard (docs/design.md guarantee 10). Each attempt
// clears the shard and starts over; the shard is marked as rebuilding meanwhile, so
// readers answer 503 instead of a partial state. Changes of records after emitAfter
// (not produced before) are produced, the others were. The duplicate horizon and the
// deadlines come out of it as they were.
func (w *worker) rebuildState(ctx context.Context, upTo, emitAfter int64) error {
	p := w.st.partition
	w.rebuilding.Add(1)
	defer w.rebuilding.Add(-1)
	w.metrics.rebuilds.Inc()
	start := time.Now()
	w.logger.Warn("the shard's state is gone from Redis: rebuilding it from the log", "partition", p,
		"through_offset", upTo, "produced_through", emitAfter)
	var records, restored int
	err := w.retryWithin(ctx, "rebuilding the shard from the log", 10*time.Minute, func(ctx context.Context) error {
		// Whatever Redis still holds of the shard (a lagging replica's partial state)
		// must not be folded into the rebuilt one: start from nothing.
		if _, err := w.store.DeleteShard(ctx, int(p)); err != nil {
			return err
		}
		if err := w.register(ctx); err != nil {
			return err
		}
		// Mark the shard before any window of the rebuild lands.
		if err := w.store.MarkRebuilding(ctx, int(p)); err != nil {
			return err
		}
		loaded, err := w.store.LoadShard(ctx, int(p))
		if err != nil {
			return err
		}
		w.st.offset, w.st.next, w.st.bitmaps, w.st.written = loaded.Offset, loaded.Next, loaded.Bitmaps, loaded.Offset+1
		w.st.groups = newShardGroups(loaded.Groups, loaded.Bitmaps)
		w.dedupe, w.evicted = dedupe.NewWindow(w.cfg.DedupeHorizon), 0
		w.dedupe.LimitIDs(w.cfg.DedupeMaxIDs)
		// The fold arms deadlines as it goes; rebuildDeadlines replaces them at the end.
		w.timeouts = timeouts.New(w.cfg.OfflineAfter, w.cfg.IdleAfter)
		records = 0
		// Retention may have trimmed the log's start: its users come from history.
		start, err := w.logStart(ctx)
		if err != nil {
			return err
		}
		if start > 0 {
			if w.history == nil {
				w.metrics.withoutHistory.Inc()
				w.logger.Error("the log no longer starts at offset 0 and restoring from history is off: users whose every event is older read as never seen",
					"partition", p, "log_start", start)
			} else if restored, err = w.seedFromHistory(ctx, start, upTo); err != nil {
				return err
			}
		}
		var batch []*kgo.Record
		write := func() error {
			if len(batch) == 0 {
				return nil
			}
			win, err := w.foldAndWrite(ctx, batch, true)
			batch = batch[:0]
			if err != nil || win == nil {
				return err
			}
			var fresh []*pulsev1.Change
			for _, c := range win.Outbox.Changes {
				if c.SourceOffset > emitAfter {
					fresh = append(fresh, c)
				}
			}
			return w.produce(ctx, fresh)
		}
		// Time 0: the log from its first record on.
		err = w.readRange(ctx, w.topic, p, time.UnixMilli(0), upTo+1, func(r *kgo.Record) error {
			records++
			batch = append(batch, r)
			if len(batch) >= w.cfg.MaxWindowRecords {
				return write()
			}
			return nil
		})
		if err != nil {
			return err
		}
		return write()
	})
	if err != nil {
		return err
	}
	w.st.offset = max(w.st.offset, upTo)
	if err := w.rebuildDeadlines(ctx); err != nil {
		return err
	}
	if err := w.markWhole(ctx); err != nil {
		return err
	}
	took := time.Since(start)
	w.metrics.rebuildSeconds.Observe(took.Seconds())
	w.metrics.restored.Add(float64(restored))
	w.logger.Warn("shard rebuilt from the log", "partition", p, "records", records, "restored_from_history", restored, "registered", w.st.next,
		"took", took.Round(time.Millisecond), "users_per_second", int(float64(w.st.next)/max(took.Seconds(), 1e-3)))
	return nil
}

// checkState compares what Redis holds of the shard with what this worker wrote, so
// that a shard that lost its state is found even while no event arrives: it records
// the layout again when Redis lost it, rebuilds the shard from the log when Redis holds
// less than was written, and marks it whole when it holds everything.
func (w *worker) checkState(ctx context.Context) error {
	p := int(w.st.partition)
	read := func() (statestore.Bookkeeping, bool) {
		cctx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
		defer cancel()
		b, err := w.store.ShardBookkeeping(cctx, p)
		return b, err == nil // Redis unreachable: the next check or window write tells
	}
	b, ok := read()
	if !ok {
		return nil
	}
	if !b.Exists {
		cctx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
		err := w.register(cctx)
		cancel()
		if err != nil {
			return nil
		}
		if b, ok = read(); !ok {
			return nil
		}
	}
	if b.Offset < w.st.written-1 {
		return w.rebuildState(ctx, w.st.offset, w.st.offset)
	}
	if b.Rebuilding {
		cctx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
		defer cancel()
		_ = w.store.FinishRebuild(cctx, p) // retried at the next check
	}
	return nil
}

// rebuildDeadlines arms the deadlines of every live user of the shard's bitmaps, as
// Redis holds them now.
func (w *worker) rebuildDeadlines(ctx context.Context) error {
	return w.retryWithin(ctx, "rebuilding deadlines", 2*time.Minute, func(ctx context.Context) error {
		w.timeouts = timeouts.New(w.cfg.OfflineAfter, w.cfg.IdleAfter)
		return w.store.LiveUsers(ctx, int(w.st.partition), w.st.bitmaps[:], w.timeouts.Update)
	})
}

// markWhole clears the shard's rebuilding mark: its owner knows it whole.
func (w *worker) markWhole(ctx context.Context) error {
	return w.retry(ctx, "marking the shard whole", func(ctx context.Context) error {
		return w.store.FinishRebuild(ctx, int(w.st.partition))
	})
}
