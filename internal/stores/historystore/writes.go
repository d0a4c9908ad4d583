package historystore

import (
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// Statement names one of the statements history writes.
type Statement uint8

// The statements history writes. Each one's CQL is beside the constructors that bind
// it: events, changes and user_status here, rollups in rollups.go, checkpoints in
// checkpoints.go.
const (
	InsertEvent Statement = iota + 1
	InsertChange
	UpdateSeen
	UpdateActive
	UpdateStatus
	InsertSession
	InsertUserDay
	InsertDayUser
	InsertConcurrency
	InsertUniques
	InsertSnapshot
	InsertShardChange
	InsertShardUser
	InsertUserIndex
	UpsertProgress
	UpsertProvisional
	InsertCheckpointChunk
	InsertCheckpointHeader
	UpdateCustom
	UpdateGroupJoin
	UpdateGroupLeave
	DeleteUserStatus
	DeleteActivityDay
	DeleteSessionsMonth
	DeleteUserDailyYear
	DeleteDayUser
	DeleteUserIndex
	DeleteShardUser
	RewriteUniques
	DeleteShardChange
)

// statements are the table and the CQL of each Statement: a constant table, never
// written.
var statements = [...]struct{ table, cql string }{
	InsertEvent:            {TableActivity, insertEventCQL},
	InsertChange:           {TableActivity, insertChangeCQL},
	UpdateSeen:             {TableStatus, updateSeenCQL},
	UpdateActive:           {TableStatus, updateActiveCQL},
	UpdateStatus:           {TableStatus, updateStatusCQL},
	InsertSession:          {TableSessions, insertSessionCQL},
	InsertUserDay:          {TableUserDaily, insertUserDailyCQL},
	InsertDayUser:          {TableDailyUsers, insertDailyUsersCQL},
	InsertConcurrency:      {TableConcurrency, insertConcurrencyCQL},
	InsertUniques:          {TableUniques, insertUniquesCQL},
	InsertSnapshot:         {TableSnapshots, insertSnapshotCQL},
	InsertShardChange:      {TableShardChanges, insertShardChangeCQL},
	InsertShardUser:        {TableShardUsers, insertShardUserCQL},
	InsertUserIndex:        {TableUserIndexes, insertUserIndexCQL},
	UpsertProgress:         {TableProgress, upsertProgressCQL},
	UpsertProvisional:      {TableProgress, upsertProvisionalCQL},
	InsertCheckpointChunk:  {TableCheckpoints, insertCheckpointChunkCQL},
	InsertCheckpointHeader: {TableCheckpoints, insertCheckpointHeaderCQL},
	UpdateCustom:           {TableStatus, updateCustomCQL},
	UpdateGroupJoin:        {TableStatus, updateGroupJoinCQL},
	UpdateGroupLeave:       {TableStatus, updateGroupLeaveCQL},
	DeleteUserStatus:       {TableStatus, deleteUserStatusCQL},
	DeleteActivityDay:      {TableActivity, deleteActivityDayCQL},
	DeleteSessionsMonth:    {TableSessions, deleteSessionsMonthCQL},
	DeleteUserDailyYear:    {TableUserDaily, deleteUserDailyYearCQL},
	DeleteDayUser:          {TableDailyUsers, deleteDayUserCQL},
	DeleteUserIndex:        {TableUserIndexes, deleteUserIndexCQL},
	DeleteShardUser:        {TableShardUsers, deleteShardUserCQL},
	RewriteUniques:         {TableUniques, rewriteUniquesCQL},
	DeleteShardChange:      {TableShardChanges, deleteShardChangeCQL},
}

// Write is one statement with its bound values, and the partition key it writes.
// The constructors below and in rollups.go and checkpoints.go make them.
type Write struct {
	stmt Statement
	key  string
	args []any
}

// Statement is which statement w runs.
func (w Write) Statement() Statement { return w.stmt }

// Table is the table w writes.
func (w Write) Table() string { return statements[w.stmt].table }

// Key identifies the partition w writes: writes of one key belong in one batch.
func (w Write) Key() string { return w.key }

// Values are w's bound values in the statement's order (gocql.UnsetValue for a column
// left unwritten), for tests and logs; they must not be changed.
func (w Write) Values() []any { return w.args }

func (w Write) cql() string { return statements[w.stmt].cql }

// The writes of events and changes. Every one carries USING TIMESTAMP from the log, so
// Cassandra's last-write-wins orders cells by the log, not by when a write arrived: a
// replay rewrites identical cells, and an old event never overwrites a newer one.
const (
	// An event as received, with what it did to the user's custom status (0010);
	// micros of received-at as its write time (rewritten alike).
	insertEventCQL = `INSERT INTO user_activity (user_id, bucket, occurred_at, entry_id, entry_type,
 kind, status, device_id, source, received_at, stale, log_partition, log_offset,
 custom, custom_text, custom_emoji, custom_until)
 VALUES (?, ?, ?, ?, 'event', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?`
	// An effective change; micros of changed-at as its write time.
	insertChangeCQL = `INSERT INTO user_activity (user_id, bucket, occurred_at, entry_id, entry_type,
 status, previous_status, cause, device_id, log_partition, log_offset)
 VALUES (?, ?, ?, ?, 'change', ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?`
	// A fresh event's time as the user's last-seen (and last-active for status and
	// activity events); micros of the event's time as write time: the newest event wins.
	updateSeenCQL   = `UPDATE user_status USING TIMESTAMP ? SET last_seen = ?, last_event_id = ? WHERE user_id = ?`
	updateActiveCQL = `UPDATE user_status USING TIMESTAMP ? SET last_seen = ?, last_active = ?, last_event_id = ? WHERE user_id = ?`
	// A change as the user's status; changed-at grows per user, so the newest wins.
	updateStatusCQL = `UPDATE user_status USING TIMESTAMP ? SET status = ?, last_updated = ? WHERE user_id = ?`
)

// EventRow is the user_activity row of event e, found at partition/offset of
// presence.events: in the bucket (UTC day) of the event's time, with entry id
// "e:<event id>", written at its received-at. An event that set or cleared the user's
// custom status writes custom = true and the status it set; any other writes none of
// those columns.
func EventRow(e *presence.Event, stale bool, partition int32, offset int64) Write {
	t := e.Time()
	bucket := dayOf(t)
	status := ""
	if e.Kind == presence.KindStatus {
		status = e.Status.String()
	}
	var custom, text, emoji, until any = gocql.UnsetValue, gocql.UnsetValue, gocql.UnsetValue, gocql.UnsetValue
	if c := customOf(e); c != nil {
		custom, text, emoji = true, orUnset(c.Text), orUnset(c.Emoji)
		if !c.Until.IsZero() {
			until = c.Until
		}
	}
	return Write{InsertEvent, activityKey(e.UserID, bucket), []any{
		e.UserID, bucket, t, "e:" + e.ID,
		e.Kind.String(), orUnset(status), e.DeviceID, e.Source.String(), e.ReceivedAt, stale, partition, offset,
		custom, text, emoji, until,
		presence.Micros(e.ReceivedAt),
	}}
}

// customOf is what event e did to its user's custom status: nil for nothing, the zero
// CustomStatus for a clear. The aggregator's timeout at a custom status's until
// (KindCustom) carries none of its own: the event itself is the clear.
func customOf(e *presence.Event) *presence.CustomStatus {
	if e.Custom == nil && e.Kind == presence.KindCustom {
		return &presence.CustomStatus{}
	}
	return e.Custom
}

// Change is an effective change as user_activity records it.
type Change struct {
	UserID string
	// EventID is the id of the event (or timeout) that caused the change.
	EventID string
	// Previous is StatusUnknown for a user's first change.
	Previous, Current presence.Status
	At                time.Time
	// Cause is "event", "timeout" or "" when unspecified; DeviceID "" when none.
	Cause, DeviceID string
	// SourcePartition and SourceOffset are the causing event's position in
	// presence.events.
	SourcePartition int32
	SourceOffset    int64
}

// ChangeRow is the user_activity row of c: in the bucket of its time, with entry id
// "c:<causing event id>", written at its time.
func ChangeRow(c *Change) Write {
	bucket := dayOf(c.At)
	prev := ""
	if c.Previous != presence.StatusUnknown {
		prev = c.Previous.String()
	}
	return Write{InsertChange, activityKey(c.UserID, bucket), []any{
		c.UserID, bucket, c.At, "c:" + c.EventID,
		c.Current.String(), orUnset(prev), orUnset(c.Cause), orUnset(c.DeviceID), c.SourcePartition, c.SourceOffset,
		presence.Micros(c.At),
	}}
}

// SeenUpdate sets the user's last_seen and last_event_id to a fresh event's time and
// id, written at that time.
func SeenUpdate(userID string, at time.Time, eventID string) Write {
	return Write{UpdateSeen, statusKey(userID), []any{presence.Micros(at), at, eventID, userID}}
}

// ActiveUpdate sets the user's last_seen, last_active and last_event_id to a fresh
// status or activity event's time and id, written at that time.
func ActiveUpdate(userID string, at time.Time, eventID string) Write {
	return Write{UpdateActive, statusKey(userID), []any{presence.Micros(at), at, at, eventID, userID}}
}

// StatusUpdate sets the user's status (its name, as presence.Status.String writes it)
// and last_updated to a change's, written at the change's time.
func StatusUpdate(userID, status string, at time.Time) Write {
	return Write{UpdateStatus, statusKey(userID), []any{presence.Micros(at), status, at, userID}}
}

func activityKey(user string, bucket time.Time) string {
	return TableActivity + "\x00" + user + "\x00" + bucket.Format(time.DateOnly)
}

func statusKey(user string) string { return TableStatus + "\x00" + user }

// dayOf is the UTC day of t: user_activity's bucket, and the day partition of the
// per-day tables.
func dayOf(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// orUnset binds an empty value as "unset", so the column is not written at all
// (null would write a tombstone).
func orUnset(s string) any {
	if s == "" {
		return gocql.UnsetValue
	}
	return s
}

// A status event's custom status as the user's, or its clear (empty text and emoji, no
// until); micros of the event's time as write time, so the newest set wins as in the
// fold (presence.User.CustomSetAt). Kept so a rebuild of Redis from history restores
// it for users the log no longer reaches back to.
const updateCustomCQL = `UPDATE user_status USING TIMESTAMP ?
 SET custom_text = ?, custom_emoji = ?, custom_until_us = ?, custom_set_at_us = ? WHERE user_id = ?`

// CustomUpdate sets the user's custom status to c, set at at, written at that time.
// Its times are microseconds, as the fold keeps them: a timestamp column would cut
// them to milliseconds.
func CustomUpdate(userID string, c presence.CustomStatus, at time.Time) Write {
	us := presence.Micros(at)
	return Write{UpdateCustom, statusKey(userID), []any{us, c.Text, c.Emoji, presence.Micros(c.Until), us, userID}}
}

// The user's groups (docs/design.md, "Groups"): a join adds its group to the set and a
// leave removes it, each written at the member event's time, so that of a join and a
// leave of one group the newer wins, as in the fold, whatever order they are written
// in. Kept so a rebuild of Redis from history restores memberships the log no longer
// holds.
const (
	updateGroupJoinCQL  = `UPDATE user_status USING TIMESTAMP ? SET groups = groups + ? WHERE user_id = ?`
	updateGroupLeaveCQL = `UPDATE user_status USING TIMESTAMP ? SET groups = groups - ? WHERE user_id = ?`
)

// GroupUpdate records that the user joined group (or left it, leave) at at.
func GroupUpdate(userID, group string, leave bool, at time.Time) Write {
	stmt := UpdateGroupJoin
	if leave {
		stmt = UpdateGroupLeave
	}
	return Write{stmt, statusKey(userID), []any{presence.Micros(at), []string{group}, userID}}
}
