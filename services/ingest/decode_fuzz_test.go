package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
)

// FuzzDecodeBatch feeds arbitrary bodies to the POST /v1/events decoder. It must
// never panic; whatever it refuses is a 400 naming a field; whatever it accepts
// obeys the log's rules and survives both re-encoding as JSON and the trip through
// the Kafka record's protobuf unchanged.
func FuzzDecodeBatch(f *testing.F) {
	for _, seed := range []string{
		`{"events":[{"userId":"u1","status":"online"}]}`,
		`{"events":[{"eventId":"e1","userId":"42","kind":"heartbeat","deviceId":"phone","occurredAt":"2025-03-14T15:09:20.123456789Z"}]}`,
		`{"events":[{"userId":"u","kind":"activity","occurredAt":"2025-03-14T16:14:26.5+01:00"},{"userId":"v","status":"invisible","deviceId":null}]}`,
		`{"events":[{"userId":"u","status":"away"}]}`,
		`{"events":[{"userId":"u","kind":"heartbeat","status":"online"}]}`,
		`{"events":[null]}`,
		`{"events":{}}`,
		`{"events":[]} x`,
		`{"events":[{"userId":"\u0000"}]}`,
		`{"events":[{"userId":"u","status":"online","extra":1}]}`,
		`[1,2,3]`,
		`{"events":[{"userId":"u","status":"online","occurredAt":"9999-12-31T23:59:59Z"}]}`,
		``,
	} {
		f.Add([]byte(seed))
	}
	const maxBatch = 8
	r := newRules(testNow, 5*time.Minute)
	f.Fuzz(func(t *testing.T, body []byte) {
		events, err := decodeBatch(body, r, maxBatch)
		if err != nil {
			apiErr, ok := errors.AsType[*httpserver.Error](err)
			if !ok || apiErr.Status != http.StatusBadRequest || apiErr.Field == "" || apiErr.Message == "" {
				t.Fatalf("refusal %#v is not a 400 naming a field", err)
			}
			return
		}
		if len(events) == 0 || len(events) > maxBatch {
			t.Fatalf("accepted %d events", len(events))
		}
		again := make([]eventJSON, len(events))
		for i := range events {
			e := &events[i]
			if err := e.Validate(); err != nil {
				t.Fatalf("accepted an invalid event %+v: %v", e, err)
			}
			back, err := presence.EventFromPB(e.ToPB())
			if err != nil || !sameEvent(back, *e) {
				t.Fatalf("protobuf round trip: %+v -> %+v, %v", *e, back, err)
			}
			again[i] = toJSON(e)
		}
		body2, err := json.Marshal(map[string]any{"events": again})
		if err != nil {
			t.Fatal(err)
		}
		events2, err := decodeBatch(body2, r, maxBatch)
		if err != nil {
			t.Fatalf("re-encoded batch %s refused: %v", body2, err)
		}
		for i := range events {
			if !sameEvent(events[i], events2[i]) {
				t.Fatalf("JSON round trip of event %d: %+v -> %+v", i, events[i], events2[i])
			}
		}
	})
}

// toJSON is e as a producer would send it, every field explicit.
func toJSON(e *presence.Event) eventJSON {
	kind := e.Kind.String()
	in := eventJSON{EventID: &e.ID, UserID: &e.UserID, Kind: &kind, DeviceID: &e.DeviceID}
	if e.Kind == presence.KindStatus {
		s := e.Status.String()
		in.Status = &s
	}
	if !e.OccurredAt.IsZero() {
		s := e.OccurredAt.Format(time.RFC3339Nano)
		in.OccurredAt = &s
	}
	return in
}

func sameEvent(a, b presence.Event) bool {
	return a.ID == b.ID && a.UserID == b.UserID && a.Kind == b.Kind && a.Status == b.Status &&
		a.DeviceID == b.DeviceID && a.Source == b.Source && a.OccurredAt.Equal(b.OccurredAt) &&
		a.ReceivedAt.Equal(b.ReceivedAt) && a.LastSeen.Equal(b.LastSeen)
}

// FuzzDecodeFastAgrees checks decodeFast against httpserver.DecodeObject: a body the
// fast decoder accepts, encoding/json accepts too, with the same fields; so clients
// see the same answers whichever decodes their body.
func FuzzDecodeFastAgrees(f *testing.F) {
	for _, seed := range []string{
		`{"userId":"u1","status":"online"}`,
		` {"eventId":"e1","userId":"42","deviceId":null,"occurredAt":"2025-03-14T15:09:20Z"}`,
		`{"userid":"u1"}`,
		`{"userId":"a","userId":"b"}`,
		`{"userId":"\ud800"}`,
		"{\"userId\":\"\xff\"}",
		`null`,
		`{"userId":"u"} {}`,
		`{"events":[{"userId":"u","kind":"activity"},null]}`,
		`{"USERID":"u","Status":"away"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var fast, exact eventJSON
		if decodeFast(body, &fast) {
			if err := httpserver.DecodeObject(body, &exact, ""); err != nil {
				t.Fatalf("decodeFast accepted %q, encoding/json refused it: %v", body, err)
			}
			if !sameEventJSON(fast, exact) {
				t.Fatalf("%q: decodeFast %+v, encoding/json %+v", body, fast, exact)
			}
		}
		var fastBatch, exactBatch struct {
			Events []*eventJSON `json:"events"`
		}
		if decodeFast(body, &fastBatch) {
			if err := httpserver.DecodeObject(body, &exactBatch, ""); err != nil {
				t.Fatalf("decodeFast accepted batch %q, encoding/json refused it: %v", body, err)
			}
			if len(fastBatch.Events) != len(exactBatch.Events) {
				t.Fatalf("%q: %d events, encoding/json %d", body, len(fastBatch.Events), len(exactBatch.Events))
			}
			for i := range fastBatch.Events {
				a, b := fastBatch.Events[i], exactBatch.Events[i]
				if (a == nil) != (b == nil) || a != nil && !sameEventJSON(*a, *b) {
					t.Fatalf("%q: event %d differs", body, i)
				}
			}
		}
	})
}

func sameEventJSON(a, b eventJSON) bool {
	same := func(x, y *string) bool { return x == nil && y == nil || x != nil && y != nil && *x == *y }
	return same(a.EventID, b.EventID) && same(a.UserID, b.UserID) && same(a.Kind, b.Kind) &&
		same(a.Status, b.Status) && same(a.DeviceID, b.DeviceID) && same(a.OccurredAt, b.OccurredAt)
}
