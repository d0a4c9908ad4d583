// Package customjson reads a custom status as clients send it, the data of a status
// event: {"text":"In a meeting","emoji":"📅","until":"2026-11-26T15:00:00Z"}, every
// member optional, {} to clear it (docs/design.md, "Custom status"). Ingest's POST
// /v1/events and query's present sockets share it, and presence.CustomStatus's rules.
package customjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
)

// In is a custom status as clients send it.
type In struct {
	Text  *string `json:"text,omitempty"`
	Emoji *string `json:"emoji,omitempty"`
	Until *string `json:"until,omitempty"`
}

// Out is a custom status as readers get it.
type Out struct {
	Text  string     `json:"text,omitempty"`
	Emoji string     `json:"emoji,omitempty"`
	Until *time.Time `json:"until,omitempty"`
}

// View is c as readers get it: nil (JSON null) for none.
func View(c presence.CustomStatus) *Out {
	if c.IsZero() {
		return nil
	}
	o := &Out{Text: c.Text, Emoji: c.Emoji}
	if !c.Until.IsZero() {
		u := c.Until
		o.Until = &u
	}
	return o
}

// EventView is what an event did to the user's custom status, as history's timeline
// answers it: nil (left out) when the event left it as it was, the empty object {}
// when it cleared it, as clients send a clear, else as View.
func EventView(c *presence.CustomStatus) *Out {
	switch {
	case c == nil:
		return nil
	case c.IsZero():
		return &Out{}
	}
	return View(*c)
}

// Decode reads and checks raw, a custom status a client sent at now (the server's
// clock). path names the member that holds it, as in "events[0].data": every error is a
// 400 naming the field at fault beneath it. The empty object is a clear, the zero
// CustomStatus.
func Decode(raw []byte, path string, now time.Time) (*presence.CustomStatus, error) {
	bad := func(field, msg string) error { return httpserver.BadRequest(httpserver.FieldPath(path, field), msg) }
	var in In
	if err := httpserver.DecodeObject(raw, &in, path); err != nil {
		return nil, err
	}
	// A null member would decode as absent; no member is nullable.
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		return nil, bad("", "must be a JSON object")
	}
	for _, name := range slices.Sorted(maps.Keys(members)) {
		if string(bytes.TrimSpace(members[name])) == "null" {
			return nil, bad(name, "must not be null: leave it out")
		}
	}
	var c presence.CustomStatus
	if in.Text != nil {
		if *in.Text == "" {
			return nil, bad("text", "must not be empty: leave it out")
		}
		c.Text = *in.Text
	}
	if in.Emoji != nil {
		if *in.Emoji == "" {
			return nil, bad("emoji", "must not be empty: leave it out")
		}
		c.Emoji = *in.Emoji
	}
	if in.Until != nil {
		t, err := time.Parse(time.RFC3339Nano, *in.Until)
		if err != nil {
			return nil, bad("until", fmt.Sprintf("must be an RFC 3339 time such as 2026-11-26T15:00:00Z, got %q", *in.Until))
		}
		if c.Until = t.UTC().Truncate(time.Microsecond); c.Until.IsZero() {
			return nil, bad("until", "must be in the future")
		}
	}
	if err := c.ValidateNew(now); err != nil {
		if ce, ok := errors.AsType[*presence.CustomError](err); ok {
			return nil, bad(ce.Field, ce.Message)
		}
		return nil, bad("", err.Error())
	}
	return &c, nil
}
