// Package records is the Kafka wire form of Pulse's log: how events and changes become
// records (keyed by user id, with the schema header) and how consumers read them back.
// Every producer and consumer of presence.events and presence.changes goes through it,
// so the wire form is defined once.
package records

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

// PrincipalHeader names, on the events ingest writes, the credential that posted
// them: an API key's name or "user:<id>" for a user token, never a secret. It tells an
// operator who wrote what in the log; consumers do not read it.
const PrincipalHeader = "pulse-principal"

// EventHeaders are the headers of events posted by principal: the schema header,
// and PrincipalHeader unless principal is empty (authentication off).
func EventHeaders(principal string) []kgo.RecordHeader {
	if principal == "" {
		return eventHeaders
	}
	return []kgo.RecordHeader{eventHeaders[0], {Key: PrincipalHeader, Value: []byte(principal)}}
}

// Event is e as it goes on topic: keyed by user id, so a user's events stay in order
// in one partition, with the schema header consumers check before decoding.
func Event(topic string, e *presence.Event) (*kgo.Record, error) {
	return EventWith(topic, e, eventHeaders)
}

// EventWith is Event with headers of EventHeaders, which the record shares.
func EventWith(topic string, e *presence.Event, headers []kgo.RecordHeader) (*kgo.Record, error) {
	// The key and the value share one buffer: ingest builds a record per event it
	// accepts, and each allocation shows in its cost per request.
	p := e.ToPB()
	size := proto.Size(p)
	buf := make([]byte, len(e.UserID), len(e.UserID)+size)
	copy(buf, e.UserID)
	value, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(buf[len(buf):], p)
	if err != nil {
		return nil, fmt.Errorf("encoding event %s: %w", e.ID, err)
	}
	return &kgo.Record{Topic: topic, Key: buf[:len(e.UserID):len(e.UserID)], Value: value, Headers: headers}, nil
}

// Change is c as it goes on topic, keyed by user id like the events it comes from.
func Change(topic string, c *pulsev1.Change) (*kgo.Record, error) {
	value, err := proto.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encoding change of %s: %w", c.UserId, err)
	}
	return &kgo.Record{Topic: topic, Key: []byte(c.UserId), Value: value, Headers: changeHeaders}, nil
}

// The schema headers, shared by every record of their kind: franz-go and Kafka only
// read them. Their length equals their capacity, so appending to a record's
// headers copies them instead of changing every record's.
var (
	eventHeaders  = schemaHeaders(pulsev1.SchemaEvent)
	changeHeaders = schemaHeaders(pulsev1.SchemaChange)
)

func schemaHeaders(schema string) []kgo.RecordHeader {
	return []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(schema)}}
}

// CheckSchema refuses a record whose schema header is missing or names another
// message: a stray producer's bytes must never be misread as Pulse's.
func CheckSchema(r *kgo.Record, want string) error {
	found := false
	for _, h := range r.Headers {
		if h.Key == pulsev1.SchemaHeader {
			if string(h.Value) != want {
				return fmt.Errorf("schema %q, want %q", h.Value, want)
			}
			found = true
		}
	}
	if !found {
		return errors.New("no " + pulsev1.SchemaHeader + " header")
	}
	return nil
}

// DecodeChange reads a presence.changes record; any flaw is an error, never a
// half-read change: a missing schema header, a value that is not a Change, a user or
// group id Pulse would not accept, a key that is not the user, a transition that is no
// change (but an erasure, which may find the user offline), an invalid custom status
// or no change time.
func DecodeChange(r *kgo.Record) (*pulsev1.Change, error) {
	if err := CheckSchema(r, pulsev1.SchemaChange); err != nil {
		return nil, err
	}
	var c pulsev1.Change
	if err := proto.Unmarshal(r.Value, &c); err != nil {
		return nil, fmt.Errorf("decoding change: %w", err)
	}
	if err := presence.ValidateID(c.GetUserId(), presence.MaxUserIDLen); err != nil {
		return nil, fmt.Errorf("user id: %w", err)
	}
	if string(r.Key) != c.GetUserId() {
		return nil, fmt.Errorf("record key %q differs from user id %q", r.Key, c.GetUserId())
	}
	if g := c.GetGroupId(); g != "" {
		if err := presence.ValidateGroupID(g); err != nil {
			return nil, fmt.Errorf("group id: %w", err)
		}
	}
	for _, g := range c.GetGroups() {
		if err := presence.ValidateGroupID(g); err != nil {
			return nil, fmt.Errorf("groups: %w", err)
		}
	}
	prev, cur := presence.StatusFromPB(c.GetPrevious()), presence.StatusFromPB(c.GetCurrent())
	if c.GetCause() == pulsev1.Cause_CAUSE_ERASE {
		// An erasure (docs/design.md, "Erasure") ends the user whatever their status
		// was, offline included: previous may equal current.
		if prev == presence.StatusUnknown || cur != presence.Offline || c.GetCustomOnly() || c.GetGroupId() != "" {
			return nil, fmt.Errorf("erasure %v -> %v is not to offline alone (custom only: %v, group: %q)", c.GetPrevious(), c.GetCurrent(), c.GetCustomOnly(), c.GetGroupId())
		}
	} else if prev == presence.StatusUnknown || cur == presence.StatusUnknown || (prev == cur) != (c.GetCustomOnly() || c.GetGroupId() != "") {
		return nil, fmt.Errorf("transition %v -> %v is not a change (custom only: %v, group: %q)", c.GetPrevious(), c.GetCurrent(), c.GetCustomOnly(), c.GetGroupId())
	}
	if cs := presence.CustomFromPB(c.GetCustom()); cs != nil {
		if err := cs.Validate(); err != nil {
			return nil, fmt.Errorf("custom: %w", err)
		}
	}
	if c.GetChangedAtUs() == 0 {
		return nil, errors.New("no changed_at")
	}
	return &c, nil
}

// DecodeEvent reads a presence.events record; any flaw is an error, never a
// half-read event.
func DecodeEvent(r *kgo.Record) (presence.Event, error) {
	if err := CheckSchema(r, pulsev1.SchemaEvent); err != nil {
		return presence.Event{}, err
	}
	var p pulsev1.Event
	if err := proto.Unmarshal(r.Value, &p); err != nil {
		return presence.Event{}, fmt.Errorf("decoding event: %w", err)
	}
	e, err := presence.EventFromPB(&p)
	if err != nil {
		return presence.Event{}, fmt.Errorf("invalid event: %w", err)
	}
	if e.UserID != string(r.Key) {
		return presence.Event{}, fmt.Errorf("record key %q differs from user id %q", r.Key, e.UserID)
	}
	return e, nil
}
