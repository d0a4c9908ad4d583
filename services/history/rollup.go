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

	"github.com/RoaringBitmap/roaring/v2"
	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/pkg/horizon"
	"github.com/pulse-presence/pulse/pkg/presence"
	"github.com/pulse-presence/pulse/pkg/retry"
	"github.com/pulse-presence/pulse/pkg/rollup"
)

// The analysts' tables (migrations/0005_history_rollups.cql), written from each
// presence.changes partition's rollup.Fold. Rows of unfinished periods are rewritten as
// they grow, so the row Cassandra keeps must be the one written from the longest prefix
// of the log. Every row of a flush is written USING TIMESTAMP flushTimestamp: the
// fold's watermark in microseconds plus the offset of the last change folded. Both only
// grow along the log, the offset strictly, and both are functions of the log prefix
// alone, so the latest flush wins however the log was cut into batches and across a
// crash and replay. A row's own time (a session's or day's Through, a minute's
// watermark) would not do: changes of different users arrive up to the lateness out of
// order, so an open session can be written with a Through later than the change that
// then closes it, and two flushes at one watermark tie with different contents.
const (
	insertSessionCQL = `INSERT INTO user_sessions (user_id, month, session_start, start_us, session_end, open,
 online_us, idle_us, invisible_us, through, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?`
	insertUserDailyCQL = `INSERT INTO user_daily (user_id, year, day, online_us, idle_us, invisible_us,
 sessions, first_seen, last_seen, through, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?`
	insertDailyUsersCQL = `INSERT INTO daily_users (day, bucket, user_id, online_us, idle_us, invisible_us,
 sessions, first_seen, last_seen, through, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?`
	insertConcurrencyCQL = `INSERT INTO concurrency (day, minute, shard, online, idle, invisible,
 close_online, close_idle, close_invisible, peak_online) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?`
	insertUniquesCQL = `INSERT INTO uniques (day, hour, shard, users, cardinality) VALUES (?, ?, ?, ?, ?) USING TIMESTAMP ?`

	// Point in time (migrations/0007_point_in_time.cql).
	insertSnapshotCQL = `INSERT INTO shard_snapshots (shard, hour, at, online, idle, invisible,
 online_count, idle_count, invisible_count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?`
	insertShardChangeCQL = `INSERT INTO shard_changes (shard, minute, at_us, user_index, status) VALUES (?, ?, ?, ?, ?)
 USING TTL ? AND TIMESTAMP ?`
	insertShardUserCQL = `INSERT INTO shard_users (shard, block, user_index, user_id) VALUES (?, ?, ?, ?) USING TIMESTAMP ?`
	insertUserIndexCQL = `INSERT INTO user_indexes (user_id, shard, user_index) VALUES (?, ?, ?) USING TIMESTAMP ?`
	// How far the shard's point-in-time rows are final (0008_shard_progress.cql).
	upsertProgressCQL = `INSERT INTO shard_progress (shard, final_through) VALUES (?, ?) USING TIMESTAMP ?`

	// A checkpoint's data chunks, then its header (chunk -1) once they are all written.
	insertCheckpointChunkCQL = `INSERT INTO rollup_checkpoints (consumer_group, partition, chunk, generation, data)
 VALUES (?, ?, ?, ?, ?)`
	insertCheckpointHeaderCQL = `INSERT INTO rollup_checkpoints (consumer_group, partition, chunk, generation, log_offset, chunks)
 VALUES (?, ?, -1, ?, ?, ?)`
	selectCheckpointCQL = `SELECT chunk, generation, log_offset, chunks, data FROM rollup_checkpoints
 WHERE consumer_group = ? AND partition = ?`
)

// Table names, as metric labels.
const (
	tableSessions    = "user_sessions"
	tableUserDaily   = "user_daily"
	tableDailyUsers  = "daily_users"
	tableConcurrency = "concurrency"
	tableUniques     = "uniques"
	tableCheckpoints = "rollup_checkpoints"
	tableSnapshots   = "shard_snapshots"
	tableShardChange = "shard_changes"
	tableShardUsers  = "shard_users"
	tableUserIndexes = "user_indexes"
	tableProgress    = "shard_progress"
)

var rollupTables = []string{tableSessions, tableUserDaily, tableDailyUsers, tableConcurrency, tableUniques, tableCheckpoints,
	tableSnapshots, tableShardChange, tableShardUsers, tableUserIndexes, tableProgress}

// shardUsersBlock is how many indexes one shard_users partition holds.
const shardUsersBlock = 4096

// checkpointChunk is the most checkpoint bytes in one row: well under Cassandra's
// mutation and batch limits, each chunk is written as its own request.
const checkpointChunk = 256 << 10

// chunkBase is where a generation's data chunks start. Even and odd generations use
// separate chunk numbers, so a checkpoint that dies half written never overwrites the
// chunks of the complete one its header still names.
func chunkBase(generation int64) int32 {
	if generation%2 == 1 {
		return 1 << 20
	}
	return 0
}

// checkpoint is a fold's state as stored: the presence.changes offset it covers (every
// record up to and including it is folded in), its generation, and its bytes.
type checkpoint struct {
	generation int64
	offset     int64
	data       []byte
}

// checkpointLoader reads the newest complete checkpoint of a partition; ok is false
// when there is none.
type checkpointLoader interface {
	loadCheckpoint(ctx context.Context, group string, partition int32) (cp checkpoint, ok bool, err error)
}

var _ checkpointLoader = cassStore{}

func (s cassStore) loadCheckpoint(ctx context.Context, group string, partition int32) (checkpoint, bool, error) {
	iter := s.session.Query(selectCheckpointCQL, group, partition).IterContext(ctx)
	type chunk struct {
		generation int64
		data       []byte
	}
	chunks := map[int32]chunk{}
	var (
		header      *checkpoint
		count       int32
		n           int32
		gen, offset int64
		nchunks     *int32
		logOffset   *int64
		data        []byte
	)
	var bad error
	for iter.Scan(&n, &gen, &logOffset, &nchunks, &data) {
		if n == -1 {
			if logOffset == nil || nchunks == nil {
				bad = errors.New("loading rollup checkpoint: header without offset or chunk count")
				continue
			}
			offset, count = *logOffset, *nchunks
			header = &checkpoint{generation: gen, offset: offset}
			continue
		}
		chunks[n] = chunk{gen, slices.Clone(data)}
	}
	if err := iter.Close(); err != nil {
		return checkpoint{}, false, fmt.Errorf("loading rollup checkpoint: %w", err)
	}
	if bad != nil {
		return checkpoint{}, false, bad
	}
	if header == nil {
		return checkpoint{}, false, nil
	}
	base := chunkBase(header.generation)
	var buf bytes.Buffer
	for i := range count {
		c, ok := chunks[base+i]
		if !ok || c.generation != header.generation {
			return checkpoint{}, false, fmt.Errorf("loading rollup checkpoint: generation %d lacks chunk %d of %d", header.generation, i, count)
		}
		buf.Write(c.data)
	}
	header.data = buf.Bytes()
	return *header, true, nil
}

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
// ingest keeps occurred-at within MaxSkew of its clock either way.
func (h *history) lateness() time.Duration {
	return max(rollup.DefaultLateness, 2*h.cfg.MaxSkew)
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

// flushTimestamp is the write time of the rows of a flush (see above).
func (s *rollupState) flushTimestamp() int64 {
	return presence.Micros(s.fold.Watermark()) + s.through
}

// retention is how long the point-in-time rows live, as TTLs in seconds.
type retention struct{ snapshots, changes int }

// addRollup adds the statements of a Flush to plan, each with write time ts.
func (b *batchPlan) addRollup(rows *rollup.Rows, shard int32, ts int64, ttl retention) {
	for i := range rows.Sessions {
		s := &rows.Sessions[i]
		month := time.Date(s.Start.Year(), s.Start.Month(), 1, 0, 0, 0, 0, time.UTC)
		var end any = gocql.UnsetValue
		if !s.Open {
			end = s.End
		}
		b.add(tableSessions+"\x00"+s.UserID+"\x00"+month.Format(time.DateOnly), stmt{tableSessions, insertSessionCQL, []any{
			s.UserID, month, s.Start, presence.Micros(s.Start), end, s.Open,
			s.Online.Microseconds(), s.Idle.Microseconds(), s.Invisible.Microseconds(), s.Through, s.Status.String(),
			ts,
		}})
	}
	for i := range rows.Days {
		d := &rows.Days[i]
		var first, last any = gocql.UnsetValue, gocql.UnsetValue
		if !d.FirstSeen.IsZero() {
			first, last = d.FirstSeen, d.LastSeen
		}
		vals := []any{d.Online.Microseconds(), d.Idle.Microseconds(), d.Invisible.Microseconds(),
			d.Sessions, first, last, d.Through, d.Status.String(), ts}
		b.add(tableUserDaily+"\x00"+d.UserID+"\x00"+fmt.Sprint(d.Day.Year()), stmt{tableUserDaily, insertUserDailyCQL,
			append([]any{d.UserID, d.Day.Year(), d.Day}, vals...)})
		b.add(tableDailyUsers+"\x00"+d.Day.Format(time.DateOnly)+"\x00"+fmt.Sprint(shard), stmt{tableDailyUsers, insertDailyUsersCQL,
			append([]any{d.Day, int(shard), d.UserID}, vals...)})
	}
	for i := range rows.Minutes {
		m := &rows.Minutes[i]
		day := bucketOf(m.Minute)
		on, idle, inv := m.Close()
		b.add(tableConcurrency+"\x00"+day.Format(time.DateOnly), stmt{tableConcurrency, insertConcurrencyCQL, []any{
			day, m.Minute, int(m.Shard), ints(m.Online[:]), ints(m.Idle[:]), ints(m.Invisible[:]),
			int(on), int(idle), int(inv), int(m.PeakOnline()), ts,
		}})
	}
	for i := range rows.Hours {
		h := &rows.Hours[i]
		day := bucketOf(h.Hour)
		var buf bytes.Buffer
		_, _ = h.Users.WriteTo(&buf) // a bytes.Buffer does not fail
		b.add(tableUniques+"\x00"+day.Format(time.DateOnly), stmt{tableUniques, insertUniquesCQL, []any{
			day, h.Hour, int(h.Shard), buf.Bytes(), int64(h.Users.GetCardinality()), ts,
		}})
	}

	for i := range rows.Snapshots {
		sn := &rows.Snapshots[i]
		hour := sn.At.Truncate(time.Hour)
		blobs := make([][]byte, 3)
		for k, bm := range []*roaring.Bitmap{sn.Online, sn.Idle, sn.Invisible} {
			var buf bytes.Buffer
			_, _ = bm.WriteTo(&buf) // a bytes.Buffer does not fail
			blobs[k] = buf.Bytes()
		}
		b.add(fmt.Sprintf("%s\x00%d\x00%d", tableSnapshots, sn.Shard, hour.UnixMicro()), stmt{tableSnapshots, insertSnapshotCQL, []any{
			int(sn.Shard), hour, sn.At, blobs[0], blobs[1], blobs[2],
			int(sn.Online.GetCardinality()), int(sn.Idle.GetCardinality()), int(sn.Invisible.GetCardinality()), ttl.snapshots, ts,
		}})
	}
	for i := range rows.Changes {
		c := &rows.Changes[i]
		minute := c.At.Truncate(time.Minute)
		b.add(fmt.Sprintf("%s\x00%d\x00%d", tableShardChange, c.Shard, minute.UnixMicro()), stmt{tableShardChange, insertShardChangeCQL, []any{
			int(c.Shard), minute, c.At.UnixMicro(), int(c.Index), c.Status.String(), ttl.changes, ts,
		}})
	}
	for i := range rows.UserIndexes {
		u := &rows.UserIndexes[i]
		block := int(u.Index / shardUsersBlock)
		b.add(fmt.Sprintf("%s\x00%d\x00%d", tableShardUsers, u.Shard, block), stmt{tableShardUsers, insertShardUserCQL, []any{
			int(u.Shard), block, int(u.Index), u.UserID, ts,
		}})
		b.add(tableUserIndexes+"\x00"+u.UserID, stmt{tableUserIndexes, insertUserIndexCQL, []any{
			u.UserID, int(u.Shard), int(u.Index), ts,
		}})
	}
}

func ints(v []uint32) []int {
	out := make([]int, len(v))
	for i, n := range v {
		out[i] = int(n)
	}
	return out
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
		cp    checkpoint
		found bool
	)
	err := retry.Do(ctx, pol, w.logger, "loading the rollup checkpoint", func(ctx context.Context) error {
		var err error
		cp, found, err = h.checkpoints.loadCheckpoint(ctx, h.cfg.Group, w.partition)
		return err
	})
	if err != nil {
		return err
	}
	st := h.newRollup(w.partition)
	if found {
		if err := st.unmarshal(cp.data); err != nil {
			// A checkpoint this version cannot read: fold from here on rather than stall
			// the partition; the rows of periods it covered are not rewritten.
			h.m.checkpointFailures.Inc()
			w.logger.Error("unusable rollup checkpoint, starting the fold empty", "generation", cp.generation, "err", err)
			st = h.newRollup(w.partition)
		} else {
			st.generation, st.through, st.checkpointed = cp.generation, cp.offset, cp.offset
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
	since := st.maxAt.Add(-h.lateness() - h.cfg.MaxSkew - horizon.Slack)
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
// the header last, so that a reader only ever takes a complete checkpoint.
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
	base := chunkBase(gen)
	var chunks []*group
	for i := 0; i == 0 || i*checkpointChunk < len(data); i++ {
		part := data[i*checkpointChunk : min((i+1)*checkpointChunk, len(data))]
		chunks = append(chunks, &group{keys: 1, stmts: []stmt{{tableCheckpoints, insertCheckpointChunkCQL,
			[]any{w.h.cfg.Group, w.partition, base + int32(i), gen, part}}}})
	}
	if err := w.h.writer.write(ctx, chunks); err != nil {
		return err
	}
	header := &group{keys: 1, stmts: []stmt{{tableCheckpoints, insertCheckpointHeaderCQL,
		[]any{w.h.cfg.Group, w.partition, gen, st.through, int32(len(chunks))}}}}
	if err := w.h.writer.write(ctx, []*group{header}); err != nil {
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
