package feed

import (
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/api/customjson"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/records"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

// entry is one decoded change of presence.changes. The hub makes one per record and
// shares it, read-only, with every subscriber; its JSON is rendered at most once per
// view however many subscribers receive it.
type entry struct {
	partition int32 // of presence.changes
	offset    int64

	userID            string
	previous, current presence.Status
	// at is when the change took effect, publicAt when readers who are not operators
	// see it take effect (the same but after a period the user spent invisible).
	at, publicAt time.Time
	timeout      bool
	erased       bool // an erasure (cause erase, docs/design.md "Erasure")
	// custom is the user's custom status after the change (zero: none); customOnly
	// says the change is to it alone, previous and current being equal.
	custom     presence.CustomStatus
	customOnly bool
	// group, when set, makes the entry a membership change: the user joined group, or
	// left it (left); previous and current are the user's status. groups are the
	// user's groups after the change, any change (docs/design.md, "Groups").
	group  string
	left   bool
	groups []string
	// sourcePartition and sourceOffset are the causing event's position in
	// presence.events: the key duplicates are recognised by.
	sourcePartition int32
	sourceOffset    int64

	// cursor is the position after this record as the hub saw the log; empty for
	// entries read by a replay, whose cursor is the session's own.
	cursor string

	rendered [2]atomic.Pointer[[]byte] // by view: public, operator
}

// publicNoop reports whether readers other than operators see no change at all:
// invisible and offline both read as offline, and a user who reads as offline shows
// no custom status (presence.Status.ShowsCustomPublicly).
func (e *entry) publicNoop() bool {
	if e.group != "" || e.erased {
		// A membership change is news whatever the status; so is an erasure, which
		// tells whoever keeps the user's data to erase it too.
		return false
	}
	if e.customOnly {
		return !e.current.ShowsCustomPublicly()
	}
	return e.previous.Public() == e.current.Public()
}

// decodeChange reads a presence.changes record (records.DecodeChange: any flaw is an
// error) into the entry the hub shares.
func decodeChange(r *kgo.Record) (*entry, error) {
	c, err := records.DecodeChange(r)
	if err != nil {
		return nil, err
	}
	e := &entry{
		partition:       r.Partition,
		offset:          r.Offset,
		userID:          c.GetUserId(),
		previous:        presence.StatusFromPB(c.GetPrevious()),
		current:         presence.StatusFromPB(c.GetCurrent()),
		at:              presence.FromMicros(c.GetChangedAtUs()),
		publicAt:        presence.FromMicros(c.GetChangedAtUs()),
		timeout:         c.GetCause() == pulsev1.Cause_CAUSE_TIMEOUT,
		erased:          c.GetCause() == pulsev1.Cause_CAUSE_ERASE,
		sourcePartition: c.GetSourcePartition(),
		sourceOffset:    c.GetSourceOffset(),
		customOnly:      c.GetCustomOnly(),
		group:           c.GetGroupId(),
		groups:          c.GetGroups(),
	}
	if e.group != "" {
		e.left = c.GetLeft()
	}
	if cs := presence.CustomFromPB(c.GetCustom()); cs != nil {
		e.custom = *cs
	}
	if p := c.GetPublicChangedAtUs(); p != 0 {
		e.publicAt = presence.FromMicros(p)
	}
	return e, nil
}

// changeMessage is the JSON of a change.
type changeMessage struct {
	Type     string    `json:"type"`
	UserID   string    `json:"userId"`
	Status   string    `json:"status"`
	Previous string    `json:"previous"`
	At       time.Time `json:"at"`
	Cause    string    `json:"cause"`
	// Data is the user's custom status after the change as the reader may see it
	// (null: none). A change whose status equals previous changed only this.
	Data   *customjson.Out `json:"data"`
	Cursor string          `json:"cursor"`
}

// message is e's message, a change's or a membership change's, for a view with the
// given cursor.
func (e *entry) message(operator bool, cursor string, now time.Time) []byte {
	if e.group != "" {
		return e.renderMember(operator, cursor)
	}
	return e.render(operator, cursor, now)
}

// render is e's message for a view with the given cursor. A custom status whose until
// has passed when the message is first rendered shows as none, as every status read
// does; its clearing follows as a change of its own.
func (e *entry) render(operator bool, cursor string, now time.Time) []byte {
	m := changeMessage{Type: TypeChange, UserID: e.userID, At: e.at, Cause: "event", Cursor: cursor}
	switch {
	case e.timeout:
		m.Cause = "timeout"
	case e.erased:
		m.Cause = "erase"
	}
	custom := e.custom
	if custom.Expired(now) {
		custom = presence.CustomStatus{}
	}
	if operator {
		m.Status, m.Previous = e.current.String(), e.previous.String()
	} else {
		m.Status, m.Previous = e.current.Public().String(), e.previous.Public().String()
		if !e.customOnly {
			m.At = e.publicAt
		}
		if !e.current.ShowsCustomPublicly() {
			custom = presence.CustomStatus{}
		}
	}
	m.Data = customjson.View(custom)
	b, _ := json.Marshal(m) // cannot fail: strings, a time and a custom status
	return b
}

// memberMessage is the JSON of a membership change, for a group's watchers.
type memberMessage struct {
	Type    string `json:"type"`
	GroupID string `json:"groupId"`
	UserID  string `json:"userId"`
	// Joined is false when the user left the group.
	Joined bool `json:"joined"`
	// Status is the user's status as the reader may see it.
	Status string    `json:"status"`
	At     time.Time `json:"at"`
	Cursor string    `json:"cursor"`
}

// renderMember is membership change e's message for a view with the given cursor.
func (e *entry) renderMember(operator bool, cursor string) []byte {
	m := memberMessage{Type: TypeMember, GroupID: e.group, UserID: e.userID, Joined: !e.left,
		Status: e.current.Public().String(), At: e.at, Cursor: cursor}
	if operator {
		m.Status = e.current.String()
	}
	b, _ := json.Marshal(m) // cannot fail: strings and a time
	return b
}

// payload is e's message for a view with the hub's cursor, rendered once.
func (e *entry) payload(operator bool) []byte {
	v := 0
	if operator {
		v = 1
	}
	if p := e.rendered[v].Load(); p != nil {
		return *p
	}
	b := e.message(operator, e.cursor, time.Now())
	e.rendered[v].Store(&b)
	return b
}
