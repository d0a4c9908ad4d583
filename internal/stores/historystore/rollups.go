package historystore

import (
	"bytes"
	"fmt"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/rollup"
)

// The analysts' tables (migrations/0005_history_rollups.cql), written from each
// presence.changes partition's rollup.Fold. Rows of unfinished periods are rewritten as
// they grow, so the row Cassandra keeps must be the one written from the longest prefix
// of the log: every row of a flush carries the same write time, which the caller
// derives from the log prefix (pulse-history: the fold's watermark in microseconds plus
// the offset of the last change folded; docs/design.md, Rollups).
const (
	insertSessionCQL = `INSERT INTO user_sessions (user_id, month, session_start, start_us, session_end, open,
 online_us, idle_us, invisible_us, through, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?`
	insertUserDailyCQL = `INSERT INTO user_daily (user_id, year, day, online_us, idle_us, invisible_us,
 sessions, first_seen, last_seen, through, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?`
	insertDailyUsersCQL = `INSERT INTO daily_users (day, bucket, user_id, online_us, idle_us, invisible_us,
 sessions, first_seen, last_seen, through, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?`
	insertConcurrencyCQL = `INSERT INTO concurrency (day, minute, shard, online, idle, invisible,
 close_online, close_idle, close_invisible, peak_online) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?`
	insertUniquesCQL = `INSERT INTO uniques (day, hour, shard, users, cardinality, shown) VALUES (?, ?, ?, ?, ?, ?) USING TIMESTAMP ?`

	// Point in time (migrations/0007_point_in_time.cql).
	insertSnapshotCQL = `INSERT INTO shard_snapshots (shard, hour, at, online, idle, invisible,
 online_count, idle_count, invisible_count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?`
	insertShardChangeCQL = `INSERT INTO shard_changes (shard, minute, at_us, user_index, status) VALUES (?, ?, ?, ?, ?)
 USING TTL ? AND TIMESTAMP ?`
	insertShardUserCQL = `INSERT INTO shard_users (shard, block, user_index, user_id) VALUES (?, ?, ?, ?) USING TIMESTAMP ?`
	insertUserIndexCQL = `INSERT INTO user_indexes (user_id, shard, user_index) VALUES (?, ?, ?) USING TIMESTAMP ?`
	// How far the shard's point-in-time rows are final (0008_shard_progress.cql).
	upsertProgressCQL    = `INSERT INTO shard_progress (shard, final_through, provisional_through) VALUES (?, ?, ?) USING TIMESTAMP ?`
	upsertProvisionalCQL = `INSERT INTO shard_progress (shard, provisional_through) VALUES (?, ?) USING TIMESTAMP ?`
)

// Retention is how long the point-in-time rows live (their TTL), in whole seconds.
type Retention struct {
	Snapshots, Changes time.Duration
}

// RollupRows are the writes of the rows a rollup.Fold of shard flushed, each written
// at ts: sessions, days (a row in user_daily and one in daily_users each), minutes,
// hours, then the point-in-time snapshots, changes and user indexes.
func RollupRows(rows *rollup.Rows, shard int32, ts int64, ttl Retention) []Write {
	snapshotTTL, changesTTL := int(ttl.Snapshots/time.Second), int(ttl.Changes/time.Second)
	out := make([]Write, 0, len(rows.Sessions)+2*len(rows.Days)+len(rows.Minutes)+len(rows.Hours)+
		len(rows.Snapshots)+len(rows.Changes)+2*len(rows.UserIndexes))
	for i := range rows.Sessions {
		s := &rows.Sessions[i]
		month := time.Date(s.Start.Year(), s.Start.Month(), 1, 0, 0, 0, 0, time.UTC)
		var end any = gocql.UnsetValue
		if !s.Open {
			end = s.End
		}
		out = append(out, Write{InsertSession, TableSessions + "\x00" + s.UserID + "\x00" + month.Format(time.DateOnly), []any{
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
		out = append(out,
			Write{InsertUserDay, TableUserDaily + "\x00" + d.UserID + "\x00" + fmt.Sprint(d.Day.Year()),
				append([]any{d.UserID, d.Day.Year(), d.Day}, vals...)},
			Write{InsertDayUser, TableDailyUsers + "\x00" + d.Day.Format(time.DateOnly) + "\x00" + fmt.Sprint(shard),
				append([]any{d.Day, int(shard), d.UserID}, vals...)})
	}
	for i := range rows.Minutes {
		m := &rows.Minutes[i]
		day := dayOf(m.Minute)
		on, idle, inv := m.Close()
		out = append(out, Write{InsertConcurrency, TableConcurrency + "\x00" + day.Format(time.DateOnly), []any{
			day, m.Minute, int(m.Shard), ints(m.Online[:]), ints(m.Idle[:]), ints(m.Invisible[:]),
			int(on), int(idle), int(inv), int(m.PeakOnline()), ts,
		}})
	}
	for i := range rows.Hours {
		h := &rows.Hours[i]
		day := dayOf(h.Hour)
		out = append(out, Write{InsertUniques, TableUniques + "\x00" + day.Format(time.DateOnly), []any{
			day, h.Hour, int(h.Shard), blob(h.Users), int64(h.Users.GetCardinality()), blob(h.Shown), ts,
		}})
	}

	for i := range rows.Snapshots {
		sn := &rows.Snapshots[i]
		out = append(out, snapshotWrite(sn.Shard, sn.At, [3]*roaring.Bitmap{sn.Online, sn.Idle, sn.Invisible}, snapshotTTL, ts))
	}
	for i := range rows.Changes {
		c := &rows.Changes[i]
		minute := c.At.Truncate(time.Minute)
		out = append(out, Write{InsertShardChange, fmt.Sprintf("%s\x00%d\x00%d", TableShardChanges, c.Shard, minute.UnixMicro()), []any{
			int(c.Shard), minute, c.At.UnixMicro(), int(c.Index), c.Status.String(), changesTTL, ts,
		}})
	}
	for i := range rows.UserIndexes {
		u := &rows.UserIndexes[i]
		out = append(out, UserIndexRows(u.Shard, u.Index, u.UserID, ts)...)
	}
	return out
}

// snapshotWrite writes shard's snapshot at at, its online, idle and invisible
// bitmaps, with ttl seconds to live, at ts.
func snapshotWrite(shard int32, at time.Time, bms [3]*roaring.Bitmap, ttl int, ts int64) Write {
	hour := at.Truncate(time.Hour)
	return Write{InsertSnapshot, fmt.Sprintf("%s\x00%d\x00%d", TableSnapshots, shard, hour.UnixMicro()), []any{
		int(shard), hour, at, blob(bms[0]), blob(bms[1]), blob(bms[2]),
		int(bms[0].GetCardinality()), int(bms[1].GetCardinality()), int(bms[2].GetCardinality()), ttl, ts,
	}}
}

// blob is bm in its portable format.
func blob(bm *roaring.Bitmap) []byte {
	var buf bytes.Buffer
	_, _ = bm.WriteTo(&buf) // a bytes.Buffer does not fail
	return buf.Bytes()
}

// UserIndexRows record that index of shard is userID, both ways (shard_users,
// user_indexes), written at ts; rewriting them changes nothing.
func UserIndexRows(shard int32, index uint32, userID string, ts int64) []Write {
	block := int(index / ShardUsersBlock)
	return []Write{
		{InsertShardUser, fmt.Sprintf("%s\x00%d\x00%d", TableShardUsers, shard, block), []any{
			int(shard), block, int(index), userID, ts,
		}},
		{InsertUserIndex, TableUserIndexes + "\x00" + userID, []any{
			userID, int(shard), int(index), ts,
		}},
	}
}

// ProgressRow records that shard's point-in-time rows are final up to finalThrough and
// written, provisionally, up to provisionalThrough (0014_shard_progress_provisional.cql),
// at ts. It is written only once the rows of the flush it follows are: readers trust
// every change dated before them to be there.
func ProgressRow(shard int32, finalThrough, provisionalThrough time.Time, ts int64) Write {
	return Write{UpsertProgress, fmt.Sprintf("%s\x00%d", TableProgress, shard), []any{int(shard), finalThrough, provisionalThrough, ts}}
}

// ProvisionalRow moves shard's provisional_through alone, at ts: every change of the
// shard history has received dated up to provisionalThrough is written.
func ProvisionalRow(shard int32, provisionalThrough time.Time, ts int64) Write {
	return Write{UpsertProvisional, fmt.Sprintf("%s\x00%d", TableProgress, shard), []any{int(shard), provisionalThrough, ts}}
}

func ints(v []uint32) []int {
	out := make([]int, len(v))
	for i, n := range v {
		out[i] = int(n)
	}
	return out
}
