package pulsev1

import (
	"testing"

	"google.golang.org/protobuf/proto"
)

func benchEvent() *Event {
	return &Event{
		EventId: "01a20227-53ed-7085-8781-a76812093ee6", UserId: "0f8fad5b-d9cb-469f-a165-70867728950e",
		Kind: Kind_KIND_STATUS, Status: Status_STATUS_ONLINE, DeviceId: "phone",
		OccurredAtUs: 1795332461548775, ReceivedAtUs: 1795332461549775, Source: Source_SOURCE_API,
	}
}

// BenchmarkEventMarshal is ingest's encoding of one event record value.
func BenchmarkEventMarshal(b *testing.B) {
	e := benchEvent()
	b.ReportAllocs()
	var n int
	for b.Loop() {
		buf, err := proto.Marshal(e)
		if err != nil {
			b.Fatal(err)
		}
		n = len(buf)
	}
	b.ReportMetric(float64(n), "bytes")
}

// BenchmarkEventUnmarshal is the consumers' decoding of one event record value.
func BenchmarkEventUnmarshal(b *testing.B) {
	buf, err := proto.Marshal(benchEvent())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var e Event
		if err := proto.Unmarshal(buf, &e); err != nil {
			b.Fatal(err)
		}
	}
}
