package historystore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
)

// An erasure also takes the user's dense index out of the rows that hold it without
// naming the user (docs/design.md, "Erasure"): the uniques hours, the point-in-time
// snapshots and shard_changes. Those rows are keyed by day, hour or minute, not by
// user, so ErasedIndexRows first finds them: the hours the user may have been present
// come from their user_daily rows (a day row is written whenever the user was present
// that day, with the first and last instants seen, and an hour or snapshot holds the
// index only while the user was present), plus the hours a fold still held unwritten;
// the shard's uniques rows of those hours that hold the index then locate the
// snapshots and changes to read.
//
// The rewritten rows keep what remains of their TTL and carry the timestamp of the
// deletions of the same erasure, so a replay that writes the old rows again at their
// own, earlier, timestamps is shadowed too.
const (
	selectUserDaysCQL      = `SELECT day, first_seen, last_seen FROM user_daily WHERE user_id = ? AND year = ?`
	selectUniquesHoursCQL  = `SELECT hour, users, shown, TTL(users) FROM uniques WHERE day = ? AND hour IN ? AND shard = ?`
	selectSnapshotsHourCQL = `SELECT at, online, idle, invisible, TTL(online) FROM shard_snapshots WHERE shard = ? AND hour = ?`
	selectChangesHourCQL   = `SELECT minute, at_us, user_index FROM shard_changes WHERE shard = ? AND minute IN ?`
	rewriteUniquesCQL      = `INSERT INTO uniques (day, hour, shard, users, cardinality, shown) VALUES (?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?`
	deleteShardChangeCQL   = `DELETE FROM shard_changes USING TIMESTAMP ? WHERE shard = ? AND minute = ? AND at_us = ? AND user_index = ?`
)

// Scrub is the writes that take an erased index out of its shard's rows, in the order
// they must be written: Located (snapshots and shard_changes) before Uniques, whose
// rows locate them, so that an erasure redone after a crash between the two still
// finds every row.
type Scrub struct {
	Located, Uniques []Write
}

// Len is the number of writes.
func (s Scrub) Len() int { return len(s.Located) + len(s.Uniques) }

// ErasedIndexRows reads where index of shard, userID's until the erasure at at, is
// still set and returns the writes that remove it, at ts. held is the earliest instant
// whose hour a fold may not have written yet: those hours are read whether or not a
// uniques row holds the index.
func (s *Store) ErasedIndexRows(ctx context.Context, userID string, shard int32, index uint32, at, held time.Time, ts int64) (Scrub, error) {
	var out Scrub
	present, err := s.presentHours(ctx, userID, at, held)
	if err != nil {
		return out, err
	}
	located := map[time.Time]bool{}
	for h := held.UTC().Truncate(time.Hour); !h.After(at); h = h.Add(time.Hour) {
		located[h] = true
	}
	for _, day := range sortedKeys(present) {
		if err := s.scrubUniques(ctx, day, sortedKeys(present[day]), shard, index, ts, located, &out); err != nil {
			return out, err
		}
	}
	for _, h := range sortedKeys(located) {
		if err := s.scrubSnapshots(ctx, h, shard, index, ts, &out); err != nil {
			return out, err
		}
		if err := s.scrubChanges(ctx, h, shard, index, ts, &out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// presentHours is, by day, every hour within ErasureReach of at in which userID may
// have been present: those from the first to the last instant seen of each of their
// user_daily rows (the whole day when a row has none), and those from held to at,
// which a fold may not have written yet.
func (s *Store) presentHours(ctx context.Context, userID string, at, held time.Time) (map[time.Time]map[time.Time]bool, error) {
	out := map[time.Time]map[time.Time]bool{}
	add := func(from, to time.Time) {
		for h := from.UTC().Truncate(time.Hour); !h.After(to); h = h.Add(time.Hour) {
			d := dayOf(h)
			if out[d] == nil {
				out[d] = map[time.Time]bool{}
			}
			out[d][h] = true
		}
	}
	add(held, at)
	for y := at.Add(-ErasureReach).Year(); y <= at.Add(24*time.Hour).Year(); y++ {
		it := s.session.Query(selectUserDaysCQL, userID, y).PageSize(500).IterContext(ctx)
		var d, first, last time.Time
		for it.Scan(&d, &first, &last) {
			if first.IsZero() || last.IsZero() {
				first, last = dayOf(d), dayOf(d).Add(23*time.Hour)
			}
			add(first, last)
			first, last = time.Time{}, time.Time{}
		}
		if err := it.Close(); err != nil {
			return nil, fmt.Errorf("days of %s in %d: %w", userID, y, err)
		}
	}
	return out, nil
}

// sortedKeys is the instants of m in order.
func sortedKeys[V any](m map[time.Time]V) []time.Time {
	out := make([]time.Time, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// scrubUniques rewrites shard's uniques rows of the given hours of day that hold index
// without it, and adds those hours to located. It reads the shard's rows of those
// hours alone: each holds a bitmap of the whole shard.
func (s *Store) scrubUniques(ctx context.Context, day time.Time, hours []time.Time, shard int32, index uint32, ts int64, located map[time.Time]bool, out *Scrub) error {
	it := s.session.Query(selectUniquesHoursCQL, day, hours, int(shard)).PageSize(100).IterContext(ctx)
	var (
		hour         time.Time
		ttl          int
		users, shown []byte
	)
	for it.Scan(&hour, &users, &shown, &ttl) {
		u, uok, err := without(users, index)
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("uniques of shard %d at %s: %w", shard, hour.Format(time.RFC3339), err)
		}
		v, vok, err := without(shown, index)
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("uniques of shard %d at %s: %w", shard, hour.Format(time.RFC3339), err)
		}
		if !uok && !vok {
			continue
		}
		located[hour.UTC()] = true
		var shownVal any = shown // rows written before 0009 have none
		if shown != nil {
			shownVal = blob(v)
		}
		out.Uniques = append(out.Uniques, Write{RewriteUniques, TableUniques + "\x00" + day.Format(time.DateOnly), []any{
			day, hour, int(shard), blob(u), int64(u.GetCardinality()), shownVal, ttl, ts,
		}})
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("uniques of shard %d on %s: %w", shard, day.Format(time.DateOnly), err)
	}
	return nil
}

// scrubSnapshots rewrites shard's snapshots of hour that hold index without it.
func (s *Store) scrubSnapshots(ctx context.Context, hour time.Time, shard int32, index uint32, ts int64, out *Scrub) error {
	it := s.session.Query(selectSnapshotsHourCQL, int(shard), hour).PageSize(60).IterContext(ctx)
	var (
		at   time.Time
		ttl  int
		bits [3][]byte
	)
	for it.Scan(&at, &bits[0], &bits[1], &bits[2], &ttl) {
		var (
			bms   [3]*roaring.Bitmap
			found bool
		)
		for k, b := range bits {
			bm, ok, err := without(b, index)
			if err != nil {
				_ = it.Close()
				return fmt.Errorf("snapshot of shard %d at %s: %w", shard, at.Format(time.RFC3339), err)
			}
			bms[k], found = bm, found || ok
		}
		if !found {
			continue
		}
		out.Located = append(out.Located, snapshotWrite(shard, at, bms, ttl, ts))
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("snapshots of shard %d at %s: %w", shard, hour.Format(time.RFC3339), err)
	}
	return nil
}

// scrubChanges deletes index's shard_changes rows of hour's minutes and of the minute
// that ends it (a session that ended exactly on the hour is in the hour before).
func (s *Store) scrubChanges(ctx context.Context, hour time.Time, shard int32, index uint32, ts int64, out *Scrub) error {
	minutes := make([]time.Time, 61)
	for i := range minutes {
		minutes[i] = hour.Add(time.Duration(i) * time.Minute)
	}
	it := s.session.Query(selectChangesHourCQL, int(shard), minutes).PageSize(5000).IterContext(ctx)
	var (
		minute time.Time
		us     int64
		idx    int
	)
	for it.Scan(&minute, &us, &idx) {
		if uint32(idx) != index {
			continue
		}
		out.Located = append(out.Located, ShardChangeDeletion(shard, minute, us, index, ts))
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("changes of shard %d at %s: %w", shard, hour.Format(time.RFC3339), err)
	}
	return nil
}

// ShardChangeDeletion deletes the shard_changes row of index at atUs in minute, at ts.
func ShardChangeDeletion(shard int32, minute time.Time, atUs int64, index uint32, ts int64) Write {
	return Write{DeleteShardChange, fmt.Sprintf("%s\x00%d\x00%d", TableShardChanges, shard, minute.UnixMicro()),
		[]any{ts, int(shard), minute, atUs, int(index)}}
}

// without decodes a portable roaring bitmap and removes index; ok says it held it. A
// nil blob is an empty bitmap.
func without(b []byte, index uint32) (bm *roaring.Bitmap, ok bool, err error) {
	bm = roaring.New()
	if len(b) > 0 {
		if _, err := bm.ReadFrom(bytes.NewReader(b)); err != nil {
			return nil, false, fmt.Errorf("decoding a bitmap: %w", err)
		}
	}
	return bm, bm.CheckedRemove(index), nil
}
