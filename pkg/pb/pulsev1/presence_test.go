package pulsev1_test

import (
	"encoding/hex"
	"maps"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

// timeoutEvent sets every field of Event, so the round-trip and golden tests
// cover each field number.
func timeoutEvent() *pulsev1.Event {
	return &pulsev1.Event{
		EventId:      "01JB3Z6W0Q8T9K2M4N5P6R7S8V",
		UserId:       "user-42",
		Kind:         pulsev1.Kind_KIND_STATUS,
		Status:       pulsev1.Status_STATUS_OFFLINE,
		DeviceId:     "phone",
		OccurredAtUs: 1_700_000_060_000_000,
		ReceivedAtUs: 1_700_000_060_000_123,
		Source:       pulsev1.Source_SOURCE_TIMEOUT,
		LastSeenUs:   1_700_000_000_000_000,
		Custom:       &pulsev1.CustomStatus{Text: "In a meeting", Emoji: "📅", UntilUs: 1_700_003_600_000_000},
		// Set here only so every field is on the wire: member events carry these.
		GroupId: "team-a",
		Leave:   true,
	}
}

// timeoutChange sets every field of Change.
func timeoutChange() *pulsev1.Change {
	return &pulsev1.Change{
		UserId:          "user-42",
		EventId:         "01JB3Z6W0Q8T9K2M4N5P6R7S8V",
		Previous:        pulsev1.Status_STATUS_ONLINE,
		Current:         pulsev1.Status_STATUS_OFFLINE,
		ChangedAtUs:     1_700_000_060_000_123,
		Cause:           pulsev1.Cause_CAUSE_TIMEOUT,
		DeviceId:        "phone",
		SourcePartition: 7,
		SourceOffset:    123_456_789,
		UserIndex:       300,
		// The user was invisible since the last change readers saw.
		PublicChangedAtUs: 1_700_000_060_000_456,
		// Set here only so every field is on the wire; the aggregator marks a change
		// custom_only when previous equals current.
		Custom:     &pulsev1.CustomStatus{Text: "lunch"},
		CustomOnly: true,
		// Membership changes carry group_id and left; every change the user's groups.
		GroupId: "team-a",
		Left:    true,
		Groups:  []string{"team-a"},
	}
}

// requireAllFieldsSet fails when a field of m is unset, so a field added to the
// schema must also be added to the samples above (and to the golden bytes).
func requireAllFieldsSet(t *testing.T, m proto.Message) {
	t.Helper()
	r := m.ProtoReflect()
	fields := r.Descriptor().Fields()
	for i := range fields.Len() {
		if fd := fields.Get(i); !r.Has(fd) {
			t.Errorf("%s: field %s (%d) is not set in the test sample", r.Descriptor().FullName(), fd.Name(), fd.Number())
		}
	}
}

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		msg  proto.Message
	}{
		{"event", timeoutEvent()},
		{"change", timeoutChange()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireAllFieldsSet(t, tt.msg)
			b, err := proto.Marshal(tt.msg)
			if err != nil {
				t.Fatalf("marshal: %v", err)
			}
			got := tt.msg.ProtoReflect().Type().New().Interface()
			if err := proto.Unmarshal(b, got); err != nil {
				t.Fatalf("unmarshal: %v", err)
			}
			if !proto.Equal(got, tt.msg) {
				t.Fatalf("round trip changed the message:\n got  %v\n want %v", got, tt.msg)
			}
		})
	}
}

// TestWireGolden pins the wire encoding: a renumbered field, a changed field
// type or a renumbered enum value changes these bytes. Records already in
// Kafka were written with them, so a failure here means the schema change is
// incompatible, not that the golden needs refreshing.
func TestWireGolden(t *testing.T) {
	tests := []struct {
		name string
		msg  proto.Message
		hex  string
	}{
		{
			name: "event",
			msg:  timeoutEvent(),
			hex: "0a1a" + "30314a42335a365730513854394b324d344e3550365237533856" + // 1 event_id
				"1207" + "757365722d3432" + // 2 user_id
				"1801" + // 3 kind
				"2003" + // 4 status
				"2a05" + "70686f6e65" + // 5 device_id
				"30" + "808ec7ddc1c48203" + // 6 occurred_at_us
				"38" + "fb8ec7ddc1c48203" + // 7 received_at_us
				"4002" + // 8 source
				"48" + "8080f9c0c1c48203" + // 9 last_seen_us
				"521d" + // 10 custom, 29 bytes:
				"0a0c" + "496e2061206d656574696e67" + //    1 text
				"1204" + "f09f9385" + //    2 emoji
				"18" + "80c8c7f5cec48203" + //    3 until_us
				"5a06" + "7465616d2d61" + // 11 group_id
				"6001", // 12 leave
		},
		{
			name: "change",
			msg:  timeoutChange(),
			hex: "0a07" + "757365722d3432" + // 1 user_id
				"121a" + "30314a42335a365730513854394b324d344e3550365237533856" + // 2 event_id
				"1801" + // 3 previous
				"2003" + // 4 current
				"28" + "fb8ec7ddc1c48203" + // 5 changed_at_us
				"3002" + // 6 cause
				"3a05" + "70686f6e65" + // 7 device_id
				"4007" + // 8 source_partition
				"48" + "959aef3a" + // 9 source_offset
				"50" + "ac02" + // 10 user_index
				"58" + "c891c7ddc1c48203" + // 11 public_changed_at_us
				"6207" + // 12 custom, 7 bytes:
				"0a05" + "6c756e6368" + //    1 text
				"6801" + // 13 custom_only
				"7206" + "7465616d2d61" + // 14 group_id
				"7801" + // 15 left
				"820106" + "7465616d2d61", // 16 groups
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := proto.MarshalOptions{Deterministic: true}.Marshal(tt.msg)
			if err != nil {
				t.Fatalf("marshal: %v", err)
			}
			if h := hex.EncodeToString(got); h != tt.hex {
				t.Fatalf("wire encoding changed:\n got  %s\n want %s", h, tt.hex)
			}
			want, err := hex.DecodeString(tt.hex)
			if err != nil {
				t.Fatalf("bad golden hex: %v", err)
			}
			decoded := tt.msg.ProtoReflect().Type().New().Interface()
			if err := proto.Unmarshal(want, decoded); err != nil {
				t.Fatalf("unmarshal golden: %v", err)
			}
			if !proto.Equal(decoded, tt.msg) {
				t.Fatalf("golden bytes decode to %v, want %v", decoded, tt.msg)
			}
		})
	}
}

// TestEnumNumbers pins every enum value's number; they are on the wire too,
// and the golden test above only covers the values its samples use.
func TestEnumNumbers(t *testing.T) {
	tests := []struct {
		name string
		got  map[string]int32
		want map[string]int32
	}{
		{"Status", pulsev1.Status_value, map[string]int32{
			"STATUS_UNSPECIFIED": 0, "STATUS_ONLINE": 1, "STATUS_IDLE": 2, "STATUS_OFFLINE": 3, "STATUS_INVISIBLE": 4,
		}},
		{"Kind", pulsev1.Kind_value, map[string]int32{
			"KIND_UNSPECIFIED": 0, "KIND_STATUS": 1, "KIND_HEARTBEAT": 2, "KIND_ACTIVITY": 3, "KIND_CUSTOM": 4, "KIND_MEMBER": 5, "KIND_ERASE": 6,
		}},
		{"Source", pulsev1.Source_value, map[string]int32{
			"SOURCE_UNSPECIFIED": 0, "SOURCE_API": 1, "SOURCE_TIMEOUT": 2, "SOURCE_SYSTEM": 3,
		}},
		{"Cause", pulsev1.Cause_value, map[string]int32{
			"CAUSE_UNSPECIFIED": 0, "CAUSE_EVENT": 1, "CAUSE_TIMEOUT": 2, "CAUSE_ERASE": 3,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !maps.Equal(tt.got, tt.want) {
				t.Fatalf("enum %s numbers = %v, want %v", tt.name, tt.got, tt.want)
			}
		})
	}
}

func TestSchemaHeaderValues(t *testing.T) {
	tests := []struct {
		header string
		msg    proto.Message
	}{
		{pulsev1.SchemaEvent, &pulsev1.Event{}},
		{pulsev1.SchemaChange, &pulsev1.Change{}},
	}
	for _, tt := range tests {
		if got := tt.msg.ProtoReflect().Descriptor().FullName(); protoreflect.FullName(tt.header) != got {
			t.Errorf("header value %q does not name message %q", tt.header, got)
		}
	}
}

// fuzzRoundTrip decodes arbitrary bytes as a fresh message from newMsg: it
// must never panic, and whatever decodes must survive a re-encode unchanged
// (unknown fields included, since a newer producer may have written them).
func fuzzRoundTrip(t *testing.T, data []byte, newMsg func() proto.Message) {
	first := newMsg()
	if err := proto.Unmarshal(data, first); err != nil {
		return
	}
	b, err := proto.Marshal(first)
	if err != nil {
		t.Fatalf("re-marshal of a decoded message: %v", err)
	}
	second := newMsg()
	if err := proto.Unmarshal(b, second); err != nil {
		t.Fatalf("unmarshal of re-marshaled bytes: %v", err)
	}
	if !proto.Equal(first, second) {
		t.Fatalf("re-encode changed the message:\n first  %v\n second %v", first, second)
	}
}

func fuzzSeeds(f *testing.F, samples ...proto.Message) {
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}) // length beyond the input
	f.Add([]byte{0x0a, 0x02, 0xc3, 0x28})             // invalid UTF-8 in a string field
	f.Add([]byte{0x18, 0x63, 0xa0, 0x06, 0x01})       // unknown enum value, unknown field 100
	for _, m := range samples {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatalf("seed: %v", err)
		}
		f.Add(b)
	}
}

func FuzzUnmarshalEvent(f *testing.F) {
	fuzzSeeds(f, timeoutEvent(), &pulsev1.Event{UserId: "u", Kind: pulsev1.Kind_KIND_HEARTBEAT, DeviceId: "default"})
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzRoundTrip(t, data, func() proto.Message { return &pulsev1.Event{} })
	})
}

func FuzzUnmarshalChange(f *testing.F) {
	fuzzSeeds(f, timeoutChange())
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzRoundTrip(t, data, func() proto.Message { return &pulsev1.Change{} })
	})
}
