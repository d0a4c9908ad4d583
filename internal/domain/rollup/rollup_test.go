package rollup_test

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/rollup"
)

const (
	on    = presence.Online
	idle  = presence.Idle
	off   = presence.Offline
	invis = presence.Invisible
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

// shard is a fold under test that remembers each user's status, so that test cases
// list only what changes.
type shard struct {
	t      *testing.T
	f      *rollup.Fold
	status map[string]presence.Status
}

func newShard(t *testing.T) *shard {
	t.Helper()
	f, err := rollup.New(rollup.Config{Shard: 3})
	if err != nil {
		t.Fatal(err)
	}
	return &shard{t, f, map[string]presence.Status{}}
}

// index gives every user of these tests a fixed dense index: u0 is 10, u1 11, …
func index(user string) uint32 {
	var n uint32
	fmt.Sscanf(user, "u%d", &n)
	return 10 + n
}

func (s *shard) change(user string, to presence.Status, when string) {
	prev, ok := s.status[user]
	if !ok {
		prev = off
	}
	s.f.Apply(rollup.Change{UserID: user, Index: index(user), Previous: prev, Current: to, At: at(when)})
	s.status[user] = to
}

func mins(m int) time.Duration { return time.Duration(m) * time.Minute }

func TestSessionAcrossMidnight(t *testing.T) {
	s := newShard(t)
	s.change("u1", on, "2026-03-14T23:00:00Z")
	s.change("u1", idle, "2026-03-14T23:30:00Z")
	s.change("u1", off, "2026-03-15T01:00:00Z")
	s.f.Advance(at("2026-03-16T00:10:00.000001Z")) // the 15th is final
	r := s.f.Flush()

	wantSessions := []rollup.Session{{
		UserID: "u1", Start: at("2026-03-14T23:00:00Z"), End: at("2026-03-15T01:00:00Z"),
		Online: mins(30), Idle: mins(90), Through: at("2026-03-15T01:00:00Z"), Status: off,
	}}
	if !slices.Equal(r.Sessions, wantSessions) {
		t.Errorf("sessions:\n got %+v\nwant %+v", r.Sessions, wantSessions)
	}
	wantDays := []rollup.Day{{
		UserID: "u1", Day: at("2026-03-14T00:00:00Z"), Online: mins(30), Idle: mins(30), Sessions: 1,
		FirstSeen: at("2026-03-14T23:00:00Z"), LastSeen: at("2026-03-14T23:59:59.999999Z"),
		Through: at("2026-03-15T00:00:00Z"), Status: idle,
	}, {
		UserID: "u1", Day: at("2026-03-15T00:00:00Z"), Idle: mins(60), Sessions: 1,
		FirstSeen: at("2026-03-15T00:00:00Z"), LastSeen: at("2026-03-15T00:59:59.999999Z"),
		Through: at("2026-03-16T00:00:00Z"), Status: off,
	}}
	if !slices.Equal(r.Days, wantDays) {
		t.Errorf("days:\n got %+v\nwant %+v", r.Days, wantDays)
	}

	// Minutes from the first change to the watermark, every one of them.
	if n := len(r.Minutes); n != 25*60+11 {
		t.Errorf("%d minute rows, want %d", n, 25*60+11)
	}
	byMinute := map[time.Time]rollup.Minute{}
	for _, m := range r.Minutes {
		byMinute[m.Minute] = m
	}
	for _, c := range []struct {
		minute          string
		on, idle, invis uint32
	}{
		{"2026-03-14T23:00:00Z", 1, 0, 0},
		{"2026-03-14T23:30:00Z", 0, 1, 0},
		{"2026-03-15T00:59:00Z", 0, 1, 0},
		{"2026-03-15T01:00:00Z", 0, 0, 0},
	} {
		m := byMinute[at(c.minute)]
		for sec := range 60 {
			if m.Online[sec] != c.on || m.Idle[sec] != c.idle || m.Invisible[sec] != c.invis {
				t.Errorf("minute %s second %d: %d/%d/%d, want %d/%d/%d", c.minute, sec,
					m.Online[sec], m.Idle[sec], m.Invisible[sec], c.on, c.idle, c.invis)
				break
			}
		}
	}
	hours := map[time.Time][]uint32{}
	for _, h := range r.Hours {
		hours[h.Hour] = h.Users.ToArray()
	}
	for _, c := range []struct {
		hour  string
		users []uint32
	}{
		{"2026-03-14T23:00:00Z", []uint32{11}},
		{"2026-03-15T00:00:00Z", []uint32{11}},
		{"2026-03-15T01:00:00Z", []uint32{}},
	} {
		if got := hours[at(c.hour)]; !slices.Equal(got, c.users) {
			t.Errorf("hour %s: %v, want %v", c.hour, got, c.users)
		}
	}
}

// An open session and today's row are written when the user changes, counted up to the
// fold's time then, and not rewritten as time passes: a reader extends them from
// Through in Status.
func TestOpenSession(t *testing.T) {
	s := newShard(t)
	s.change("u1", on, "2026-03-14T10:00:00Z")
	s.f.Advance(at("2026-03-14T10:30:00Z"))
	r := s.f.Flush()
	wantSession := rollup.Session{UserID: "u1", Start: at("2026-03-14T10:00:00Z"), Online: mins(30),
		Open: true, Through: at("2026-03-14T10:30:00Z"), Status: on}
	wantDay := rollup.Day{UserID: "u1", Day: at("2026-03-14T00:00:00Z"), Online: mins(30), Sessions: 1,
		FirstSeen: at("2026-03-14T10:00:00Z"), LastSeen: at("2026-03-14T10:29:59.999999Z"),
		Through: at("2026-03-14T10:30:00Z"), Status: on}
	if !slices.Equal(r.Sessions, []rollup.Session{wantSession}) || !slices.Equal(r.Days, []rollup.Day{wantDay}) {
		t.Errorf("first flush:\n got %+v\n     %+v\nwant %+v\n     %+v", r.Sessions, r.Days, wantSession, wantDay)
	}

	s.f.Advance(at("2026-03-14T11:00:00Z"))
	r = s.f.Flush()
	if len(r.Sessions) != 0 || len(r.Days) != 0 {
		t.Errorf("time passing rewrote %+v %+v", r.Sessions, r.Days)
	}
	if len(r.Minutes) != 30 || len(r.Hours) != 1 {
		t.Errorf("time passing wrote %d minutes and %d hours, want the 30 new minutes and the new hour", len(r.Minutes), len(r.Hours))
	}

	s.change("u1", idle, "2026-03-14T11:15:00Z")
	r = s.f.Flush()
	wantSession.Online, wantSession.Through, wantSession.Status = mins(75), at("2026-03-14T11:15:00Z"), idle
	wantDay.Online, wantDay.LastSeen, wantDay.Through, wantDay.Status = mins(75), at("2026-03-14T11:14:59.999999Z"), at("2026-03-14T11:15:00Z"), idle
	if !slices.Equal(r.Sessions, []rollup.Session{wantSession}) || !slices.Equal(r.Days, []rollup.Day{wantDay}) {
		t.Errorf("after going idle:\n got %+v\n     %+v\nwant %+v\n     %+v", r.Sessions, r.Days, wantSession, wantDay)
	}
}

// A user present through midnight gets today's row once the day is Lateness old, not
// only when it ends, and the row they had yesterday is completed once that is final.
func TestPresentAllDayGetsTodaysRow(t *testing.T) {
	s := newShard(t)
	s.change("u1", invis, "2026-03-14T20:00:00Z")
	s.f.Advance(at("2026-03-15T00:09:59Z"))
	r := s.f.Flush()
	if len(r.Days) != 1 || r.Days[0].Through != at("2026-03-15T00:00:00Z") {
		t.Fatalf("before lateness has passed: %+v, want only the 14th's row, complete", r.Days)
	}
	s.f.Advance(at("2026-03-15T00:10:01Z")) // frontier 00:00:01
	r = s.f.Flush()
	want := []rollup.Day{
		{UserID: "u1", Day: at("2026-03-14T00:00:00Z"), Invisible: 4 * time.Hour, Sessions: 1,
			FirstSeen: at("2026-03-14T20:00:00Z"), LastSeen: at("2026-03-14T23:59:59.999999Z"),
			Through: at("2026-03-15T00:00:00Z"), Status: invis},
		{UserID: "u1", Day: at("2026-03-15T00:00:00Z"), Invisible: 10*time.Minute + time.Second, Sessions: 1,
			FirstSeen: at("2026-03-15T00:00:00Z"), LastSeen: at("2026-03-15T00:10:00.999999Z"),
			Through: at("2026-03-15T00:10:01Z"), Status: invis},
	}
	if !slices.Equal(r.Days, want) {
		t.Errorf("days:\n got %+v\nwant %+v", r.Days, want)
	}
	// Written once: more time passing rewrites no day row until the day ends.
	for _, w := range []string{"2026-03-15T00:30:00Z", "2026-03-15T12:00:00Z", "2026-03-16T00:09:59Z"} {
		s.f.Advance(at(w))
		if r := s.f.Flush(); len(r.Days) != 0 {
			t.Errorf("at %s rewrote %+v", w, r.Days)
		}
	}
}

// A change from before the frontier is beyond the promised lateness: it is moved up to
// the frontier, still after its user's previous change, and counted.
func TestLateChangeIsMovedToTheFrontier(t *testing.T) {
	s := newShard(t)
	s.f.Advance(at("2026-03-14T12:00:00Z")) // frontier 11:50
	s.change("u1", on, "2026-03-14T11:40:00Z")
	s.change("u1", off, "2026-03-14T11:45:00Z")
	s.change("u2", on, "2026-03-14T11:55:00Z") // within lateness: as it is
	r := s.f.Flush()
	want := []rollup.Session{
		{UserID: "u1", Start: at("2026-03-14T11:50:00Z"), End: at("2026-03-14T11:50:00.000001Z"),
			Online: time.Microsecond, Through: at("2026-03-14T11:50:00.000001Z"), Status: off},
		{UserID: "u2", Start: at("2026-03-14T11:55:00Z"), Online: mins(5), Open: true,
			Through: at("2026-03-14T12:00:00Z"), Status: on},
	}
	if !slices.Equal(r.Sessions, want) {
		t.Errorf("sessions:\n got %+v\nwant %+v", r.Sessions, want)
	}
	if st := s.f.Stats(); st.Late != 2 || st.Applied != 3 || st.Dropped != 0 {
		t.Errorf("stats %+v, want 2 late of 3 applied", st)
	}
	// Nothing before the frontier moved: the minute rows begin at 11:50 with nobody.
	if r.Minutes[0].Minute != at("2026-03-14T11:50:00Z") || r.Minutes[0].Online[0] != 0 {
		t.Errorf("first minute %v online %d", r.Minutes[0].Minute, r.Minutes[0].Online[0])
	}
}

// Before the first Advance the first change stands for the watermark, and a change
// dated a day past the fold's time is corrupt: neither can make the fold hold years of
// minutes.
func TestImplausibleTimes(t *testing.T) {
	s := newShard(t)
	s.change("u1", on, "2026-03-14T10:00:00Z")
	s.change("u2", on, "2026-03-14T09:00:00Z") // beyond lateness of the first change
	s.f.Apply(rollup.Change{UserID: "u3", Index: 13, Previous: off, Current: on, At: at("2026-03-15T10:00:00.000001Z")})
	s.f.Apply(rollup.Change{UserID: "u4", Index: 14, Previous: off, Current: on, At: at("1970-01-01T00:00:01Z")})
	r := s.f.Flush()
	if st := s.f.Stats(); st.Applied != 3 || st.Late != 2 || st.Dropped != 1 || st.Minutes != 11 {
		t.Errorf("stats %+v, want 3 applied, 2 late, 1 dropped, 11 minutes held", st)
	}
	if len(r.Sessions) != 3 || r.Sessions[1].UserID != "u2" || r.Sessions[1].Start != at("2026-03-14T09:50:00Z") {
		t.Errorf("sessions %+v", r.Sessions)
	}
	if s.f.Watermark() != at("2026-03-14T10:00:00Z") || s.f.Frontier() != at("2026-03-14T09:50:00Z") {
		t.Errorf("watermark %v, frontier %v", s.f.Watermark(), s.f.Frontier())
	}
}

func TestRepeatsAndMismatches(t *testing.T) {
	s := newShard(t)
	s.change("u1", on, "2026-03-14T10:00:00Z")
	s.change("u1", idle, "2026-03-14T10:05:00Z")
	// presence.changes is at least once: the same changes again.
	s.f.Apply(rollup.Change{UserID: "u1", Index: 11, Previous: off, Current: on, At: at("2026-03-14T10:00:00Z")})
	s.f.Apply(rollup.Change{UserID: "u1", Index: 11, Previous: on, Current: idle, At: at("2026-03-14T10:05:00Z")})
	// A user whose earlier changes the fold never saw: it starts from offline.
	s.f.Apply(rollup.Change{UserID: "u2", Index: 12, Previous: on, Current: idle, At: at("2026-03-14T10:06:00Z")})
	// Not a transition for the fold: nothing happens.
	s.f.Apply(rollup.Change{UserID: "u2", Index: 12, Previous: on, Current: idle, At: at("2026-03-14T10:07:00Z")})
	s.f.Apply(rollup.Change{UserID: "u3", Index: 13, Current: presence.StatusUnknown, At: at("2026-03-14T10:07:00Z")})
	s.f.Advance(at("2026-03-14T10:10:00Z"))
	r := s.f.Flush()
	want := []rollup.Session{
		{UserID: "u1", Start: at("2026-03-14T10:00:00Z"), Online: mins(5), Idle: mins(5), Open: true,
			Through: at("2026-03-14T10:10:00Z"), Status: idle},
		{UserID: "u2", Start: at("2026-03-14T10:06:00Z"), Idle: mins(4), Open: true,
			Through: at("2026-03-14T10:10:00Z"), Status: idle},
	}
	if !slices.Equal(r.Sessions, want) {
		t.Errorf("sessions:\n got %+v\nwant %+v", r.Sessions, want)
	}
	if st := s.f.Stats(); st.Applied != 3 || st.Dropped != 3 || st.Mismatched != 2 || st.Late != 0 {
		t.Errorf("stats %+v, want 3 applied, 3 dropped, 2 mismatched", st)
	}
}

// Concurrency samples the end of each second: a change at any microsecond of a second
// counts from that second on, and a visit within one second is not counted.
func TestConcurrencyCountsTheEndOfEachSecond(t *testing.T) {
	s := newShard(t)
	s.change("u1", on, "2026-03-14T10:00:05.3Z")
	s.change("u1", off, "2026-03-14T10:00:05.7Z")
	s.change("u2", on, "2026-03-14T10:00:07.999999Z")
	s.change("u3", invis, "2026-03-14T10:00:30Z")
	s.change("u3", on, "2026-03-14T10:00:40Z")
	s.change("u4", idle, "2026-03-14T10:00:59.999999Z")
	s.f.Advance(at("2026-03-14T10:11:00Z"))
	r := s.f.Flush()
	var want rollup.Minute
	want.Shard, want.Minute = 3, at("2026-03-14T10:00:00Z")
	for sec := range 60 {
		switch {
		case sec >= 40:
			want.Online[sec] = 2
		case sec >= 7:
			want.Online[sec] = 1
		}
		if sec >= 30 && sec < 40 {
			want.Invisible[sec] = 1
		}
	}
	want.Idle[59] = 1
	if r.Minutes[0] != want {
		t.Errorf("minute:\n got %+v\nwant %+v", r.Minutes[0], want)
	}
	if o, i, v := r.Minutes[0].Close(); o != 2 || i != 1 || v != 0 {
		t.Errorf("close %d/%d/%d, want 2/1/0", o, i, v)
	}
	if p := r.Minutes[0].PeakOnline(); p != 2 {
		t.Errorf("peak %d, want 2", p)
	}
	if next := r.Minutes[1]; next.Online != [60]uint32{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2} || next.Idle[0] != 1 {
		t.Errorf("next minute: %+v", next)
	}
	// u1's visit is still a session and counts in the hour.
	if len(r.Sessions) != 4 || r.Sessions[0].Online != 400*time.Millisecond {
		t.Errorf("sessions %+v", r.Sessions)
	}
	if got := r.Hours[0].Users.ToArray(); !slices.Equal(got, []uint32{11, 12, 13, 14}) {
		t.Errorf("hour users %v", got)
	}
}

func TestUniqueUsersPerHour(t *testing.T) {
	s := newShard(t)
	s.change("u0", on, "2026-03-14T09:59:59.999999Z")
	s.change("u0", off, "2026-03-14T10:00:00Z") // gone exactly when the hour starts
	s.change("u1", on, "2026-03-14T10:30:00Z")
	s.change("u1", off, "2026-03-14T12:00:00Z")
	s.change("u2", on, "2026-03-14T11:59:59.999999Z")
	s.change("u2", idle, "2026-03-14T12:00:00.5Z")
	s.change("u2", off, "2026-03-14T13:00:00Z")
	s.f.Advance(at("2026-03-14T14:11:00Z"))
	r := s.f.Flush()
	want := map[string][]uint32{
		"2026-03-14T09:00:00Z": {10},
		"2026-03-14T10:00:00Z": {11},
		"2026-03-14T11:00:00Z": {11, 12},
		"2026-03-14T12:00:00Z": {12},
		"2026-03-14T13:00:00Z": {},
		"2026-03-14T14:00:00Z": {},
	}
	if len(r.Hours) != len(want) {
		t.Fatalf("%d hour rows, want %d", len(r.Hours), len(want))
	}
	var all []*roaring.Bitmap
	for _, h := range r.Hours {
		if got := h.Users.ToArray(); h.Shard != 3 || !slices.Equal(got, want[h.Hour.Format(time.RFC3339)]) {
			t.Errorf("hour %v of shard %d: %v, want %v", h.Hour, h.Shard, got, want[h.Hour.Format(time.RFC3339)])
		}
		all = append(all, h.Users)
	}
	if got := rollup.Union(all...).ToArray(); !slices.Equal(got, []uint32{10, 11, 12}) {
		t.Errorf("union %v", got)
	}
	if n := rollup.Cardinality(all...); n != 3 {
		t.Errorf("cardinality %d, want 3", n)
	}
	if n := rollup.Cardinality(all[2]); n != 2 {
		t.Errorf("cardinality of one hour %d, want 2", n)
	}
	if n := rollup.Cardinality(); n != 0 {
		t.Errorf("cardinality of nothing %d", n)
	}
}

// TestShownUsersPerHour: an hour's shown users are those online or idle at some
// instant of it; a user who was only invisible in the hour is not among them.
func TestShownUsersPerHour(t *testing.T) {
	s := newShard(t)
	s.change("u0", invis, "2026-03-14T10:10:00Z")
	s.change("u0", on, "2026-03-14T11:59:59.999999Z") // shown from the hour's last microsecond
	s.change("u0", invis, "2026-03-14T12:00:00Z")     // left exactly as 12:00 starts
	s.change("u0", off, "2026-03-14T13:30:00Z")
	s.change("u1", idle, "2026-03-14T10:30:00Z")
	s.change("u1", invis, "2026-03-14T10:40:00Z")
	s.change("u1", off, "2026-03-14T12:30:00Z")
	s.change("u2", invis, "2026-03-14T12:10:00Z") // still invisible at the end
	s.f.Advance(at("2026-03-14T14:11:00Z"))
	r := s.f.Flush()
	want := map[string][2][]uint32{ // users, shown
		"2026-03-14T10:00:00Z": {{10, 11}, {11}},
		"2026-03-14T11:00:00Z": {{10, 11}, {10}},
		"2026-03-14T12:00:00Z": {{10, 11, 12}, {}},
		"2026-03-14T13:00:00Z": {{10, 12}, {}},
		"2026-03-14T14:00:00Z": {{12}, {}},
	}
	if len(r.Hours) != len(want) {
		t.Fatalf("%d hour rows, want %d", len(r.Hours), len(want))
	}
	for _, h := range r.Hours {
		w := want[h.Hour.Format(time.RFC3339)]
		if users, shown := h.Users.ToArray(), h.Shown.ToArray(); !slices.Equal(users, w[0]) || !slices.Equal(shown, w[1]) {
			t.Errorf("hour %v: users %v shown %v, want %v and %v", h.Hour, users, shown, w[0], w[1])
		}
	}
}

// TestVersion2CheckpointShowsItsHoursUsers: a checkpoint written before hours had shown
// users (testdata/checkpoint-v2.bin: u1, index 1, online since 10:10 and u2, index 2,
// invisible since 10:20, folded to 10:30) restores its hours with every user shown, as
// readers counted them then; changes after it are told apart again.
func TestVersion2CheckpointShowsItsHoursUsers(t *testing.T) {
	data, err := os.ReadFile("testdata/checkpoint-v2.bin")
	if err != nil {
		t.Fatal(err)
	}
	f, err := rollup.New(rollup.Config{Shard: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.UnmarshalBinary(data); err != nil {
		t.Fatalf("restoring a version 2 checkpoint: %v", err)
	}
	f.Apply(rollup.Change{UserID: "u3", Index: 3, Previous: off, Current: invis, At: at("2026-03-14T10:40:00Z")})
	f.Apply(rollup.Change{UserID: "u1", Index: 1, Previous: on, Current: off, At: at("2026-03-14T10:50:00Z")})
	f.Advance(at("2026-03-14T11:05:00Z"))
	r := f.Flush()
	want := map[string][2][]uint32{
		"2026-03-14T10:00:00Z": {{1, 2, 3}, {1, 2}},
		"2026-03-14T11:00:00Z": {{2, 3}, {}},
	}
	if len(r.Hours) != len(want) {
		t.Fatalf("%d hour rows, want %d", len(r.Hours), len(want))
	}
	for _, h := range r.Hours {
		w := want[h.Hour.Format(time.RFC3339)]
		if users, shown := h.Users.ToArray(), h.Shown.ToArray(); !slices.Equal(users, w[0]) || !slices.Equal(shown, w[1]) {
			t.Errorf("hour %v: users %v shown %v, want %v and %v", h.Hour, users, shown, w[0], w[1])
		}
	}
	again, err := f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if again[0] != 3 {
		t.Errorf("rewritten as version %d, want 3", again[0])
	}
}

func TestPeriods(t *testing.T) {
	sat := at("2026-03-14T15:04:05.123456Z") // a Saturday
	for _, c := range []struct {
		p          rollup.Period
		start, end string
		hours      int
	}{
		{rollup.PeriodHour, "2026-03-14T15:00:00Z", "2026-03-14T16:00:00Z", 1},
		{rollup.PeriodDay, "2026-03-14T00:00:00Z", "2026-03-15T00:00:00Z", 24},
		{rollup.PeriodWeek, "2026-03-09T00:00:00Z", "2026-03-16T00:00:00Z", 168},
		{rollup.PeriodMonth, "2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z", 744},
	} {
		start, end := c.p.Bounds(sat)
		hours := c.p.Hours(sat)
		if start != at(c.start) || end != at(c.end) || len(hours) != c.hours || hours[0] != start || hours[len(hours)-1] != end.Add(-time.Hour) {
			t.Errorf("period %d: [%v, %v) with %d hours, want [%s, %s) with %d", c.p, start, end, len(hours), c.start, c.end, c.hours)
		}
	}
	if start, _ := rollup.PeriodWeek.Bounds(at("2026-03-16T00:00:00Z")); start != at("2026-03-16T00:00:00Z") {
		t.Errorf("a Monday's week starts %v", start)
	}
	if start, _ := rollup.PeriodWeek.Bounds(at("2026-03-15T23:59:59Z")); start != at("2026-03-09T00:00:00Z") {
		t.Errorf("a Sunday's week starts %v", start)
	}
}

// Once everyone is offline and their days are final, the fold holds nothing per user,
// and only the minutes and hour that are not final yet.
func TestMemoryIsBounded(t *testing.T) {
	s := newShard(t)
	base := at("2026-03-14T10:00:00Z")
	for i := range 1000 {
		u := fmt.Sprintf("u%d", i)
		s.change(u, on, base.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano))
	}
	for i := range 1000 {
		u := fmt.Sprintf("u%d", i)
		s.change(u, off, base.Add(2*time.Hour+time.Duration(i)*time.Second).Format(time.RFC3339Nano))
	}
	s.f.Advance(at("2026-03-14T13:00:00Z"))
	s.f.Flush()
	if st := s.f.Stats(); st.Users != 1000 {
		t.Errorf("%d users held while their day runs, want 1000", st.Users)
	}
	s.f.Advance(at("2026-03-15T00:10:00.000001Z"))
	s.f.Flush()
	st := s.f.Stats()
	if st.Users != 0 || st.Minutes > 11 || st.Hours > 1 {
		t.Errorf("holds %d users, %d minutes, %d hours; want none, ≤11, ≤1", st.Users, st.Minutes, st.Hours)
	}
	snap, err := s.f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap) > 200 {
		t.Errorf("checkpoint of an empty shard is %d bytes", len(snap))
	}
}

func TestUnmarshalRefuses(t *testing.T) {
	s := newShard(t)
	s.change("u1", on, "2026-03-14T10:00:00Z")
	snap, err := s.f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := rollup.New(rollup.Config{Shard: 4})
	if err := other.UnmarshalBinary(snap); err == nil {
		t.Error("restored another shard's checkpoint")
	}
	for i := range len(snap) {
		f, _ := rollup.New(rollup.Config{Shard: 3})
		if err := f.UnmarshalBinary(snap[:i]); err == nil {
			t.Errorf("restored a checkpoint cut to %d of %d bytes", i, len(snap))
		}
	}
	f, _ := rollup.New(rollup.Config{Shard: 3})
	if err := f.UnmarshalBinary(append(bytes.Clone(snap), 0)); err == nil {
		t.Error("restored a checkpoint with trailing bytes")
	}
	if _, err := rollup.New(rollup.Config{Lateness: -time.Second}); err == nil {
		t.Error("accepted a negative lateness")
	}
}

// FuzzUnmarshalBinary: a checkpoint read back from storage never panics the decoder,
// and whatever it accepts encodes to a checkpoint that reads back the same.
func FuzzUnmarshalBinary(f *testing.F) {
	r := genRunForFuzz()
	fold, _ := rollup.New(rollup.Config{Shard: 7, Lateness: time.Duration(lateness) * time.Microsecond})
	for i, o := range r.ops {
		switch o.kind {
		case opApply:
			fold.Apply(o.c)
		case opAdvance:
			fold.Advance(o.t)
		case opFlush:
			fold.Flush()
		}
		if i%50 == 0 {
			snap, err := fold.MarshalBinary()
			if err != nil {
				f.Fatal(err)
			}
			f.Add(snap)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, _ := rollup.New(rollup.Config{Shard: 7})
		if a.UnmarshalBinary(data) != nil {
			return
		}
		snap, err := a.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := rollup.New(rollup.Config{Shard: 7})
		if err := b.UnmarshalBinary(snap); err != nil {
			t.Fatalf("re-encoded checkpoint refused: %v", err)
		}
		again, err := b.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(snap, again) {
			t.Fatal("re-encoded checkpoint does not read back the same")
		}
	})
}
