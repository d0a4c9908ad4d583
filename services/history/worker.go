package main

import (
	"context"
	"log/slog"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/domain/dedupe"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/records"
	"github.com/pulse-presence/pulse/internal/platform/consume"
	"github.com/pulse-presence/pulse/internal/platform/deadletter"
	"github.com/pulse-presence/pulse/internal/platform/retry"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
)

// poisonLogEvery is the most often one partition logs undecodable records; the
// skipped-records counter counts every one.
const poisonLogEvery = time.Minute

// committer commits r's offset+1 for r's partition (the group client's CommitRecords).
type committer func(ctx context.Context, r *kgo.Record) error

// history builds the partition workers of pulse-history.
type history struct {
	cfg       Config
	writer    *writer
	commit    committer
	readRange dedupe.ReadRange
	// checkpoints reads the rollup folds' checkpoints (the writer writes them).
	checkpoints checkpointLoader
	// scrubs finds the rows that still hold an erased user's index.
	scrubs indexScrubber
	// produce writes dead letters (presence.changes.dlq) and waits for the acks.
	produce func(ctx context.Context, recs ...*kgo.Record) error
	// ends lists presence.changes' end offsets for quiet partitions, and committed is
	// the group's committed offset of a partition, if any (quiet.go).
	ends      *endOffsets
	committed func(topic string, partition int32) (int64, bool)
	logger    *slog.Logger
	m         *metrics
}

// newWorker is the consumer's consume.NewWorker: events partitions get a horizon, and
// changes partitions need none (the aggregator emits each change once per position).
func (h *history) newWorker(topic string, partition int32) consume.Worker {
	w := &worker{
		h:         h,
		topic:     topic,
		partition: partition,
		events:    topic == h.cfg.Kafka.EventsTopic,
		logger:    h.logger.With("topic", topic, "partition", partition),
	}
	if w.events {
		w.window = dedupe.NewWindow(h.cfg.Horizon)
	}
	return w
}

// worker writes one partition of presence.events or presence.changes to Cassandra.
type worker struct {
	h         *history
	topic     string
	partition int32
	events    bool
	logger    *slog.Logger

	window    *dedupe.Window // events only
	windowLen int            // last Len reported to the gauge

	plan      *batchPlan  // gathered since the last flush; nil: nothing
	planned   *kgo.Record // the last record in plan
	lastFlush time.Time

	// started: the partition's state is rebuilt (from its first record, or for a quiet
	// changes partition from its end offset); next is the offset after the last record
	// gathered, lastRecord when it came, lastQuiet the last quiet check (quiet.go).
	started    bool
	next       int64
	lastRecord time.Time
	lastQuiet  time.Time

	// status is the user_status rows gathered since they were last written (at
	// lastStatus, when statusFrom was the log time of the first record they held),
	// kept across flushes: a user's row is written at most once every StatusInterval,
	// however many events and changes it saw. Offsets are committed without waiting for
	// them: after a crash, an events partition plans them again from the horizon it
	// re-reads (docs/design.md, History). A changes partition writes its user_status
	// rows with every flush.
	status     *statusPlan
	lastStatus time.Time
	statusFrom time.Time

	pending    *kgo.Record // written but not committed yet
	lastCommit time.Time

	poisonLogged  time.Time
	poisonSkipped int // since the last log line
	// dead are the changes records gathered since the last flush that cannot be
	// decoded: they go to presence.changes.dlq before the flush's writes.
	dead []*kgo.Record

	rollup *rollupState // changes only, from the first batch on
	// erasures are the users the fold forgot since the last flush (planErasure).
	erasures       []erasure
	lastCheckpoint time.Time
	// rollupHeld: the fold has changes whose rows were not flushed yet (at lastRollup
	// they last were). They are flushed every RollupInterval; a checkpoint keeps them,
	// so a commit need not wait for them.
	rollupHeld bool
	lastRollup time.Time
}

var _ consume.Worker = (*worker)(nil)

// Run gathers batches for up to FlushInterval (ChangesFlushInterval), writes them, then checkpoints the
// rollups when one is due and commits the last written offset. On revoke it writes what
// it gathered, checkpoints and commits, and returns; on loss (ctx cancelled) it returns
// at once without committing.
func (w *worker) Run(ctx context.Context, recs <-chan []*kgo.Record) error {
	defer w.h.m.windowEntries.Sub(float64(w.windowLen))
	defer w.dropRollupGauges()
	now := time.Now()
	w.lastCheckpoint, w.lastFlush, w.lastStatus, w.lastRollup, w.lastRecord = now, now, now, now, now
	w.status = &statusPlan{}
	// One timer serves every deadline: the gathered batches' flush, the pending commit,
	// the rollups' checkpoint and a changes partition's quiet check (a partition whose
	// records stop still gets them all once their interval passes).
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	if !w.events && w.h.cfg.QuietAfter > 0 {
		timer.Reset(w.h.cfg.QuietAfter)
	}
	for {
		select {
		case batch, ok := <-recs:
			if !ok {
				// Revoked or shutting down: write what was gathered, and checkpoint so
				// that whoever takes the partition over re-reads nothing.
				if ctx.Err() == nil && w.flush(ctx, true) == nil && w.rollup != nil {
					if err := w.checkpointRollup(ctx); err != nil {
						return nil
					}
				}
				w.commitPending(ctx)
				return nil
			}
			if !w.started {
				w.started = true
				rebuild := w.rebuild
				if !w.events {
					rebuild = w.restoreRollup
				}
				if err := rebuild(ctx, batch[0]); err != nil {
					return nil // only ctx ends a rebuild: the partition is lost
				}
			}
			w.gather(batch)
		case <-timer.C:
		case <-ctx.Done():
			return nil
		}
		wait, err := w.settle(ctx)
		if err != nil {
			return nil // only ctx ends a write: lost, or too slow to revoke
		}
		timer.Stop()
		if wait > 0 {
			timer.Reset(wait)
		}
	}
}

// settle does what is due: the flush of gathered batches and of the held user_status
// rows, then the rollups' checkpoint, then the commit. It returns how long until the next of them is due (0:
// nothing is pending), or ctx's error.
func (w *worker) settle(ctx context.Context) (time.Duration, error) {
	cfg := w.h.cfg
	var next time.Duration
	soonest := func(d time.Duration) {
		d = max(d, time.Millisecond)
		if next == 0 || d < next {
			next = d
		}
	}
	if w.plan != nil {
		every := cfg.FlushInterval
		if !w.events {
			every = cfg.ChangesFlushInterval
		}
		if wait := every - time.Since(w.lastFlush); wait > 0 && w.plan.size() < cfg.FlushStatements {
			soonest(wait)
		} else if err := w.flush(ctx, false); err != nil {
			return 0, err
		}
	}
	if w.plan == nil && ((w.events && w.status.len() > 0) || w.rollupHeld) {
		// Only user_status or rollup rows are held: they go on their own schedules.
		wait := time.Duration(math.MaxInt64)
		if w.events && w.status.len() > 0 {
			wait = cfg.StatusInterval - time.Since(w.lastStatus)
		}
		if w.rollupHeld {
			wait = min(wait, cfg.RollupInterval-time.Since(w.lastRollup))
		}
		if wait > 0 {
			soonest(wait)
		} else if err := w.flush(ctx, false); err != nil {
			return 0, err
		}
	}
	if w.rollup != nil && w.rollup.through > w.rollup.checkpointed && w.plan == nil {
		if wait := cfg.CheckpointInterval - time.Since(w.lastCheckpoint); wait > 0 {
			soonest(wait)
		} else {
			// The checkpoint goes first: a committed offset is covered by the
			// checkpoint, or the log after the checkpoint still holds it.
			if err := w.checkpointRollup(ctx); err != nil {
				return 0, err
			}
			w.commitPending(ctx)
		}
	}
	if w.pending != nil {
		if wait := cfg.CommitInterval - time.Since(w.lastCommit); wait > 0 {
			soonest(wait)
		} else {
			w.commitPending(ctx)
		}
	}
	if !w.events && cfg.QuietAfter > 0 {
		since := w.lastRecord
		if w.lastQuiet.After(since) {
			since = w.lastQuiet
		}
		if wait := cfg.QuietAfter - time.Since(since); wait > 0 {
			soonest(wait)
		} else {
			w.lastQuiet = time.Now()
			moved, err := w.quiet(ctx)
			if err != nil {
				return 0, err
			}
			if moved && w.plan == nil {
				if err := w.h.writer.write(ctx, []*historystore.Batch{w.provisionalRow()}); err != nil {
					return 0, err
				}
			}
			soonest(cfg.QuietAfter)
		}
	}
	return next, nil
}

// gather plans the writes of one batch on top of those gathered since the last flush.
func (w *worker) gather(batch []*kgo.Record) {
	if w.plan == nil {
		w.plan = &batchPlan{allEvents: w.h.cfg.EventRows == eventRowsAll, status: w.status, holdStatus: true}
	}
	if w.status.len() == 0 {
		w.statusFrom = batch[0].Timestamp
	}
	for _, r := range batch {
		if w.events {
			w.planEvent(w.plan, r)
		} else {
			w.planChange(w.plan, r)
		}
	}
	w.planned = batch[len(batch)-1]
	w.next, w.lastRecord = w.planned.Offset+1, time.Now()
	if w.window != nil {
		n := w.window.Len()
		w.h.m.windowEntries.Add(float64(n - w.windowLen))
		w.windowLen = n
	}
}

// flush writes the gathered batches, and the held user_status and rollup rows when they
// are due (final: now, before a checkpoint or a revoke); it returns only when every
// write succeeded, or with ctx's error.
func (w *worker) flush(ctx context.Context, final bool) error {
	cfg := w.h.cfg
	statusDue := w.status.len() > 0 && (final || !w.events || w.statusOverdue())
	rollupDue := w.rollupHeld && (final || time.Since(w.lastRollup) >= cfg.RollupInterval)
	if w.plan == nil && !statusDue && !rollupDue {
		return nil
	}
	if err := w.flushDead(ctx); err != nil {
		return err
	}
	plan := w.plan
	if plan == nil {
		plan = &batchPlan{status: w.status, holdStatus: true}
	}
	st := w.rollup
	if rollupDue {
		st.fold.Advance(st.maxAt)
		rows := st.fold.Flush()
		plan.addRollup(&rows, w.partition, st.flushTimestamp(), w.retention())
		w.reportRollup()
	} else if st != nil {
		// The changes go out with every flush, ahead of the rollups, so that readers
		// of the recent past see every change that has arrived.
		rows := st.fold.TakeChanges()
		plan.addRollup(&rows, w.partition, st.flushTimestamp(), w.retention())
	}
	for _, e := range w.erasures {
		if st == nil {
			break // only a changes partition erases rollups, and it has a fold
		}
		for _, wr := range historystore.ErasedRollupRows(e.user, w.partition, e.index, e.at, st.flushTimestamp()-1) {
			plan.add(wr)
		}
	}
	if st != nil && len(w.erasures) > 0 {
		if err := w.scrubErasures(ctx, st.flushTimestamp()-1); err != nil {
			return err
		}
	}
	keys := plan.keys()
	if statusDue {
		keys = append(keys, w.status.keys()...)
	}
	if err := w.h.writer.write(ctx, historystore.Pack(keys, w.h.cfg.MaxBatchStatements, w.h.cfg.BatchPartitions)); err != nil {
		return err
	}
	// Progress only once the flush's rows are written: readers trust every change dated
	// before it to be there.
	switch {
	case rollupDue && !st.fold.Frontier().IsZero():
		progress := historystore.Single(historystore.ProgressRow(w.partition, st.fold.Frontier(), st.maxAt, st.flushTimestamp()))
		if err := w.h.writer.write(ctx, []*historystore.Batch{progress}); err != nil {
			return err
		}
	case st != nil && !st.maxAt.IsZero():
		if err := w.h.writer.write(ctx, []*historystore.Batch{w.provisionalRow()}); err != nil {
			return err
		}
	}
	if w.plan != nil {
		w.plan, w.pending, w.lastFlush = nil, w.planned, time.Now()
	}
	w.erasures = nil
	if rollupDue {
		w.rollupHeld, w.lastRollup = false, time.Now()
	}
	if statusDue {
		w.status, w.lastStatus = &statusPlan{}, time.Now()
	}
	return nil
}

// retention is the TTLs of the point-in-time rows.
func (w *worker) retention() historystore.Retention {
	return historystore.Retention{Snapshots: w.h.cfg.SnapshotRetention, Changes: w.h.cfg.ShardChangesRetention}
}

// statusOverdue reports whether an events partition's held user_status rows are due:
// StatusInterval has passed, or they span that much of the log. The second bounds what
// the horizon re-read after a crash must cover when the partition reads a backlog
// faster than it was written.
func (w *worker) statusOverdue() bool {
	interval := w.h.cfg.StatusInterval
	if time.Since(w.lastStatus) >= interval {
		return true
	}
	return w.planned != nil && w.planned.Timestamp.Sub(w.statusFrom) >= interval
}

// flushDead produces the undecodable changes gathered since the last flush to the
// dead-letter topic, before the flush's writes.
func (w *worker) flushDead(ctx context.Context) error {
	if len(w.dead) == 0 {
		return nil
	}
	pol := retry.Policy{Initial: backoffMin, Max: backoffMax, TryTimeout: w.h.cfg.Kafka.RetryTimeout}
	if err := retry.Do(ctx, pol, w.logger, "producing dead letters", func(ctx context.Context) error {
		return w.h.produce(ctx, w.dead...)
	}); err != nil {
		return err
	}
	w.h.m.deadLetters.Add(float64(len(w.dead)))
	w.dead = nil
	return nil
}

func (w *worker) planEvent(plan *batchPlan, r *kgo.Record) {
	e, err := records.DecodeEvent(r)
	if err != nil {
		w.poison(r, err)
		return
	}
	if e.Kind == presence.KindMember {
		// Membership is not presence: no timeline entry, no sign of life. Its
		// effective changes reach user_status through presence.changes.
		return
	}
	if e.Kind == presence.KindErase {
		// The user's rows go, and events of theirs still in flight after it with it
		// (docs/design.md, "Erasure"); the erasure itself leaves no row.
		w.window.Erase(e.UserID, e.Time(), e.ReceivedAt)
		w.status.forget(e.UserID)
		for _, wr := range historystore.ErasedUserRows(e.UserID, e.Time()) {
			plan.add(wr)
		}
		w.h.m.erasures.Inc()
		return
	}
	if w.window.Duplicate(e.UserID, e.ID, e.ReceivedAt) {
		w.h.m.skipped.WithLabelValues(skipDuplicate).Inc()
		return
	}
	if w.window.Erased(e.UserID, e.Time(), e.ReceivedAt) {
		w.h.m.skipped.WithLabelValues(skipErased).Inc()
		return
	}
	stale := observe(w.window, &e)
	if stale {
		w.h.m.stale.Inc()
	}
	plan.addEvent(&e, stale, r.Partition, r.Offset)
}

// activityDevice is the pseudo-device under which the window remembers a user's newest
// activity (status and activity events), which idle timeouts are decided against;
// customDevice the newest status event that set or cleared the custom status, which
// custom status timeouts are.
const (
	activityDevice = "\x00activity"
	customDevice   = "\x00custom"
)

// observe records e in the window and reports whether the aggregator found it stale,
// by the same rules (internal/domain/presence): per device for events; for a timeout, whether
// something newer than its basis came first — a newer event of the device for an
// offline timeout, newer activity of the user for an idle timeout, a custom status set
// since for a custom status timeout.
func observe(win *dedupe.Window, e *presence.Event) bool {
	if e.Source == presence.SourceTimeout {
		device := e.DeviceID
		switch {
		case e.Kind == presence.KindCustom:
			device = customDevice
		case e.DeviceID == presence.AllDevices:
			device = activityDevice
		}
		return win.Stale(e.UserID, device, e.LastSeen, e.ReceivedAt)
	}
	stale := win.Stale(e.UserID, e.DeviceID, e.Time(), e.ReceivedAt)
	if !stale && (e.Kind == presence.KindStatus || e.Kind == presence.KindActivity) {
		win.Stale(e.UserID, activityDevice, e.Time(), e.ReceivedAt)
	}
	if !stale && e.Custom != nil {
		win.Stale(e.UserID, customDevice, e.Time(), e.ReceivedAt)
	}
	return stale
}

func (w *worker) planChange(plan *batchPlan, r *kgo.Record) {
	c, err := decodeChange(r)
	if err != nil {
		w.poison(r, err)
		return
	}
	if c.CustomOnly {
		// Not a transition: the event that made it is the timeline's entry.
		return
	}
	if c.Group != "" {
		// Not a transition either: membership, kept in user_status.
		plan.addMembership(&c)
		return
	}
	if c.Cause == causeErase {
		w.planErasure(&c, r.Offset)
		return
	}
	plan.addChange(&c)
	if w.rollup == nil {
		return
	}
	if w.rollup.apply(&c, r.Offset) {
		w.h.m.rollupChanges.WithLabelValues("repeated").Inc()
	} else {
		w.rollupHeld = true
	}
}

// planErasure folds an erasure change (the user going offline at the erasure), has the
// fold forget the user, and holds the deletion of the user's rollup rows for the next
// flush, which writes it at that flush's timestamp less one
// (historystore.ErasedRollupRows). The change itself leaves no row.
func (w *worker) planErasure(c *change, offset int64) {
	if w.rollup != nil {
		w.rollup.apply(c, offset)
		w.rollup.fold.Forget(c.UserID, c.UserIndex)
		w.rollupHeld = true
	}
	w.erasures = append(w.erasures, erasure{user: c.UserID, index: c.UserIndex, at: c.At})
	w.h.m.erasures.Inc()
}

// indexScrubber reads where an erased user's index is still set.
type indexScrubber interface {
	ErasedIndexRows(ctx context.Context, userID string, shard int32, index uint32, at, held time.Time, ts int64) (historystore.Scrub, error)
}

var _ indexScrubber = (*historystore.Store)(nil)

// scrubErasures takes each erased user's index out of the rows of the partition's
// shard that hold it without naming the user (historystore.ErasedIndexRows), at ts. It
// runs before the flush deletes the user's day rows, which locate those rows, so an
// erasure redone after a crash finds them again.
func (w *worker) scrubErasures(ctx context.Context, ts int64) error {
	held := w.rollup.maxAt.Add(-w.h.lateness())
	pol := retry.Policy{Initial: backoffMin, Max: backoffMax, TryTimeout: w.h.cfg.RebuildTimeout}
	for _, e := range w.erasures {
		from := held
		if e.at.Before(from) {
			from = e.at
		}
		var sc historystore.Scrub
		if err := retry.Do(ctx, pol, w.logger, "finding an erased user's index", func(ctx context.Context) error {
			var err error
			sc, err = w.h.scrubs.ErasedIndexRows(ctx, e.user, w.partition, e.index, e.at, from, ts)
			return err
		}); err != nil {
			return err
		}
		for _, writes := range [][]historystore.Write{sc.Located, sc.Uniques} {
			plan := &batchPlan{holdStatus: true}
			for _, wr := range writes {
				plan.add(wr)
			}
			if err := w.h.writer.write(ctx, historystore.Pack(plan.keys(), w.h.cfg.MaxBatchStatements, w.h.cfg.BatchPartitions)); err != nil {
				return err
			}
		}
		w.h.m.scrubbed.Add(float64(sc.Len()))
	}
	return nil
}

// erasure is a user whose rollup rows a flush deletes.
type erasure struct {
	user  string
	index uint32
	at    time.Time
}

// poison counts a record that cannot be decoded and skips it: one bad record must not
// stop the pipeline. The log line is rate-limited per partition.
func (w *worker) poison(r *kgo.Record, err error) {
	w.h.m.skipped.WithLabelValues(skipUndecodable).Inc()
	if !w.events {
		// The aggregator sends undecodable events to presence.events.dlq; history is
		// the one reader that gives up on a change (guarantee 11).
		w.dead = append(w.dead, deadletter.Record(r, "history", err, time.Now()))
	}
	w.poisonSkipped++
	if now := time.Now(); w.poisonLogged.IsZero() || now.Sub(w.poisonLogged) >= poisonLogEvery {
		w.logger.Warn("skipping undecodable records", "offset", r.Offset, "err", err,
			"skipped_since_last_log", w.poisonSkipped)
		w.poisonLogged, w.poisonSkipped = now, 0
	}
}

// commitPending commits the last written record, if any. A failed commit is logged and
// left pending: the next one covers it, and a replay would rewrite identical rows.
func (w *worker) commitPending(ctx context.Context) {
	r := w.pending
	if r == nil || ctx.Err() != nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, w.h.cfg.Kafka.RetryTimeout)
	err := w.h.commit(cctx, r)
	cancel()
	if err != nil {
		w.h.m.commitFailures.Inc()
		w.logger.Warn("committing offset", "offset", r.Offset, "err", err)
		return
	}
	w.pending = nil
	w.lastCommit = time.Now()
	if !r.Timestamp.IsZero() {
		w.h.m.commitLag.WithLabelValues(w.topic).Observe(max(time.Since(r.Timestamp).Seconds(), 0))
	}
}

// rebuild replays the horizon just before first, the first record the group hands this
// worker, through the window, so duplicates and staleness are decided exactly as if
// this worker had seen the partition all along. It retries until it succeeds or ctx ends.
func (w *worker) rebuild(ctx context.Context, first *kgo.Record) error {
	start := time.Now()
	res, err := dedupe.Rebuild(ctx, dedupe.Spec{
		Read:      w.h.readRange,
		Topic:     w.topic,
		Partition: w.partition,
		Horizon:   w.h.cfg.Horizon,
		Retry:     retry.Policy{Initial: backoffMin, Max: backoffMax, TryTimeout: w.h.cfg.RebuildTimeout},
		What:      "rebuilding the horizon",
	}, w.logger, first, func(win *dedupe.Window, e *presence.Event) {
		// The user_status rows of a crashed process may not have been written: the
		// horizon's fresh events plan them again (they carry the log's timestamps, so
		// rewriting what was written changes nothing).
		if e.Kind == presence.KindErase {
			// The horizon's erasures hold back the user's late events again.
			win.Erase(e.UserID, e.Time(), e.ReceivedAt)
			w.status.forget(e.UserID)
			return
		}
		if !win.Duplicate(e.UserID, e.ID, e.ReceivedAt) && !win.Erased(e.UserID, e.Time(), e.ReceivedAt) && !observe(win, e) {
			w.status.offerEvent(e)
		}
	})
	if err != nil {
		return err
	}
	w.window = res.Window
	w.h.m.rebuilt.Add(float64(res.Records))
	w.logger.Info("horizon rebuilt from the log", "first_offset", first.Offset, "since", res.Since,
		"records", res.Records, "entries", w.window.Len(), "took", time.Since(start).Round(time.Millisecond))
	return nil
}
