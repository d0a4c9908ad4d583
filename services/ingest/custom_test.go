package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

func TestPostEventsWithData(t *testing.T) {
	hs := newHarness(t, nil)
	body := `{"events": [
		{"eventId": "c-1", "userId": "42", "status": "online",
		 "data": {"text": "In a meeting", "emoji": "📅", "until": "2025-03-14T17:00:00+01:00"}},
		{"eventId": "c-2", "userId": "42", "status": "idle", "data": {"emoji": "🌴"}},
		{"eventId": "c-3", "userId": "42", "kind": "status", "status": "online", "data": {}}
	]}`
	res := hs.post("/v1/events", body)
	if res.status != http.StatusAccepted {
		t.Fatalf("POST /v1/events = %d %s", res.status, res.body)
	}
	api := pulsev1.Source_SOURCE_API
	checkRecords(t, hs.consume(3), []*pulsev1.Event{
		{EventId: "c-1", UserId: "42", Kind: pulsev1.Kind_KIND_STATUS, Status: pulsev1.Status_STATUS_ONLINE,
			DeviceId: "default", ReceivedAtUs: nowUs, Source: api,
			Custom: &pulsev1.CustomStatus{Text: "In a meeting", Emoji: "📅", UntilUs: 1741968000_000000}},
		{EventId: "c-2", UserId: "42", Kind: pulsev1.Kind_KIND_STATUS, Status: pulsev1.Status_STATUS_IDLE,
			DeviceId: "default", ReceivedAtUs: nowUs, Source: api, Custom: &pulsev1.CustomStatus{Emoji: "🌴"}},
		// Present but empty: the clear.
		{EventId: "c-3", UserId: "42", Kind: pulsev1.Kind_KIND_STATUS, Status: pulsev1.Status_STATUS_ONLINE,
			DeviceId: "default", ReceivedAtUs: nowUs, Source: api, Custom: &pulsev1.CustomStatus{}},
	})
}

func TestInvalidDataProducesNothing(t *testing.T) {
	hs := newHarness(t, nil)
	ev := func(data string) string {
		return `{"events":[{"userId":"u1","status":"online"},{"userId":"u1","status":"online","data":` + data + `}]}`
	}
	for _, tt := range []struct {
		name, path, body, field, message string
	}{
		{"text of 129 characters", "/v1/events", ev(`{"text":"` + strings.Repeat("é", 129) + `"}`),
			"events[1].data.text", "must be at most 128 characters, got 129"},
		{"control character in text", "/v1/events", ev(`{"text":"a\u0007"}`),
			"events[1].data.text", "must not contain control or format characters (Unicode categories Cc and Cf), got U+0007 at byte 1"},
		{"empty text", "/v1/events", ev(`{"text":"","emoji":"📅"}`), "events[1].data.text", "must not be empty: leave it out"},
		{"two emoji", "/v1/events", ev(`{"emoji":"📅📅"}`), "events[1].data.emoji", "must be exactly one emoji, got 2 characters"},
		{"not an emoji", "/v1/events", ev(`{"emoji":"x"}`), "events[1].data.emoji", `must be an emoji, got "x"`},
		{"until in the past", "/v1/events", ev(`{"text":"x","until":"2025-03-14T15:09:26Z"}`),
			"events[1].data.until", "must be in the future; it is 535.897ms before the server clock"},
		{"until past 30 days", "/v1/events", ev(`{"text":"x","until":"2025-04-14T15:09:26Z"}`),
			"events[1].data.until", "must be at most 720h0m0s ahead of the server clock, got 743h59m59.464103s"},
		{"until not a time", "/v1/events", ev(`{"text":"x","until":"tomorrow"}`),
			"events[1].data.until", `must be an RFC 3339 time such as 2026-11-26T15:00:00Z, got "tomorrow"`},
		{"until alone", "/v1/events", ev(`{"until":"2025-03-14T16:09:26Z"}`),
			"events[1].data", "needs a text or an emoji; an empty object clears the custom status"},
		{"unknown member", "/v1/events", ev(`{"text":"x","colour":"red"}`), "events[1].data.colour", `unknown field "colour"`},
		{"null member", "/v1/events", ev(`{"text":"x","emoji":null}`), "events[1].data.emoji", "must not be null: leave it out"},
		{"null data", "/v1/events", ev(`null`), "events[1].data", "must not be null: leave it out for its default"},
		{"data not an object", "/v1/events", ev(`"busy"`), "events[1].data", "must be a JSON object, got a string"},
		{"wrong type", "/v1/events", ev(`{"text":5}`), "events[1].data.text", "must be a string, got number"},
		{"on a heartbeat event", "/v1/events", `{"events":[{"userId":"u1","kind":"heartbeat","data":{"text":"x"}}]}`,
			"events[0].data", "only status events carry data; kind is heartbeat"},
		{"on an activity event", "/v1/events", `{"events":[{"userId":"u1","kind":"activity","data":{}}]}`,
			"events[0].data", "only status events carry data; kind is activity"},
		{"on POST /v1/heartbeat", "/v1/heartbeat", `{"userId":"u1","data":{"text":"x"}}`, "data", `unknown field "data"`},
		{"on the seed POST /status", "/status", `{"userId":"u1","status":"online","data":{"text":"x"}}`, "data", `unknown field "data"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := hs.post(tt.path, tt.body)
			if want := badRequest(tt.field, tt.message); res.status != http.StatusBadRequest || res.body != want {
				t.Errorf("POST %s = %d %s\nwant 400 %s", tt.path, res.status, res.body, want)
			}
			if n := hs.endOffset(); n != 0 {
				t.Fatalf("topic holds %d records after a refused request", n)
			}
		})
	}
}
