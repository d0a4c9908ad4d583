package presence

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rivo/uniseg"

	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

// Limits of a custom status (docs/design.md, "Custom status").
const (
	// MaxCustomText bounds a custom status's text, in characters (runes).
	MaxCustomText = 128
	// MaxCustomEmoji bounds its emoji, in bytes: the longest emoji in use (a family
	// of four with skin tones, a subdivision flag) fit with room to spare.
	MaxCustomEmoji = 32
	// MaxCustomAhead bounds how far ahead of the server clock its until may be.
	MaxCustomAhead = 30 * 24 * time.Hour
)

// CustomStatus is what a user says about themselves beside their status: a text, an
// emoji, and when it clears itself. The zero value is no custom status; on an event it
// clears the user's.
type CustomStatus struct {
	Text  string
	Emoji string
	// Until is when the custom status clears itself; zero: never.
	Until time.Time
}

// IsZero reports whether c is no custom status (a clear, on an event).
func (c CustomStatus) IsZero() bool { return c.Text == "" && c.Emoji == "" && c.Until.IsZero() }

// Expired reports whether c has cleared itself by now.
func (c CustomStatus) Expired(now time.Time) bool { return !c.Until.IsZero() && !now.Before(c.Until) }

// CustomError is a custom status refused: Field names the member at fault, as the HTTP
// API spells it ("text", "emoji" or "until"; "" for the status as a whole).
type CustomError struct {
	Field, Message string
}

func (e *CustomError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// Validate checks what every custom status must satisfy, whoever produced it and
// whenever it is read: the limits on text and emoji, and that a non-empty one says
// something (a text or an emoji). It does not judge until against a clock: records are
// folded again long after they were written. ValidateNew does, for a status a client
// sends now.
func (c CustomStatus) Validate() error {
	if c.IsZero() {
		return nil
	}
	if c.Text == "" && c.Emoji == "" {
		return &CustomError{"", "needs a text or an emoji; an empty object clears the custom status"}
	}
	if c.Text != "" {
		if err := validateCustomText(c.Text); err != nil {
			return &CustomError{"text", err.Error()}
		}
	}
	if c.Emoji != "" {
		if err := validateEmoji(c.Emoji); err != nil {
			return &CustomError{"emoji", err.Error()}
		}
	}
	if !c.Until.IsZero() && c.Until.UnixMicro() <= 0 {
		return &CustomError{"until", "must be after 1970"}
	}
	return nil
}

// ValidateNew is Validate for a custom status a client sends at now (the server's
// clock): its until, if any, must be in the future and at most MaxCustomAhead ahead.
func (c CustomStatus) ValidateNew(now time.Time) error {
	if err := c.Validate(); err != nil {
		return err
	}
	switch {
	case c.Until.IsZero():
	case !c.Until.After(now):
		return &CustomError{"until", fmt.Sprintf("must be in the future; it is %v before the server clock", now.Sub(c.Until))}
	case c.Until.Sub(now) > MaxCustomAhead:
		return &CustomError{"until", fmt.Sprintf("must be at most %v ahead of the server clock, got %v", MaxCustomAhead, c.Until.Sub(now))}
	}
	return nil
}

func validateCustomText(s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("must be valid UTF-8")
	}
	if n := utf8.RuneCountInString(s); n > MaxCustomText {
		return fmt.Errorf("must be at most %d characters, got %d", MaxCustomText, n)
	}
	if i := strings.IndexFunc(s, refusedInID); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		return fmt.Errorf("must not contain control or format characters (Unicode categories Cc and Cf), got %U at byte %d", r, i)
	}
	return nil
}

// validateEmoji accepts exactly one emoji: one grapheme cluster (Unicode's extended
// grapheme clusters, which keep a ZWJ sequence, a flag, a keycap and a skin tone
// together) that starts with a pictographic symbol, a pair of regional indicators or
// a keycap, at most MaxCustomEmoji bytes, and without a control or format character
// other than the joiner and the tags emoji sequences are made of.
func validateEmoji(s string) error {
	switch {
	case !utf8.ValidString(s):
		return fmt.Errorf("must be valid UTF-8")
	case len(s) > MaxCustomEmoji:
		return fmt.Errorf("must be at most %d bytes, got %d", MaxCustomEmoji, len(s))
	}
	for i, r := range s {
		if refusedInID(r) && r != zwj && !isTag(r) {
			return fmt.Errorf("must not contain control or format characters other than emoji joiners and tags, got %U at byte %d", r, i)
		}
	}
	if n := uniseg.GraphemeClusterCount(s); n != 1 {
		return fmt.Errorf("must be exactly one emoji, got %d characters", n)
	}
	first, size := utf8.DecodeRuneInString(s)
	switch {
	case isRegionalIndicator(first):
		if r, _ := utf8.DecodeRuneInString(s[size:]); !isRegionalIndicator(r) {
			return fmt.Errorf("must be an emoji: a flag takes two regional indicators")
		}
	case strings.ContainsRune("0123456789#*", first):
		if !strings.HasSuffix(s, "\u20e3") {
			return fmt.Errorf("must be an emoji, got %q", s)
		}
	case first >= 0xa9 && (unicode.Is(unicode.So, first) || strings.ContainsRune(pictographicNotSo, first)):
	default:
		return fmt.Errorf("must be an emoji, got %q", s)
	}
	return nil
}

const zwj = '\u200d'

// pictographicNotSo are the emoji (Unicode's Emoji property) that are not of category
// So (other symbol), besides the keycaps' digits, # and *: ‼ ⁉ ℹ ↔ ◻ ◼ ◽ ◾ ⤴ ⤵ 〰 〽.
const pictographicNotSo = "\u203c\u2049\u2139\u2194\u25fb\u25fc\u25fd\u25fe\u2934\u2935\u3030\u303d"

func isTag(r rune) bool               { return r >= 0xe0020 && r <= 0xe007f }
func isRegionalIndicator(r rune) bool { return r >= 0x1f1e6 && r <= 0x1f1ff }

// CustomAt is the user's custom status as a reader whose clock reads now sees it: the
// zero value when the user has none or it has cleared itself by now, even if the
// aggregator has not folded the user since.
func (u *User) CustomAt(now time.Time) CustomStatus {
	if u.Custom.Expired(now) {
		return CustomStatus{}
	}
	return u.Custom
}

// applyCustom folds the custom status side of a fresh event of time t: a custom status
// whose until has passed by t clears (as of its until), and a status event carrying one
// sets it (or clears it, when empty) unless an event dated later already did. out says
// whether and when the custom status changed.
func (u *User) applyCustom(out *Outcome, e *Event, t time.Time) {
	if u.Custom.Expired(t) {
		out.CustomChanged, out.CustomAt = true, u.customChangeAt(u.Custom.Until)
		u.Custom = CustomStatus{}
	}
	if e.Kind != KindStatus || e.Custom == nil || t.Before(u.CustomSetAt) {
		return
	}
	if !u.Custom.Equal(*e.Custom) {
		out.CustomChanged, out.CustomAt = true, u.customChangeAt(t)
	}
	u.Custom, u.CustomSetAt = *e.Custom, t
}

// applyCustomTimeout applies the aggregator's decision that the custom status set at
// e.LastSeen has cleared itself by e's time: only if that custom status is still the
// user's and its until has passed, so a custom status set again since stays.
func (u *User) applyCustomTimeout(e *Event) Outcome {
	out := Outcome{Previous: u.Status, Current: u.Status}
	if u.Custom.IsZero() || !u.CustomSetAt.Equal(e.LastSeen) || !u.Custom.Expired(e.Time()) {
		out.Stale = true
		return out
	}
	out.CustomChanged, out.CustomAt = true, u.customChangeAt(u.Custom.Until)
	u.Custom = CustomStatus{}
	return out
}

// customChangeAt is when a change of the custom status at t takes effect for readers
// of the change feed: t, but never before the custom status was set.
func (u *User) customChangeAt(t time.Time) time.Time {
	return later(t, u.CustomSetAt)
}

// Equal reports whether c and o say the same.
func (c CustomStatus) Equal(o CustomStatus) bool {
	return c.Text == o.Text && c.Emoji == o.Emoji && c.Until.Equal(o.Until)
}

// ToPB is c's wire form; nil for nil.
func (c *CustomStatus) ToPB() *pulsev1.CustomStatus {
	if c == nil {
		return nil
	}
	return &pulsev1.CustomStatus{Text: c.Text, Emoji: c.Emoji, UntilUs: Micros(c.Until)}
}

// CustomFromPB is the inverse of ToPB.
func CustomFromPB(p *pulsev1.CustomStatus) *CustomStatus {
	if p == nil {
		return nil
	}
	return &CustomStatus{Text: p.GetText(), Emoji: p.GetEmoji(), Until: FromMicros(p.GetUntilUs())}
}

// PublicCustomAt is CustomAt for readers who are not operators: none while the user
// reads offline to them, so that an invisible user shows no custom status, as an
// offline one does not (docs/design.md, "Invisible looks offline").
func (u *User) PublicCustomAt(now time.Time) CustomStatus {
	if !u.Status.ShowsCustomPublicly() {
		return CustomStatus{}
	}
	return u.CustomAt(now)
}

// ShowsCustomPublicly reports whether readers who are not operators see the custom
// status of a user whose status is s: only while the user reads online or idle.
func (s Status) ShowsCustomPublicly() bool {
	st := s.Public()
	return st == Online || st == Idle
}
