package main

import (
	"errors"
	"fmt"
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

// group is the statements of one Cassandra partition key, written as one unlogged
// batch: a single-partition batch is applied as one mutation, atomically, and costs
// one round trip.
type group struct {
	key   string
	stmts []stmt
}

// batchPlan collects statements by partition key, keeping first-seen key order.
type batchPlan struct {
	groups []*group
	index  map[string]int
}

func (b *batchPlan) add(key string, s stmt) {
	if b.index == nil {
		b.index = make(map[string]int)
	}
	i, ok := b.index[key]
	if !ok {
		i = len(b.groups)
		b.index[key] = i
		b.groups = append(b.groups, &group{key: key})
	}
	b.groups[i].stmts = append(b.groups[i].stmts, s)
}

// split returns the groups with none longer than max statements.
func (b *batchPlan) split(max int) []*group {
	var out []*group
	for _, g := range b.groups {
		for len(g.stmts) > max {
			out = append(out, &group{key: g.key, stmts: g.stmts[:max:max]})
			g = &group{key: g.key, stmts: g.stmts[max:]}
		}
		out = append(out, g)
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
// through presence.changes.
func (b *batchPlan) addEvent(e *presence.Event, stale bool, partition int32, offset int64) {
	t := e.Time()
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
	if stale || e.Source == presence.SourceTimeout {
		return
	}
	if e.Kind == presence.KindStatus || e.Kind == presence.KindActivity {
		b.add(statusKey(e.UserID), stmt{tableStatus, updateActiveCQL, []any{presence.Micros(t), t, t, e.ID, e.UserID}})
	} else {
		b.add(statusKey(e.UserID), stmt{tableStatus, updateSeenCQL, []any{presence.Micros(t), t, e.ID, e.UserID}})
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
	b.add(statusKey(c.UserID), stmt{tableStatus, updateStatusCQL, []any{us, c.Current.String(), c.At, c.UserID}})
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
