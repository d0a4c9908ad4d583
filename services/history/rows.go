package main

import (
	"errors"
	"fmt"
	"slices"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/pkg/presence"
	"github.com/pulse-presence/pulse/pkg/records"
)

// The statements history writes. Every one carries USING TIMESTAMP from the log, so
// Cassandra's last-write-wins orders cells by the log, not by when a write arrived: a
// replay rewrites identical cells, and an old event never overwrites a newer one.
const (
	// An event as received; micros of received-at as its write time (rewritten alike).
	insertEventCQL = `INSERT INTO user_activity (user_id, bucket, occurred_at, entry_id, entry_type,
 kind, status, device_id, source, received_at, stale, log_partition, log_offset)
 VALUES (?, ?, ?, ?, 'event', ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?`
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

// Table names, as metric labels.
const (
	tableActivity = "user_activity"
	tableStatus   = "user_status"
)

// stmt is one CQL statement and its bound values.
type stmt struct {
	table string
	cql   string
	args  []any
}

// group is the statements written in one request, as one unlogged batch. A group of
// one partition key is applied by Cassandra as a single mutation, atomically; a group of
// several keys (see batchPlan.requests) is still atomic per key and costs one round trip
// and one request's overhead on the server instead of one per key.
type group struct {
	keys  int // partition keys in the group
	stmts []stmt
}

// batchPlan collects the statements of one batch of records: user_activity rows by
// partition key, in first-seen key order, and user_status updates coalesced per user.
type batchPlan struct {
	// allEvents: every event gets a user_activity row (PULSE_HISTORY_EVENT_ROWS=all);
	// otherwise heartbeats and activity events get none.
	allEvents bool

	activity []*keyStmts
	index    map[string]int
	// status takes the user_status updates. A worker hands every plan the one it keeps
	// across flushes and writes it on its own schedule (holdStatus); a plan without one
	// makes its own, which keys includes.
	status     *statusPlan
	holdStatus bool
	stmts      int // statements added with add
}

// statusPlan is the user_status rows to write, one per user, in first-seen order.
type statusPlan struct {
	rows  map[string]*statusRow
	users []string
}

func (s *statusPlan) len() int {
	if s == nil {
		return 0
	}
	return len(s.users)
}

func (s *statusPlan) of(user string) *statusRow {
	if s.rows == nil {
		s.rows = make(map[string]*statusRow)
	}
	r, ok := s.rows[user]
	if !ok {
		r = &statusRow{}
		s.rows[user] = r
		s.users = append(s.users, user)
	}
	return r
}

// keys returns one user_status key per user with the coalesced updates.
func (s *statusPlan) keys() []*keyStmts {
	if s == nil {
		return nil
	}
	out := make([]*keyStmts, 0, len(s.users))
	for _, user := range s.users {
		r := s.rows[user]
		ks := &keyStmts{key: statusKey(user)}
		// An active write sets last_seen too; a separate seen write is needed only when a
		// newer event than the newest active one came (a heartbeat after it).
		if r.active.set {
			ks.stmts = append(ks.stmts, stmt{tableStatus, updateActiveCQL, []any{r.active.us, r.active.at, r.active.at, r.active.tie, user}})
		}
		if r.seen.set && (r.seen.us != r.active.us || r.seen.tie != r.active.tie) {
			ks.stmts = append(ks.stmts, stmt{tableStatus, updateSeenCQL, []any{r.seen.us, r.seen.at, r.seen.tie, user}})
		}
		if r.status.set {
			ks.stmts = append(ks.stmts, stmt{tableStatus, updateStatusCQL, []any{r.status.us, r.status.tie, r.status.at, user}})
		}
		out = append(out, ks)
	}
	return out
}

// keyStmts are the statements of one partition key.
type keyStmts struct {
	key   string
	stmts []stmt
}

// cellWrite is the newest write planned for a set of user_status cells: its write
// timestamp (micros) and the value that breaks a tie. Cassandra resolves cells of equal
// timestamps by the greater value, so the plan keeps the write Cassandra would keep.
type cellWrite struct {
	set bool
	us  int64
	at  time.Time
	tie string // event id (seen, active) or status (status)
}

func (c *cellWrite) offer(at time.Time, tie string) {
	us := presence.Micros(at)
	if !c.set || us > c.us || (us == c.us && tie > c.tie) {
		*c = cellWrite{set: true, us: us, at: at, tie: tie}
	}
}

// statusRow is what a batch writes to one user's user_status row. Only the newest write
// of each kind matters: every write carries USING TIMESTAMP from the log, so the older
// ones of the batch would lose to it anyway. A heartbeat-heavy batch thus costs one
// user_status write per user instead of one per event.
type statusRow struct {
	seen   cellWrite // last_seen, last_event_id: newest fresh event of any kind
	active cellWrite // last_seen, last_active, last_event_id: newest status or activity event
	status cellWrite // status, last_updated: newest change
}

func (b *batchPlan) add(key string, s stmt) {
	if b.index == nil {
		b.index = make(map[string]int)
	}
	i, ok := b.index[key]
	if !ok {
		i = len(b.activity)
		b.index[key] = i
		b.activity = append(b.activity, &keyStmts{key: key})
	}
	b.activity[i].stmts = append(b.activity[i].stmts, s)
	b.stmts++
}

// size is about how many statements the plan holds: every user_activity and rollup
// statement, and one per user_status row it does not leave to the worker.
func (b *batchPlan) size() int {
	if b.holdStatus {
		return b.stmts
	}
	return b.stmts + b.status.len()
}

func (b *batchPlan) statusOf(user string) *statusRow {
	if b.status == nil {
		b.status = &statusPlan{}
	}
	return b.status.of(user)
}

// keys returns every partition key's statements: user_activity and rollup keys first,
// then, unless the worker holds them, one user_status key per user.
func (b *batchPlan) keys() []*keyStmts {
	if b.holdStatus {
		return b.activity
	}
	return append(slices.Clip(b.activity), b.status.keys()...)
}

// requests packs the plan into requests of at most maxStmts statements and maxKeys
// partition keys each (see pack).
func (b *batchPlan) requests(maxStmts, maxKeys int) []*group {
	return pack(b.keys(), maxStmts, maxKeys)
}

// pack packs keys into requests of at most maxStmts statements and maxKeys partition
// keys each. A key's statements stay together unless they alone exceed maxStmts; with
// maxKeys 1 every request is a single-partition batch.
func pack(keys []*keyStmts, maxStmts, maxKeys int) []*group {
	var out []*group
	var cur *group
	for _, ks := range keys {
		stmts := ks.stmts
		for len(stmts) > maxStmts {
			out = append(out, &group{keys: 1, stmts: stmts[:maxStmts:maxStmts]})
			stmts = stmts[maxStmts:]
		}
		if len(stmts) == 0 {
			continue
		}
		if cur == nil || cur.keys >= maxKeys || len(cur.stmts)+len(stmts) > maxStmts {
			cur = &group{}
			out = append(out, cur)
		}
		cur.keys++
		cur.stmts = append(cur.stmts, stmts...)
	}
	return out
}

func activityKey(user string, bucket time.Time) string {
	return tableActivity + "\x00" + user + "\x00" + bucket.Format(time.DateOnly)
}

func statusKey(user string) string { return tableStatus + "\x00" + user }

// bucketOf is the UTC day of t, user_activity's bucket.
func bucketOf(t time.Time) time.Time {
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

// addEvent plans the writes of event e found at partition/offset. A stale event is
// recorded in user_activity only; a fresh one also advances user_status, unless it is
// a timeout: a timeout is not a sign of life, and its change reaches user_status
// through presence.changes. Heartbeats and activity events have a user_activity row
// only when the plan keeps every event: they say nothing that the changes, last_seen
// and last_active do not (docs/design.md, History).
func (b *batchPlan) addEvent(e *presence.Event, stale bool, partition int32, offset int64) {
	t := e.Time()
	if e.Kind == presence.KindStatus || e.Source == presence.SourceTimeout || b.allEvents {
		bucket := bucketOf(t)
		status := ""
		if e.Kind == presence.KindStatus {
			status = e.Status.String()
		}
		b.add(activityKey(e.UserID, bucket), stmt{tableActivity, insertEventCQL, []any{
			e.UserID, bucket, t, "e:" + e.ID,
			e.Kind.String(), orUnset(status), e.DeviceID, e.Source.String(), e.ReceivedAt, stale, partition, offset,
			presence.Micros(e.ReceivedAt),
		}})
	}
	if stale {
		return
	}
	if b.status == nil {
		b.status = &statusPlan{}
	}
	b.status.offerEvent(e)
}

// offerEvent plans what fresh event e writes to its user's user_status row: last_seen
// and last_event_id, and for status and activity events last_active. A timeout is not
// a sign of life: its change reaches user_status through presence.changes.
func (s *statusPlan) offerEvent(e *presence.Event) {
	if e.Source == presence.SourceTimeout {
		return
	}
	t := e.Time()
	r := s.of(e.UserID)
	r.seen.offer(t, e.ID)
	if e.Kind == presence.KindStatus || e.Kind == presence.KindActivity {
		r.active.offer(t, e.ID)
	}
}

// addChange plans the writes of change c.
func (b *batchPlan) addChange(c *change) {
	bucket := bucketOf(c.At)
	us := presence.Micros(c.At)
	prev := ""
	if c.Previous != presence.StatusUnknown {
		prev = c.Previous.String()
	}
	b.add(activityKey(c.UserID, bucket), stmt{tableActivity, insertChangeCQL, []any{
		c.UserID, bucket, c.At, "c:" + c.EventID,
		c.Current.String(), orUnset(prev), orUnset(c.Cause), orUnset(c.DeviceID), c.SourcePartition, c.SourceOffset,
		us,
	}})
	b.statusOf(c.UserID).status.offer(c.At, c.Current.String())
}

// change is a decoded, validated presence.changes record.
type change struct {
	UserID          string
	EventID         string
	Previous        presence.Status
	Current         presence.Status
	At              time.Time
	Cause           string // "event", "timeout" or "" when unspecified
	DeviceID        string
	SourcePartition int32
	SourceOffset    int64
	UserIndex       uint32 // dense index in the shard (guarantee 8)
}

// decodeChange reads a presence.changes record.
func decodeChange(r *kgo.Record) (change, error) {
	if err := records.CheckSchema(r, pulsev1.SchemaChange); err != nil {
		return change{}, err
	}
	var p pulsev1.Change
	if err := proto.Unmarshal(r.Value, &p); err != nil {
		return change{}, fmt.Errorf("decoding change: %w", err)
	}
	c := change{
		UserID:          p.GetUserId(),
		EventID:         p.GetEventId(),
		Previous:        presence.StatusFromPB(p.GetPrevious()),
		Current:         presence.StatusFromPB(p.GetCurrent()),
		At:              presence.FromMicros(p.GetChangedAtUs()),
		DeviceID:        p.GetDeviceId(),
		SourcePartition: p.GetSourcePartition(),
		SourceOffset:    p.GetSourceOffset(),
		UserIndex:       p.GetUserIndex(),
	}
	switch p.GetCause() {
	case pulsev1.Cause_CAUSE_EVENT:
		c.Cause = "event"
	case pulsev1.Cause_CAUSE_TIMEOUT:
		c.Cause = "timeout"
	}
	if err := presence.ValidateID(c.UserID, presence.MaxUserIDLen); err != nil {
		return change{}, fmt.Errorf("invalid change: user id: %w", err)
	}
	if err := presence.ValidateID(c.EventID, presence.MaxEventIDLen); err != nil {
		return change{}, fmt.Errorf("invalid change: event id: %w", err)
	}
	if c.DeviceID != "" {
		if err := presence.ValidateID(c.DeviceID, presence.MaxDeviceIDLen); err != nil {
			return change{}, fmt.Errorf("invalid change: device id: %w", err)
		}
	}
	if c.Current == presence.StatusUnknown {
		return change{}, errors.New("invalid change: no current status")
	}
	if c.At.IsZero() || p.GetChangedAtUs() < 0 {
		return change{}, errors.New("invalid change: no changed-at")
	}
	if c.UserID != string(r.Key) {
		return change{}, fmt.Errorf("record key %q differs from user id %q", r.Key, c.UserID)
	}
	return c, nil
}
