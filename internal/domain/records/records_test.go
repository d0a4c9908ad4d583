package records

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

func TestEventRoundTrip(t *testing.T) {
	e := presence.Event{ID: "e1", UserID: "alice", Kind: presence.KindStatus, Status: presence.Online,
		DeviceID: "phone", ReceivedAt: time.UnixMicro(1_795_000_000_000_000).UTC(), Source: presence.SourceAPI}
	r, err := Event("presence.events", &e)
	if err != nil {
		t.Fatal(err)
	}
	if r.Topic != "presence.events" || string(r.Key) != "alice" || len(r.Headers) != 1 ||
		r.Headers[0].Key != pulsev1.SchemaHeader || string(r.Headers[0].Value) != pulsev1.SchemaEvent {
		t.Fatalf("record = %+v", r)
	}
	got, err := DecodeEvent(r)
	if err != nil || got != e {
		t.Fatalf("DecodeEvent = %+v, %v; want %+v", got, err, e)
	}
}

func TestDecodeEventRefusesForeignRecords(t *testing.T) {
	e := presence.Event{ID: "e1", UserID: "alice", Kind: presence.KindHeartbeat, DeviceID: "phone",
		ReceivedAt: time.UnixMicro(1).UTC(), Source: presence.SourceAPI}
	good, err := Event("t", &e)
	if err != nil {
		t.Fatal(err)
	}
	change, err := Change("t", &pulsev1.Change{UserId: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	for name, tt := range map[string]struct {
		r    *kgo.Record
		want string
	}{
		"no header":     {&kgo.Record{Key: good.Key, Value: good.Value}, "no pulse-schema header"},
		"a change":      {change, `schema "pulse.v1.Change", want "pulse.v1.Event"`},
		"bad bytes":     {&kgo.Record{Key: good.Key, Value: []byte{0xff}, Headers: good.Headers}, "decoding event"},
		"key mismatch":  {&kgo.Record{Key: []byte("bob"), Value: good.Value, Headers: good.Headers}, `record key "bob" differs`},
		"invalid event": {&kgo.Record{Key: []byte(""), Value: nil, Headers: good.Headers}, "invalid event"},
	} {
		if _, err := DecodeEvent(tt.r); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: DecodeEvent error = %v, want it to say %q", name, err, tt.want)
		}
	}
}

func TestDecodeChangeRefusesWhatIsNoChange(t *testing.T) {
	on, idle := pulsev1.Status_STATUS_ONLINE, pulsev1.Status_STATUS_IDLE
	good := func() *pulsev1.Change {
		return &pulsev1.Change{UserId: "alice", Previous: idle, Current: on, ChangedAtUs: 1_795_000_000_000_000}
	}
	r, err := Change("presence.changes", good())
	if err != nil {
		t.Fatal(err)
	}
	if c, err := DecodeChange(r); err != nil || c.GetUserId() != "alice" || c.GetCurrent() != on {
		t.Fatalf("DecodeChange = %v, %v", c, err)
	}
	for _, tc := range []struct {
		name string
		edit func(*pulsev1.Change, *kgo.Record)
		want string
	}{
		{"no header", func(_ *pulsev1.Change, r *kgo.Record) { r.Headers = nil }, "no " + pulsev1.SchemaHeader},
		{"key", func(_ *pulsev1.Change, r *kgo.Record) { r.Key = []byte("bob") }, `record key "bob" differs`},
		{"same status", func(c *pulsev1.Change, _ *kgo.Record) { c.Current = idle }, "is not a change"},
		{"group id", func(c *pulsev1.Change, _ *kgo.Record) { c.Current, c.GroupId = idle, "a b" }, "group id"},
		{"groups", func(c *pulsev1.Change, _ *kgo.Record) { c.Groups = []string{""} }, "groups"},
		{"no time", func(c *pulsev1.Change, _ *kgo.Record) { c.ChangedAtUs = 0 }, "no changed_at"},
	} {
		c := good()
		r, _ := Change("presence.changes", c)
		tc.edit(c, r)
		if tc.name != "no header" && tc.name != "key" {
			key := r.Key
			r, _ = Change("presence.changes", c)
			r.Key = key
		}
		if _, err := DecodeChange(r); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: DecodeChange = %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

func TestDecodeChangeTakesErasures(t *testing.T) {
	rec := func(c *pulsev1.Change) *kgo.Record {
		r, err := Change("presence.changes", c)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	base := func(prev pulsev1.Status) *pulsev1.Change {
		return &pulsev1.Change{UserId: "u", EventId: "e", Previous: prev, Current: pulsev1.Status_STATUS_OFFLINE,
			ChangedAtUs: 1, Cause: pulsev1.Cause_CAUSE_ERASE, DeviceId: presence.AllDevices}
	}
	for _, prev := range []pulsev1.Status{pulsev1.Status_STATUS_OFFLINE, pulsev1.Status_STATUS_ONLINE, pulsev1.Status_STATUS_INVISIBLE} {
		c, err := DecodeChange(rec(base(prev)))
		if err != nil || c.GetCause() != pulsev1.Cause_CAUSE_ERASE || c.GetPrevious() != prev {
			t.Fatalf("erasure from %v: %v, %v", prev, c, err)
		}
	}
	bad := base(pulsev1.Status_STATUS_ONLINE)
	bad.Current = pulsev1.Status_STATUS_IDLE
	if _, err := DecodeChange(rec(bad)); err == nil {
		t.Fatal("an erasure to idle was taken")
	}
	bad = base(pulsev1.Status_STATUS_OFFLINE)
	bad.GroupId = "g"
	if _, err := DecodeChange(rec(bad)); err == nil {
		t.Fatal("an erasure with a group was taken")
	}
	// Any other cause still needs a transition.
	same := base(pulsev1.Status_STATUS_OFFLINE)
	same.Cause = pulsev1.Cause_CAUSE_EVENT
	if _, err := DecodeChange(rec(same)); err == nil {
		t.Fatal("offline -> offline with cause event was taken")
	}
}

func TestEraseEventRoundTrips(t *testing.T) {
	now := time.UnixMicro(1_700_000_000_000_000).UTC()
	e := presence.Event{ID: "x", UserID: "u", Kind: presence.KindErase, DeviceID: presence.AllDevices,
		OccurredAt: now, ReceivedAt: now, Source: presence.SourceSystem}
	r, err := Event("presence.events", &e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeEvent(r)
	if err != nil || got.Kind != presence.KindErase || !got.OccurredAt.Equal(now) {
		t.Fatalf("DecodeEvent = %+v, %v", got, err)
	}
	for name, mut := range map[string]func(*presence.Event){
		"source api":  func(e *presence.Event) { e.Source = presence.SourceAPI },
		"one device":  func(e *presence.Event) { e.DeviceID = "d" },
		"no time":     func(e *presence.Event) { e.OccurredAt = time.Time{} },
		"with status": func(e *presence.Event) { e.Status = presence.Online },
	} {
		b := e
		mut(&b)
		if err := b.Validate(); err == nil {
			t.Errorf("%s: an invalid erase event validates", name)
		}
	}
}
