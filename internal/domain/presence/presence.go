// Package presence holds Pulse's domain: statuses, events and the rules that fold a
// user's events into state. The aggregator, history writer and the tests share it, so
// the service and the test models decide with the same code only where the design
// says they must; everything here is pure and clock-free.
package presence

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

// Status is a user's (or a device's) presence. The numeric order ranks statuses for
// the multi-device rule: online > idle > offline.
type Status uint8

const (
	StatusUnknown Status = iota
	Offline
	Idle
	Online
	Invisible
)

var statusNames = [...]string{"", "offline", "idle", "online", "invisible"}

// String is the status as the HTTP API spells it.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", s)
}

// ParseStatus reads "online", "idle", "offline" or "invisible".
func ParseStatus(s string) (Status, error) {
	for i, n := range statusNames {
		if i > 0 && n == s {
			return Status(i), nil
		}
	}
	return StatusUnknown, fmt.Errorf("must be one of online, idle, offline, invisible")
}

// Public is the status every reader but an operator sees: invisible reads as offline.
func (s Status) Public() Status {
	if s == Invisible || s == StatusUnknown {
		return Offline
	}
	return s
}

// Kind is what an event reports.
type Kind uint8

const (
	KindUnknown Kind = iota
	// KindStatus sets a device's status (and invisible for the user).
	KindStatus
	// KindHeartbeat says a device is still connected; it does not mean activity.
	KindHeartbeat
	// KindActivity says the user did something on a device: the device is online.
	KindActivity
	// KindCustom clears a custom status whose until has passed. Only the aggregator
	// makes it, as a timeout (docs/design.md, "Custom status"); clients cannot send it.
	KindCustom
	// KindMember makes the user join or leave a group (docs/design.md, "Groups"). It
	// is membership, not presence: the user's status and times stay as they are.
	KindMember
	// KindErase erases the user (docs/design.md, "Erasure"): the aggregator and
	// history forget everything they hold of them, and drop the user's events dated at
	// or before the erase event's time that come after it in the log. Only query's
	// DELETE /v1/users/{id} makes it, with source system, device AllDevices and
	// OccurredAt the server's time.
	KindErase
)

var kindNames = [...]string{"", "status", "heartbeat", "activity", "custom", "member", "erase"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// ParseKind reads "status", "heartbeat" or "activity": the kinds clients send.
func ParseKind(s string) (Kind, error) {
	for i, n := range kindNames[:KindCustom] {
		if i > 0 && n == s {
			return Kind(i), nil
		}
	}
	return KindUnknown, fmt.Errorf("must be one of status, heartbeat, activity")
}

// Source is who made an event.
type Source uint8

const (
	SourceUnknown Source = iota
	SourceAPI
	SourceTimeout
	SourceSystem
)

var sourceNames = [...]string{"", "api", "timeout", "system"}

func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return fmt.Sprintf("source(%d)", s)
}

// Limits on identifiers; docs/design.md (Event model) fixes the user id's.
const (
	MaxUserIDLen   = 128
	MaxDeviceIDLen = 128
	MaxEventIDLen  = 128
	// DefaultDevice is the device of events that name none.
	DefaultDevice = "default"
)

// ValidateID checks an identifier: 1..max bytes of UTF-8 without a character of
// Unicode category Cc (C0 and C1 controls) or Cf (format characters: bidi overrides
// and isolates, zero-width spaces and joiners, the byte order mark, tags). Controls
// break logs, keys and CSV exports; format characters are invisible or reorder text,
// so two ids that look alike could name different users in a log, a dashboard or an
// operator's terminal. No real id contains either (docs/design.md, Security). The
// OpenAPI document states the same rule as IDPattern.
func ValidateID(id string, max int) error {
	switch {
	case id == "":
		return fmt.Errorf("must not be empty")
	case len(id) > max:
		return fmt.Errorf("must be at most %d bytes, got %d", max, len(id))
	case !utf8.ValidString(id):
		return fmt.Errorf("must be valid UTF-8")
	}
	if i := strings.IndexFunc(id, refusedInID); i >= 0 {
		r, _ := utf8.DecodeRuneInString(id[i:])
		return fmt.Errorf("must not contain control or format characters (Unicode categories Cc and Cf), got %U at byte %d", r, i)
	}
	return nil
}

// refusedInID reports whether r is of category Cc or Cf. ASCII, nearly every id,
// needs no table: its only such characters are the C0 controls and DEL.
func refusedInID(r rune) bool {
	if r < utf8.RuneSelf {
		return r < 0x20 || r == 0x7f
	}
	return unicode.In(r, refusedCategories...)
}

var refusedCategories = []*unicode.RangeTable{unicode.Cc, unicode.Cf}

// IDPattern is ValidateID's rule on characters as a regular expression (ECMA-262, as
// JSON Schema's pattern wants): one or more characters outside a class of every Cc
// and Cf range of the Unicode tables this binary was built with, written as the
// characters themselves rather than escapes, since engines differ on escapes of
// astral characters. The byte limit is not in it (JSON Schema counts characters,
// ValidateID bytes). internal/api/openapi's tests hold the document to it.
func IDPattern() string {
	var b strings.Builder
	b.WriteString("^[^")
	for _, t := range refusedCategories {
		for _, r := range t.R16 {
			writeRange(&b, rune(r.Lo), rune(r.Hi), rune(r.Stride))
		}
		for _, r := range t.R32 {
			writeRange(&b, rune(r.Lo), rune(r.Hi), rune(r.Stride))
		}
	}
	b.WriteString("]+$")
	return b.String()
}

func writeRange(b *strings.Builder, lo, hi, stride rune) {
	if stride != 1 {
		for r := lo; r <= hi; r += stride {
			b.WriteRune(r)
		}
		return
	}
	b.WriteRune(lo)
	if hi > lo {
		b.WriteByte('-')
		b.WriteRune(hi)
	}
}

// Event is one status report, as carried by presence.events.
type Event struct {
	ID       string
	UserID   string
	Kind     Kind
	Status   Status // for KindStatus only
	DeviceID string
	// OccurredAt is the client's clock; zero when the client gave none.
	OccurredAt time.Time
	ReceivedAt time.Time
	Source     Source
	// LastSeen is, for timeout events, the basis the timeout was decided on: the
	// device's last-seen (offline), the user's last-active (idle), or when the custom
	// status was set (KindCustom).
	LastSeen time.Time
	// Custom is, on a status event only, the user's custom status: nil leaves it as it
	// is, the zero CustomStatus clears it.
	Custom *CustomStatus
	// GroupID and Leave are a member event's (KindMember): the group the user joins,
	// or leaves when Leave is set.
	GroupID string
	Leave   bool
}

// Time is when the event happened as far as Pulse can tell: the client's occurred-at,
// else the server's received-at. Staleness and every timestamp derive from it.
func (e *Event) Time() time.Time {
	if !e.OccurredAt.IsZero() {
		return e.OccurredAt
	}
	return e.ReceivedAt
}

// Validate checks what every event must satisfy, whoever produced it.
func (e *Event) Validate() error {
	if err := ValidateID(e.ID, MaxEventIDLen); err != nil {
		return fmt.Errorf("event id: %w", err)
	}
	if err := ValidateID(e.UserID, MaxUserIDLen); err != nil {
		return fmt.Errorf("user id: %w", err)
	}
	if err := ValidateID(e.DeviceID, MaxDeviceIDLen); err != nil {
		return fmt.Errorf("device id: %w", err)
	}
	switch e.Kind {
	case KindStatus:
		if e.Status < Offline || e.Status > Invisible {
			return fmt.Errorf("status: a status event needs online, idle, offline or invisible")
		}
	case KindHeartbeat, KindActivity:
		if e.Status != StatusUnknown {
			return fmt.Errorf("status: only status events carry a status")
		}
	case KindCustom:
		switch {
		case e.Source != SourceTimeout:
			return fmt.Errorf("kind: only the aggregator's timeouts clear a custom status by itself")
		case e.Status != StatusUnknown:
			return fmt.Errorf("status: only status events carry a status")
		case e.DeviceID != AllDevices:
			return fmt.Errorf("device id: a custom status clears for every device (%q)", AllDevices)
		case e.LastSeen.IsZero():
			return fmt.Errorf("last seen: a custom status timeout needs the set-at it was decided on")
		}
	case KindMember:
		if err := ValidateGroupID(e.GroupID); err != nil {
			return fmt.Errorf("group id: %w", err)
		}
		if e.Status != StatusUnknown {
			return fmt.Errorf("status: only status events carry a status")
		}
	case KindErase:
		switch {
		case e.Source != SourceSystem:
			return fmt.Errorf("kind: only Pulse itself erases a user (source system)")
		case e.Status != StatusUnknown:
			return fmt.Errorf("status: only status events carry a status")
		case e.DeviceID != AllDevices:
			return fmt.Errorf("device id: an erasure is of every device (%q)", AllDevices)
		case e.OccurredAt.IsZero():
			return fmt.Errorf("occurred at: an erasure needs the time it cuts the user's events at")
		}
	default:
		return fmt.Errorf("kind: unknown kind %d", e.Kind)
	}
	if e.Custom != nil {
		if e.Kind != KindStatus {
			return fmt.Errorf("custom: only status events carry a custom status")
		}
		if err := e.Custom.Validate(); err != nil {
			return fmt.Errorf("custom: %w", err)
		}
	}
	if e.Kind != KindMember && (e.GroupID != "" || e.Leave) {
		return fmt.Errorf("group id: only member events name a group")
	}
	if e.ReceivedAt.IsZero() {
		return fmt.Errorf("received at: missing")
	}
	if e.Source < SourceAPI || e.Source > SourceSystem {
		return fmt.Errorf("source: unknown source %d", e.Source)
	}
	return nil
}

// Micros is t as unix microseconds, 0 for the zero time: the wire and storage unit.
func Micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// FromMicros is the inverse of Micros.
func FromMicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// ToPB is the event's Kafka record value.
func (e *Event) ToPB() *pulsev1.Event {
	return &pulsev1.Event{
		EventId:      e.ID,
		UserId:       e.UserID,
		Kind:         pulsev1.Kind(e.Kind),
		Status:       StatusToPB(e.Status),
		DeviceId:     e.DeviceID,
		OccurredAtUs: Micros(e.OccurredAt),
		ReceivedAtUs: Micros(e.ReceivedAt),
		Source:       pulsev1.Source(e.Source),
		LastSeenUs:   Micros(e.LastSeen),
		Custom:       e.Custom.ToPB(),
		GroupId:      e.GroupID,
		Leave:        e.Leave,
	}
}

// EventFromPB decodes and validates a record value; an invalid record is an error,
// never a half-read event.
func EventFromPB(p *pulsev1.Event) (Event, error) {
	e := Event{
		ID:         p.GetEventId(),
		UserID:     p.GetUserId(),
		Kind:       Kind(p.GetKind()),
		Status:     StatusFromPB(p.GetStatus()),
		DeviceID:   p.GetDeviceId(),
		OccurredAt: FromMicros(p.GetOccurredAtUs()),
		ReceivedAt: FromMicros(p.GetReceivedAtUs()),
		Source:     Source(p.GetSource()),
		LastSeen:   FromMicros(p.GetLastSeenUs()),
		Custom:     CustomFromPB(p.GetCustom()),
		GroupID:    p.GetGroupId(),
		Leave:      p.GetLeave(),
	}
	return e, e.Validate()
}

// StatusToPB maps a Status onto the schema's enum.
func StatusToPB(s Status) pulsev1.Status {
	switch s {
	case Online:
		return pulsev1.Status_STATUS_ONLINE
	case Idle:
		return pulsev1.Status_STATUS_IDLE
	case Offline:
		return pulsev1.Status_STATUS_OFFLINE
	case Invisible:
		return pulsev1.Status_STATUS_INVISIBLE
	}
	return pulsev1.Status_STATUS_UNSPECIFIED
}

// StatusFromPB maps the schema's enum onto a Status.
func StatusFromPB(s pulsev1.Status) Status {
	switch s {
	case pulsev1.Status_STATUS_ONLINE:
		return Online
	case pulsev1.Status_STATUS_IDLE:
		return Idle
	case pulsev1.Status_STATUS_OFFLINE:
		return Offline
	case pulsev1.Status_STATUS_INVISIBLE:
		return Invisible
	}
	return StatusUnknown
}
