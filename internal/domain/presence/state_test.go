package presence

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

var t0 = time.Date(2025, 3, 14, 12, 0, 0, 0, time.UTC)

// at is t0 plus s seconds: the tests' client clock.
func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func statusEv(device string, s Status, t time.Time) *Event {
	return &Event{ID: "e", UserID: "u", Kind: KindStatus, Status: s, DeviceID: device, OccurredAt: t, ReceivedAt: t, Source: SourceAPI}
}

func heartbeatEv(device string, t time.Time) *Event {
	return &Event{ID: "e", UserID: "u", Kind: KindHeartbeat, DeviceID: device, OccurredAt: t, ReceivedAt: t, Source: SourceAPI}
}

func activityEv(device string, t time.Time) *Event {
	return &Event{ID: "e", UserID: "u", Kind: KindActivity, DeviceID: device, OccurredAt: t, ReceivedAt: t, Source: SourceAPI}
}

// step is one event and what applying it must report.
type step struct {
	ev   *Event
	want Outcome
}

func changed(from, to Status, t time.Time) Outcome {
	return Outcome{Changed: true, Previous: from, Current: to, At: t}
}

func same(s Status) Outcome { return Outcome{Previous: s, Current: s} }

func stale(s Status) Outcome { return Outcome{Stale: true, Previous: s, Current: s} }

func TestApply(t *testing.T) {
	const us = time.Microsecond
	tests := []struct {
		name  string
		steps []step
		want  User // Index 0 and Offset -1 are implied
	}{
		{
			name:  "online",
			steps: []step{{statusEv("default", Online, at(1)), changed(Offline, Online, at(1))}},
			want: User{Status: Online, LastUpdated: at(1), LastActive: at(1), LastSeen: at(1),
				Devices: []Device{{ID: "default", Status: Online, LastSeen: at(1)}}},
		},
		{
			name:  "idle",
			steps: []step{{statusEv("default", Idle, at(1)), changed(Offline, Idle, at(1))}},
			want: User{Status: Idle, LastUpdated: at(1), LastActive: at(1), LastSeen: at(1),
				Devices: []Device{{ID: "default", Status: Idle, LastSeen: at(1)}}},
		},
		{
			name:  "offline on a new user changes nothing but the times",
			steps: []step{{statusEv("default", Offline, at(1)), same(Offline)}},
			want: User{Status: Offline, LastActive: at(1), LastSeen: at(1),
				Devices: []Device{{ID: "default", Status: Offline, LastSeen: at(1)}}},
		},
		{
			name: "offline after online",
			steps: []step{
				{statusEv("default", Online, at(1)), changed(Offline, Online, at(1))},
				{statusEv("default", Offline, at(2)), changed(Online, Offline, at(2))},
			},
			want: User{Status: Offline, LastUpdated: at(2), LastActive: at(2), LastSeen: at(2),
				Devices: []Device{{ID: "default", Status: Offline, LastSeen: at(2)}}},
		},
		{
			name:  "invisible",
			steps: []step{{statusEv("default", Invisible, at(1)), changed(Offline, Invisible, at(1))}},
			want: User{Status: Invisible, Invisible: true, LastUpdated: at(1), LastActive: at(1), LastSeen: at(1),
				Devices: []Device{{ID: "default", Status: Online, LastSeen: at(1)}}},
		},
		{
			name: "online ends invisible",
			steps: []step{
				{statusEv("default", Invisible, at(1)), changed(Offline, Invisible, at(1))},
				{statusEv("default", Online, at(2)), changed(Invisible, Online, at(2))},
			},
			want: User{Status: Online, LastUpdated: at(2), LastActive: at(2), LastSeen: at(2),
				Devices: []Device{{ID: "default", Status: Online, LastSeen: at(2)}}},
		},
		{
			name: "heartbeat revives an offline device",
			steps: []step{
				{statusEv("default", Offline, at(1)), same(Offline)},
				{heartbeatEv("default", at(2)), changed(Offline, Online, at(2))},
			},
			// A heartbeat is no activity: LastActive stays at the status event.
			want: User{Status: Online, LastUpdated: at(2), LastActive: at(1), LastSeen: at(2),
				Devices: []Device{{ID: "default", Status: Online, LastSeen: at(2)}}},
		},
		{
			name:  "heartbeat of an unknown device brings it online",
			steps: []step{{heartbeatEv("phone", at(1)), changed(Offline, Online, at(1))}},
			want: User{Status: Online, LastUpdated: at(1), LastSeen: at(1),
				Devices: []Device{{ID: "phone", Status: Online, LastSeen: at(1)}}},
		},
		{
			name: "heartbeat keeps idle idle",
			steps: []step{
				{statusEv("default", Idle, at(1)), changed(Offline, Idle, at(1))},
				{heartbeatEv("default", at(2)), same(Idle)},
			},
			want: User{Status: Idle, LastUpdated: at(1), LastActive: at(1), LastSeen: at(2),
				Devices: []Device{{ID: "default", Status: Idle, LastSeen: at(2)}}},
		},
		{
			name: "activity makes an idle device online",
			steps: []step{
				{statusEv("default", Idle, at(1)), changed(Offline, Idle, at(1))},
				{activityEv("default", at(2)), changed(Idle, Online, at(2))},
			},
			want: User{Status: Online, LastUpdated: at(2), LastActive: at(2), LastSeen: at(2),
				Devices: []Device{{ID: "default", Status: Online, LastSeen: at(2)}}},
		},
		{
			name: "activity keeps invisible",
			steps: []step{
				{statusEv("default", Invisible, at(1)), changed(Offline, Invisible, at(1))},
				{activityEv("default", at(2)), same(Invisible)},
			},
			want: User{Status: Invisible, Invisible: true, LastUpdated: at(1), LastActive: at(2), LastSeen: at(2),
				Devices: []Device{{ID: "default", Status: Online, LastSeen: at(2)}}},
		},
		{
			name: "an older event of a device is stale",
			steps: []step{
				{statusEv("phone", Online, at(5)), changed(Offline, Online, at(5))},
				{statusEv("phone", Offline, at(4)), stale(Online)},
				{heartbeatEv("phone", at(3)), stale(Online)},
			},
			want: User{Status: Online, LastUpdated: at(5), LastActive: at(5), LastSeen: at(5),
				Devices: []Device{{ID: "phone", Status: Online, LastSeen: at(5)}}},
		},
		{
			name: "an event as old as the newest is applied",
			steps: []step{
				{statusEv("phone", Online, at(5)), changed(Offline, Online, at(5))},
				// Same time as the change before it: the change time still grows.
				{statusEv("phone", Offline, at(5)), changed(Online, Offline, at(5).Add(us))},
			},
			want: User{Status: Offline, LastUpdated: at(5).Add(us), LastActive: at(5), LastSeen: at(5),
				Devices: []Device{{ID: "phone", Status: Offline, LastSeen: at(5)}}},
		},
		{
			name: "staleness is per device",
			steps: []step{
				{statusEv("phone", Online, at(5)), changed(Offline, Online, at(5))},
				{statusEv("laptop", Idle, at(2)), same(Online)},
			},
			want: User{Status: Online, LastUpdated: at(5), LastActive: at(5), LastSeen: at(5),
				Devices: []Device{{ID: "laptop", Status: Idle, LastSeen: at(2)}, {ID: "phone", Status: Online, LastSeen: at(5)}}},
		},
		{
			name: "the effective status is the highest of the devices",
			steps: []step{
				{statusEv("phone", Idle, at(1)), changed(Offline, Idle, at(1))},
				{statusEv("laptop", Online, at(2)), changed(Idle, Online, at(2))},
				{statusEv("tablet", Offline, at(3)), same(Online)},
				{statusEv("laptop", Idle, at(4)), changed(Online, Idle, at(4))},
				{statusEv("phone", Offline, at(5)), same(Idle)},
				{statusEv("laptop", Offline, at(6)), changed(Idle, Offline, at(6))},
			},
			want: User{Status: Offline, LastUpdated: at(6), LastActive: at(6), LastSeen: at(6),
				Devices: []Device{{ID: "laptop", Status: Offline, LastSeen: at(6)}, {ID: "phone", Status: Offline, LastSeen: at(5)}, {ID: "tablet", Status: Offline, LastSeen: at(3)}}},
		},
		{
			name: "offline from one device leaves the others",
			steps: []step{
				{statusEv("phone", Online, at(1)), changed(Offline, Online, at(1))},
				{statusEv("laptop", Online, at(2)), same(Online)},
				{statusEv("laptop", Offline, at(3)), same(Online)},
			},
			want: User{Status: Online, LastUpdated: at(1), LastActive: at(3), LastSeen: at(3),
				Devices: []Device{{ID: "laptop", Status: Offline, LastSeen: at(3)}, {ID: "phone", Status: Online, LastSeen: at(1)}}},
		},
		{
			name: "invisible while a device is alive, else offline",
			steps: []step{
				{statusEv("phone", Invisible, at(1)), changed(Offline, Invisible, at(1))},
				{heartbeatEv("laptop", at(2)), same(Invisible)},
				{statusEv("phone", Offline, at(3)), same(Invisible)},
				{statusEv("laptop", Offline, at(4)), changed(Invisible, Offline, at(4))},
			},
			want: User{Status: Offline, Invisible: true, LastUpdated: at(4), LastActive: at(4), LastSeen: at(4),
				Devices: []Device{{ID: "laptop", Status: Offline, LastSeen: at(4)}, {ID: "phone", Status: Offline, LastSeen: at(3)}}},
		},
		{
			name: "invisible survives a device going offline and coming back by heartbeat",
			steps: []step{
				{statusEv("phone", Invisible, at(1)), changed(Offline, Invisible, at(1))},
				{statusEv("phone", Offline, at(2)), changed(Invisible, Offline, at(2))},
				{heartbeatEv("phone", at(3)), changed(Offline, Invisible, at(3))},
			},
			want: User{Status: Invisible, Invisible: true, LastUpdated: at(3), LastActive: at(2), LastSeen: at(3),
				Devices: []Device{{ID: "phone", Status: Online, LastSeen: at(3)}}},
		},
		{
			name: "invisible from one device hides the others",
			steps: []step{
				{statusEv("laptop", Online, at(1)), changed(Offline, Online, at(1))},
				{statusEv("phone", Invisible, at(2)), changed(Online, Invisible, at(2))},
				{statusEv("phone", Offline, at(3)), same(Invisible)},
			},
			want: User{Status: Invisible, Invisible: true, LastUpdated: at(2), LastActive: at(3), LastSeen: at(3),
				Devices: []Device{{ID: "laptop", Status: Online, LastSeen: at(1)}, {ID: "phone", Status: Offline, LastSeen: at(3)}}},
		},
		{
			name: "change times grow when client clocks go backwards across devices",
			steps: []step{
				{statusEv("phone", Online, at(10)), changed(Offline, Online, at(10))},
				{statusEv("laptop", Invisible, at(5)), changed(Online, Invisible, at(10).Add(us))},
				{statusEv("tablet", Online, at(6)), changed(Invisible, Online, at(10).Add(2*us))},
				{statusEv("tablet", Offline, at(7)), same(Online)},
				// The laptop, online since its invisible, keeps the user online.
				{statusEv("phone", Idle, at(11)), same(Online)},
			},
			want: User{Status: Online, LastUpdated: at(10).Add(2 * us), LastActive: at(11), LastSeen: at(11),
				Devices: []Device{{ID: "laptop", Status: Online, LastSeen: at(5)}, {ID: "phone", Status: Idle, LastSeen: at(11)}, {ID: "tablet", Status: Offline, LastSeen: at(7)}}},
		},
		{
			name: "received-at stands in for a missing occurred-at",
			steps: []step{
				{&Event{ID: "e", UserID: "u", Kind: KindStatus, Status: Online, DeviceID: "d", ReceivedAt: at(8), Source: SourceAPI},
					changed(Offline, Online, at(8))},
				{statusEv("d", Offline, at(7)), stale(Online)},
			},
			want: User{Status: Online, LastUpdated: at(8), LastActive: at(8), LastSeen: at(8),
				Devices: []Device{{ID: "d", Status: Online, LastSeen: at(8)}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := NewUser(0)
			for i, s := range tt.steps {
				got := u.Apply(s.ev)
				got.PublicAt = time.Time{} // the public view has its tests (public_test.go)
				if got != s.want {
					t.Errorf("step %d (%v %v on %s at %v): outcome = %+v, want %+v",
						i, s.ev.Kind, s.ev.Status, s.ev.DeviceID, s.ev.Time().Sub(t0), got, s.want)
				}
			}
			want := tt.want
			want.Offset = -1
			checkUser(t, u, &want)
		})
	}
}

func checkUser(t *testing.T, got, want *User) {
	t.Helper()
	if got.Index != want.Index || got.Status != want.Status || got.Invisible != want.Invisible ||
		!got.LastUpdated.Equal(want.LastUpdated) || !got.LastActive.Equal(want.LastActive) ||
		!got.LastSeen.Equal(want.LastSeen) || got.Offset != want.Offset ||
		!slices.EqualFunc(got.Devices, want.Devices, func(a, b Device) bool {
			return a.ID == b.ID && a.Status == b.Status && a.LastSeen.Equal(b.LastSeen)
		}) {
		t.Errorf("user =\n  %s\nwant\n  %s", fmtUser(got), fmtUser(want))
	}
}

func fmtUser(u *User) string {
	rel := func(t time.Time) string {
		if t.IsZero() {
			return "zero"
		}
		return t.Sub(t0).String()
	}
	s := fmt.Sprintf("index=%d status=%v invisible=%v updated=%s active=%s seen=%s offset=%d devices=[",
		u.Index, u.Status, u.Invisible, rel(u.LastUpdated), rel(u.LastActive), rel(u.LastSeen), u.Offset)
	for _, d := range u.Devices {
		s += fmt.Sprintf(" %s:%v@%s", d.ID, d.Status, rel(d.LastSeen))
	}
	return s + " ]"
}

func TestNewUser(t *testing.T) {
	checkUser(t, NewUser(9), &User{Index: 9, Status: Offline, Offset: -1})
}

// devices lists n device names dev00, dev01, ...
func devices(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("dev%02d", i)
	}
	return out
}

func TestApplyEvictsTheOldestOfflineDevice(t *testing.T) {
	u := NewUser(0)
	// 14 live devices and two offline ones, the older of which goes first.
	for i, d := range devices(MaxDevices - 2) {
		u.Apply(heartbeatEv(d, at(10+i)))
	}
	u.Apply(statusEv("gone-later", Offline, at(5)))
	u.Apply(statusEv("gone-first", Offline, at(3)))
	if len(u.Devices) != MaxDevices {
		t.Fatalf("%d devices before the limit, want %d", len(u.Devices), MaxDevices)
	}
	out := u.Apply(heartbeatEv("new", at(40)))
	if out != same(Online) {
		t.Errorf("outcome = %+v", out)
	}
	var ids []string
	for _, d := range u.Devices {
		ids = append(ids, d.ID)
	}
	want := append(devices(MaxDevices-2), "gone-later", "new")
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Fatalf("devices = %v\nwant %v", ids, want)
	}
	// The next new device evicts the remaining offline one.
	u.Apply(heartbeatEv("newer", at(41)))
	if _, found := u.device("gone-later"); found || len(u.Devices) != MaxDevices {
		t.Fatalf("after a second new device: %d devices, gone-later kept: %v", len(u.Devices), found)
	}
}

func TestApplyKeepsLiveDevicesPastTheLimit(t *testing.T) {
	u := NewUser(0)
	for i, d := range devices(MaxDevices + 1) {
		u.Apply(heartbeatEv(d, at(i)))
	}
	if len(u.Devices) != MaxDevices+1 {
		t.Fatalf("%d devices, want all %d live ones kept", len(u.Devices), MaxDevices+1)
	}
	// Once one goes offline, the next new device evicts it.
	u.Apply(statusEv("dev03", Offline, at(30)))
	u.Apply(heartbeatEv("extra", at(31)))
	if _, found := u.device("dev03"); found || len(u.Devices) != MaxDevices+1 {
		t.Fatalf("%d devices, dev03 kept: %v", len(u.Devices), found)
	}
}

// Past MaxLiveDevices live devices, the one seen longest ago is dropped and the
// outcome counts it: heartbeating new device ids cannot grow a state without bound.
func TestApplyDropsTheOldestLiveDevicePastTheBound(t *testing.T) {
	u := NewUser(0)
	names := make([]string, MaxLiveDevices+3)
	for i := range names {
		names[i] = fmt.Sprintf("d%03d", i)
	}
	dropped := 0
	for i, d := range names {
		dropped += u.Apply(heartbeatEv(d, at(i))).DevicesDropped
	}
	if len(u.Devices) != MaxLiveDevices || dropped != 3 {
		t.Fatalf("%d devices, %d dropped; want %d kept and 3 dropped", len(u.Devices), dropped, MaxLiveDevices)
	}
	for _, gone := range names[:3] {
		if _, found := u.device(gone); found {
			t.Errorf("%s, the oldest seen, was kept", gone)
		}
	}
	if u.Status != Online {
		t.Errorf("status %v, want online", u.Status)
	}
}

// TestApplyTimeoutLosesToNewerHeartbeat is docs/design.md guarantee 5: a timeout event
// carries the last-seen it was decided on, and must not apply when the device was
// seen after that (a heartbeat raced the timeout into the log and won).
func TestApplyTimeoutLosesToNewerHeartbeat(t *testing.T) {
	u := NewUser(0)
	u.Apply(heartbeatEv("phone", at(0)))
	u.Apply(heartbeatEv("phone", at(59)))
	// Decided at 60 s on the last-seen of 0 s, appended after the heartbeat at 59 s.
	timeout := &Event{ID: "t", UserID: "u", Kind: KindStatus, Status: Offline, DeviceID: "phone",
		OccurredAt: at(60), ReceivedAt: at(60), Source: SourceTimeout, LastSeen: at(0)}
	if out := u.Apply(timeout); out != stale(Online) {
		t.Errorf("timeout decided on an old last-seen: outcome = %+v, want stale", out)
	}
	checkUser(t, u, &User{Status: Online, LastUpdated: at(0), LastSeen: at(59), Offset: -1,
		Devices: []Device{{ID: "phone", Status: Online, LastSeen: at(59)}}})
}

func TestUserPBRoundTrip(t *testing.T) {
	us := time.Microsecond
	u := &User{
		Index:       123456,
		Status:      Invisible,
		Invisible:   true,
		LastUpdated: at(10).Add(3 * us),
		LastActive:  at(9),
		LastSeen:    at(11),
		Devices:     []Device{{ID: "laptop", Status: Offline, LastSeen: at(4)}, {ID: "phone", Status: Online, LastSeen: at(11)}, {ID: "tablet", Status: Idle, LastSeen: at(7)}},
		Offset:      98765,
	}
	p := u.ToPB()
	want := &pulsev1.UserState{
		Index:         123456,
		Status:        pulsev1.Status_STATUS_INVISIBLE,
		Invisible:     true,
		LastUpdatedUs: 1741953610_000003,
		LastActiveUs:  1741953609_000000,
		LastSeenUs:    1741953611_000000,
		Offset:        98765,
		Devices: []*pulsev1.DeviceState{
			{DeviceId: "laptop", Status: pulsev1.Status_STATUS_OFFLINE, LastSeenUs: 1741953604_000000},
			{DeviceId: "phone", Status: pulsev1.Status_STATUS_ONLINE, LastSeenUs: 1741953611_000000},
			{DeviceId: "tablet", Status: pulsev1.Status_STATUS_IDLE, LastSeenUs: 1741953607_000000},
		},
	}
	if !proto.Equal(p, want) {
		t.Fatalf("ToPB() = %v\nwant %v", p, want)
	}
	b, err := proto.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var decoded pulsev1.UserState
	if err := proto.Unmarshal(b, &decoded); err != nil {
		t.Fatal(err)
	}
	checkUser(t, UserFromPB(&decoded), u)

	// A user never seen round-trips as one.
	checkUser(t, UserFromPB(NewUser(5).ToPB()), NewUser(5))
	// A stored state without a status reads as offline.
	checkUser(t, UserFromPB(&pulsev1.UserState{Index: 2, Offset: 7}), &User{Index: 2, Status: Offline, Offset: 7})

	// A state folded by Apply survives the trip and folds on identically.
	a := NewUser(1)
	a.Apply(statusEv("phone", Idle, at(1)))
	a.Apply(statusEv("laptop", Invisible, at(2)))
	b2 := UserFromPB(a.ToPB())
	next := heartbeatEv("phone", at(3))
	if oa, ob := a.Apply(next), b2.Apply(next); oa != ob {
		t.Fatalf("outcomes differ after the round trip: %+v vs %+v", oa, ob)
	}
	checkUser(t, b2, a)
}
