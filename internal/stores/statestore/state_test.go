package statestore

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// at is a time as states hold it: whole microseconds, UTC.
func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

// oneDevice is the common user: one device, online, last seen a moment ago, active a
// little before, status changed minutes before, at a realistic log offset.
func oneDevice() *presence.User {
	seen := at("2026-11-22T07:00:00.123456Z")
	u := &presence.User{
		Index: 412_345, Status: presence.Online,
		LastUpdated: seen.Add(-7 * time.Minute), LastActive: seen.Add(-2 * time.Second), LastSeen: seen,
		Devices: []presence.Device{{ID: "default", Status: presence.Online, LastSeen: seen}},
		Offset:  123_456_789,
	}
	u.ResetPublic()
	return u
}

// withCustom gives u the custom status c, set at u's last-seen.
func withCustom(u *presence.User, c presence.CustomStatus) *presence.User {
	u.Custom, u.CustomSetAt = c, u.LastSeen
	return u
}

func TestStateRoundTrip(t *testing.T) {
	seen := at("2026-11-22T07:00:00.000001Z")
	for _, tt := range []struct {
		name string
		u    *presence.User
	}{
		{"never seen", &presence.User{Status: presence.Offline, Offset: -1, Devices: []presence.Device{}}},
		{"one device", oneDevice()},
		{"invisible, three devices, a timeout after the last event", &presence.User{
			Index: 1<<32 - 1, Status: presence.Invisible, Invisible: true,
			LastUpdated: seen.Add(time.Second), LastActive: seen.Add(-time.Hour), LastSeen: seen,
			Devices: []presence.Device{
				{ID: "0f8fad5b-d9cb-469f-a165-70867728950e", Status: presence.Online, LastSeen: seen},
				{ID: "phone", Status: presence.Idle, LastSeen: seen.Add(-time.Minute)},
				{ID: "web", Status: presence.Offline, LastSeen: at("2025-01-01T00:00:00Z")},
			},
			Offset: 1<<62 + 5,
		}},
		{"back from invisible: a hidden device and public times of its own", &presence.User{
			Index: 17, Status: presence.Online, LastUpdated: seen, LastActive: seen, LastSeen: seen,
			Devices: []presence.Device{
				{ID: "laptop", Status: presence.Online, LastSeen: seen.Add(-30 * time.Second), PublicLastSeen: seen},
				{ID: "phone", Status: presence.Offline, LastSeen: seen.Add(-time.Minute), PublicLastSeen: seen.Add(-2 * time.Minute)},
				{ID: "tablet", Status: presence.Offline, LastSeen: seen.Add(-40 * time.Second), Hidden: true},
			},
			Offset: 99,
			Public: presence.Public{LastUpdated: seen.Add(-time.Microsecond), LastActive: seen, LastSeen: seen},
		}},
		{"seen but never active or changed", &presence.User{
			Index: 3, Status: presence.Offline, LastSeen: seen, Offset: 0,
			Devices: []presence.Device{{ID: "d", Status: presence.Offline, LastSeen: seen}},
		}},
		{"a custom status", withCustom(oneDevice(), presence.CustomStatus{
			Text: "In a meeting — back at 3", Emoji: "📅", Until: seen.Add(time.Hour),
		})},
		{"a custom status cleared, back from invisible", func() *presence.User {
			u := withCustom(oneDevice(), presence.CustomStatus{})
			u.Public.LastUpdated = u.Public.LastUpdated.Add(-time.Second)
			return u
		}()},
		{"a custom status without until, set before the user's last event", func() *presence.User {
			u := withCustom(oneDevice(), presence.CustomStatus{Emoji: "👩‍👩‍👧‍👦"})
			u.CustomSetAt = u.LastSeen.Add(-time.Hour)
			return u
		}()},
		{"before 1970", &presence.User{
			Index: 9, Status: presence.Idle, LastSeen: at("1960-01-01T00:00:00Z"), LastActive: seen, Offset: 1,
			Devices: []presence.Device{},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := encodeState(nil, tt.u)
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeState(string(b))
			if err != nil {
				t.Fatalf("decodeState(%x): %v", b, err)
			}
			if !reflect.DeepEqual(got, tt.u) {
				t.Fatalf("decodeState(encodeState(u)) = %+v\nwant %+v", got, tt.u)
			}
			if idx, err := stateIndex(string(b)); err != nil || idx != tt.u.Index {
				t.Fatalf("stateIndex = %d, %v; want %d", idx, err, tt.u.Index)
			}
		})
	}
}

// A state read back is what presence.UserFromPB(ToPB) gave before states were
// compact: the same user, times in UTC, an unknown status read as offline.
func TestStateMatchesProtobufForm(t *testing.T) {
	u := oneDevice()
	u.LastSeen = u.LastSeen.In(time.FixedZone("X", 3600)).Add(999 * time.Nanosecond)
	b, err := encodeState(nil, u)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeState(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if want := presence.UserFromPB(u.ToPB()); !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeState = %+v\nwant %+v", got, want)
	}
	unknown, err := encodeState(nil, &presence.User{Offset: -1})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := decodeState(string(unknown)); err != nil || got.Status != presence.Offline {
		t.Fatalf("state without status = %+v, %v; want offline", got, err)
	}
}

// States written before custom statuses existed (formats 1 and 2) read with none, and a
// user who never set one is written as before, byte for byte.
func TestStateWithoutCustomStatusIsAsBefore(t *testing.T) {
	// oneDevice() as format 1 wrote it before custom statuses existed (commit 4f28de0).
	const old = "\x13\xb9\x95\x19\x96\x9a\xef\x3a\x80\xf9\xc3\xe9\x80\xb6\xb0\x06\x80\x92\xf4\x01\x80\xc4\xc5\x90\x03\x01\x07\x64\x65\x66\x61\x75\x6c\x74\x03\x00"
	got, err := decodeState(old)
	if err != nil {
		t.Fatal(err)
	}
	if want := oneDevice(); !reflect.DeepEqual(got, want) {
		t.Fatalf("old state = %+v\nwant %+v", got, want)
	}
	if !got.Custom.IsZero() || !got.CustomSetAt.IsZero() {
		t.Fatalf("old state has a custom status: %+v at %v", got.Custom, got.CustomSetAt)
	}
	if b, err := encodeState(nil, got); err != nil || string(b) != old {
		t.Fatalf("encodeState(old) = %q, %v; want the old bytes %q", b, err, old)
	}
	b, err := encodeState(nil, withCustom(oneDevice(), presence.CustomStatus{Emoji: "🌴"}))
	if err != nil || b[0]>>4 != stateFormat|stateCustom {
		t.Fatalf("a state with a custom status has format %d, %v; want %d", b[0]>>4, err, stateFormat|stateCustom)
	}
}

// The sizes that matter for memory and for staying under hash-max-listpack-value (64
// bytes by default): a one-device user must stay well under it.
func TestStateSize(t *testing.T) {
	u := oneDevice()
	b, err := encodeState(nil, u)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := proto.Marshal(u.ToPB())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("one-device state: %d bytes (protobuf pulse.v1.UserState: %d)", len(b), len(pb))
	if len(b) != 36 || len(pb) != 60 {
		t.Errorf("one-device state = %d bytes, protobuf %d; want 36 and 60", len(b), len(pb))
	}

	// The bench's minimal state (cmd/bench loadPulse): no device, the three times equal.
	seen := at("2026-11-22T07:00:00.123456Z")
	minimal := &presence.User{Index: 40_000, Status: presence.Online, LastSeen: seen, LastActive: seen, LastUpdated: seen, Offset: 17}
	minimal.ResetPublic()
	if b, _ := encodeState(nil, minimal); len(b) != 16 {
		t.Errorf("minimal state = %d bytes, want 16", len(b))
	}

	// Two devices with UUID ids pass 64 bytes: docs/redis.md recommends 256.
	two := oneDevice()
	two.Devices = []presence.Device{
		{ID: "0f8fad5b-d9cb-469f-a165-70867728950e", Status: presence.Online, LastSeen: seen},
		{ID: "7c9e6679-7425-40de-944b-e07fc1f90ae7", Status: presence.Offline, LastSeen: seen.Add(-time.Hour)},
	}
	two.ResetPublic()
	if b, _ := encodeState(nil, two); len(b) != 108 {
		t.Errorf("two-UUID-device state = %d bytes, want 108", len(b))
	}
}

func TestStateDecodeRejectsCorruption(t *testing.T) {
	good, err := encodeState(nil, oneDevice())
	if err != nil {
		t.Fatal(err)
	}
	custom, err := encodeState(nil, withCustom(oneDevice(), presence.CustomStatus{Text: "lunch", Until: oneDevice().LastSeen.Add(time.Hour)}))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, in, want string
	}{
		{"empty", "", "truncated"},
		{"protobuf of the old layout", "\x08\x01\x10\x03", "unknown state format 0"},
		{"next format", "\x30\x00", "unknown state format 3"},
		{"next format with a custom status", "\x70\x00", "unknown state format 3"},
		{"custom status cut inside", string(custom[:len(custom)-3]), "truncated"},
		{"status past invisible", "\x17\x00", "unknown status 7"},
		{"index past 32 bits", "\x13\x80\x80\x80\x80\x10", "out of range"},
		{"cut inside", string(good[:len(good)-5]), "truncated"},
		{"trailing", string(good) + "x", "1 bytes after the state"},
		{"device count past the bytes", "\x13\x00\x00\x00\x00\x00\x7f", "127 devices in 0 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if u, err := decodeState(tt.in); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("decodeState(%q) = %+v, %v; want an error with %q", tt.in, u, err, tt.want)
			}
		})
	}
	if _, err := encodeState(nil, &presence.User{Status: 8}); err == nil {
		t.Error("encodeState of status 8 did not fail")
	}
}

// States come from Redis, which anyone with access can write: decoding must fail
// cleanly, never panic or allocate without bound, and what decodes re-encodes to the
// same bytes.
func FuzzDecodeState(f *testing.F) {
	b, _ := encodeState(nil, oneDevice())
	f.Add(string(b))
	f.Add("\x13\x00\x00\x00\x00\x00\x00")
	b, _ = encodeState(nil, withCustom(oneDevice(), presence.CustomStatus{Text: "lunch", Emoji: "🥪", Until: oneDevice().LastSeen.Add(time.Hour)}))
	f.Add(string(b))
	f.Fuzz(func(t *testing.T, in string) {
		u, err := decodeState(in)
		if err != nil {
			return
		}
		if _, err := stateIndex(in); err != nil {
			t.Fatalf("stateIndex failed on a state decodeState read: %v", err)
		}
		back, err := encodeState(nil, u)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", u, err)
		}
		again, err := decodeState(string(back))
		if err != nil || !reflect.DeepEqual(again, u) {
			t.Fatalf("decode(encode(decode(%x))) = %+v, %v; want %+v", in, again, err, u)
		}
	})
}
