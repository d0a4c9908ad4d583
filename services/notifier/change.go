package main

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/records"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/pkg/webhook"
)

// change is one decoded record of presence.changes.
type change struct {
	// id is the causing event's position in presence.events, "<partition>:<offset>":
	// the aggregator emits one change per event, and a replay after its crash emits
	// the same change at the same position, so receivers de-duplicate by it.
	id                string
	userID            string
	previous, current presence.Status
	at, publicAt      time.Time
	timeout           bool
	erased            bool // an erasure (cause erase, docs/design.md "Erasure")
	custom            presence.CustomStatus
	customOnly        bool
	group             string
	left              bool
	groups            []string
	// produced is when the aggregator wrote the record: delivery latency counts from it.
	produced time.Time
	offset   int64

	rendered [2][]byte // by view: public, operator
}

// decodeChange reads a presence.changes record (records.DecodeChange: any flaw is an
// error).
func decodeChange(r *kgo.Record) (*change, error) {
	p, err := records.DecodeChange(r)
	if err != nil {
		return nil, err
	}
	c := &change{
		id:         strconv.Itoa(int(p.GetSourcePartition())) + ":" + strconv.FormatInt(p.GetSourceOffset(), 10),
		userID:     p.GetUserId(),
		previous:   presence.StatusFromPB(p.GetPrevious()),
		current:    presence.StatusFromPB(p.GetCurrent()),
		at:         presence.FromMicros(p.GetChangedAtUs()),
		publicAt:   presence.FromMicros(p.GetChangedAtUs()),
		timeout:    p.GetCause() == pulsev1.Cause_CAUSE_TIMEOUT,
		erased:     p.GetCause() == pulsev1.Cause_CAUSE_ERASE,
		customOnly: p.GetCustomOnly(),
		group:      p.GetGroupId(),
		left:       p.GetLeft(),
		groups:     p.GetGroups(),
		produced:   r.Timestamp,
		offset:     r.Offset,
	}
	if cs := presence.CustomFromPB(p.GetCustom()); cs != nil {
		c.custom = *cs
	}
	if pa := p.GetPublicChangedAtUs(); pa != 0 {
		c.publicAt = presence.FromMicros(pa)
	}
	return c, nil
}

// filterType is the change's type as filters name it.
func (c *change) filterType() string {
	switch {
	case c.group != "":
		return typeMember
	case c.customOnly:
		return typeCustom
	default:
		return typeStatus
	}
}

func (c *change) cause() string {
	switch {
	case c.timeout:
		return "timeout"
	case c.erased:
		return "erase"
	}
	return "event"
}

// status is the user's status after the change as the view shows it.
func (c *change) status(operator bool) presence.Status {
	if operator {
		return c.current
	}
	return c.current.Public()
}

// visible reports whether the view sees the change at all: a public view sees
// invisible and offline alike, and no custom status of a user who reads as offline.
func (c *change) visible(operator bool) bool {
	if operator || c.group != "" || c.erased {
		// An erasure is news to every receiver: it must erase the user too.
		return true
	}
	if c.customOnly {
		return c.current.ShowsCustomPublicly()
	}
	return c.previous.Public() != c.current.Public()
}

// json is the change as the view shows it, rendered once per view. A custom status
// whose until has passed by then shows as none; its clearing follows as a change.
func (c *change) json(operator bool, now time.Time) []byte {
	v := 0
	if operator {
		v = 1
	}
	if c.rendered[v] != nil {
		return c.rendered[v]
	}
	w := webhook.Change{ID: c.id, UserID: c.userID, Status: c.status(operator).String(), At: c.at}
	if len(c.groups) > 0 {
		w.Groups = c.groups
	}
	if c.group != "" {
		joined := !c.left
		w.Type, w.GroupID, w.Joined = webhook.TypeMember, c.group, &joined
	} else {
		w.Type, w.Cause = webhook.TypeChange, c.cause()
		w.Previous = c.previous.String()
		custom := c.custom
		if !operator {
			w.Previous = c.previous.Public().String()
			if !c.customOnly {
				w.At = c.publicAt
			}
			if !c.current.ShowsCustomPublicly() {
				custom = presence.CustomStatus{}
			}
		}
		if !custom.IsZero() && !custom.Expired(now) {
			w.Data = &webhook.Custom{Text: custom.Text, Emoji: custom.Emoji}
			if !custom.Until.IsZero() {
				u := custom.Until
				w.Data.Until = &u
			}
		}
	}
	b, _ := json.Marshal(w) // cannot fail: strings, times and a custom status
	c.rendered[v] = b
	return b
}
