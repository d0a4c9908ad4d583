package deadletter

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestRecordParseReplay(t *testing.T) {
	at := time.Date(2026, 11, 23, 10, 0, 0, 123, time.UTC)
	orig := &kgo.Record{Topic: "presence.events", Partition: 7, Offset: 1234, Key: []byte("alice"), Value: []byte{0xff, 0x00},
		Headers: []kgo.RecordHeader{{Key: "pulse-schema", Value: []byte("event")}}}
	dl := Record(orig, "aggregator", errors.New("not a protobuf event"), at)
	if dl.Topic != "presence.events.dlq" || string(dl.Key) != "alice" || string(dl.Value) != "\xff\x00" {
		t.Fatalf("dead letter %+v", dl)
	}
	dl.Partition, dl.Offset = 3, 9
	l, err := Parse(dl)
	if err != nil {
		t.Fatal(err)
	}
	want := Letter{Topic: "presence.events", Partition: 7, Offset: 1234, Service: "aggregator", Reason: "not a protobuf event", At: at,
		Key: orig.Key, Value: orig.Value, Headers: orig.Headers}
	if !reflect.DeepEqual(l, want) {
		t.Fatalf("Parse = %+v, want %+v", l, want)
	}
	back := l.Replay()
	if back.Topic != "presence.events" || !reflect.DeepEqual(back.Headers, orig.Headers) || string(back.Value) != string(orig.Value) {
		t.Fatalf("Replay = %+v", back)
	}
}

func TestLongReasonIsCut(t *testing.T) {
	dl := Record(&kgo.Record{Topic: "t"}, "history", errors.New(strings.Repeat("x", 5000)), time.Now())
	l, err := Parse(&kgo.Record{Topic: dl.Topic, Headers: dl.Headers})
	if err != nil || len(l.Reason) > maxReason+len("…") || !strings.HasSuffix(l.Reason, "…") {
		t.Fatalf("reason of %d bytes, err %v", len(l.Reason), err)
	}
}

func TestParseRefusesWhatIsNotADeadLetter(t *testing.T) {
	for _, h := range [][]kgo.RecordHeader{nil, {{Key: HeaderOrigin, Value: []byte("x")}},
		{{Key: HeaderOrigin, Value: []byte("t/a/1")}, {Key: HeaderAt, Value: []byte(time.Now().Format(time.RFC3339))}}} {
		if _, err := Parse(&kgo.Record{Topic: "t.dlq", Headers: h}); err == nil {
			t.Errorf("Parse(%v) accepted", h)
		}
	}
}
