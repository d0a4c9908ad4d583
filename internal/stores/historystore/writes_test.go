package historystore

import (
	"reflect"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// An event row's custom, custom_text, custom_emoji and custom_until: unwritten for an
// event that left the custom status as it was, custom alone for a clear, and every
// member the event set.
func TestEventRowCustomStatus(t *testing.T) {
	at := time.Date(2026, 11, 26, 14, 0, 0, 0, time.UTC)
	until := at.Add(90 * time.Minute)
	unset := gocql.UnsetValue
	tests := []struct {
		name   string
		kind   presence.Kind
		custom *presence.CustomStatus
		want   []any // custom, custom_text, custom_emoji, custom_until
	}{
		{"none", presence.KindStatus, nil, []any{unset, unset, unset, unset}},
		{"clear", presence.KindStatus, &presence.CustomStatus{}, []any{true, unset, unset, unset}},
		{"text", presence.KindStatus, &presence.CustomStatus{Text: "Heads down"}, []any{true, "Heads down", unset, unset}},
		{"all", presence.KindStatus, &presence.CustomStatus{Text: "In a meeting", Emoji: "📅", Until: until},
			[]any{true, "In a meeting", "📅", until}},
		{"heartbeat", presence.KindHeartbeat, nil, []any{unset, unset, unset, unset}},
		// The aggregator's clear at until carries no custom status of its own.
		{"until", presence.KindCustom, nil, []any{true, unset, unset, unset}},
	}
	for _, tt := range tests {
		e := presence.Event{ID: "e1", UserID: "u1", Kind: tt.kind, DeviceID: "phone", ReceivedAt: at, Source: presence.SourceAPI, Custom: tt.custom}
		switch tt.kind {
		case presence.KindStatus:
			e.Status = presence.Online
		case presence.KindCustom:
			e.Source, e.DeviceID = presence.SourceTimeout, presence.AllDevices
		}
		v := EventRow(&e, false, 3, 10).Values()
		if got := v[12:16]; !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: custom columns = %v, want %v", tt.name, got, tt.want)
		}
		if got, want := v[16], presence.Micros(at); got != want {
			t.Errorf("%s: write timestamp = %v, want %v (received-at)", tt.name, got, want)
		}
	}
}
