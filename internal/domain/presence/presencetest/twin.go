// Package presencetest derives, for tests, the events of a user's twin: a user who
// spends the periods the first one is invisible offline instead. Readers who are not
// operators must not tell the two apart (docs/design.md, "Invisible looks offline").
package presencetest

import (
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// TwinEvents are the events the twin twinID receives for the user's event e, given
// what applying e did (out), the user afterwards (u) and the twin before (twin):
//   - going invisible from online or idle is every live device of the twin
//     disconnecting, idle ones first so that its status moves once;
//   - nothing while the user stays invisible or goes offline from invisible;
//   - becoming visible again is every live device of the user connecting with its
//     status, online ones first;
//   - any other event is the user's own, a timeout decided on the twin's own basis.
//
// A device cannot send an event older than its last one, so each event made for a
// device here is dated no earlier than the twin last saw it: the disconnects and
// connects at the latest of the user's event's time and the last-seen of every twin
// device they touch, any other event at the later of its time and its device's.
//
// A stale event of the user gives none. The events made here have no id.
func TwinEvents(twinID string, e *presence.Event, out presence.Outcome, u, twin *presence.User) []*presence.Event {
	if out.Stale {
		return nil
	}
	t := e.Time()
	seen := func(device string) time.Time {
		for _, d := range twin.Devices {
			if d.ID == device {
				return d.LastSeen
			}
		}
		return time.Time{}
	}
	status := func(device string, s presence.Status) *presence.Event {
		return &presence.Event{UserID: twinID, Kind: presence.KindStatus, Status: s, DeviceID: device,
			OccurredAt: t, ReceivedAt: e.ReceivedAt, Source: presence.SourceAPI}
	}
	// each makes an event of status s (or, when s is Unknown, of the device's own
	// status) for every device of ds in state first, then in state then, so that the
	// twin's status moves once.
	each := func(ds []presence.Device, first, then, s presence.Status) []*presence.Event {
		for _, d := range ds {
			if d.Status == first || d.Status == then {
				t = latest(t, seen(d.ID))
			}
		}
		var evs []*presence.Event
		for _, want := range []presence.Status{first, then} {
			for _, d := range ds {
				if d.Status == want {
					to := s
					if to == presence.StatusUnknown {
						to = d.Status
					}
					evs = append(evs, status(d.ID, to))
				}
			}
		}
		return evs
	}
	switch {
	case (out.Previous == presence.Online || out.Previous == presence.Idle) && out.Current == presence.Invisible:
		return each(twin.Devices, presence.Idle, presence.Online, presence.Offline)
	case out.Current == presence.Invisible || out.Previous == presence.Invisible && out.Current == presence.Offline:
		return nil
	case out.Previous == presence.Invisible:
		return each(u.Devices, presence.Online, presence.Idle, presence.StatusUnknown)
	}
	te := *e
	te.UserID = twinID
	if e.Source != presence.SourceTimeout {
		te.OccurredAt = latest(t, seen(e.DeviceID))
	}
	if e.Source == presence.SourceTimeout {
		if e.DeviceID == presence.AllDevices {
			te.LastSeen = twin.LastActive
			if te.LastSeen.IsZero() {
				te.LastSeen = twin.LastUpdated
			}
		} else {
			for _, d := range twin.Devices {
				if d.ID == e.DeviceID {
					te.LastSeen = d.Heard()
				}
			}
		}
	}
	return []*presence.Event{&te}
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
