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
