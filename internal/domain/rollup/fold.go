package rollup

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// DefaultLateness is twice the largest distance ingest allows between a client's clock
// and its own (PULSE_INGEST_MAX_SKEW, 5 min): two users' changes can be that far apart
// in changed_at in the wrong order.
const DefaultLateness = 10 * time.Minute

// Config is what a Fold needs to know about its shard.
type Config struct {
	// Shard is the partition of presence.changes being folded; it keys Minute and
	// Hour rows.
	Shard int32
	// Lateness bounds how far out of changed_at order two users' changes may arrive;
	// DefaultLateness when zero.
	Lateness time.Duration
	// SnapshotEvery is the time between two point-in-time Snapshots; it divides an
	// hour. DefaultSnapshotEvery when zero.
	SnapshotEvery time.Duration
}

// DefaultSnapshotEvery is the default time between two point-in-time Snapshots.
const DefaultSnapshotEvery = time.Minute

// Change is one effective status transition of a user, as presence.changes carries it.
type Change struct {
	UserID string
	// Index is the user's dense index in the shard (guarantee 8); it never changes.
	Index uint32
	// Previous is checked against the status the fold holds for the user, which wins.
	Previous, Current presence.Status
	// At is changed_at; strictly increasing per user.
	At time.Time
}

// Stats counts what the fold did with its input, cumulatively across checkpoints, and
// how much state it holds now.
type Stats struct {
	// Applied changes moved a user to a new status.
	Applied uint64
	// Late changes came from before the frontier and were moved up to it.
	Late uint64
	// Dropped changes were not after their user's previous change (repeats), had no
	// valid status or time, or were dated more than a day past the fold's time.
	Dropped uint64
	// Mismatched changes had a Previous other than the status the fold held; those
	// whose Current equals that status change nothing.
	Mismatched uint64

	// Users, Minutes and Hours are held in memory now.
	Users, Minutes, Hours int
}

// Microseconds, the unit of every time the fold keeps.
const (
	usSecond = int64(time.Second / time.Microsecond)
	usMinute = 60 * usSecond
	usHour   = 60 * usMinute
	usDay    = 24 * usHour
)

// maxAhead is how far past the fold's time a change may be dated: ingest keeps event
// times within minutes of its clock, so a change a day ahead is corrupt.
const maxAhead = usDay

// noFrontier is the frontier before any Advance: nothing is final, nothing is late.
// Far from MinInt64 so that arithmetic on it cannot overflow.
const noFrontier = math.MinInt64 / 4

// Fold is one shard's rollup state. It is not safe for concurrent use: the history
// service gives each partition one goroutine.
type Fold struct {
	shard    int32
	lateness int64

	started   bool
	watermark int64 // largest Advance
	frontier  int64 // largest watermark - lateness: spans ending at or before it are final
	now       int64 // the fold's time: max(watermark, every change time applied)
	stats     Stats

	users map[string]*user
	dirty []*user // touched since the last Flush
	// alive holds the users present now, shown those online or idle now: the users
	// a reader may see (an invisible user reads as offline).
	alive, shown *roaring.Bitmap

	// Per-second count changes of the unfinished minutes [minStart, minStart+len(mins)),
	// on top of base, the counts before minStart.
	minStart int64
	mins     []minute
	minDirty int64 // first minute to hand out again; math.MaxInt64 when none
	base     [3]int64

	// Users present in the unfinished hours [hourStart, hourStart+len(hours)).
	hourStart int64
	hours     []hour

	// Days before dayDone are final and handed out; days before dayBegun have had the
	// users who entered them present written out.
	dayDone, dayBegun int64

	closed []closedSession // since the last Flush

	pit pit // point in time (pointintime.go)
}

// minute holds, per second, how many users entered (+) or left (-) each status.
type minute [60][3]int32

type hour struct {
	users *roaring.Bitmap // present at some instant of the hour
	shown *roaring.Bitmap // online or idle at some instant of the hour
	dirty bool
}

type closedSession struct {
	user       string
	start, end int64
	spent      [3]int64
}

// user is what the fold keeps of a user with an unfinished session or day.
type user struct {
	id     string
	index  uint32
	status presence.Status
	since  int64 // effective time of the latest change
	last   int64 // changed_at as received of the latest change: repeats are at or before it

	// The open session (status not offline): its start and the time spent in each
	// status up to since.
	sessStart int64
	spent     [3]int64
	sessDirty bool

	inDirty bool
	days    []dayPart // unfinished days touched by a closed span or a change, by day
}

// dayPart is a user's day from the spans that ended by the user's latest change; the
// open span since then is added when the row is made.
type dayPart struct {
	day        int64
	spent      [3]int64
	sessions   int64
	first      int64 // first present instant, valid when seen
	last       int64 // last present instant, valid when seen
	lastStatus presence.Status
	sess       int64 // start of the latest session counted, valid when hasSess
	seen       bool
	hasSess    bool
	dirty      bool
}

// New is an empty fold for one shard.
func New(cfg Config) (*Fold, error) {
	if cfg.Lateness < 0 {
		return nil, errors.New("rollup: lateness must not be negative")
	}
	if cfg.Lateness == 0 {
		cfg.Lateness = DefaultLateness
	}
	if cfg.SnapshotEvery == 0 {
		cfg.SnapshotEvery = DefaultSnapshotEvery
	}
	if cfg.SnapshotEvery < time.Microsecond || time.Hour%cfg.SnapshotEvery != 0 {
		return nil, fmt.Errorf("rollup: snapshot interval %v does not divide an hour", cfg.SnapshotEvery)
	}
	return &Fold{
		shard:     cfg.Shard,
		lateness:  int64(cfg.Lateness / time.Microsecond),
		watermark: noFrontier,
		frontier:  noFrontier,
		now:       noFrontier,
		users:     make(map[string]*user),
		alive:     roaring.New(),
		shown:     roaring.New(),
		minDirty:  math.MaxInt64,
		pit:       newPIT(cfg.SnapshotEvery),
	}, nil
}

// slot is a status's place in per-status arrays; -1 for offline.
func slot(s presence.Status) int {
	switch s {
	case presence.Online:
		return 0
	case presence.Idle:
		return 1
	case presence.Invisible:
		return 2
	}
	return -1
}

func present(s presence.Status) bool { return slot(s) >= 0 }

// visible is whether a reader sees s as present: online or idle.
func visible(s presence.Status) bool { return s == presence.Online || s == presence.Idle }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func valid(s presence.Status) bool {
	return s == presence.Offline || present(s)
}

// Watermark is the largest time given to Advance (zero before any).
func (f *Fold) Watermark() time.Time {
	if f.watermark == noFrontier {
		return time.Time{}
	}
	return time.UnixMicro(f.watermark).UTC()
}

// Frontier is the time before which everything is final (zero before any Advance).
func (f *Fold) Frontier() time.Time {
	if f.frontier == noFrontier {
		return time.Time{}
	}
	return time.UnixMicro(f.frontier).UTC()
}

// Stats is what the fold did and holds.
func (f *Fold) Stats() Stats {
	s := f.stats
	s.Users, s.Minutes, s.Hours = len(f.users), len(f.mins), len(f.hours)
	return s
}

// Advance moves the watermark to t: the caller promises that every change applied from
// now on has At ≥ t - Lateness. An earlier t than before changes nothing.
func (f *Fold) Advance(t time.Time) {
	w := t.UnixMicro()
	if w <= f.watermark {
		return
	}
	f.watermark = w
	f.frontier = max(f.frontier, w-f.lateness)
	f.now = max(f.now, w)
	f.extend(f.now)
	f.startPIT()
}

// Apply folds in c, the next change of the shard in log order. Until the first
// Advance, the first change's time stands in for the watermark, so that the fold has
// a frontier from the start.
func (f *Fold) Apply(c Change) {
	if !valid(c.Current) || c.At.IsZero() {
		f.stats.Dropped++
		return
	}
	raw := c.At.UnixMicro()
	if f.watermark == noFrontier {
		f.Advance(c.At)
	}
	if raw > f.now+maxAhead {
		// No clock skew explains it, and believing it would make the fold hold every
		// minute up to it.
		f.stats.Dropped++
		return
	}
	u := f.users[c.UserID]
	if u != nil && raw <= u.last {
		f.stats.Dropped++
		return
	}
	prev := presence.Offline
	if u != nil {
		prev = u.status
	}
	if c.Previous != prev || c.Current == prev {
		f.stats.Mismatched++
	}
	if c.Current == prev {
		if u != nil {
			u.last = raw
		}
		return
	}
	at := raw
	if at < f.frontier {
		at = f.frontier
		f.stats.Late++
	}
	newUser := u == nil
	if newUser {
		u = &user{id: c.UserID, status: presence.Offline, since: noFrontier}
		f.users[c.UserID] = u
	} else if at <= u.since {
		// Only a change moved up to the frontier can meet its predecessor there; keep
		// the user's changes strictly ordered as the aggregator does.
		at = u.since + 1
	}
	f.stats.Applied++
	f.now = max(f.now, at)
	f.extend(at)
	f.extend(f.now)
	f.recordPIT(c.UserID, c.Index, prev, c.Current, at, newUser)
	f.apply(u, c.Index, prev, c.Current, at)
	u.last = raw
	if !u.inDirty {
		u.inDirty = true
		f.dirty = append(f.dirty, u)
	}
}

func (f *Fold) apply(u *user, index uint32, prev, cur presence.Status, at int64) {
	m := floorDiv(at, usMinute)
	sec := floorDiv(at, usSecond) - m*60
	d := &f.mins[m-f.minStart][sec]
	if i := slot(prev); i >= 0 {
		d[i]--
	}
	if i := slot(cur); i >= 0 {
		d[i]++
	}
	f.minDirty = min(f.minDirty, m)

	if i := slot(prev); i >= 0 {
		u.spent[i] += at - u.since
		f.addSpan(u, u.since, at, prev)
	}
	switch {
	case !present(prev) && present(cur):
		u.index = index
		u.sessStart = at
		u.spent = [3]int64{}
		f.alive.Add(u.index)
		f.enterHours(at, u.index, hourUsers)
	case present(prev) && !present(cur):
		f.closed = append(f.closed, closedSession{user: u.id, start: u.sessStart, end: at, spent: u.spent})
		u.sessDirty = false // the closed row replaces the open one
		f.alive.Remove(u.index)
		f.leaveHours(at, u.index, hourUsers)
	}
	switch {
	case !visible(prev) && visible(cur):
		f.shown.Add(u.index)
		f.enterHours(at, u.index, hourShown)
	case visible(prev) && !visible(cur):
		f.shown.Remove(u.index)
		f.leaveHours(at, u.index, hourShown)
	}
	if present(cur) {
		u.sessDirty = true
		f.part(u, floorDiv(at, usDay)).dirty = true
	}
	u.status, u.since = cur, at
}

func hourUsers(h *hour) *roaring.Bitmap { return h.users }
func hourShown(h *hour) *roaring.Bitmap { return h.shown }

// enterHours adds index to the set of every held hour from at's on.
func (f *Fold) enterHours(at int64, index uint32, set func(*hour) *roaring.Bitmap) {
	for h := floorDiv(at, usHour) - f.hourStart; h < int64(len(f.hours)); h++ {
		if set(&f.hours[h]).CheckedAdd(index) {
			f.hours[h].dirty = true
		}
	}
}

// leaveHours removes index from the set of the held hours after a span that ended at
// at, and from at's own hour if the span ended exactly where that hour starts.
func (f *Fold) leaveHours(at int64, index uint32, set func(*hour) *roaring.Bitmap) {
	h := floorDiv(at, usHour)
	if at > h*usHour {
		h++
	}
	for h -= f.hourStart; h < int64(len(f.hours)); h++ {
		if set(&f.hours[h]).CheckedRemove(index) {
			f.hours[h].dirty = true
		}
	}
}

// addSpan adds the span [from, to) the user spent in s to the unfinished days it
// overlaps. Its part in final days was written when they were finalised, counted the
// same way then because the span was still open and ran past them.
func (f *Fold) addSpan(u *user, from, to int64, s presence.Status) {
	i := slot(s)
	for d := max(floorDiv(from, usDay), f.dayDone); d*usDay < to; d++ {
		lo, hi := max(from, d*usDay), min(to, (d+1)*usDay)
		p := f.part(u, d)
		p.spent[i] += hi - lo
		if !p.seen {
			p.seen, p.first = true, lo
		}
		p.last, p.lastStatus = hi-1, s
		if !p.hasSess || p.sess != u.sessStart {
			p.hasSess, p.sess = true, u.sessStart
			p.sessions++
		}
		p.dirty = true
	}
}

// part is the user's part of day d, added in order if missing.
func (f *Fold) part(u *user, d int64) *dayPart {
	i, found := slices.BinarySearchFunc(u.days, d, func(p dayPart, d int64) int { return cmp.Compare(p.day, d) })
	if !found {
		u.days = slices.Insert(u.days, i, dayPart{day: d})
	}
	return &u.days[i]
}

// extend makes sure the unfinished minutes, hours and days reach t, creating missing
// ones before or after those held. Hours created after the others hold the users
// present now, whose open spans run through them.
func (f *Fold) extend(t int64) {
	m, h, d := floorDiv(t, usMinute), floorDiv(t, usHour), floorDiv(t, usDay)
	if !f.started {
		f.started = true
		f.minStart, f.hourStart = m, h
		f.dayDone, f.dayBegun = d, d
	}
	// Earlier buckets appear only for a change from before any time the fold has seen;
	// nobody was present in them yet.
	if m < f.minStart {
		f.mins = slices.Insert(f.mins, 0, make([]minute, f.minStart-m)...)
		f.minStart = m
		f.minDirty = min(f.minDirty, m)
	}
	if end := f.minStart + int64(len(f.mins)); m >= end {
		f.mins = append(f.mins, make([]minute, m+1-end)...)
		f.minDirty = min(f.minDirty, end)
	}
	if h < f.hourStart {
		add := make([]hour, f.hourStart-h)
		for i := range add {
			add[i] = hour{users: roaring.New(), shown: roaring.New(), dirty: true}
		}
		f.hours = slices.Insert(f.hours, 0, add...)
		f.hourStart = h
	}
	for end := f.hourStart + int64(len(f.hours)); h >= end; end++ {
		f.hours = append(f.hours, hour{users: f.alive.Clone(), shown: f.shown.Clone(), dirty: true})
	}
	// A day before the first one seen only gets parts from changes; dayBegun stays, as
	// nobody can have entered such a day present.
	f.dayDone = min(f.dayDone, d)
}

// Flush hands out every row that may have changed since the last Flush and drops the
// state of what became final. The history service writes the rows before it commits
// the offsets (and the checkpoint) that cover them.
func (f *Fold) Flush() Rows {
	var r Rows
	if !f.started {
		return r
	}
	// Rows come out in key order: visiting the touched users in id order makes most of
	// them so without sorting the rows themselves, which are large.
	slices.SortFunc(f.dirty, func(a, b *user) int { return cmp.Compare(a.id, b.id) })
	f.flushMinutes(&r)
	f.flushHours(&r)
	f.flushSessions(&r)
	f.flushDays(&r)
	f.flushPIT(&r)
	for _, u := range f.dirty {
		u.inDirty = false
		f.forgetIfDone(u)
	}
	clear(f.dirty)
	f.dirty = f.dirty[:0]
	return r
}

func (f *Fold) forgetIfDone(u *user) {
	if !present(u.status) && len(u.days) == 0 && !u.inDirty {
		delete(f.users, u.id)
	}
}

func (f *Fold) flushMinutes(r *Rows) {
	run := f.base
	for i := range f.mins {
		m := f.minStart + int64(i)
		var row *Minute
		if m >= f.minDirty {
			r.Minutes = append(r.Minutes, Minute{Shard: f.shard, Minute: time.UnixMicro(m * usMinute).UTC()})
			row = &r.Minutes[len(r.Minutes)-1]
		}
		for s := range f.mins[i] {
			for k := range run {
				run[k] += int64(f.mins[i][s][k])
			}
			if row != nil {
				row.Online[s], row.Idle[s], row.Invisible[s] = uint32(run[0]), uint32(run[1]), uint32(run[2])
			}
		}
	}
	f.minDirty = math.MaxInt64
	done := 0
	for done < len(f.mins) && (f.minStart+int64(done)+1)*usMinute <= f.frontier {
		for s := range f.mins[done] {
			for k := range f.base {
				f.base[k] += int64(f.mins[done][s][k])
			}
		}
		done++
	}
	f.mins = slices.Delete(f.mins, 0, done)
	f.minStart += int64(done)
}

func (f *Fold) flushHours(r *Rows) {
	for i := range f.hours {
		if !f.hours[i].dirty {
			continue
		}
		users, shown := f.hours[i].users.Clone(), f.hours[i].shown.Clone()
		users.RunOptimize()
		shown.RunOptimize()
		r.Hours = append(r.Hours, Hour{Shard: f.shard, Hour: time.UnixMicro((f.hourStart + int64(i)) * usHour).UTC(), Users: users, Shown: shown})
		f.hours[i].dirty = false
	}
	done := 0
	for done < len(f.hours) && (f.hourStart+int64(done)+1)*usHour <= f.frontier {
		done++
	}
	clear(f.hours[:done])
	f.hours = slices.Delete(f.hours, 0, done)
	f.hourStart += int64(done)
}

// flushSessions merges the closed sessions with the open ones of the touched users,
// both in (user, start) order; an open session starts after every closed one of its
// user.
func (f *Fold) flushSessions(r *Rows) {
	slices.SortFunc(f.closed, func(a, b closedSession) int {
		return cmp.Or(cmp.Compare(a.user, b.user), cmp.Compare(a.start, b.start))
	})
	closed := f.closed
	for _, u := range f.dirty {
		for len(closed) > 0 && closed[0].user <= u.id {
			r.Sessions = append(r.Sessions, closed[0].row())
			closed = closed[1:]
		}
		if !u.sessDirty {
			continue
		}
		u.sessDirty = false
		spent := u.spent
		spent[slot(u.status)] += f.now - u.since
		r.Sessions = append(r.Sessions, Session{
			UserID: u.id, Start: time.UnixMicro(u.sessStart).UTC(),
			Online: micros(spent[0]), Idle: micros(spent[1]), Invisible: micros(spent[2]),
			Open: true, Through: time.UnixMicro(f.now).UTC(), Status: u.status,
		})
	}
	for _, c := range closed {
		r.Sessions = append(r.Sessions, c.row())
	}
	clear(f.closed)
	f.closed = f.closed[:0]
}

func (c *closedSession) row() Session {
	end := time.UnixMicro(c.end).UTC()
	return Session{
		UserID: c.user, Start: time.UnixMicro(c.start).UTC(), End: end,
		Online: micros(c.spent[0]), Idle: micros(c.spent[1]), Invisible: micros(c.spent[2]),
		Through: end, Status: presence.Offline,
	}
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

func (f *Fold) flushDays(r *Rows) {
	done := max(f.dayDone, floorDiv(f.frontier, usDay)) // days before it are final
	lastBegun := floorDiv(f.frontier-1, usDay)          // days that began before the frontier
	for _, u := range f.dirty {
		for i := range u.days {
			if p := &u.days[i]; p.dirty && p.day >= done {
				r.Days = append(r.Days, f.dayRow(u, p.day, p))
				p.dirty = false
			}
		}
	}
	firstBegun := max(f.dayBegun, done)
	if done == f.dayDone && firstBegun > lastBegun {
		return
	}
	// Once a day: the days that became final, and the day that began before the
	// frontier, for which no change of a user present all along will come any more.
	for _, u := range f.users {
		sinceDay := floorDiv(u.since, usDay)
		sinceDayWritten := false
		n := 0
		for _, p := range u.days {
			if p.day >= done {
				u.days[n] = p
				n++
				continue
			}
			r.Days = append(r.Days, f.dayRow(u, p.day, &p))
			sinceDayWritten = sinceDayWritten || p.day == sinceDay
		}
		clear(u.days[n:])
		u.days = u.days[:n]
		if present(u.status) {
			for d := max(f.dayDone, sinceDay); d < done; d++ {
				if d != sinceDay || !sinceDayWritten {
					r.Days = append(r.Days, f.dayRow(u, d, nil))
				}
			}
			for d := max(firstBegun, sinceDay+1); d <= lastBegun; d++ {
				r.Days = append(r.Days, f.dayRow(u, d, nil))
			}
		}
		f.forgetIfDone(u)
	}
	f.dayDone = done
	f.dayBegun = max(firstBegun, lastBegun+1)
	slices.SortFunc(r.Days, func(a, b Day) int {
		return cmp.Or(cmp.Compare(a.UserID, b.UserID), a.Day.Compare(b.Day))
	})
}

// dayRow is the user's row for day d: the part p from spans already closed (nil when
// none), plus the open span up to the fold's time.
func (f *Fold) dayRow(u *user, d int64, p *dayPart) Day {
	start, end := d*usDay, (d+1)*usDay
	through := min(f.now, end)
	var q dayPart
	if p != nil {
		q = *p
	}
	if i := slot(u.status); i >= 0 && u.since < through {
		lo := max(u.since, start)
		q.spent[i] += through - lo
		if !q.seen {
			q.seen, q.first = true, lo
		}
		q.last = through - 1
		if !q.hasSess || q.sess != u.sessStart {
			q.sessions++
		}
	}
	status := u.status
	if u.since >= end {
		// The user changed since the day ended; their status at its last instant is
		// that of the span that reached it, if one did.
		status = presence.Offline
		if p != nil && p.seen && p.last == end-1 {
			status = p.lastStatus
		}
	}
	row := Day{
		UserID: u.id, Day: time.UnixMicro(start).UTC(),
		Online: micros(q.spent[0]), Idle: micros(q.spent[1]), Invisible: micros(q.spent[2]),
		Sessions: int(q.sessions), Through: time.UnixMicro(through).UTC(), Status: status,
	}
	if q.seen {
		row.FirstSeen, row.LastSeen = time.UnixMicro(q.first).UTC(), time.UnixMicro(q.last).UTC()
	}
	return row
}
