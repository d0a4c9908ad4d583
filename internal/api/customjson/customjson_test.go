package customjson

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
)

var now = time.Date(2026, 11, 26, 14, 0, 0, 0, time.UTC)

func TestDecode(t *testing.T) {
	c, err := Decode([]byte(`{"text":"In a meeting","emoji":"📅","until":"2026-11-26T16:00:00.0000019+01:00"}`), "data", now)
	if err != nil {
		t.Fatal(err)
	}
	want := presence.CustomStatus{Text: "In a meeting", Emoji: "📅", Until: time.Date(2026, 11, 26, 15, 0, 0, 1000, time.UTC)}
	if *c != want {
		t.Fatalf("Decode = %+v, want %+v (UTC, truncated to µs)", *c, want)
	}
	if c, err := Decode([]byte(`{}`), "data", now); err != nil || !c.IsZero() {
		t.Fatalf("Decode({}) = %+v, %v; want the clear", c, err)
	}
	for body, field := range map[string]string{
		`{"text":""}`:                                 "events[2].data.text",
		`{"emoji":null,"text":"x"}`:                   "events[2].data.emoji",
		`{"text":"x","until":"0001-01-01T00:00:00Z"}`: "events[2].data.until",
		`{"text":"x","until":"soon"}`:                 "events[2].data.until",
		`{"until":"2026-11-26T15:00:00Z"}`:            "events[2].data",
		`{"text":"x","extra":1}`:                      "events[2].data.extra",
		`[]`:                                          "events[2].data",
	} {
		_, err := Decode([]byte(body), "events[2].data", now)
		var e *httpserver.Error
		if !errors.As(err, &e) || e.Field != field || e.Status != 400 {
			t.Errorf("Decode(%s) = %v, want a 400 naming %s", body, err, field)
		}
	}
}

func TestView(t *testing.T) {
	if v := View(presence.CustomStatus{}); v != nil {
		t.Fatalf("View(none) = %+v, want nil", v)
	}
	b, err := json.Marshal(View(presence.CustomStatus{Emoji: "🌴", Until: now}))
	if err != nil || string(b) != `{"emoji":"🌴","until":"2026-11-26T14:00:00Z"}` {
		t.Fatalf("View = %s, %v", b, err)
	}
}

func TestEventView(t *testing.T) {
	for _, tt := range []struct {
		c    *presence.CustomStatus
		want string
	}{
		{nil, `null`},
		{&presence.CustomStatus{}, `{}`},
		{&presence.CustomStatus{Text: "In a meeting", Until: now}, `{"text":"In a meeting","until":"2026-11-26T14:00:00Z"}`},
	} {
		b, err := json.Marshal(EventView(tt.c))
		if err != nil || string(b) != tt.want {
			t.Errorf("EventView(%+v) = %s, %v; want %s", tt.c, b, err, tt.want)
		}
	}
}
