package presence

import (
	"slices"
	"time"

	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

// AllDevices is the device of an idle timeout, which idles every online device of
// the user at once.
const AllDevices = "*"

// MaxDevices bounds the devices kept per user; past it the device seen longest ago
// among the offline ones is forgotten, so a user who logs in from a new browser every
// day cannot grow their state without bound.
const MaxDevices = 16

// MaxLiveDevices bounds the devices of a user even when all of them are live, so a
// client that heartbeats a new device id every time cannot grow a state without bound
// (docs/design.md, Security and limits). Past it the live device seen longest ago is
// dropped, and the outcome says so (Outcome.DevicesDropped).
const MaxLiveDevices = 64

// Device is one device of a user.
type Device struct {
	ID     string
	Status Status // Online, Idle or Offline
	// LastSeen is the time of the newest event applied for the device.
	LastSeen time.Time
	// PublicLastSeen is LastSeen as readers who are not operators know it (see Public).
	PublicLastSeen time.Time
	// Hidden: the device was seen only while the user was invisible, and was offline
	// when the user became visible again, so no such reader knows of it.
	Hidden bool
}

// User is a user's current state: what the aggregator keeps and readers see.
type User struct {
	// Index is the user's dense index in its shard's bitmaps; assigned once.
	Index uint32
	// Status is the effective status (operator view: invisible stays invisible).
	Status Status
	// Invisible is the user's choice, kept while devices come and go.
	Invisible bool
	// LastUpdated is when Status last changed; zero if it never did.
	LastUpdated time.Time
	// LastActive is the newest status or activity event.
	LastActive time.Time
	// LastSeen is the newest event of any kind.
	LastSeen time.Time
	// Devices are sorted by ID.
	Devices []Device
	// Offset is the presence.events offset of the last event folded in (-1: none).
	Offset int64
	// Public is what readers who are not operators know of the user's times.
	Public Public
	// Custom is the user's custom status, the zero value for none. It may have
	// cleared itself since it was folded: readers ask CustomAt.
	Custom CustomStatus
	// CustomSetAt is the time of the status event that last set or cleared Custom;
	// zero if none ever did. An event dated before it changes Custom no more.
	CustomSetAt time.Time
}

// Public is the part of a user's state that readers who are not operators may know
// (docs/design.md, "Invisible looks offline"). It moves only on what such a reader can
// observe, so that a period spent invisible leaves in it exactly what going offline
// at its start and reconnecting every live device at its end would have left:
//   - becoming invisible from online or idle at t reads as every live device
//     disconnecting at t;
//   - nothing applied while the user stays invisible, or goes offline from invisible,
//     moves it; devices first seen then are Hidden;
//   - becoming visible again at t reads as every live device connecting at t.
//
// Outside those periods it follows the user's own times. Device clocks may disagree:
// a device is never seen publicly at an instant before its public last-seen, so the t
// above is the latest of the event's time and the public last-seen of those devices,
// and any other event of a device counts from its public last-seen at the earliest,
// as the events of a user who really went offline would have to. A change readers see
// takes effect at that instant, or a microsecond after the public last-updated
// (Outcome.PublicAt).
type Public struct {
	LastUpdated, LastActive, LastSeen time.Time
}

// NewUser is the state of a user Pulse has never seen: offline, no devices.
func NewUser(index uint32) *User {
	return &User{Index: index, Status: Offline, Offset: -1}
}

// Outcome is what applying one event did.
type Outcome struct {
	// Stale: the event is older than the newest applied for its device; nothing changed.
	Stale bool
	// Changed: the effective status changed from Previous to Current.
	Changed           bool
	Previous, Current Status
	// At is when the change took effect (LastUpdated afterwards).
	At time.Time
	// PublicAt is when readers who are not operators see a change take effect
	// (Public.LastUpdated afterwards): At but for a user who was invisible since the
	// last change they saw (see Public); zero when they see no change.
	PublicAt time.Time
	// DevicesDropped counts live devices dropped because the user had more than
	// MaxLiveDevices.
	DevicesDropped int
	// CustomChanged: the user's custom status changed (set, replaced, cleared, or
	// cleared itself), at CustomAt.
	CustomChanged bool
	CustomAt      time.Time
}

// Heard is when the device was last heard from, what its offline timeout counts from:
// its last event, or the moment its user became visible again if that is later. A
// reader who is not an operator learns of a live device at that moment, and a device
// that timed out sooner would tell them it had been silent while the user was
// invisible.
func (d Device) Heard() time.Time { return later(d.LastSeen, d.PublicLastSeen) }

func (u *User) device(id string) (int, bool) {
	return slices.BinarySearchFunc(u.Devices, id, func(d Device, id string) int {
		switch {
		case d.ID < id:
			return -1
		case d.ID > id:
			return 1
		}
		return 0
	})
}

// Apply folds e, the next event of this user in log order, into u (docs/design.md
// guarantees 1, 3, 4 and 5). Duplicates are the caller's business: Apply sees each
// event once.
func (u *User) Apply(e *Event) Outcome {
	if e.Source == SourceTimeout {
		if e.Kind == KindCustom {
			return u.applyCustomTimeout(e)
		}
		out := u.applyTimeout(e)
		if !out.Stale {
			u.publish(&out, e.DeviceID, e.Time(), false, false, Offline, false)
			u.applyCustom(&out, e, e.Time())
		}
		return out
	}
	t := e.Time()
	i, found := u.device(e.DeviceID)
	if found && t.Before(u.Devices[i].LastSeen) {
		return Outcome{Stale: true, Previous: u.Status, Current: u.Status}
	}
	if !found {
		u.Devices = slices.Insert(u.Devices, i, Device{ID: e.DeviceID, Status: Offline})
	}
	before := u.Devices[i].Status
	var custom Outcome
	u.applyCustom(&custom, e, t)
	out := u.apply(e, i, t)
	out.CustomChanged, out.CustomAt = custom.CustomChanged, custom.CustomAt
	u.publish(&out, e.DeviceID, t, true, e.Kind != KindHeartbeat, before, !found)
	return out
}

// apply folds a fresh event of time t for the device at index i.
func (u *User) apply(e *Event, i int, t time.Time) Outcome {
	d := &u.Devices[i]
	d.LastSeen = t

	switch e.Kind {
	case KindStatus:
		switch e.Status {
		case Invisible:
			u.Invisible = true
			d.Status = Online
		case Online, Idle:
			u.Invisible = false
			d.Status = e.Status
		case Offline:
			// An explicit disconnect of this device; the others keep their state and
			// the user's choice of invisible stays for their next connection.
			d.Status = Offline
		}
		u.LastActive = later(u.LastActive, t)
	case KindHeartbeat:
		// A heartbeat proves the connection, not activity: it revives an offline
		// device but leaves an idle one idle.
		if d.Status == Offline {
			d.Status = Online
		}
	case KindActivity:
		d.Status = Online
		u.LastActive = later(u.LastActive, t)
	}
	u.LastSeen = later(u.LastSeen, t)
	dropped := u.evictDevices()
	out := u.settle(t)
	out.DevicesDropped = dropped
	return out
}

// applyTimeout applies a timeout the aggregator decided and wrote to the log. It takes
// effect only if nothing newer came first: a device timeout only if the device was last
// seen exactly when the decision was made (e.LastSeen), an idle timeout only if the user
// was last active then. A timeout is not activity: no last-seen or last-active moves.
func (u *User) applyTimeout(e *Event) Outcome {
	noChange := Outcome{Stale: true, Previous: u.Status, Current: u.Status}
	switch {
	case e.Kind == KindStatus && e.Status == Offline:
		i, found := u.device(e.DeviceID)
		if !found || u.Devices[i].Status == Offline || u.Devices[i].Heard().After(e.LastSeen) {
			return noChange
		}
		u.Devices[i].Status = Offline
	case e.Kind == KindStatus && e.Status == Idle && e.DeviceID == AllDevices:
		if u.Status != Online || u.LastActive.After(e.LastSeen) {
			return noChange
		}
		for i := range u.Devices {
			if u.Devices[i].Status == Online {
				u.Devices[i].Status = Idle
			}
		}
	default:
		return noChange
	}
	return u.settle(e.Time())
}

// publish moves the Public times after an applied event of the device at t (seen is
// false for a timeout, which moves no last-seen; active for status and activity events;
// before the device's status before the event; added when the event made the device
// known), as the comment on Public says, and sets out.PublicAt.
func (u *User) publish(out *Outcome, device string, t time.Time, seen, active bool, before Status, added bool) {
	p := &u.Public
	switch {
	case (out.Previous == Online || out.Previous == Idle) && out.Current == Invisible:
		// An invisible status from online or idle: every device that was live
		// disconnects, no earlier than any of them was last seen. The device that
		// sent it, if it was not live, shows nothing new (and stays unknown if it is
		// new).
		live := func(d *Device) bool {
			return d.ID != device && d.Status != Offline && !d.Hidden || d.ID == device && before != Offline
		}
		for i := range u.Devices {
			if d := &u.Devices[i]; live(d) {
				t = later(t, d.PublicLastSeen)
			}
		}
		for i := range u.Devices {
			switch d := &u.Devices[i]; {
			case live(d):
				d.PublicLastSeen = t
			case d.ID == device && added:
				d.Hidden = true
			}
		}
		p.LastSeen, p.LastActive = later(p.LastSeen, t), later(p.LastActive, t)
		u.publicChange(out, t)
	case out.Current == Invisible || out.Previous == Invisible && out.Current == Offline:
		// Invisible, or offline from invisible: offline throughout to such a reader,
		// who does not learn of a device first seen now.
		if added {
			if i, ok := u.device(device); ok {
				u.Devices[i].Hidden = true
			}
		}
	case out.Previous == Invisible:
		// Visible again (an online or idle status): every live device connects, no
		// earlier than any of them was last seen.
		for i := range u.Devices {
			if d := &u.Devices[i]; d.Status != Offline {
				t = later(t, d.PublicLastSeen)
			}
		}
		for i := range u.Devices {
			if d := &u.Devices[i]; d.Status != Offline {
				d.PublicLastSeen, d.Hidden = t, false
			}
		}
		p.LastSeen, p.LastActive = later(p.LastSeen, t), later(p.LastActive, t)
		u.publicChange(out, t)
	default:
		if seen {
			if i, ok := u.device(device); ok {
				d := &u.Devices[i]
				t = later(t, d.PublicLastSeen)
				d.PublicLastSeen, d.Hidden = t, false
			}
			p.LastSeen = later(p.LastSeen, t)
			if active {
				p.LastActive = later(p.LastActive, t)
			}
		}
		if out.Changed && out.Previous.Public() != out.Current.Public() {
			u.publicChange(out, t)
		}
	}
}

// publicChange records a change readers see at t: like LastUpdated, the public
// last-updated grows, by a microsecond when t does not.
func (u *User) publicChange(out *Outcome, t time.Time) {
	if !t.After(u.Public.LastUpdated) {
		t = u.Public.LastUpdated.Add(time.Microsecond)
	}
	u.Public.LastUpdated, out.PublicAt = t, t
}

// ResetPublic makes the public times the user's own, for a state made from times no
// reader was kept from (an older stored form, a rebuild from history's last known
// state).
func (u *User) ResetPublic() {
	u.Public = Public{LastUpdated: u.LastUpdated, LastActive: u.LastActive, LastSeen: u.LastSeen}
	for i := range u.Devices {
		u.Devices[i].PublicLastSeen, u.Devices[i].Hidden = u.Devices[i].LastSeen, false
	}
}

// TimesFor are u's times as a reader may see them: an operator u's own, anyone else
// the public ones (docs/design.md, "Invisible looks offline").
func (u *User) TimesFor(operator bool) Public {
	if operator {
		return Public{LastUpdated: u.LastUpdated, LastActive: u.LastActive, LastSeen: u.LastSeen}
	}
	return u.Public
}

// PublicDevices are the devices readers who are not operators know of, each with its
// public last-seen in LastSeen; all offline while the user is invisible.
func (u *User) PublicDevices() []Device {
	out := make([]Device, 0, len(u.Devices))
	for _, d := range u.Devices {
		if d.Hidden {
			continue
		}
		st := d.Status
		if u.Status == Invisible {
			st = Offline
		}
		out = append(out, Device{ID: d.ID, Status: st, LastSeen: d.PublicLastSeen})
	}
	return out
}

// settle recomputes the effective status after an event of time t.
func (u *User) settle(t time.Time) Outcome {
	prev := u.Status
	u.Status = u.effective()
	if u.Status == prev {
		return Outcome{Previous: prev, Current: prev}
	}
	// Change times must grow per user, whatever clients' clocks say: history writes
	// them as Cassandra write timestamps, where the largest wins.
	at := t
	if !at.After(u.LastUpdated) {
		at = u.LastUpdated.Add(time.Microsecond)
	}
	u.LastUpdated = at
	return Outcome{Changed: true, Previous: prev, Current: u.Status, At: at}
}

// effective is docs/design.md guarantee 4: invisible if chosen and a device is alive, else
// the highest device status.
func (u *User) effective() Status {
	best := Offline
	for _, d := range u.Devices {
		if d.Status > best {
			best = d.Status
		}
	}
	if u.Invisible && best != Offline {
		return Invisible
	}
	return best
}

func (u *User) evictDevices() (droppedLive int) {
	for len(u.Devices) > MaxDevices {
		oldest, oldestLive := -1, -1
		for i, d := range u.Devices {
			if d.Status == Offline && (oldest < 0 || d.LastSeen.Before(u.Devices[oldest].LastSeen)) {
				oldest = i
			}
			if oldestLive < 0 || d.LastSeen.Before(u.Devices[oldestLive].LastSeen) {
				oldestLive = i
			}
		}
		if oldest < 0 {
			// Every device is live: keep them all up to MaxLiveDevices rather than
			// forget a connection, then drop the one seen longest ago.
			if len(u.Devices) <= MaxLiveDevices {
				return droppedLive
			}
			oldest = oldestLive
			droppedLive++
		}
		u.Devices = slices.Delete(u.Devices, oldest, oldest+1)
	}
	return droppedLive
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// ToPB is the state's stored form.
func (u *User) ToPB() *pulsev1.UserState {
	p := &pulsev1.UserState{
		Index:         u.Index,
		Status:        StatusToPB(u.Status),
		Invisible:     u.Invisible,
		LastUpdatedUs: Micros(u.LastUpdated),
		LastActiveUs:  Micros(u.LastActive),
		LastSeenUs:    Micros(u.LastSeen),
		Offset:        u.Offset,
		Devices:       make([]*pulsev1.DeviceState, len(u.Devices)),
		CustomSetAtUs: Micros(u.CustomSetAt),
	}
	if !u.Custom.IsZero() {
		p.Custom = u.Custom.ToPB()
	}
	for i, d := range u.Devices {
		p.Devices[i] = &pulsev1.DeviceState{DeviceId: d.ID, Status: StatusToPB(d.Status), LastSeenUs: Micros(d.LastSeen)}
	}
	return p
}

// UserFromPB is the inverse of ToPB.
func UserFromPB(p *pulsev1.UserState) *User {
	u := &User{
		Index:       p.GetIndex(),
		Status:      StatusFromPB(p.GetStatus()),
		Invisible:   p.GetInvisible(),
		LastUpdated: FromMicros(p.GetLastUpdatedUs()),
		LastActive:  FromMicros(p.GetLastActiveUs()),
		LastSeen:    FromMicros(p.GetLastSeenUs()),
		Offset:      p.GetOffset(),
		Devices:     make([]Device, len(p.GetDevices())),
		CustomSetAt: FromMicros(p.GetCustomSetAtUs()),
	}
	if c := CustomFromPB(p.GetCustom()); c != nil {
		u.Custom = *c
	}
	for i, d := range p.GetDevices() {
		u.Devices[i] = Device{ID: d.GetDeviceId(), Status: StatusFromPB(d.GetStatus()), LastSeen: FromMicros(d.GetLastSeenUs())}
	}
	if u.Status == StatusUnknown {
		u.Status = Offline
	}
	u.ResetPublic()
	return u
}
