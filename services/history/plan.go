package main

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/records"
	"github.com/pulse-presence/pulse/internal/domain/rollup"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

// batchPlan collects the statements of one batch of records: user_activity rows by
// partition key, in first-seen key order, and user_status updates coalesced per user.
type batchPlan struct {
	// allEvents: every event gets a user_activity row (PULSE_HISTORY_EVENT_ROWS=all);
	// otherwise heartbeats and activity events get none.
	allEvents bool

	activity []*historystore.Partition
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

// forget drops what the plan holds for user, who was erased: those updates would only
// be written under the erasure's deletion anyway (historystore.ErasedUserRows).
func (s *statusPlan) forget(user string) {
	if s == nil || s.rows[user] == nil {
		return
	}
	delete(s.rows, user)
	s.users = slices.DeleteFunc(s.users, func(u string) bool { return u == user })
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

// keys returns one user_status partition per user with the coalesced updates.
func (s *statusPlan) keys() []*historystore.Partition {
	if s == nil {
		return nil
	}
	out := make([]*historystore.Partition, 0, len(s.users))
	for _, user := range s.users {
		r := s.rows[user]
		var ws []historystore.Write
		// An active write sets last_seen too; a separate seen write is needed only when a
		// newer event than the newest active one came (a heartbeat after it).
		if r.active.set {
			ws = append(ws, historystore.ActiveUpdate(user, r.active.at, r.active.tie))
		}
		if r.seen.set && (r.seen.us != r.active.us || r.seen.tie != r.active.tie) {
			ws = append(ws, historystore.SeenUpdate(user, r.seen.at, r.seen.tie))
		}
		if r.status.set {
			ws = append(ws, historystore.StatusUpdate(user, r.status.tie, r.status.at))
		}
		if r.custom.set {
			ws = append(ws, historystore.CustomUpdate(user, r.customValue, r.custom.at))
		}
		for _, g := range r.groups {
			ws = append(ws, historystore.GroupUpdate(user, g.group, g.left, g.at))
		}
		if len(ws) > 0 {
			out = append(out, &historystore.Partition{Key: ws[0].Key(), Writes: ws})
		}
	}
	return out
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
	// custom is the newest fresh status event carrying a custom status (tie: its id),
	// and customValue what it set.
	custom      cellWrite
	customValue presence.CustomStatus
	// groups are the newest membership change of each group, in first-seen order.
	groups []groupWrite
}

// groupWrite is a membership change to write to user_status: its group's element is
// written at the change's time, so only the newest one of a group matters.
type groupWrite struct {
	group string
	left  bool
	at    time.Time
}

// offerGroup keeps c if it is the newest change of its group in the row.
func (r *statusRow) offerGroup(c *change) {
	for i := range r.groups {
		if g := &r.groups[i]; g.group == c.Group {
			if !c.At.Before(g.at) {
				g.left, g.at = c.Left, c.At
			}
			return
		}
	}
	r.groups = append(r.groups, groupWrite{group: c.Group, left: c.Left, at: c.At})
}

// add plans w after the writes of its partition key planned before.
func (b *batchPlan) add(w historystore.Write) {
	if b.index == nil {
		b.index = make(map[string]int)
	}
	key := w.Key()
	i, ok := b.index[key]
	if !ok {
		i = len(b.activity)
		b.index[key] = i
		b.activity = append(b.activity, &historystore.Partition{Key: key})
	}
	b.activity[i].Writes = append(b.activity[i].Writes, w)
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
func (b *batchPlan) keys() []*historystore.Partition {
	if b.holdStatus {
		return b.activity
	}
	return append(slices.Clip(b.activity), b.status.keys()...)
}

// addRollup plans the rows a rollup fold of shard flushed, each written at ts.
func (b *batchPlan) addRollup(rows *rollup.Rows, shard int32, ts int64, ttl historystore.Retention) {
	for _, w := range historystore.RollupRows(rows, shard, ts, ttl) {
		b.add(w)
	}
}

// addEvent plans the writes of event e found at partition/offset. A stale event is
// recorded in user_activity only; a fresh one also advances user_status, unless it is
// a timeout: a timeout is not a sign of life, and its change reaches user_status
// through presence.changes. Heartbeats and activity events have a user_activity row
// only when the plan keeps every event: they say nothing that the changes, last_seen
// and last_active do not (docs/design.md, History).
func (b *batchPlan) addEvent(e *presence.Event, stale bool, partition int32, offset int64) {
	if e.Kind == presence.KindStatus || e.Source == presence.SourceTimeout || b.allEvents {
		b.add(historystore.EventRow(e, stale, partition, offset))
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
// and last_event_id, for status and activity events last_active, and for a status
// event carrying a custom status that custom status. A timeout is not
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
	if e.Custom != nil {
		prev := r.custom
		if r.custom.offer(t, e.ID); r.custom != prev {
			r.customValue = *e.Custom
		}
	}
}

// addMembership plans the writes of membership change c: the group in the user's
// user_status row, and the user's index, so that a rebuild from history finds a member
// whose status never changed.
func (b *batchPlan) addMembership(c *change) {
	b.statusOf(c.UserID).offerGroup(c)
	for _, w := range historystore.UserIndexRows(c.SourcePartition, c.UserIndex, c.UserID, presence.Micros(c.At)) {
		b.add(w)
	}
}

// addChange plans the writes of change c.
func (b *batchPlan) addChange(c *change) {
	b.add(historystore.ChangeRow(&historystore.Change{
		UserID: c.UserID, EventID: c.EventID, Previous: c.Previous, Current: c.Current, At: c.At,
		Cause: c.Cause, DeviceID: c.DeviceID, SourcePartition: c.SourcePartition, SourceOffset: c.SourceOffset,
	}))
	b.statusOf(c.UserID).status.offer(c.At, c.Current.String())
}

// change is a decoded, validated presence.changes record.
// causeErase is the cause of an erasure change (docs/design.md, "Erasure").
const causeErase = "erase"

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
	// CustomOnly: a change of the custom status alone, not a transition; nothing
	// else of the change is read.
	CustomOnly bool
	// Group, when set, makes the change a membership change (docs/design.md,
	// "Groups"), not a transition: the user joined Group, or left it (Left).
	Group string
	Left  bool
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
	if p.GetCustomOnly() {
		return change{CustomOnly: true}, nil
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
	case pulsev1.Cause_CAUSE_ERASE:
		c.Cause = causeErase
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
	if g := p.GetGroupId(); g != "" {
		if err := presence.ValidateGroupID(g); err != nil {
			return change{}, fmt.Errorf("invalid change: group id: %w", err)
		}
		c.Group, c.Left = g, p.GetLeft()
	}
	if c.At.IsZero() || p.GetChangedAtUs() < 0 {
		return change{}, errors.New("invalid change: no changed-at")
	}
	if c.UserID != string(r.Key) {
		return change{}, fmt.Errorf("record key %q differs from user id %q", r.Key, c.UserID)
	}
	return c, nil
}
