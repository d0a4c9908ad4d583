package timeouts

import (
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

var t0 = time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)

func sec(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Second))) }

func ev(kind presence.Kind, status presence.Status, device string, at time.Time) *presence.Event {
	return &presence.Event{ID: "e", UserID: "u", Kind: kind, Status: status, DeviceID: device,
		OccurredAt: at, ReceivedAt: at, Source: presence.SourceAPI}
}

func TestDeviceDeadlineFollowsTheNewestEvent(t *testing.T) {
	tr := New(60*time.Second, 5*time.Minute)
	u := presence.NewUser(0)
	u.Apply(ev(presence.KindHeartbeat, 0, "phone", sec(0)))
	tr.Update("u", u)
	u.Apply(ev(presence.KindHeartbeat, 0, "phone", sec(30)))
	tr.Update("u", u)

	if next, ok := tr.Next(); !ok || !next.Equal(sec(90)) {
		t.Fatalf("Next = %v %v, want %v (30s + 60s; the 60s deadline is obsolete)", next, ok, sec(90))
	}
	if due := tr.Due(sec(89.999)); len(due) != 0 {
		t.Fatalf("Due just before the deadline = %+v, want nothing (never early)", due)
	}
	due := tr.Due(sec(90))
	want := Deadline{At: sec(90), UserID: "u", DeviceID: "phone", Kind: DeviceOffline, Basis: sec(30)}
	if len(due) != 1 || due[0] != want {
		t.Fatalf("Due = %+v, want [%+v]", due, want)
	}
	// Online through heartbeats alone: idle 5 min after coming online.
	idle := Deadline{At: sec(300), UserID: "u", DeviceID: presence.AllDevices, Kind: UserIdle, Basis: sec(0)}
	if due := tr.Due(sec(1000)); len(due) != 1 || due[0] != idle || tr.Len() != 0 {
		t.Fatalf("after firing: Due = %+v, Len = %d, want only %+v", due, tr.Len(), idle)
	}
}

func TestIdleDeadlineOnlyForOnlineUsers(t *testing.T) {
	tr := New(time.Hour, 5*time.Minute)
	u := presence.NewUser(0)
	u.Apply(ev(presence.KindActivity, 0, "laptop", sec(10)))
	tr.Update("u", u)
	next, _ := tr.Next()
	if !next.Equal(sec(310)) {
		t.Fatalf("idle deadline = %v, want %v (last active + 5 min)", next, sec(310))
	}
	// Heartbeats keep the device alive but are not activity: the idle deadline stays.
	u.Apply(ev(presence.KindHeartbeat, 0, "laptop", sec(100)))
	tr.Update("u", u)
	due := tr.Due(sec(310))
	if len(due) != 1 || due[0].Kind != UserIdle || due[0].DeviceID != presence.AllDevices || !due[0].Basis.Equal(sec(10)) {
		t.Fatalf("Due = %+v, want the idle deadline based on last active at 10s", due)
	}
	// Invisible and idle users have no idle deadline.
	for _, st := range []presence.Status{presence.Invisible, presence.Idle} {
		v := presence.NewUser(0)
		v.Apply(ev(presence.KindStatus, st, "laptop", sec(0)))
		tr := New(time.Hour, time.Minute)
		tr.Update("v", v)
		if due := tr.Due(sec(3599)); len(due) != 0 {
			t.Errorf("%s user: Due = %+v, want no idle deadline", st, due)
		}
	}
}

func TestOfflineDeviceHasNoDeadline(t *testing.T) {
	tr := New(time.Minute, time.Hour)
	u := presence.NewUser(0)
	u.Apply(ev(presence.KindHeartbeat, 0, "phone", sec(0)))
	tr.Update("u", u)
	u.Apply(ev(presence.KindStatus, presence.Offline, "phone", sec(5)))
	tr.Update("u", u)
	if due := tr.Due(sec(3600)); len(due) != 0 || tr.Len() != 0 {
		t.Fatalf("explicitly disconnected device: Due = %+v, Len = %d, want none", due, tr.Len())
	}
}

func TestEventIsDeterministic(t *testing.T) {
	d := Deadline{At: sec(90), UserID: "u", DeviceID: "phone", Kind: DeviceOffline, Basis: sec(30)}
	a, b := d.Event(sec(91)), d.Event(sec(95))
	if a.ID != b.ID || len(a.ID) != len("timeout-")+32 {
		t.Fatalf("ids %q and %q: the same deadline must give the same id", a.ID, b.ID)
	}
	if err := a.Validate(); err != nil {
		t.Fatalf("timeout event invalid: %v", err)
	}
	if a.Kind != presence.KindStatus || a.Status != presence.Offline || a.Source != presence.SourceTimeout ||
		!a.OccurredAt.Equal(sec(90)) || !a.LastSeen.Equal(sec(30)) || !a.ReceivedAt.Equal(sec(91)) {
		t.Fatalf("event = %+v", a)
	}
	d.Basis = sec(31)
	if d.Event(sec(91)).ID == a.ID {
		t.Fatal("another basis gave the same id")
	}
}

func TestCompactionKeepsEveryValidDeadline(t *testing.T) {
	tr := New(time.Minute, 24*time.Hour)
	u := presence.NewUser(0)
	for i := range 5000 {
		u.Apply(ev(presence.KindHeartbeat, 0, "phone", sec(float64(i))))
		tr.Update("u", u)
	}
	if tr.h.Len() > 2*tr.Len()+1024 {
		t.Fatalf("heap holds %d entries for %d deadlines: obsolete entries are not compacted", tr.h.Len(), tr.Len())
	}
	due := tr.Due(sec(4999 + 60))
	if len(due) != 1 || !due[0].Basis.Equal(sec(4999)) {
		t.Fatalf("Due = %+v, want one deadline based on the last heartbeat", due)
	}
}

// sim is the aggregator's timeout loop in miniature, on the fake clock of a synctest
// bubble: events are folded at their time, deadlines fire at theirs, and each decision
// goes through the log (the fold) as a timeout event, after any event that raced it.
type sim struct {
	tr      *Tracker
	u       *presence.User
	changes []string
}

func (s *sim) apply(e *presence.Event) {
	if out := s.u.Apply(e); out.Changed {
		s.changes = append(s.changes, time.Since(t0).String()+" "+out.Previous.String()+"->"+out.Current.String())
	}
	s.tr.Update("u", s.u)
}

// fire decides every due deadline now; decided timeouts are appended to the log after
// whatever events the caller applied first.
func (s *sim) fire() []presence.Event {
	var evs []presence.Event
	for _, d := range s.tr.Due(time.Now()) {
		evs = append(evs, d.Event(time.Now()))
	}
	return evs
}

func TestTimeoutsFireOnTimeInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The bubble's clock starts at 2000-01-01; move the test's epoch there.
		t0 = time.Now()
		s := &sim{tr: New(3*time.Second, 5*time.Second), u: presence.NewUser(0)}
		now := func() time.Time { return time.Now() }

		// phone: heartbeats every second for 4s then silence; laptop: one activity at 0.
		s.apply(ev(presence.KindActivity, 0, "laptop", now()))
		for i := range 5 {
			s.apply(ev(presence.KindHeartbeat, 0, "phone", now()))
			if i < 4 {
				time.Sleep(time.Second)
			}
		}
		// A loop like the aggregator's: sleep until the next deadline, decide, apply.
		for {
			next, ok := s.tr.Next()
			if !ok {
				break
			}
			time.Sleep(time.Until(next))
			for _, e := range s.fire() {
				s.apply(&e)
			}
		}
		want := []string{
			"0s offline->online",
			// laptop last seen at 0s: offline at 3s, but the phone keeps the user online.
			// idle at 5s: no activity since 0s, although the phone still heartbeats.
			"5s online->idle",
			// phone last seen at 4s: offline at 7s, the user with it.
			"7s idle->offline",
		}
		if len(s.changes) != len(want) {
			t.Fatalf("changes = %q, want %q", s.changes, want)
		}
		for i := range want {
			if s.changes[i] != want[i] {
				t.Errorf("change %d = %q, want %q", i, s.changes[i], want[i])
			}
		}
	})
}

func TestHeartbeatRacingATimeoutWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 = time.Now()
		s := &sim{tr: New(3*time.Second, time.Hour), u: presence.NewUser(0)}
		s.apply(ev(presence.KindHeartbeat, 0, "phone", time.Now()))
		time.Sleep(3 * time.Second)
		timeouts := s.fire() // decided on last-seen 0s ...
		if len(timeouts) != 1 {
			t.Fatalf("due at 3s = %d deadlines, want 1", len(timeouts))
		}
		// ... but a heartbeat reaches the log first.
		s.apply(ev(presence.KindHeartbeat, 0, "phone", time.Now()))
		out := s.u.Apply(&timeouts[0])
		if !out.Stale || s.u.Status != presence.Online {
			t.Fatalf("timeout after a newer heartbeat: outcome %+v, status %s; want stale, still online", out, s.u.Status)
		}
		// The heartbeat re-armed the deadline: 3s after it.
		if next, ok := s.tr.Next(); !ok || !next.Equal(t0.Add(6*time.Second)) {
			t.Fatalf("next deadline = %v %v, want 6s", next.Sub(t0), ok)
		}
	})
}

func TestInvisibleUserTimesOutToOffline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 = time.Now()
		s := &sim{tr: New(2*time.Second, time.Second), u: presence.NewUser(0)}
		s.apply(ev(presence.KindStatus, presence.Invisible, "phone", time.Now()))
		time.Sleep(2 * time.Second)
		for _, e := range s.fire() {
			s.apply(&e)
		}
		want := []string{"0s offline->invisible", "2s invisible->offline"}
		if len(s.changes) != 2 || s.changes[0] != want[0] || s.changes[1] != want[1] {
			t.Fatalf("changes = %q, want %q (no idle for invisible users)", s.changes, want)
		}
		if s.u.Status.Public() != presence.Offline || !s.u.Invisible {
			t.Fatalf("user = %+v: invisible stays chosen while offline", s.u)
		}
	})
}

// benchUsers makes n users with one live device each, last seen within a minute.
func benchUsers(n int) ([]string, []*presence.User) {
	ids := make([]string, n)
	users := make([]*presence.User, n)
	for i := range n {
		ids[i] = "0f8fad5b-d9cb-469f-a165-" + strconvPad(i)
		u := presence.NewUser(uint32(i))
		u.Apply(&presence.Event{ID: "x", UserID: ids[i], Kind: presence.KindActivity,
			DeviceID: "phone", ReceivedAt: sec(float64(i % 60)), Source: presence.SourceAPI})
		users[i] = u
	}
	return ids, users
}

// BenchmarkTrackerUpdate is the cost of one heartbeat's deadline update among 2M
// pending deadlines (1M online users: a device deadline and an idle deadline each),
// and reports the tracker's own memory per pending deadline.
func BenchmarkTrackerUpdate(b *testing.B) {
	const n = 1_000_000
	ids, users := benchUsers(n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tr := New(time.Minute, 5*time.Minute)
	for i := range n {
		tr.Update(ids[i], users[i])
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perDeadline := float64(after.HeapAlloc-before.HeapAlloc) / float64(tr.Len())
	i := 0
	for b.Loop() {
		u := users[i%n]
		u.Devices[0].LastSeen = u.Devices[0].LastSeen.Add(time.Second)
		tr.Update(ids[i%n], u)
		i++
	}
	b.ReportMetric(perDeadline, "B/deadline")
	runtime.KeepAlive(users)
}

// BenchmarkTrackerDue is the cost of deciding one deadline: popping it when due.
func BenchmarkTrackerDue(b *testing.B) {
	n := b.N
	ids, users := benchUsers(n)
	tr := New(time.Minute, time.Hour)
	for i := range n {
		tr.Update(ids[i], users[i])
	}
	b.ResetTimer()
	due := 0
	for s := 61; due < n; s++ {
		due += len(tr.Due(sec(float64(s))))
	}
	b.StopTimer()
	if due != n {
		b.Fatalf("%d due, want %d", due, n)
	}
}

func strconvPad(i int) string {
	const digits = "0123456789"
	b := []byte("000000000000")
	for j := len(b) - 1; i > 0 && j >= 0; j-- {
		b[j] = digits[i%10]
		i /= 10
	}
	return string(b)
}
