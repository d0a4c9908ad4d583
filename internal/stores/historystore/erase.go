package historystore

import (
	"fmt"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// An erasure (docs/design.md, "Erasure") deletes every row keyed by the user, each with
// USING TIMESTAMP chosen so that a replay of the user's older events or changes, which
// history writes again at the timestamps it derives from the log, can never bring a row
// back, while the rows of the user's events after the erasure (a new user of the same
// id) are kept: a Cassandra deletion shadows every write to its rows at or before its
// timestamp, whenever that write arrives.
//
//   - The rows written from events and changes (user_status, user_activity) carry the
//     event's received-at, or the event's or change's time: for everything before the
//     erasure at most its instant, and every event dated at or before it that arrives
//     later is dropped (the tombstone of dedupe.Window). So they are deleted at the
//     erasure's instant (ErasedUserRows).
//   - The rollup rows (sessions, days, the index maps) carry the flush's timestamp, which
//     only grows along the log: they are deleted at the timestamp of the flush that
//     follows the fold's forgetting of the user, less one, so that rows of the new user
//     written by that very flush stay (ErasedRollupRows).
//
// The day- and month-partitioned tables are deleted over ErasureReach back from the
// erasure, the longest retention of any of them (0013_retention.cql), and a day ahead
// (ingest takes events dated up to PULSE_INGEST_MAX_SKEW ahead of its clock). A table
// whose retention is set longer (pulsectl retention set) keeps rows older than that.
const (
	deleteUserStatusCQL    = `DELETE FROM user_status USING TIMESTAMP ? WHERE user_id = ?`
	deleteActivityDayCQL   = `DELETE FROM user_activity USING TIMESTAMP ? WHERE user_id = ? AND bucket = ?`
	deleteSessionsMonthCQL = `DELETE FROM user_sessions USING TIMESTAMP ? WHERE user_id = ? AND month = ?`
	deleteUserDailyYearCQL = `DELETE FROM user_daily USING TIMESTAMP ? WHERE user_id = ? AND year = ?`
	deleteDayUserCQL       = `DELETE FROM daily_users USING TIMESTAMP ? WHERE day = ? AND bucket = ? AND user_id = ?`
	deleteUserIndexCQL     = `DELETE FROM user_indexes USING TIMESTAMP ? WHERE user_id = ?`
	deleteShardUserCQL     = `DELETE FROM shard_users USING TIMESTAMP ? WHERE shard = ? AND block = ? AND user_index = ?`
)

// ErasureReach is how far back an erasure deletes the day- and month-partitioned rows.
const ErasureReach = 400 * 24 * time.Hour

// erasureDays is every UTC day from ErasureReach before at to the day after it.
func erasureDays(at time.Time) []time.Time {
	var out []time.Time
	for d := dayOf(at.Add(-ErasureReach)); !d.After(dayOf(at.Add(24 * time.Hour))); d = d.AddDate(0, 0, 1) {
		out = append(out, d)
	}
	return out
}

// ErasedUserRows deletes userID's user_status row and user_activity partitions, at the
// erasure's instant at.
func ErasedUserRows(userID string, at time.Time) []Write {
	ts := presence.Micros(at)
	out := []Write{{DeleteUserStatus, statusKey(userID), []any{ts, userID}}}
	for _, d := range erasureDays(at) {
		out = append(out, Write{DeleteActivityDay, activityKey(userID, d), []any{ts, userID, d}})
	}
	return out
}

// ErasedRollupRows deletes userID's sessions, days (user_daily and the user's row in
// every day of daily_users in shard), and index maps (index of shard), at ts: the
// timestamp of the flush after the fold forgot the user, less one.
func ErasedRollupRows(userID string, shard int32, index uint32, at time.Time, ts int64) []Write {
	var out []Write
	days := erasureDays(at)
	seenMonth, seenYear := map[time.Time]bool{}, map[int]bool{}
	for _, d := range days {
		month := time.Date(d.Year(), d.Month(), 1, 0, 0, 0, 0, time.UTC)
		if !seenMonth[month] {
			seenMonth[month] = true
			out = append(out, Write{DeleteSessionsMonth, TableSessions + "\x00" + userID + "\x00" + month.Format(time.DateOnly),
				[]any{ts, userID, month}})
		}
		if y := d.Year(); !seenYear[y] {
			seenYear[y] = true
			out = append(out, Write{DeleteUserDailyYear, TableUserDaily + "\x00" + userID + "\x00" + fmt.Sprint(y),
				[]any{ts, userID, y}})
		}
		out = append(out, Write{DeleteDayUser, TableDailyUsers + "\x00" + d.Format(time.DateOnly) + "\x00" + fmt.Sprint(shard),
			[]any{ts, d, int(shard), userID}})
	}
	block := int(index / ShardUsersBlock)
	return append(out,
		Write{DeleteUserIndex, TableUserIndexes + "\x00" + userID, []any{ts, userID}},
		Write{DeleteShardUser, fmt.Sprintf("%s\x00%d\x00%d", TableShardUsers, shard, block), []any{ts, int(shard), block, int(index)}})
}
