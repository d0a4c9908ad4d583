// Package presencetest derives, for tests, the events of a user's twin: a user who
// spends the periods the first one is invisible offline instead. Readers who are not
// operators must not tell the two apart (docs/design.md, "Invisible looks offline").
package presencetest

import "github.com/pulse-presence/pulse/pkg/presence"

// TwinEvents are the events the twin twinID receives for the user's event e, given
// what applying e did (out), the user afterwards (u) and the twin before (twin):
//   - going invisible from online or idle is every live device of the twin
//     disconnecting, idle ones first so that its status moves once;
//   - nothing while the user stays invisible or goes offline from invisible;
//   - becoming visible again is every live device of the user connecting with its
//     status, online ones first;
//   - any other event is the user's own, a timeout decided on the twin's own basis.
//
// A stale event of the user gives none. The events made here have no id.
func TwinEvents(twinID string, e *presence.Event, out presence.Outcome, u, twin *presence.User) []*presence.Event {
	if out.Stale {
		return nil
	}
	t := e.Time()
	status := func(device string, s presence.Status) *presence.Event {
		return &presence.Event{UserID: twinID, Kind: presence.KindStatus, Status: s, DeviceID: device,
			OccurredAt: t, ReceivedAt: e.ReceivedAt, Source: presence.SourceAPI}
	}
	switch {
	case (out.Previous == presence.Online || out.Previous == presence.Idle) && out.Current == presence.Invisible:
		var idle, online []*presence.Event
		for _, d := range twin.Devices {
			switch d.Status {
			case presence.Idle:
				idle = append(idle, status(d.ID, presence.Offline))
			case presence.Online:
				online = append(online, status(d.ID, presence.Offline))
			}
		}
		return append(idle, online...)
	case out.Current == presence.Invisible || out.Previous == presence.Invisible && out.Current == presence.Offline:
		return nil
	case out.Previous == presence.Invisible:
		var online, idle []*presence.Event
		for _, d := range u.Devices {
			switch d.Status {
			case presence.Online:
				online = append(online, status(d.ID, presence.Online))
			case presence.Idle:
				idle = append(idle, status(d.ID, presence.Idle))
			}
		}
		return append(online, idle...)
	}
	te := *e
	te.UserID = twinID
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
