package presence

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

func TestCustomStatusValidate(t *testing.T) {
	now := t0
	for _, tt := range []struct {
		name string
		c    CustomStatus
		want string // "" for valid
	}{
		{"empty: a clear", CustomStatus{}, ""},
		{"text", CustomStatus{Text: "In a meeting"}, ""},
		{"emoji", CustomStatus{Emoji: "📅"}, ""},
		{"all three", CustomStatus{Text: "In a meeting", Emoji: "📅", Until: now.Add(time.Hour)}, ""},
		{"128 runes", CustomStatus{Text: strings.Repeat("é", 128)}, ""},
		{"129 runes", CustomStatus{Text: strings.Repeat("é", 129)}, "text: must be at most 128 characters, got 129"},
		{"128 runes of 4 bytes", CustomStatus{Text: strings.Repeat("🙂", 128)}, ""},
		{"newline in text", CustomStatus{Text: "a\nb"}, "text: must not contain control or format characters (Unicode categories Cc and Cf), got U+000A at byte 1"},
		{"bidi override in text", CustomStatus{Text: "a\u202eb"}, "text: must not contain control or format characters (Unicode categories Cc and Cf), got U+202E at byte 1"},
		{"zero-width joiner in text", CustomStatus{Text: "a\u200db"}, "text: must not contain control or format characters (Unicode categories Cc and Cf), got U+200D at byte 1"},
		{"bad utf-8 text", CustomStatus{Text: "\xff"}, "text: must be valid UTF-8"},
		{"until alone", CustomStatus{Until: now.Add(time.Hour)}, "needs a text or an emoji; an empty object clears the custom status"},
		{"flag", CustomStatus{Emoji: "🇫🇷"}, ""},
		{"keycap", CustomStatus{Emoji: "1️⃣"}, ""},
		{"skin tone", CustomStatus{Emoji: "👍🏽"}, ""},
		{"family: a ZWJ sequence", CustomStatus{Emoji: "👩‍👩‍👧‍👦"}, ""},
		{"subdivision flag: tags", CustomStatus{Emoji: "🏴󠁧󠁢󠁳󠁣󠁴󠁿"}, ""},
		{"text-style symbol", CustomStatus{Emoji: "☕"}, ""},
		{"an emoji that is not a symbol", CustomStatus{Emoji: "‼️"}, ""},
		{"an arrow emoji", CustomStatus{Emoji: "↔️"}, ""},
		{"two emoji", CustomStatus{Emoji: "📅📅"}, "emoji: must be exactly one emoji, got 2 characters"},
		{"emoji and a letter", CustomStatus{Emoji: "📅a"}, "emoji: must be exactly one emoji, got 2 characters"},
		{"a letter", CustomStatus{Emoji: "a"}, `emoji: must be an emoji, got "a"`},
		{"a digit", CustomStatus{Emoji: "1"}, `emoji: must be an emoji, got "1"`},
		{"a lone regional indicator", CustomStatus{Emoji: "🇫"}, "emoji: must be an emoji: a flag takes two regional indicators"},
		{"emoji with a bidi override", CustomStatus{Emoji: "📅\u202e"}, "emoji: must not contain control or format characters other than emoji joiners and tags, got U+202E at byte 4"},
		{"emoji past 32 bytes", CustomStatus{Emoji: "👩🏽‍👩🏽‍👧🏽‍👦🏽"}, "emoji: must be at most 32 bytes, got 41"},
		{"bad utf-8 emoji", CustomStatus{Emoji: "\xf0\x9f"}, "emoji: must be valid UTF-8"},
	} {
		got := ""
		if err := tt.c.ValidateNew(now); err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("%s: ValidateNew() = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestCustomStatusUntil(t *testing.T) {
	now := t0
	for _, tt := range []struct {
		name  string
		until time.Time
		want  string
	}{
		{"a microsecond ahead", now.Add(time.Microsecond), ""},
		{"30 days ahead", now.Add(MaxCustomAhead), ""},
		{"now", now, "until: must be in the future; it is 0s before the server clock"},
		{"past", now.Add(-time.Minute), "until: must be in the future; it is 1m0s before the server clock"},
		{"30 days and a second ahead", now.Add(MaxCustomAhead + time.Second), "until: must be at most 720h0m0s ahead of the server clock, got 720h0m1s"},
	} {
		c := CustomStatus{Text: "away", Until: tt.until}
		got := ""
		if err := c.ValidateNew(now); err != nil {
			got = err.Error()
			var ce *CustomError
			if !errors.As(err, &ce) || ce.Field != "until" {
				t.Errorf("%s: error %v does not name until", tt.name, err)
			}
		}
		if got != tt.want {
			t.Errorf("%s: ValidateNew() = %q, want %q", tt.name, got, tt.want)
		}
		// Records are folded again long after: Validate never judges until by a clock.
		if err := c.Validate(); err != nil {
			t.Errorf("%s: Validate() = %v", tt.name, err)
		}
	}
}

func customEv(device string, t time.Time, c *CustomStatus) *Event {
	e := statusEv(device, Online, t)
	e.Custom = c
	return e
}

func TestEventCustomValidateAndPB(t *testing.T) {
	e := validEvent()
	e.Custom = &CustomStatus{Text: "lunch", Emoji: "🥪", Until: received.Add(time.Hour)}
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
	p := e.ToPB()
	if want := (&pulsev1.CustomStatus{Text: "lunch", Emoji: "🥪", UntilUs: 1741968566_535897}); !proto.Equal(p.GetCustom(), want) {
		t.Fatalf("ToPB().Custom = %v, want %v", p.GetCustom(), want)
	}
	back, err := EventFromPB(p)
	if err != nil || !reflect.DeepEqual(back, e) {
		t.Fatalf("EventFromPB(ToPB(e)) = %+v, %v\nwant %+v", back, err, e)
	}
	// A clear: present but empty stays present.
	e.Custom = &CustomStatus{}
	if back, err := EventFromPB(e.ToPB()); err != nil || back.Custom == nil || !back.Custom.IsZero() {
		t.Fatalf("a clear round-trips as %+v, %v", back.Custom, err)
	}
	// Only status events carry one, and the record's is checked like the client's.
	hb := validEvent()
	hb.Kind, hb.Status, hb.Custom = KindHeartbeat, StatusUnknown, &CustomStatus{Text: "x"}
	if err := hb.Validate(); err == nil || err.Error() != "custom: only status events carry a custom status" {
		t.Errorf("heartbeat with a custom status: %v", err)
	}
	bad := validEvent()
	bad.Custom = &CustomStatus{Emoji: "ab"}
	if _, err := EventFromPB(bad.ToPB()); err == nil || !strings.HasPrefix(err.Error(), "custom: emoji:") {
		t.Errorf("record with a bad emoji: %v", err)
	}
}

func TestApplyCustomStatus(t *testing.T) {
	meeting := &CustomStatus{Text: "In a meeting", Emoji: "📅", Until: at(100)}
	lunch := &CustomStatus{Text: "lunch"}
	expire := func(setAt, when time.Time) *Event {
		return &Event{ID: "c", UserID: "u", Kind: KindCustom, DeviceID: AllDevices, OccurredAt: when, ReceivedAt: when,
			Source: SourceTimeout, LastSeen: setAt}
	}
	// changed is when the outcome says the custom status changed; zero: it did not.
	type check struct {
		ev      *Event
		want    CustomStatus
		changed time.Time
	}
	for _, tt := range []struct {
		name   string
		checks []check
	}{
		{"set", []check{{customEv("a", at(1), meeting), *meeting, at(1)}}},
		{"a status event without one leaves it", []check{
			{customEv("a", at(1), lunch), *lunch, at(1)},
			{statusEv("a", Idle, at(2)), *lunch, time.Time{}},
			{statusEv("a", Offline, at(3)), *lunch, time.Time{}},
			{heartbeatEv("a", at(4)), *lunch, time.Time{}},
			{activityEv("a", at(5)), *lunch, time.Time{}},
		}},
		{"the same again is no change", []check{
			{customEv("a", at(1), lunch), *lunch, at(1)},
			{customEv("a", at(2), &CustomStatus{Text: "lunch"}), *lunch, time.Time{}},
		}},
		{"an empty one clears it", []check{
			{customEv("a", at(1), lunch), *lunch, at(1)},
			{customEv("a", at(2), &CustomStatus{}), CustomStatus{}, at(2)},
			{customEv("a", at(3), &CustomStatus{}), CustomStatus{}, time.Time{}},
		}},
		{"replaced", []check{
			{customEv("a", at(1), lunch), *lunch, at(1)},
			{customEv("b", at(2), meeting), *meeting, at(2)},
		}},
		{"a stale event of the device changes nothing", []check{
			{customEv("a", at(5), lunch), *lunch, at(5)},
			{customEv("a", at(4), meeting), *lunch, time.Time{}},
			{customEv("a", at(3), &CustomStatus{}), *lunch, time.Time{}},
		}},
		{"an older event of another device changes it no more", []check{
			{customEv("a", at(5), lunch), *lunch, at(5)},
			{customEv("b", at(4), meeting), *lunch, time.Time{}},
			{customEv("b", at(4), &CustomStatus{}), *lunch, time.Time{}},
			{customEv("b", at(5), meeting), *meeting, at(5)},
		}},
		{"a clear holds against an older set", []check{
			{customEv("a", at(5), &CustomStatus{}), CustomStatus{}, time.Time{}},
			{customEv("b", at(4), lunch), CustomStatus{}, time.Time{}},
		}},
		{"the fold drops it once until has passed, as of until", []check{
			{customEv("a", at(1), meeting), *meeting, at(1)},
			{heartbeatEv("a", at(99)), *meeting, time.Time{}},
			{heartbeatEv("a", at(130)), CustomStatus{}, at(100)},
		}},
		{"a timeout after until drops it", []check{
			{customEv("a", at(1), meeting), *meeting, at(1)},
			{&Event{ID: "t", UserID: "u", Kind: KindStatus, Status: Offline, DeviceID: "a", OccurredAt: at(200), ReceivedAt: at(200),
				Source: SourceTimeout, LastSeen: at(1)}, CustomStatus{}, at(100)},
		}},
		{"set with an until already past by the event's time is dropped at once", []check{
			{customEv("a", at(1), meeting), *meeting, at(1)},
			{customEv("a", at(150), &CustomStatus{Text: "x", Until: at(120)}), CustomStatus{Text: "x", Until: at(120)}, at(150)},
			{heartbeatEv("a", at(151)), CustomStatus{}, at(150)},
		}},
		{"its until clears it through the aggregator's timeout", []check{
			{customEv("a", at(1), meeting), *meeting, at(1)},
			{expire(at(1), at(100)), CustomStatus{}, at(100)},
			{expire(at(1), at(100)), CustomStatus{}, time.Time{}}, // decided twice: stale
		}},
		{"a timeout of a custom status set again since changes nothing", []check{
			{customEv("a", at(1), meeting), *meeting, at(1)},
			{customEv("a", at(50), &CustomStatus{Text: "later", Until: at(300)}), CustomStatus{Text: "later", Until: at(300)}, at(50)},
			{expire(at(1), at(100)), CustomStatus{Text: "later", Until: at(300)}, time.Time{}},
			{expire(at(50), at(300)), CustomStatus{}, at(300)},
		}},
		{"a timeout before until changes nothing", []check{
			{customEv("a", at(1), meeting), *meeting, at(1)},
			{expire(at(1), at(99)), *meeting, time.Time{}},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := NewUser(0)
			for i, c := range tt.checks {
				status := u.Status
				out := u.Apply(c.ev)
				if u.Custom != c.want {
					t.Fatalf("after event %d: custom = %+v, want %+v", i, u.Custom, c.want)
				}
				if out.CustomChanged != !c.changed.IsZero() || !out.CustomAt.Equal(c.changed) {
					t.Fatalf("after event %d: outcome custom changed %v at %v, want at %v", i, out.CustomChanged, out.CustomAt, c.changed)
				}
				if c.ev.Kind == KindCustom && (out.Changed || u.Status != status) {
					t.Fatalf("after event %d: a custom status timeout changed the status: %+v", i, out)
				}
				// Every state survives the stored form with its custom status.
				back := UserFromPB(u.ToPB())
				if back.Custom != u.Custom || !back.CustomSetAt.Equal(u.CustomSetAt) {
					t.Fatalf("after event %d: UserFromPB(ToPB) custom = %+v at %v, want %+v at %v", i, back.Custom, back.CustomSetAt, u.Custom, u.CustomSetAt)
				}
			}
		})
	}
}

func TestCustomKindIsTheAggregators(t *testing.T) {
	e := Event{ID: "c", UserID: "u", Kind: KindCustom, DeviceID: AllDevices, OccurredAt: at(100), ReceivedAt: at(100),
		Source: SourceTimeout, LastSeen: at(1)}
	if err := e.Validate(); err != nil {
		t.Fatalf("the aggregator's custom status timeout: %v", err)
	}
	if back, err := EventFromPB(e.ToPB()); err != nil || !reflect.DeepEqual(back, e) {
		t.Fatalf("EventFromPB(ToPB(e)) = %+v, %v", back, err)
	}
	for _, tt := range []struct {
		name string
		edit func(*Event)
		want string
	}{
		{"from a client", func(e *Event) { e.Source = SourceAPI }, "kind: only the aggregator's timeouts clear a custom status by itself"},
		{"with a status", func(e *Event) { e.Status = Offline }, "status: only status events carry a status"},
		{"of one device", func(e *Event) { e.DeviceID = "web" }, `device id: a custom status clears for every device ("*")`},
		{"without its basis", func(e *Event) { e.LastSeen = time.Time{} }, "last seen: a custom status timeout needs the set-at it was decided on"},
		{"carrying one", func(e *Event) { e.Custom = &CustomStatus{Text: "x"} }, "custom: only status events carry a custom status"},
	} {
		bad := e
		tt.edit(&bad)
		if err := bad.Validate(); err == nil || err.Error() != tt.want {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
	// Clients name the kinds they may send; "custom" is not one.
	if _, err := ParseKind("custom"); err == nil {
		t.Errorf(`ParseKind("custom") accepted`)
	}
	if k, err := ParseKind("activity"); err != nil || k != KindActivity {
		t.Errorf(`ParseKind("activity") = %v, %v`, k, err)
	}
}

func TestCustomStatusReads(t *testing.T) {
	meeting := &CustomStatus{Text: "In a meeting", Until: at(100)}
	u := NewUser(0)
	u.Apply(customEv("a", at(1), meeting))
	if got := u.CustomAt(at(99)); got != *meeting {
		t.Errorf("CustomAt before until = %+v", got)
	}
	// Readers never see an expired one, though nothing was folded since.
	if got := u.CustomAt(at(100)); !got.IsZero() {
		t.Errorf("CustomAt at until = %+v, want none", got)
	}
	if got := u.PublicCustomAt(at(50)); got != *meeting {
		t.Errorf("PublicCustomAt of an online user = %+v", got)
	}
	u.Apply(statusEv("a", Idle, at(2)))
	if got := u.PublicCustomAt(at(50)); got != *meeting {
		t.Errorf("PublicCustomAt of an idle user = %+v", got)
	}
	// Invisible reads as offline: no custom status to readers, operators still see it.
	u.Apply(statusEv("a", Invisible, at(3)))
	if got := u.PublicCustomAt(at(50)); !got.IsZero() {
		t.Errorf("PublicCustomAt of an invisible user = %+v, want none", got)
	}
	if got := u.CustomAt(at(50)); got != *meeting {
		t.Errorf("CustomAt of an invisible user = %+v", got)
	}
	u.Apply(statusEv("a", Offline, at(4)))
	if got := u.PublicCustomAt(at(50)); !got.IsZero() {
		t.Errorf("PublicCustomAt of an offline user = %+v, want none", got)
	}
}
