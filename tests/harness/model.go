package harness

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
	Status string // online, idle, offline
	Last   time.Time
	// pub is when readers who are not operators last saw the device, hidden whether
	// they never learnt of it (first seen while its user was invisible).
	pub    time.Time
	Hidden bool
}

type modelUser struct {
	Devices     map[string]*modelDevice
	Invisible   bool
	Status      string // effective, operator view
	LastUpdated time.Time
	LastActive  time.Time
	LastSeen    time.Time
	// Rows is the user_activity Rows history must write: every non-duplicate event
	// (stale included) but heartbeats and activity (PULSE_HISTORY_EVENT_ROWS=status, the
	// default), and every change.
	Rows    int
	Changes []ModelChange
	// Changed is whether any change happened (user_status.status is set only then).
	Changed bool
	// PublicLastUpdated is lastUpdated as readers who are not operators see it: it
	// moves only when the public status (invisible read as offline) changes;
	// publicChanged whether it ever did.
	PublicLastUpdated time.Time
	PublicChanged     bool
}

type ModelChange struct {
	EventID           string
	Previous, Current string
	At                time.Time
	// PublicAt is when readers who are not operators see the change take effect,
	// when they see one.
	PublicAt time.Time
}

type Model struct {
	Users      map[string]*modelUser
	Duplicates int
	Stale      int
}

var rank = map[string]int{"offline": 0, "idle": 1, "online": 2}

func NewModel() *Model { return &Model{Users: map[string]*modelUser{}} }

// Fold applies the events of one partition in log order; seen is shared by all
// partitions (an event id is a user's, so it never crosses partitions anyway).
func (m *Model) Fold(events []*pulsev1.Event, seen map[string]bool) {
	for _, e := range events {
		if seen[e.EventId] {
			m.Duplicates++
			continue
		}
		seen[e.EventId] = true
		u := m.Users[e.UserId]
		if u == nil {
			u = &modelUser{Devices: map[string]*modelDevice{}, Status: "offline"}
			m.Users[e.UserId] = u
		}
		if e.Kind == pulsev1.Kind_KIND_STATUS || e.Source == pulsev1.Source_SOURCE_TIMEOUT {
			u.Rows++
		}
		if e.Source == pulsev1.Source_SOURCE_TIMEOUT {
			if !m.timeout(u, e) {
				m.Stale++
				continue
			}
			m.settle(u, e, time.UnixMicro(e.OccurredAtUs).UTC(), nil, "offline", false)
			continue
		}
		t := time.UnixMicro(e.ReceivedAtUs).UTC()
		if e.OccurredAtUs != 0 {
			t = time.UnixMicro(e.OccurredAtUs).UTC()
		}
		d := u.Devices[e.DeviceId]
		if d != nil && t.Before(d.Last) {
			m.Stale++
			continue
		}
		added := d == nil
		if d == nil {
			d = &modelDevice{Status: "offline"}
			u.Devices[e.DeviceId] = d
		}
		before := d.Status
		d.Last = t
		switch e.Kind {
		case pulsev1.Kind_KIND_STATUS:
			switch e.Status {
			case pulsev1.Status_STATUS_INVISIBLE:
				u.Invisible, d.Status = true, "online"
			case pulsev1.Status_STATUS_ONLINE:
				u.Invisible, d.Status = false, "online"
			case pulsev1.Status_STATUS_IDLE:
				u.Invisible, d.Status = false, "idle"
			case pulsev1.Status_STATUS_OFFLINE:
				d.Status = "offline"
			}
			u.LastActive = maxTime(u.LastActive, t)
		case pulsev1.Kind_KIND_HEARTBEAT:
			if d.Status == "offline" {
				d.Status = "online"
			}
		case pulsev1.Kind_KIND_ACTIVITY:
			d.Status = "online"
			u.LastActive = maxTime(u.LastActive, t)
		}
		u.LastSeen = maxTime(u.LastSeen, t)
		m.settle(u, e, t, d, before, added)
	}
}

// timeout applies a timeout event if its basis is still the newest: the device was
// last seen at the basis (device offline), or the user last active then (idle).
func (m *Model) timeout(u *modelUser, e *pulsev1.Event) bool {
	basis := time.UnixMicro(e.LastSeenUs).UTC()
	switch e.Status {
	case pulsev1.Status_STATUS_OFFLINE:
		d := u.Devices[e.DeviceId]
		if d == nil || d.Status == "offline" || d.Last.After(basis) {
			return false
		}
		d.Status = "offline"
	case pulsev1.Status_STATUS_IDLE:
		if u.Status != "online" || u.LastActive.After(basis) {
			return false
		}
		for _, d := range u.Devices {
			if d.Status == "online" {
				d.Status = "idle"
			}
		}
	default:
		return false
	}
	return true
}

// settle recomputes the effective status after e, of time t, an event of device d
// (nil for a timeout) whose status was before, added by e when it was new.
func (m *Model) settle(u *modelUser, e *pulsev1.Event, t time.Time, d *modelDevice, before string, added bool) {
	best := "offline"
	for _, dv := range u.Devices {
		if rank[dv.Status] > rank[best] {
			best = dv.Status
		}
	}
	if u.Invisible && best != "offline" {
		best = "invisible"
	}
	pt := m.publicTime(u, best, t, d, before, added)
	if best == u.Status {
		return
	}
	at := t
	if !at.After(u.LastUpdated) {
		at = u.LastUpdated.Add(time.Microsecond)
	}
	c := ModelChange{EventID: e.EventId, Previous: u.Status, Current: best, At: at}
	if Public(u.Status) != Public(best) {
		if !pt.After(u.PublicLastUpdated) {
			pt = u.PublicLastUpdated.Add(time.Microsecond)
		}
		u.PublicLastUpdated, u.PublicChanged, c.PublicAt = pt, true, pt
	}
	u.Changes = append(u.Changes, c)
	u.Status, u.LastUpdated, u.Changed = best, at, true
	u.Rows++
}

// publicTime is the instant readers who are not operators see the event of time t
// happen, when the user's status goes to best, and moves their last-seen of the
// devices: a reader sees an invisible user as one whose devices all disconnected when
// it went invisible and connected again when it came back, and no device is seen
// before it was last seen (device clocks disagree).
func (m *Model) publicTime(u *modelUser, best string, t time.Time, d *modelDevice, before string, added bool) time.Time {
	visible := func(s string) bool { return s == "online" || s == "idle" }
	switch {
	case visible(u.Status) && best == "invisible":
		var live []*modelDevice
		for _, dv := range u.Devices {
			if dv != d && dv.Status != "offline" && !dv.Hidden || dv == d && before != "offline" {
				live = append(live, dv)
				t = maxTime(t, dv.pub)
			}
		}
		for _, dv := range live {
			dv.pub = t
		}
		if added {
			d.Hidden = true
		}
	case best == "invisible" || u.Status == "invisible" && best == "offline":
		if added {
			d.Hidden = true
		}
	case u.Status == "invisible":
		for _, dv := range u.Devices {
			if dv.Status != "offline" {
				t = maxTime(t, dv.pub)
			}
		}
		for _, dv := range u.Devices {
			if dv.Status != "offline" {
				dv.pub, dv.Hidden = t, false
			}
		}
	case d != nil:
		t = maxTime(t, d.pub)
		d.pub, d.Hidden = t, false
	}
	return t
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Public is what readers other than operators see.
func Public(status string) string {
	if status == "invisible" {
		return "offline"
	}
	return status
}

// Counts is the model's answer to GET /v1/online/count.
func (m *Model) Counts() map[string]uint64 {
	c := map[string]uint64{"online": 0, "idle": 0, "offline": 0, "registered": uint64(len(m.Users))}
	for _, u := range m.Users {
		c[Public(u.Status)]++
	}
	c["total"] = c["online"] + c["idle"]
	return c
}

// DeviceIDs lists a user's devices in the order the API returns them (by id).
func (u *modelUser) DeviceIDs() []string {
	ids := make([]string, 0, len(u.Devices))
	for id := range u.Devices {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
