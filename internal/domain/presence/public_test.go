package presence_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/presence/presencetest"
)

// publicView is everything a reader who is not an operator may know of a user.
type publicView struct {
	Status                            presence.Status
	LastUpdated, LastActive, LastSeen time.Time
	Devices                           []presence.Device
}

func (v publicView) String() string {
	return fmt.Sprintf("%v updated %v active %v seen %v devices %v", v.Status, v.LastUpdated, v.LastActive, v.LastSeen, v.Devices)
}

func viewOf(u *presence.User) publicView {
	return publicView{Status: u.Status.Public(), LastUpdated: u.Public.LastUpdated,
		LastActive: u.Public.LastActive, LastSeen: u.Public.LastSeen, Devices: u.PublicDevices()}
}

// viewOfVisible is the view of a user who was never invisible, from its own times: the
// twin's, which must not depend on Public at all.
func viewOfVisible(u *presence.User) publicView {
	v := publicView{Status: u.Status, LastUpdated: u.LastUpdated, LastActive: u.LastActive, LastSeen: u.LastSeen}
	for _, d := range u.Devices {
		v.Devices = append(v.Devices, presence.Device{ID: d.ID, Status: d.Status, LastSeen: d.LastSeen})
	}
	return v
}

func sameView(a, b publicView) bool {
	return a.Status == b.Status && a.LastUpdated.Equal(b.LastUpdated) && a.LastActive.Equal(b.LastActive) &&
		a.LastSeen.Equal(b.LastSeen) && slices.EqualFunc(a.Devices, b.Devices, func(x, y presence.Device) bool {
		return x.ID == y.ID && x.Status == y.Status && x.LastSeen.Equal(y.LastSeen)
	})
}

// TestInvisibleReadsAsATwinWhoWasOffline applies random events — statuses including
// invisible, heartbeats, activity and timeouts on up to four devices — to a user, and
// the events presencetest.TwinEvents derives to a twin; after every event the user's
// public view must equal the twin's, computed from the twin's own times, and the change
// a reader sees (public statuses and PublicAt) the twin's own change. Each device's
// clock is off by its own few seconds, so times run backwards from one device to
// another.
func TestInvisibleReadsAsATwinWhoWasOffline(t *testing.T) {
	devices := []string{"a", "b", "c", "d"}
	statuses := []presence.Status{presence.Online, presence.Idle, presence.Offline, presence.Invisible}
	t0 := time.Date(2025, 3, 14, 12, 0, 0, 0, time.UTC)
	for seed := range uint64(1000) {
		rng := rand.New(rand.NewPCG(seed, 7))
		u, twin := presence.NewUser(0), presence.NewUser(0)
		now := t0
		skew := map[string]time.Duration{}
		for _, d := range devices {
			skew[d] = time.Duration(rng.IntN(6000)-3000) * time.Millisecond
		}
		var log []string
		for step := range 60 {
			now = now.Add(time.Duration(1+rng.IntN(5000)) * time.Millisecond)
			dev := devices[rng.IntN(len(devices))]
			e := &presence.Event{ID: fmt.Sprint(step), UserID: "u", DeviceID: dev, OccurredAt: now.Add(skew[dev]), ReceivedAt: now, Source: presence.SourceAPI}
			switch k := rng.IntN(10); {
			case k < 4:
				e.Kind, e.Status = presence.KindStatus, statuses[rng.IntN(len(statuses))]
			case k < 6:
				e.Kind = presence.KindHeartbeat
			case k < 8:
				e.Kind = presence.KindActivity
			case k < 9:
				// The aggregator's offline timeout of the device, on its basis.
				i := slices.IndexFunc(u.Devices, func(d presence.Device) bool { return d.ID == dev })
				if i < 0 {
					continue
				}
				e.Kind, e.Status, e.Source, e.LastSeen = presence.KindStatus, presence.Offline, presence.SourceTimeout, u.Devices[i].Heard()
			default:
				e.Kind, e.Status, e.Source, e.DeviceID, e.LastSeen = presence.KindStatus, presence.Idle, presence.SourceTimeout, presence.AllDevices, u.LastActive
			}
			out := u.Apply(e)
			log = append(log, fmt.Sprintf("%d: %v %v %v %s → %v", step, e.Source, e.Kind, e.Status, e.DeviceID, u.Status))
			var seen, twinSaw []string
			if !out.PublicAt.IsZero() {
				seen = append(seen, fmt.Sprintf("%v→%v at %v", out.Previous.Public(), out.Current.Public(), out.PublicAt))
			}
			for _, te := range presencetest.TwinEvents("twin", e, out, u, twin) {
				if to := twin.Apply(te); to.Changed {
					twinSaw = append(twinSaw, fmt.Sprintf("%v→%v at %v", to.Previous, to.Current, to.At))
				}
			}
			if !slices.Equal(seen, twinSaw) {
				t.Fatalf("seed %d step %d: a reader sees the change %v, the twin's is %v\nevents:\n%v", seed, step, seen, twinSaw, append(log, fmt.Sprint(e)))
			}
			if twin.Status == presence.Invisible {
				t.Fatalf("seed %d: the twin became invisible", seed)
			}
			if got, want := viewOf(u), viewOfVisible(twin); !sameView(got, want) {
				t.Fatalf("seed %d step %d: public view\n  %v\nwant the twin's\n  %v\nevents:\n%v", seed, step, got, want, log)
			}
		}
	}
}
