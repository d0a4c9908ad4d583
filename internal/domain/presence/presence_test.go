package presence

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

func TestParseStatus(t *testing.T) {
	for in, want := range map[string]Status{"online": Online, "idle": Idle, "offline": Offline, "invisible": Invisible} {
		got, err := ParseStatus(in)
		if err != nil || got != want {
			t.Errorf("ParseStatus(%q) = %v, %v; want %v", in, got, err, want)
		}
		if got.String() != in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), in)
		}
	}
	for _, in := range []string{"", "Online", "away", " online", "unknown", "status(9)"} {
		got, err := ParseStatus(in)
		if err == nil || err.Error() != "must be one of online, idle, offline, invisible" || got != StatusUnknown {
			t.Errorf("ParseStatus(%q) = %v, %v; want StatusUnknown and the list of statuses", in, got, err)
		}
	}
	if s := Status(9).String(); s != "status(9)" {
		t.Errorf("Status(9).String() = %q", s)
	}
}

func TestParseKind(t *testing.T) {
	for in, want := range map[string]Kind{"status": KindStatus, "heartbeat": KindHeartbeat, "activity": KindActivity} {
		got, err := ParseKind(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("ParseKind(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "Status", "typing"} {
		got, err := ParseKind(in)
		if err == nil || err.Error() != "must be one of status, heartbeat, activity" || got != KindUnknown {
			t.Errorf("ParseKind(%q) = %v, %v", in, got, err)
		}
	}
	if s := Kind(7).String(); s != "kind(7)" {
		t.Errorf("Kind(7).String() = %q", s)
	}
	for s, want := range map[Source]string{SourceAPI: "api", SourceTimeout: "timeout", SourceSystem: "system", Source(5): "source(5)"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", s, s.String(), want)
		}
	}
}

func TestPublic(t *testing.T) {
	for s, want := range map[Status]Status{Online: Online, Idle: Idle, Offline: Offline, Invisible: Offline, StatusUnknown: Offline} {
		if got := s.Public(); got != want {
			t.Errorf("%v.Public() = %v, want %v", s, got, want)
		}
	}
}

func TestValidateID(t *testing.T) {
	tests := []struct {
		id, want string
	}{
		{"u", ""},
		{"0b9d3c5e-7f1a-4c2b-9e8d-1a2b3c4d5e6f", ""},
		{"12345678901234567890", ""},
		{"ünïcödé 名前", ""},
		{strings.Repeat("x", 128), ""},
		{"", "must not be empty"},
		{strings.Repeat("x", 129), "must be at most 128 bytes, got 129"},
		{strings.Repeat("é", 65), "must be at most 128 bytes, got 130"},
		{"a\xffb", "must be valid UTF-8"},
		{"a\x00b", "must not contain control or format characters (Unicode categories Cc and Cf), got U+0000 at byte 1"},
		{"tab\there", "must not contain control or format characters (Unicode categories Cc and Cf), got U+0009 at byte 3"},
		{"new\nline", "must not contain control or format characters (Unicode categories Cc and Cf), got U+000A at byte 3"},
		{"del\x7f", "must not contain control or format characters (Unicode categories Cc and Cf), got U+007F at byte 3"},
		{"c1\u0085", "must not contain control or format characters (Unicode categories Cc and Cf), got U+0085 at byte 2"},
		{"ali\u202ece", "must not contain control or format characters (Unicode categories Cc and Cf), got U+202E at byte 3"},
		{"zero\u200bwidth", "must not contain control or format characters (Unicode categories Cc and Cf), got U+200B at byte 4"},
		{"join\u200dme", "must not contain control or format characters (Unicode categories Cc and Cf), got U+200D at byte 4"},
		{"\ufeffbom", "must not contain control or format characters (Unicode categories Cc and Cf), got U+FEFF at byte 0"},
		{"iso\u2066late", "must not contain control or format characters (Unicode categories Cc and Cf), got U+2066 at byte 3"},
		{"soft\u00adhyphen", "must not contain control or format characters (Unicode categories Cc and Cf), got U+00AD at byte 4"},
		{"tag\U000E0041", "must not contain control or format characters (Unicode categories Cc and Cf), got U+E0041 at byte 3"},
		{"emoji 👍🏽 and 中文", ""},
	}
	for _, tt := range tests {
		err := ValidateID(tt.id, 128)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("ValidateID(%q) = %q, want %q", tt.id, got, tt.want)
		}
	}
}

var received = time.Date(2025, 3, 14, 15, 9, 26, 535_897_000, time.UTC)

func validEvent() Event {
	return Event{
		ID:         "e-1",
		UserID:     "user-42",
		Kind:       KindStatus,
		Status:     Online,
		DeviceID:   DefaultDevice,
		OccurredAt: received.Add(-time.Second),
		ReceivedAt: received,
		Source:     SourceAPI,
	}
}

func TestEventValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Event)
		want   string
	}{
		{"valid status", func(*Event) {}, ""},
		{"valid invisible", func(e *Event) { e.Status = Invisible }, ""},
		{"valid heartbeat", func(e *Event) { e.Kind, e.Status = KindHeartbeat, StatusUnknown }, ""},
		{"valid activity without occurred at", func(e *Event) { e.Kind, e.Status, e.OccurredAt = KindActivity, StatusUnknown, time.Time{} }, ""},
		{"valid timeout", func(e *Event) { e.Source, e.Status, e.LastSeen = SourceTimeout, Offline, received.Add(-time.Minute) }, ""},
		{"no event id", func(e *Event) { e.ID = "" }, "event id: must not be empty"},
		{"long event id", func(e *Event) { e.ID = strings.Repeat("e", 129) }, "event id: must be at most 128 bytes, got 129"},
		{"no user id", func(e *Event) { e.UserID = "" }, "user id: must not be empty"},
		{"long user id", func(e *Event) { e.UserID = strings.Repeat("u", 129) }, "user id: must be at most 128 bytes, got 129"},
		{"bad utf-8 user id", func(e *Event) { e.UserID = "\xff" }, "user id: must be valid UTF-8"},
		{"control char in device", func(e *Event) { e.DeviceID = "phone\r" }, "device id: must not contain control or format characters (Unicode categories Cc and Cf), got U+000D at byte 5"},
		{"no device", func(e *Event) { e.DeviceID = "" }, "device id: must not be empty"},
		{"status event without status", func(e *Event) { e.Status = StatusUnknown }, "status: a status event needs online, idle, offline or invisible"},
		{"status out of range", func(e *Event) { e.Status = Status(5) }, "status: a status event needs online, idle, offline or invisible"},
		{"heartbeat with status", func(e *Event) { e.Kind = KindHeartbeat }, "status: only status events carry a status"},
		{"activity with status", func(e *Event) { e.Kind, e.Status = KindActivity, Idle }, "status: only status events carry a status"},
		{"no kind", func(e *Event) { e.Kind = KindUnknown }, "kind: unknown kind 0"},
		{"kind out of range", func(e *Event) { e.Kind = Kind(9) }, "kind: unknown kind 9"},
		{"no received at", func(e *Event) { e.ReceivedAt = time.Time{} }, "received at: missing"},
		{"no source", func(e *Event) { e.Source = SourceUnknown }, "source: unknown source 0"},
		{"source out of range", func(e *Event) { e.Source = Source(4) }, "source: unknown source 4"},
	}
	for _, tt := range tests {
		e := validEvent()
		tt.change(&e)
		got := ""
		if err := e.Validate(); err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("%s: Validate() = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestEventTime(t *testing.T) {
	e := validEvent()
	if got := e.Time(); !got.Equal(received.Add(-time.Second)) {
		t.Errorf("Time() = %v, want the occurred-at", got)
	}
	e.OccurredAt = time.Time{}
	if got := e.Time(); !got.Equal(received) {
		t.Errorf("Time() without occurred-at = %v, want the received-at", got)
	}
}

func TestEventPBRoundTrip(t *testing.T) {
	e := validEvent()
	e.Source, e.Status, e.LastSeen, e.DeviceID = SourceTimeout, Offline, received.Add(-time.Minute), "phone"
	p := e.ToPB()
	want := &pulsev1.Event{
		EventId:      "e-1",
		UserId:       "user-42",
		Kind:         pulsev1.Kind_KIND_STATUS,
		Status:       pulsev1.Status_STATUS_OFFLINE,
		DeviceId:     "phone",
		OccurredAtUs: 1741964965_535897,
		ReceivedAtUs: 1741964966_535897,
		Source:       pulsev1.Source_SOURCE_TIMEOUT,
		LastSeenUs:   1741964906_535897,
	}
	if !proto.Equal(p, want) {
		t.Fatalf("ToPB() = %v\nwant %v", p, want)
	}
	back, err := EventFromPB(p)
	if err != nil || back != e {
		t.Fatalf("EventFromPB(ToPB(e)) = %+v, %v\nwant %+v", back, err, e)
	}

	// Each kind and status maps onto the schema and back.
	for _, k := range []Kind{KindStatus, KindHeartbeat, KindActivity} {
		for _, s := range []Status{StatusUnknown, Offline, Idle, Online, Invisible} {
			e := validEvent()
			e.Kind, e.Status, e.OccurredAt = k, s, time.Time{}
			if e.Validate() != nil {
				continue
			}
			back, err := EventFromPB(e.ToPB())
			if err != nil || back != e {
				t.Errorf("round trip of %v/%v = %+v, %v", k, s, back, err)
			}
		}
	}

	if _, err := EventFromPB(&pulsev1.Event{EventId: "e", UserId: "u", DeviceId: "d", ReceivedAtUs: 1, Source: pulsev1.Source_SOURCE_API,
		Kind: pulsev1.Kind_KIND_STATUS}); err == nil || err.Error() != "status: a status event needs online, idle, offline or invisible" {
		t.Errorf("EventFromPB of a status event without status: %v", err)
	}
	if _, err := EventFromPB(&pulsev1.Event{}); err == nil || err.Error() != "event id: must not be empty" {
		t.Errorf("EventFromPB of an empty record: %v", err)
	}
}

func TestMicros(t *testing.T) {
	if Micros(time.Time{}) != 0 || !FromMicros(0).IsZero() {
		t.Error("the zero time must map to 0 and back")
	}
	tm := time.Date(2025, 3, 14, 16, 9, 26, 535_897_999, time.FixedZone("CET", 3600))
	if got := Micros(tm); got != 1741964966_535897 {
		t.Errorf("Micros = %d", got)
	}
	back := FromMicros(1741964966_535897)
	if back.Location() != time.UTC || !back.Equal(tm.Truncate(time.Microsecond)) {
		t.Errorf("FromMicros = %v", back)
	}
}

func TestStatusPBMapping(t *testing.T) {
	pairs := map[Status]pulsev1.Status{
		StatusUnknown: pulsev1.Status_STATUS_UNSPECIFIED,
		Online:        pulsev1.Status_STATUS_ONLINE,
		Idle:          pulsev1.Status_STATUS_IDLE,
		Offline:       pulsev1.Status_STATUS_OFFLINE,
		Invisible:     pulsev1.Status_STATUS_INVISIBLE,
	}
	for s, p := range pairs {
		if got := StatusToPB(s); got != p {
			t.Errorf("StatusToPB(%v) = %v, want %v", s, got, p)
		}
		if got := StatusFromPB(p); got != s {
			t.Errorf("StatusFromPB(%v) = %v, want %v", p, got, s)
		}
	}
	if StatusToPB(Status(9)) != pulsev1.Status_STATUS_UNSPECIFIED || StatusFromPB(pulsev1.Status(42)) != StatusUnknown {
		t.Error("out-of-range statuses must map to unspecified/unknown")
	}
}
