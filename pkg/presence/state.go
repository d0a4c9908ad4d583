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
	// DevicesDropped counts live devices dropped because the user had more than
	// MaxLiveDevices.
	DevicesDropped int
}

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
		return u.applyTimeout(e)
	}
	t := e.Time()
	i, found := u.device(e.DeviceID)
	if found && t.Before(u.Devices[i].LastSeen) {
		return Outcome{Stale: true, Previous: u.Status, Current: u.Status}
	}
	if !found {
		u.Devices = slices.Insert(u.Devices, i, Device{ID: e.DeviceID, Status: Offline})
	}
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
		if !found || u.Devices[i].Status == Offline || u.Devices[i].LastSeen.After(e.LastSeen) {
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
	}
	for i, d := range p.GetDevices() {
		u.Devices[i] = Device{ID: d.GetDeviceId(), Status: StatusFromPB(d.GetStatus()), LastSeen: FromMicros(d.GetLastSeenUs())}
	}
	if u.Status == StatusUnknown {
		u.Status = Offline
	}
	return u
}
