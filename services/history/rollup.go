package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/domain/dedupe"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/rollup"
	"github.com/pulse-presence/pulse/internal/platform/retry"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
)

// checkpointLoader reads the newest complete checkpoint of a partition; ok is false
// when there is none.
type checkpointLoader interface {
	LoadCheckpoint(ctx context.Context, group string, partition int32) (cp historystore.Checkpoint, ok bool, err error)
}

var _ checkpointLoader = (*historystore.Store)(nil)

// rollupState is one presence.changes partition's fold and what it needs besides.
type rollupState struct {
	fold *rollup.Fold
	// sources is the largest source offset folded per presence.events partition: the
	// aggregator may emit a change again after a crash, at the same source position.
	sources map[int32]int64
	// through is the last presence.changes offset folded in; -1 before any.
	through int64
	// generation and checkpointed are the generation and offset of the checkpoint
	// restored or last written (offset -1: none).
	generation   int64
	checkpointed int64
	// maxAt is the largest changed_at seen: the fold's watermark.
	maxAt time.Time
	// last is the Stats already reported to the metrics.
	last rollup.Stats
}

func (h *history) newRollup(partition int32) *rollupState {
	// The interval was validated with the configuration.
	f, _ := rollup.New(rollup.Config{Shard: partition, Lateness: h.lateness(), SnapshotEvery: h.cfg.SnapshotInterval})
	return &rollupState{fold: f, sources: map[int32]int64{}, through: -1, checkpointed: -1}
}

// lateness bounds how far out of changed_at order changes of different users arrive:
// PULSE_HISTORY_LATENESS, or by default twice MaxSkew, as ingest keeps occurred-at
// within MaxSkew of its clock either way.
func (h *history) lateness() time.Duration {
	if h.cfg.Lateness > 0 {
		return h.cfg.Lateness
	}
	return 2 * h.cfg.MaxSkew
}

// apply folds c, found at offset, unless it was folded already: at or before the
// checkpoint's offset, or at a source position already seen.
func (s *rollupState) apply(c *change, offset int64) (repeat bool) {
	if offset <= s.through {
		return true
	}
	s.through = offset
	if last, ok := s.sources[c.SourcePartition]; ok && c.SourceOffset <= last {
		return true
	}
	s.sources[c.SourcePartition] = c.SourceOffset
	dropped := s.fold.Stats().Dropped
	s.fold.Apply(rollup.Change{UserID: c.UserID, Index: c.UserIndex, Previous: c.Previous, Current: c.Current, At: c.At})
	// A change the fold dropped (one dated a day ahead, say) must not move the watermark.
	if c.At.After(s.maxAt) && s.fold.Stats().Dropped == dropped {
		s.maxAt = c.At
	}
	return false
}

// marshal is the checkpoint's bytes: a version, the source positions, the fold.
func (s *rollupState) marshal() ([]byte, error) {
	b := []byte{1}
	b = binary.AppendUvarint(b, uint64(len(s.sources)))
	for _, p := range slices.Sorted(maps.Keys(s.sources)) {
		b = binary.AppendVarint(b, int64(p))
		b = binary.AppendVarint(b, s.sources[p])
	}
	b = binary.AppendVarint(b, presence.Micros(s.maxAt))
	f, err := s.fold.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return append(b, f...), nil
}

func (s *rollupState) unmarshal(data []byte) error {
	if len(data) == 0 || data[0] != 1 {
		return errors.New("unknown checkpoint version")
	}
	r := bytes.NewReader(data[1:])
	n, err := binary.ReadUvarint(r)
	if err != nil || n > 1<<16 {
		return errors.New("bad source positions")
	}
	sources := make(map[int32]int64, n)
	for range n {
		p, err1 := binary.ReadVarint(r)
		o, err2 := binary.ReadVarint(r)
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("bad source position: %w", err)
		}
		sources[int32(p)] = o
	}
	at, err := binary.ReadVarint(r)
	if err != nil {
		return fmt.Errorf("bad watermark: %w", err)
	}
	if err := s.fold.UnmarshalBinary(data[len(data)-r.Len():]); err != nil {
		return err
	}
	s.sources, s.maxAt = sources, presence.FromMicros(at)
	return nil
}

// flushTimestamp is the write time of every row of a flush: the fold's watermark in
// microseconds plus the offset of the last change folded. Rows of unfinished periods
// are rewritten as they grow, so the row Cassandra keeps must be the one written from
// the longest prefix of the log. Both terms only grow along the log, the offset
// strictly, and both are functions of the log prefix alone, so the latest flush wins
// however the log was cut into batches and across a crash and replay. A row's own time
// (a session's or day's Through, a minute's watermark) would not do: changes of
// different users arrive up to the lateness out of order, so an open session can be
// written with a Through later than the change that then closes it, and two flushes at
// one watermark tie with different contents.
func (s *rollupState) flushTimestamp() int64 {
	return presence.Micros(s.fold.Watermark()) + s.through
}

// restoreRollup loads the partition's checkpoint and re-reads presence.changes from
// the offset after it up to first, the first record the group hands this worker, so
// the fold holds exactly what it would had this worker folded the partition all
// along. Without a checkpoint the fold starts empty at first. It retries until it
// succeeds or ctx ends.
func (w *worker) restoreRollup(ctx context.Context, first *kgo.Record) error {
	start := time.Now()
	h := w.h
	pol := retry.Policy{Initial: backoffMin, Max: backoffMax, TryTimeout: h.cfg.RebuildTimeout}
	var (
		cp    historystore.Checkpoint
		found bool
	)
	err := retry.Do(ctx, pol, w.logger, "loading the rollup checkpoint", func(ctx context.Context) error {
		var err error
		cp, found, err = h.checkpoints.LoadCheckpoint(ctx, h.cfg.Group, w.partition)
		return err
	})
	if err != nil {
		return err
	}
	st := h.newRollup(w.partition)
	if found {
		if err := st.unmarshal(cp.Data); err != nil {
			// A checkpoint this version cannot read: fold from here on rather than stall
			// the partition; the rows of periods it covered are not rewritten.
			h.m.checkpointFailures.Inc()
			w.logger.Error("unusable rollup checkpoint, starting the fold empty", "generation", cp.Generation, "err", err)
			st = h.newRollup(w.partition)
		} else {
			st.generation, st.through, st.checkpointed = cp.Generation, cp.Offset, cp.Offset
		}
	}
	// Stats count across checkpoints; the metrics count only what this process folds.
	st.last = st.fold.Stats()
	st.last.Users, st.last.Minutes, st.last.Hours = 0, 0, 0
	w.rollup = st
	// A checkpoint keeps the rows its fold had not flushed, and the re-read below
	// may add more.
	w.rollupHeld = true
	if !found || st.through < 0 || st.through+1 >= first.Offset {
		w.logger.Info("rollup fold ready", "checkpoint", found, "checkpoint_offset", st.through, "first_offset", first.Offset)
		return nil
	}
	// Changes after the checkpoint are stamped (by the aggregator, on producing them) no
	// earlier than their changed_at minus ingest's skew, and no earlier than the
	// watermark minus the fold's lateness: reading from there on finds all of them.
	since := st.maxAt.Add(-h.lateness() - h.cfg.MaxSkew - dedupe.Slack)
	if epoch := time.UnixMilli(0); since.Before(epoch) {
		// Kafka reads negative times as "latest" (-1) and "earliest" (-2).
		since = epoch
	}
	var snapshot []byte
	if snapshot, err = st.marshal(); err != nil {
		return fmt.Errorf("copying the rollup fold: %w", err)
	}
	through := st.through
	records := 0
	err = retry.Do(ctx, pol, w.logger, "replaying presence.changes into the rollup fold", func(ctx context.Context) error {
		// Every attempt starts again from the checkpoint.
		if err := st.unmarshal(snapshot); err != nil {
			return err
		}
		st.through, records = through, 0
		return h.readRange(ctx, w.topic, w.partition, since, first.Offset, func(r *kgo.Record) error {
			if r.Offset <= through {
				return nil
			}
			records++
			c, err := decodeChange(r)
			if err != nil {
				st.through = r.Offset
				return nil
			}
			st.apply(&c, r.Offset)
			return nil
		})
	})
	if err != nil {
		return err
	}
	st.fold.Advance(st.maxAt)
	h.m.rollupReplayed.Add(float64(records))
	w.logger.Info("rollup fold restored from its checkpoint and the log", "generation", st.generation,
		"checkpoint_offset", through, "first_offset", first.Offset, "records", records,
		"took", time.Since(start).Round(time.Millisecond))
	return nil
}

// checkpointRollup writes the fold's state and the offset it covers, chunks first and
// the header last, so that a reader only ever takes a complete checkpoint
// (historystore.CheckpointBatches).
func (w *worker) checkpointRollup(ctx context.Context) error {
	st := w.rollup
	if st == nil || st.through <= st.checkpointed {
		w.lastCheckpoint = time.Now()
		return nil
	}
	data, err := st.marshal()
	if err != nil {
		return fmt.Errorf("checkpointing the rollup fold: %w", err)
	}
	gen := st.generation + 1
	chunks, header := historystore.CheckpointBatches(w.h.cfg.Group, w.partition,
		historystore.Checkpoint{Generation: gen, Offset: st.through, Data: data})
	if err := w.h.writer.write(ctx, chunks); err != nil {
		return err
	}
	if err := w.h.writer.write(ctx, []*historystore.Batch{header}); err != nil {
		return err
	}
	st.generation, st.checkpointed = gen, st.through
	w.lastCheckpoint = time.Now()
	w.h.m.checkpoints.Inc()
	w.h.m.checkpointBytes.Observe(float64(len(data)))
	return nil
}

// reportRollup moves the metrics by what the fold did since the last report.
func (w *worker) reportRollup() {
	st := w.rollup
	if st == nil {
		return
	}
	s, m := st.fold.Stats(), w.h.m
	m.rollupChanges.WithLabelValues("applied").Add(float64(s.Applied - min(s.Applied, st.last.Applied)))
	m.rollupChanges.WithLabelValues("late").Add(float64(s.Late - min(s.Late, st.last.Late)))
	m.rollupChanges.WithLabelValues("dropped").Add(float64(s.Dropped - min(s.Dropped, st.last.Dropped)))
	m.rollupChanges.WithLabelValues("mismatched").Add(float64(s.Mismatched - min(s.Mismatched, st.last.Mismatched)))
	m.rollupUsers.Add(float64(s.Users - st.last.Users))
	m.rollupMinutes.Add(float64(s.Minutes - st.last.Minutes))
	m.rollupHours.Add(float64(s.Hours - st.last.Hours))
	st.last = s
}

// dropRollupGauges takes the partition's state out of the gauges when it goes.
func (w *worker) dropRollupGauges() {
	if st := w.rollup; st != nil {
		w.h.m.rollupUsers.Sub(float64(st.last.Users))
		w.h.m.rollupMinutes.Sub(float64(st.last.Minutes))
		w.h.m.rollupHours.Sub(float64(st.last.Hours))
	}
}
