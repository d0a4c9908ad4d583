package tests

import (
	"slices"
	"time"

	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

// The model is the test's own reading of docs/design.md guarantees 1-5, written apart from the
// aggregator's code so that a mistake in one is caught by the other. It folds the
// events exactly as they were logged (read back from Kafka), so it needs no guess
// about the order concurrent requests reached the log in.

type modelDevice struct {
	status string // online, idle, offline
	last   time.Time
	// pub is when readers who are not operators last saw the device, hidden whether
	// they never learnt of it (first seen while its user was invisible).
	pub    time.Time
	hidden bool
}

type modelUser struct {
	devices     map[string]*modelDevice
	invisible   bool
	status      string // effective, operator view
	lastUpdated time.Time
	lastActive  time.Time
	lastSeen    time.Time
	// rows is the user_activity rows history must write: every non-duplicate event
	// (stale included) but heartbeats and activity (PULSE_HISTORY_EVENT_ROWS=status, the
	// default), and every change.
	rows    int
	changes []modelChange
	// changed is whether any change happened (user_status.status is set only then).
	changed bool
	// publicLastUpdated is lastUpdated as readers who are not operators see it: it
	// moves only when the public status (invisible read as offline) changes;
	// publicChanged whether it ever did.
	publicLastUpdated time.Time
	publicChanged     bool
}

type modelChange struct {
	eventID           string
	previous, current string
	at                time.Time
	// publicAt is when readers who are not operators see the change take effect,
	// when they see one.
	publicAt time.Time
}

type model struct {
	users      map[string]*modelUser
	duplicates int
	stale      int
}

var rank = map[string]int{"offline": 0, "idle": 1, "online": 2}

func newModel() *model { return &model{users: map[string]*modelUser{}} }

// fold applies the events of one partition in log order; seen is shared by all
// partitions (an event id is a user's, so it never crosses partitions anyway).
func (m *model) fold(events []*pulsev1.Event, seen map[string]bool) {
	for _, e := range events {
		if seen[e.EventId] {
			m.duplicates++
			continue
		}
		seen[e.EventId] = true
		u := m.users[e.UserId]
		if u == nil {
			u = &modelUser{devices: map[string]*modelDevice{}, status: "offline"}
			m.users[e.UserId] = u
		}
		if e.Kind == pulsev1.Kind_KIND_STATUS || e.Source == pulsev1.Source_SOURCE_TIMEOUT {
			u.rows++
		}
		if e.Source == pulsev1.Source_SOURCE_TIMEOUT {
			if !m.timeout(u, e) {
				m.stale++
				continue
			}
			m.settle(u, e, time.UnixMicro(e.OccurredAtUs).UTC(), nil, "offline", false)
			continue
		}
		t := time.UnixMicro(e.ReceivedAtUs).UTC()
		if e.OccurredAtUs != 0 {
			t = time.UnixMicro(e.OccurredAtUs).UTC()
		}
		d := u.devices[e.DeviceId]
		if d != nil && t.Before(d.last) {
			m.stale++
			continue
		}
		added := d == nil
		if d == nil {
			d = &modelDevice{status: "offline"}
			u.devices[e.DeviceId] = d
		}
		before := d.status
		d.last = t
		switch e.Kind {
		case pulsev1.Kind_KIND_STATUS:
			switch e.Status {
			case pulsev1.Status_STATUS_INVISIBLE:
				u.invisible, d.status = true, "online"
			case pulsev1.Status_STATUS_ONLINE:
				u.invisible, d.status = false, "online"
			case pulsev1.Status_STATUS_IDLE:
				u.invisible, d.status = false, "idle"
			case pulsev1.Status_STATUS_OFFLINE:
				d.status = "offline"
			}
			u.lastActive = maxTime(u.lastActive, t)
		case pulsev1.Kind_KIND_HEARTBEAT:
			if d.status == "offline" {
				d.status = "online"
			}
		case pulsev1.Kind_KIND_ACTIVITY:
			d.status = "online"
			u.lastActive = maxTime(u.lastActive, t)
		}
		u.lastSeen = maxTime(u.lastSeen, t)
		m.settle(u, e, t, d, before, added)
	}
}

// timeout applies a timeout event if its basis is still the newest: the device was
// last seen at the basis (device offline), or the user last active then (idle).
func (m *model) timeout(u *modelUser, e *pulsev1.Event) bool {
	basis := time.UnixMicro(e.LastSeenUs).UTC()
	switch e.Status {
	case pulsev1.Status_STATUS_OFFLINE:
		d := u.devices[e.DeviceId]
		if d == nil || d.status == "offline" || d.last.After(basis) {
			return false
		}
		d.status = "offline"
	case pulsev1.Status_STATUS_IDLE:
		if u.status != "online" || u.lastActive.After(basis) {
			return false
		}
		for _, d := range u.devices {
			if d.status == "online" {
				d.status = "idle"
			}
		}
	default:
		return false
	}
	return true
}

// settle recomputes the effective status after e, of time t, an event of device d
// (nil for a timeout) whose status was before, added by e when it was new.
func (m *model) settle(u *modelUser, e *pulsev1.Event, t time.Time, d *modelDevice, before string, added bool) {
	best := "offline"
	for _, dv := range u.devices {
		if rank[dv.status] > rank[best] {
			best = dv.status
		}
	}
	if u.invisible && best != "offline" {
		best = "invisible"
	}
	pt := m.publicTime(u, best, t, d, before, added)
	if best == u.status {
		return
	}
	at := t
	if !at.After(u.lastUpdated) {
		at = u.lastUpdated.Add(time.Microsecond)
	}
	c := modelChange{eventID: e.EventId, previous: u.status, current: best, at: at}
	if public(u.status) != public(best) {
		if !pt.After(u.publicLastUpdated) {
			pt = u.publicLastUpdated.Add(time.Microsecond)
		}
		u.publicLastUpdated, u.publicChanged, c.publicAt = pt, true, pt
	}
	u.changes = append(u.changes, c)
	u.status, u.lastUpdated, u.changed = best, at, true
	u.rows++
}

// publicTime is the instant readers who are not operators see the event of time t
// happen, when the user's status goes to best, and moves their last-seen of the
// devices: a reader sees an invisible user as one whose devices all disconnected when
// it went invisible and connected again when it came back, and no device is seen
// before it was last seen (device clocks disagree).
func (m *model) publicTime(u *modelUser, best string, t time.Time, d *modelDevice, before string, added bool) time.Time {
	visible := func(s string) bool { return s == "online" || s == "idle" }
	switch {
	case visible(u.status) && best == "invisible":
		var live []*modelDevice
		for _, dv := range u.devices {
			if dv != d && dv.status != "offline" && !dv.hidden || dv == d && before != "offline" {
				live = append(live, dv)
				t = maxTime(t, dv.pub)
			}
		}
		for _, dv := range live {
			dv.pub = t
		}
		if added {
			d.hidden = true
		}
	case best == "invisible" || u.status == "invisible" && best == "offline":
		if added {
			d.hidden = true
		}
	case u.status == "invisible":
		for _, dv := range u.devices {
			if dv.status != "offline" {
				t = maxTime(t, dv.pub)
			}
		}
		for _, dv := range u.devices {
			if dv.status != "offline" {
				dv.pub, dv.hidden = t, false
			}
		}
	case d != nil:
		t = maxTime(t, d.pub)
		d.pub, d.hidden = t, false
	}
	return t
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// public is what readers other than operators see.
func public(status string) string {
	if status == "invisible" {
		return "offline"
	}
	return status
}

// counts is the model's answer to GET /v1/online/count.
func (m *model) counts() map[string]uint64 {
	c := map[string]uint64{"online": 0, "idle": 0, "offline": 0, "registered": uint64(len(m.users))}
	for _, u := range m.users {
		c[public(u.status)]++
	}
	c["total"] = c["online"] + c["idle"]
	return c
}

// deviceIDs lists a user's devices in the order the API returns them (by id).
func (u *modelUser) deviceIDs() []string {
	ids := make([]string, 0, len(u.devices))
	for id := range u.devices {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
