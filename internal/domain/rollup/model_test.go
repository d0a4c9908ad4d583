package rollup_test

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/rollup"
)

// The model below is written from the package comment's definitions alone: it knows
// every user's whole change list at once and evaluates each definition directly
// (status at an instant by search, spans clipped to each day and hour, a time-ordered
// sweep for the per-second samples), with no lateness, buffers, finality or state.

const (
	usSecond = int64(time.Second / time.Microsecond)
	usMinute = 60 * usSecond
	usHour   = 60 * usMinute
	usDay    = 24 * usHour
	skew     = 5 * usMinute // ingest's largest clock skew
	lateness = 2 * skew
)

var statuses = []presence.Status{presence.Offline, presence.Online, presence.Idle, presence.Invisible}

type mchange struct {
	at     int64
	status presence.Status
}

type opKind uint8

const (
	opApply opKind = iota
	opAdvance
	opFlush
)

type op struct {
	kind opKind
	c    rollup.Change
	t    time.Time
}

// run is a generated shard history and the calls that feed it to a fold.
type run struct {
	ids     []string
	index   []uint32
	changes [][]mchange // per user, in time order
	ops     []op
	first   int64 // time of the first call: where the fold's buckets begin
	final   int64 // the last Advance: the fold's time at the end
}

func ts(us int64) time.Time { return time.UnixMicro(us).UTC() }

// genRun makes a history of n users over two and a half days across two midnights, with
// gaps from a microsecond to thirty hours, times often on minute, hour and day edges,
// and an arrival order in which each change is up to `skew` early or late, as clients'
// clocks make it. The watermark is advanced as tightly as the bound allows.
func genRun(rng *rand.Rand, n int) *run {
	r := &run{}
	day0 := time.Date(2026, 3, 14, 0, 0, 0, 0, time.UTC).UnixMicro()
	t0 := day0 + 21*usHour + rng.Int64N(usHour)
	tEnd := t0 + 2*usDay + 6*usHour
	type arrival struct {
		arr       int64
		user, seq int
	}
	var arrivals []arrival
	perm := rng.Perm(n * 3)
	for u := range n {
		r.ids = append(r.ids, fmt.Sprintf("user-%x", rng.Uint64()))
		r.index = append(r.index, uint32(perm[u]))
		var list []mchange
		cur := presence.Offline
		t := t0 + rng.Int64N(3*usHour)
		prevArr := int64(0)
		for t < tEnd {
			next := cur
			for next == cur {
				next = statuses[rng.IntN(len(statuses))]
				if cur == presence.Offline && rng.IntN(2) == 0 {
					next = presence.Online
				}
			}
			list = append(list, mchange{t, next})
			jitter := rng.Int64N(2*skew+1) - skew
			if rng.IntN(10) == 0 {
				jitter = skew * (2*rng.Int64N(2) - 1)
			}
			arr := max(t+jitter, prevArr)
			prevArr = arr
			arrivals = append(arrivals, arrival{arr, u, len(list) - 1})
			cur = next

			var gap int64
			switch p := rng.IntN(10); {
			case p < 4:
				gap = 1 + rng.Int64N(2*usSecond)
			case p < 7:
				gap = 1 + rng.Int64N(20*usMinute)
			case p < 9:
				gap = 1 + rng.Int64N(3*usHour)
			default:
				gap = 1 + rng.Int64N(30*usHour)
			}
			next0 := t + gap
			if rng.IntN(8) == 0 {
				edge := []int64{usSecond, usMinute, usHour, usDay}[rng.IntN(4)]
				snapped := (next0/edge+1)*edge - rng.Int64N(2) // on the edge or 1 µs before
				if snapped > t {
					next0 = snapped
				}
			}
			t = next0
		}
		r.changes = append(r.changes, list)
	}
	slices.SortFunc(arrivals, func(a, b arrival) int {
		return cmp.Or(cmp.Compare(a.arr, b.arr), cmp.Compare(a.user, b.user), cmp.Compare(a.seq, b.seq))
	})

	r.first = arrivals[0].arr
	for i, a := range arrivals {
		c := r.changes[a.user][a.seq]
		prev := presence.Offline
		if a.seq > 0 {
			prev = r.changes[a.user][a.seq-1].status
		}
		if i == 0 {
			// Start with an Advance so that the fold's buckets begin before some changes.
			r.ops = append(r.ops, op{kind: opAdvance, t: ts(a.arr)})
		}
		r.ops = append(r.ops, op{kind: opApply, c: rollup.Change{UserID: r.ids[a.user], Index: r.index[a.user], Previous: prev, Current: c.status, At: ts(c.at)}})
		r.first = min(r.first, c.at)
		if rng.IntN(3) == 0 {
			// Every later change arrives no earlier than a.arr and is at most skew
			// early: the watermark may run lateness-skew ahead of the arrivals.
			d := rng.Int64N(lateness - skew + 1)
			if rng.IntN(4) == 0 {
				d = lateness - skew
			}
			r.ops = append(r.ops, op{kind: opAdvance, t: ts(a.arr + d)})
		}
		if rng.IntN(25) == 0 {
			r.ops = append(r.ops, op{kind: opFlush})
		}
	}
	// Far enough on that every day with a change is final, and in the middle of a day
	// that has begun before the frontier.
	r.final = (tEnd+lateness)/usDay*usDay + usDay + 12*usHour
	r.ops = append(r.ops, op{kind: opAdvance, t: ts(r.final)}, op{kind: opFlush})
	return r
}

// do runs ops on f and returns the rows of each Flush.
func do(t testing.TB, f *rollup.Fold, ops []op) []rollup.Rows {
	t.Helper()
	var out []rollup.Rows
	for _, o := range ops {
		switch o.kind {
		case opApply:
			f.Apply(o.c)
		case opAdvance:
			f.Advance(o.t)
		case opFlush:
			out = append(out, f.Flush())
		}
	}
	return out
}

func newFold(t testing.TB) *rollup.Fold {
	t.Helper()
	f, err := rollup.New(rollup.Config{Shard: 7, Lateness: time.Duration(lateness) * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// table is what the history tables hold after the rows were upserted in order.
type table struct {
	sessions map[string]rollup.Session
	days     map[string]rollup.Day
	minutes  map[int64]rollup.Minute
	hours    map[int64][]uint32
	shown    map[int64][]uint32
}

func upsert(t *testing.T, flushes []rollup.Rows) table {
	t.Helper()
	tb := table{map[string]rollup.Session{}, map[string]rollup.Day{}, map[int64]rollup.Minute{}, map[int64][]uint32{}, map[int64][]uint32{}}
	for i, r := range flushes {
		if !slices.IsSortedFunc(r.Sessions, func(a, b rollup.Session) int {
			return cmp.Or(cmp.Compare(a.UserID, b.UserID), a.Start.Compare(b.Start))
		}) || !slices.IsSortedFunc(r.Days, func(a, b rollup.Day) int {
			return cmp.Or(cmp.Compare(a.UserID, b.UserID), a.Day.Compare(b.Day))
		}) || !slices.IsSortedFunc(r.Minutes, func(a, b rollup.Minute) int { return a.Minute.Compare(b.Minute) }) ||
			!slices.IsSortedFunc(r.Hours, func(a, b rollup.Hour) int { return a.Hour.Compare(b.Hour) }) {
			t.Fatalf("flush %d: rows out of key order", i)
		}
		for _, s := range r.Sessions {
			tb.sessions[s.UserID+" "+s.Start.Format(time.RFC3339Nano)] = s
		}
		for _, d := range r.Days {
			tb.days[d.UserID+" "+d.Day.Format(time.RFC3339Nano)] = d
		}
		for _, m := range r.Minutes {
			if m.Shard != 7 {
				t.Fatalf("minute row of shard %d", m.Shard)
			}
			tb.minutes[m.Minute.UnixMicro()] = m
		}
		for _, h := range r.Hours {
			tb.hours[h.Hour.UnixMicro()] = h.Users.ToArray()
			tb.shown[h.Hour.UnixMicro()] = h.Shown.ToArray()
		}
	}
	return tb
}

// statusAt is the status set by the latest change at or before x.
func statusAt(list []mchange, x int64) presence.Status {
	i := sort.Search(len(list), func(i int) bool { return list[i].at > x })
	if i == 0 {
		return presence.Offline
	}
	return list[i-1].status
}

func isPresent(s presence.Status) bool { return s != presence.Offline }

// usersIn is the sorted indexes of the users in a status that counts at some instant
// of [start, end).
func (r *run) usersIn(start, end int64, counts func(presence.Status) bool) []uint32 {
	users := []uint32{}
	for u, list := range r.changes {
		for k, c := range list {
			e := int64(1 << 62)
			if k+1 < len(list) {
				e = list[k+1].at
			}
			if counts(c.status) && max(c.at, start) < min(e, end) {
				users = append(users, r.index[u])
				break
			}
		}
	}
	slices.Sort(users)
	return users
}

func addTo(d *rollup.Day, s presence.Status, us int64) {
	switch s {
	case presence.Online:
		d.Online += time.Duration(us) * time.Microsecond
	case presence.Idle:
		d.Idle += time.Duration(us) * time.Microsecond
	case presence.Invisible:
		d.Invisible += time.Duration(us) * time.Microsecond
	}
}

// model evaluates the definitions as of the fold's final time.
func model(r *run) table {
	now := r.final
	tb := table{map[string]rollup.Session{}, map[string]rollup.Day{}, map[int64]rollup.Minute{}, map[int64][]uint32{}, map[int64][]uint32{}}
	for u, list := range r.changes {
		id := r.ids[u]
		end := func(k int) int64 { // end of the span that starts at change k
			if k+1 < len(list) {
				return list[k+1].at
			}
			return 1 << 62
		}
		// Sessions, and for each span the start of its session.
		sessOf := make([]int64, len(list))
		for k := 0; k < len(list); k++ {
			if !isPresent(list[k].status) || (k > 0 && isPresent(list[k-1].status)) {
				if k > 0 && isPresent(list[k].status) {
					sessOf[k] = sessOf[k-1]
				}
				continue
			}
			s := rollup.Session{UserID: id, Start: ts(list[k].at)}
			var tally rollup.Day
			j := k
			for ; j < len(list) && isPresent(list[j].status); j++ {
				sessOf[j] = list[k].at
				addTo(&tally, list[j].status, min(end(j), now)-list[j].at)
			}
			s.Online, s.Idle, s.Invisible = tally.Online, tally.Idle, tally.Invisible
			if j < len(list) {
				s.End, s.Through, s.Status = ts(list[j].at), ts(list[j].at), presence.Offline
			} else {
				s.Open, s.Through, s.Status = true, ts(now), list[j-1].status
			}
			tb.sessions[id+" "+s.Start.Format(time.RFC3339Nano)] = s
			k = j - 1
		}
		// Days.
		for d := r.first / usDay; d <= now/usDay; d++ {
			start, dend := d*usDay, (d+1)*usDay
			through := min(dend, now)
			row := rollup.Day{UserID: id, Day: ts(start), Through: ts(through)}
			first, last := int64(-1), int64(-1)
			seen := map[int64]bool{}
			for k, c := range list {
				lo, hi := max(c.at, start), min(end(k), through)
				if !isPresent(c.status) || lo >= hi {
					continue
				}
				addTo(&row, c.status, hi-lo)
				if first < 0 {
					first = lo
				}
				last = hi - 1
				seen[sessOf[k]] = true
			}
			if len(seen) == 0 {
				continue
			}
			row.Sessions = len(seen)
			row.FirstSeen, row.LastSeen = ts(first), ts(last)
			if through < dend {
				row.Status = statusAt(list, through)
			} else {
				row.Status = statusAt(list, dend-1)
			}
			tb.days[id+" "+row.Day.Format(time.RFC3339Nano)] = row
		}
	}

	// Concurrency: sweep the changes of all users in time order past each second's end.
	type ev struct {
		at   int64
		user int
		st   presence.Status
	}
	var evs []ev
	for u, list := range r.changes {
		for _, c := range list {
			evs = append(evs, ev{c.at, u, c.status})
		}
	}
	slices.SortFunc(evs, func(a, b ev) int { return cmp.Compare(a.at, b.at) })
	cur := make([]presence.Status, len(r.changes))
	for i := range cur {
		cur[i] = presence.Offline
	}
	count := map[presence.Status]uint32{}
	next := 0
	for m := floor(r.first, usMinute); m <= floor(now, usMinute); m++ {
		row := rollup.Minute{Shard: 7, Minute: ts(m * usMinute)}
		for s := range 60 {
			sample := m*usMinute + int64(s)*usSecond + usSecond - 1
			for next < len(evs) && evs[next].at <= sample {
				e := evs[next]
				count[cur[e.user]]--
				count[e.st]++
				cur[e.user] = e.st
				next++
			}
			row.Online[s], row.Idle[s], row.Invisible[s] = count[presence.Online], count[presence.Idle], count[presence.Invisible]
		}
		tb.minutes[m*usMinute] = row
	}

	// Unique users: present at some instant of the hour; shown: online or idle at
	// some instant of it.
	isShown := func(s presence.Status) bool { return s == presence.Online || s == presence.Idle }
	for h := floor(r.first, usHour); h <= floor(now, usHour); h++ {
		start, hend := h*usHour, (h+1)*usHour
		tb.hours[start] = r.usersIn(start, hend, isPresent)
		tb.shown[start] = r.usersIn(start, hend, isShown)
	}
	return tb
}

func floor(a, b int64) int64 { return a / b } // times in these tests are positive

// TestAgainstModel folds random shard histories and compares every table, as the
// upserts leave it, with the model.
func TestAgainstModel(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x9e3779b9))
			r := genRun(rng, 300)
			f := newFold(t)
			got := upsert(t, do(t, f, r.ops))
			want := model(r)
			compare(t, r, got, want)

			total := 0
			alive := 0
			for _, list := range r.changes {
				total += len(list)
				if isPresent(list[len(list)-1].status) {
					alive++
				}
			}
			st := f.Stats()
			if st.Applied != uint64(total) || st.Late != 0 || st.Dropped != 0 || st.Mismatched != 0 {
				t.Errorf("stats %+v, want %d applied and nothing else", st, total)
			}
			// Only the users present now are held; every day before the last is final.
			if st.Users != alive || st.Minutes > 11 || st.Hours > 2 {
				t.Errorf("holds %d users, %d minutes, %d hours; want %d users, ≤11 minutes, ≤2 hours", st.Users, st.Minutes, st.Hours, alive)
			}
			t.Logf("%d changes of %d users, %d sessions, %d days, %d minutes, %d hours", total, len(r.ids), len(want.sessions), len(want.days), len(want.minutes), len(want.hours))
		})
	}
}

func compare(t *testing.T, r *run, got, want table) {
	t.Helper()
	now := ts(r.final)
	for k, w := range want.sessions {
		g, ok := got.sessions[k]
		if !ok {
			t.Errorf("session %s missing", k)
			continue
		}
		if g.Open {
			// An open session is not rewritten as time passes: extend it the way a
			// reader does, from Through in Status.
			if g.Through.After(now) {
				t.Errorf("session %s: through %v after now", k, g.Through)
			}
			var x rollup.Day
			x.Online, x.Idle, x.Invisible = g.Online, g.Idle, g.Invisible
			addTo(&x, g.Status, now.Sub(g.Through).Microseconds())
			g.Online, g.Idle, g.Invisible, g.Through = x.Online, x.Idle, x.Invisible, now
		}
		if g != w {
			t.Errorf("session %s:\n got %+v\nwant %+v", k, g, w)
		}
	}
	for k := range got.sessions {
		if _, ok := want.sessions[k]; !ok {
			t.Errorf("session %s should not exist: %+v", k, got.sessions[k])
		}
	}
	for k, w := range want.days {
		if g, ok := got.days[k]; !ok {
			t.Errorf("day %s missing; want %+v", k, w)
		} else if g != w {
			t.Errorf("day %s:\n got %+v\nwant %+v", k, g, w)
		}
	}
	for k, g := range got.days {
		if _, ok := want.days[k]; !ok {
			t.Errorf("day %s should not exist: %+v", k, g)
		}
	}
	if len(got.minutes) != len(want.minutes) {
		t.Errorf("%d minute rows, want %d", len(got.minutes), len(want.minutes))
	}
	for k, w := range want.minutes {
		if g := got.minutes[k]; g != w {
			t.Errorf("minute %v:\n got %+v\nwant %+v", ts(k), g, w)
		}
	}
	if len(got.hours) != len(want.hours) {
		t.Errorf("%d hour rows, want %d", len(got.hours), len(want.hours))
	}
	for k, w := range want.hours {
		if g := got.hours[k]; !slices.Equal(g, w) {
			t.Errorf("hour %v: %d users, want %d", ts(k), len(g), len(w))
		}
	}
	for k, w := range want.shown {
		if g := got.shown[k]; !slices.Equal(g, w) {
			t.Errorf("hour %v: %d shown users, want %d", ts(k), len(g), len(w))
		}
	}
}

// encodeRows is a byte form of everything Flush handed out, bitmaps in their portable
// serialization, to compare runs byte for byte.
func encodeRows(t testing.TB, flushes []rollup.Rows) []byte {
	t.Helper()
	var b []byte
	tm := func(x time.Time) { b = binary.AppendVarint(b, x.UnixMicro()) }
	du := func(x time.Duration) { b = binary.AppendVarint(b, int64(x)) }
	str := func(s string) { b = binary.AppendUvarint(b, uint64(len(s))); b = append(b, s...) }
	for _, r := range flushes {
		// Provisional snapshots are left out: a restored fold hands every one out again
		// (TestCheckpointResumesExactly compares what the table ends up holding).
		r.Snapshots = slices.DeleteFunc(slices.Clone(r.Snapshots), func(s rollup.Snapshot) bool { return s.Provisional })
		b = binary.AppendUvarint(b, uint64(r.Len()))
		for _, s := range r.Sessions {
			str(s.UserID)
			tm(s.Start)
			tm(s.End)
			du(s.Online)
			du(s.Idle)
			du(s.Invisible)
			tm(s.Through)
			b = append(b, byte(s.Status), map[bool]byte{true: 1}[s.Open])
		}
		for _, d := range r.Days {
			str(d.UserID)
			tm(d.Day)
			du(d.Online)
			du(d.Idle)
			du(d.Invisible)
			b = binary.AppendVarint(b, int64(d.Sessions))
			tm(d.FirstSeen)
			tm(d.LastSeen)
			tm(d.Through)
			b = append(b, byte(d.Status))
		}
		for _, m := range r.Minutes {
			b = binary.AppendVarint(b, int64(m.Shard))
			tm(m.Minute)
			for s := range 60 {
				b = binary.AppendUvarint(b, uint64(m.Online[s]))
				b = binary.AppendUvarint(b, uint64(m.Idle[s]))
				b = binary.AppendUvarint(b, uint64(m.Invisible[s]))
			}
		}
		for _, h := range r.Hours {
			b = binary.AppendVarint(b, int64(h.Shard))
			tm(h.Hour)
			for _, set := range []*roaring.Bitmap{h.Users, h.Shown} {
				bm, err := set.ToBytes()
				if err != nil {
					t.Fatal(err)
				}
				str(string(bm))
			}
		}
		for _, sn := range r.Snapshots {
			b = binary.AppendVarint(b, int64(sn.Shard))
			tm(sn.At)
			for _, bm := range []*roaring.Bitmap{sn.Online, sn.Idle, sn.Invisible} {
				raw, err := bm.ToBytes()
				if err != nil {
					t.Fatal(err)
				}
				str(string(raw))
			}
		}
		for _, c := range r.Changes {
			b = binary.AppendVarint(b, int64(c.Shard))
			tm(c.At)
			b = binary.AppendUvarint(b, uint64(c.Index))
			b = append(b, byte(c.Status))
		}
		for _, u := range r.UserIndexes {
			b = binary.AppendVarint(b, int64(u.Shard))
			b = binary.AppendUvarint(b, uint64(u.Index))
			str(u.UserID)
		}
	}
	return b
}

// TestSameInputSameRows: two folds of one input hand out byte-identical rows.
func TestSameInputSameRows(t *testing.T) {
	r := genRun(rand.New(rand.NewPCG(11, 12)), 200)
	a := encodeRows(t, do(t, newFold(t), r.ops))
	b := encodeRows(t, do(t, newFold(t), r.ops))
	if !bytes.Equal(a, b) {
		t.Fatal("two folds of the same input differ")
	}
}

// TestCheckpointResumesExactly: folding a prefix, checkpointing, restoring into a new
// fold and folding the rest (at several random cuts in a row) hands out byte for byte
// the rows of one uninterrupted fold.
func TestCheckpointResumesExactly(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	r := genRun(rng, 200)
	whole := do(t, newFold(t), r.ops)
	want, wantSnaps := encodeRows(t, whole), snapshotTable(whole)
	for trial := range 6 {
		cuts := []int{}
		for range 1 + rng.IntN(4) {
			cuts = append(cuts, rng.IntN(len(r.ops)))
		}
		if trial == 0 {
			cuts = append(cuts, 0, len(r.ops)) // before anything and after everything
		}
		slices.Sort(cuts)
		f := newFold(t)
		var flushes []rollup.Rows
		from := 0
		for _, cut := range cuts {
			flushes = append(flushes, do(t, f, r.ops[from:cut])...)
			from = cut
			snap, err := f.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			f = newFold(t)
			if err := f.UnmarshalBinary(snap); err != nil {
				t.Fatalf("restoring at op %d: %v", cut, err)
			}
			again, err := f.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(snap, again) {
				t.Fatalf("checkpoint at op %d does not survive a round trip", cut)
			}
		}
		flushes = append(flushes, do(t, f, r.ops[from:])...)
		if got := encodeRows(t, flushes); !bytes.Equal(got, want) {
			t.Fatalf("cuts %v: rows differ from the uninterrupted fold", cuts)
		}
		if got := snapshotTable(flushes); !slices.EqualFunc(got, wantSnaps, func(a, b rollup.Snapshot) bool {
			return a.At.Equal(b.At) && sameSnapshot(a, b)
		}) {
			t.Fatalf("cuts %v: the snapshots held differ from the uninterrupted fold's", cuts)
		}
	}
}

// snapshotTable is the snapshot rows held after writing every flush in order.
func snapshotTable(flushes []rollup.Rows) []rollup.Snapshot {
	var table []rollup.Snapshot
	for _, r := range flushes {
		table = upsertSnapshots(table, r.Snapshots)
	}
	return table
}

// genRunForFuzz is a small history whose checkpoints seed the fuzzer.
func genRunForFuzz() *run { return genRun(rand.New(rand.NewPCG(5, 6)), 20) }
