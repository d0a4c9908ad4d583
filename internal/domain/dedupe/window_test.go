package dedupe

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestDuplicate(t *testing.T) {
	type call struct {
		id   string
		at   time.Duration
		want bool
	}
	tests := []struct {
		name  string
		calls []call
	}{
		{"first sighting is new", []call{{"a", 0, false}}},
		{"second sighting within horizon", []call{{"a", 0, false}, {"a", time.Minute, true}}},
		{"exactly at the horizon still counts", []call{{"a", 0, false}, {"a", 10 * time.Minute, true}}},
		{"past the horizon is new again", []call{{"a", 0, false}, {"a", 10*time.Minute + 1, false}}},
		{"ids are independent", []call{{"a", 0, false}, {"b", 0, false}, {"a", 1, true}, {"c", 2, false}}},
		{"a repeat refreshes the sighting", []call{
			{"a", 0, false}, {"a", 9 * time.Minute, true}, {"a", 18 * time.Minute, true}, {"a", 29 * time.Minute, false},
		}},
		{"same log time twice", []call{{"a", 0, false}, {"a", 0, true}, {"a", 0, true}}},
		{"log time never goes backwards", []call{
			// The second call's at is earlier than the first; it is taken to happen at
			// 11m, so "a" seen at 0 is already out of the horizon.
			{"b", 11 * time.Minute, false}, {"a", 0, false}, {"a", 5 * time.Minute, true},
		}},
		{"other ids expire meanwhile", []call{
			{"a", 0, false}, {"b", 6 * time.Minute, false}, {"c", 12 * time.Minute, false}, {"a", 12 * time.Minute, false}, {"b", 12 * time.Minute, true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := NewWindow(10 * time.Minute)
			for i, c := range tt.calls {
				if got := w.Duplicate("u", c.id, at(c.at)); got != c.want {
					t.Fatalf("call %d Duplicate(%q, +%v) = %v, want %v", i, c.id, c.at, got, c.want)
				}
			}
		})
	}
}

func TestStale(t *testing.T) {
	type call struct {
		user, device string
		t, at        time.Duration
		want         bool
	}
	tests := []struct {
		name  string
		calls []call
	}{
		{"first event is fresh", []call{{"u", "d", 0, 0, false}}},
		{"newer is fresh", []call{{"u", "d", 0, 0, false}, {"u", "d", time.Second, time.Second, false}}},
		{"older is stale", []call{{"u", "d", time.Second, 0, false}, {"u", "d", 0, time.Second, true}}},
		{"equal time is not stale", []call{{"u", "d", time.Second, 0, false}, {"u", "d", time.Second, time.Second, false}}},
		{"a stale event does not lower the newest", []call{
			{"u", "d", 5 * time.Second, 0, false}, {"u", "d", time.Second, 1, true}, {"u", "d", 3 * time.Second, 2, true},
		}},
		{"devices are independent", []call{{"u", "d1", 5 * time.Second, 0, false}, {"u", "d2", time.Second, 1, false}}},
		{"users are independent", []call{{"u1", "d", 5 * time.Second, 0, false}, {"u2", "d", time.Second, 1, false}}},
		{"pair boundary is unambiguous", []call{{"ab", "c", 5 * time.Second, 0, false}, {"a", "bc", time.Second, 1, false}}},
		{"forgotten after the horizon", []call{
			{"u", "d", 5 * time.Second, 0, false}, {"x", "d", 0, 10*time.Minute + 1, false}, {"u", "d", time.Second, 10*time.Minute + 2, false},
		}},
		{"horizon counts from the event that set the newest", []call{
			{"u", "d", 5 * time.Second, 0, false},
			{"u", "d", 5 * time.Second, 8 * time.Minute, false}, // equal: does not refresh
			{"u", "d", time.Second, 10*time.Minute + 1, false},
		}},
		{"a newer event restarts the horizon", []call{
			{"u", "d", 5 * time.Second, 0, false},
			{"u", "d", 6 * time.Second, 8 * time.Minute, false},
			{"u", "d", time.Second, 10*time.Minute + 1, true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := NewWindow(10 * time.Minute)
			for i, c := range tt.calls {
				if got := w.Stale(c.user, c.device, at(c.t), at(c.at)); got != c.want {
					t.Fatalf("call %d Stale(%q, %q, +%v, +%v) = %v, want %v", i, c.user, c.device, c.t, c.at, got, c.want)
				}
			}
		})
	}
}

func TestLenExpires(t *testing.T) {
	w := NewWindow(time.Minute)
	for i := range 1000 {
		id := strconv.Itoa(i)
		w.Duplicate("u", id, at(time.Duration(i)*time.Millisecond))
		w.Stale("u"+id, "d", at(0), at(time.Duration(i)*time.Millisecond))
	}
	if got := w.Len(); got != 2000 {
		t.Fatalf("Len = %d, want 2000", got)
	}
	w.Duplicate("u", "late", at(time.Minute+500*time.Millisecond))
	// Entries at 0..499ms fell out (cutoff 500ms is kept), the new id came in.
	if got, want := w.Len(), 2*500+1; got != want {
		t.Fatalf("Len = %d, want %d", got, want)
	}
	w.Duplicate("u", "later", at(time.Hour))
	if got := w.Len(); got != 1 {
		t.Fatalf("Len after an hour = %d, want 1", got)
	}
}

// A model that scans everything answers the same as the Window over a long random-ish
// sequence that wraps and resizes the FIFOs and shrinks the maps several times.
func TestAgainstModel(t *testing.T) {
	const horizon = 2 * time.Second
	w := NewWindow(horizon)
	seenAt := map[string]time.Time{}
	newestT := map[string]time.Time{}
	setAt := map[string]time.Time{}
	var clock time.Duration
	x := uint64(42)
	next := func(n uint64) uint64 { x = x*6364136223846793005 + 1442695040888963407; return (x >> 33) % n }
	for i := range 200000 {
		// Bursts of traffic with quiet spells, so the maps grow and shrink.
		step := time.Duration(next(3)) * time.Millisecond
		if (i/20000)%2 == 1 {
			step = time.Duration(next(400)) * time.Millisecond
		}
		now := clock + step
		if next(10) == 0 {
			now = clock - time.Duration(next(5))*time.Millisecond // slightly behind
		}
		clock = max(clock, now)
		logAt, eff := at(now), at(clock)

		id := strconv.Itoa(int(next(5000)))
		prev, ok := seenAt[id]
		want := ok && !prev.Before(eff.Add(-horizon))
		seenAt[id] = eff
		if got := w.Duplicate("u", id, logAt); got != want {
			t.Fatalf("step %d: Duplicate(%s) = %v, want %v", i, id, got, want)
		}

		pair := strconv.Itoa(int(next(300)))
		evT := eff.Add(time.Duration(next(1000)) * time.Millisecond)
		cur, ok := newestT[pair]
		if ok && setAt[pair].Before(eff.Add(-horizon)) {
			ok = false
		}
		wantStale := ok && evT.Before(cur)
		if !ok || evT.After(cur) {
			newestT[pair], setAt[pair] = evT, eff
		}
		if got := w.Stale(pair, "d", evT, logAt); got != wantStale {
			t.Fatalf("step %d: Stale(%s) = %v, want %v", i, pair, got, wantStale)
		}
	}
}

func TestFIFOWrapsAndResizes(t *testing.T) {
	var f fifo
	next, want := 0, 0
	for round := range 50 {
		for range 100 + round*7 {
			f.push(seen{at: int64(next)})
			next++
		}
		for range 90 + round*5 {
			e, ok := f.front()
			if !ok || e.at != int64(want) {
				t.Fatalf("front = %v %v, want %d", e, ok, want)
			}
			f.pop()
			want++
		}
	}
	for f.n > 0 {
		e, _ := f.front()
		if e.at != int64(want) {
			t.Fatalf("front = %d, want %d", e.at, want)
		}
		f.pop()
		want++
	}
	if want != next {
		t.Fatalf("popped %d, pushed %d", want, next)
	}
	if len(f.buf) > 64 {
		t.Fatalf("empty FIFO keeps %d slots", len(f.buf))
	}
}

// BenchmarkDuplicate is the steady state of a busy partition: the window holds about
// 600k ids (1000 events/s over 10 minutes) and every call expires one.
func BenchmarkDuplicate(b *testing.B) {
	w := NewWindow(10 * time.Minute)
	ids := make([]string, 1<<20)
	for i := range ids {
		ids[i] = "0197c6f1-8a2b-7c3d-9e4f-" + strconv.FormatInt(int64(100000000000+i), 10)
	}
	users := make([]string, 1024)
	for i := range users {
		users[i] = "user-" + strconv.Itoa(i)
	}
	var i int
	for ; i < 600000; i++ {
		w.Duplicate(users[i&1023], ids[i&(len(ids)-1)], at(time.Duration(i)*time.Millisecond))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		w.Duplicate(users[i&1023], ids[i&(len(ids)-1)], at(time.Duration(i)*time.Millisecond))
		w.Stale(users[i&1023], "default", at(time.Duration(i)*time.Millisecond), at(time.Duration(i)*time.Millisecond))
		i++
	}
}

// BenchmarkMemoryPerID reports the heap bytes a Window holds per remembered id.
func BenchmarkMemoryPerID(b *testing.B) {
	const n = 1 << 20
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "0197c6f1-8a2b-7c3d-9e4f-" + strconv.FormatInt(int64(100000000000+i), 10)
	}
	var perID float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		w := NewWindow(time.Hour)
		for i, id := range ids {
			w.Duplicate("u", id, at(time.Duration(i)))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perID = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(w)
	}
	b.ReportMetric(perID, "B/id")
}

// A bound on the ids remembered forgets the oldest first, counts what it forgot
// before its horizon, and leaves staleness alone.
func TestLimitIDs(t *testing.T) {
	w := NewWindow(time.Hour)
	w.LimitIDs(3)
	t0 := time.Unix(1_700_000_000, 0)
	for i, id := range []string{"a", "b", "c", "d", "e"} {
		if w.Duplicate("u", id, t0.Add(time.Duration(i)*time.Second)) {
			t.Fatalf("%s reported as a duplicate on first sight", id)
		}
	}
	if w.EvictedIDs() != 2 || len(w.ids) != 3 {
		t.Fatalf("evicted %d, remembered %d; want 2 and 3", w.EvictedIDs(), len(w.ids))
	}
	if got := w.IDSpan(); got != 2*time.Second {
		t.Fatalf("IDSpan = %v, want 2s (c at +2s to e at +4s)", got)
	}
	at := t0.Add(5 * time.Second)
	if !w.Duplicate("u", "e", at) || !w.Duplicate("u", "d", at) {
		t.Fatal("a remembered id was not a duplicate")
	}
	if w.Duplicate("u", "a", at) {
		t.Fatal("an evicted id is still remembered")
	}
	for i := range 10 {
		w.Stale("u", fmt.Sprint("dev", i), at, at)
	}
	if len(w.dev) != 10 {
		t.Fatalf("staleness keeps %d pairs, want 10: LimitIDs must not bound it", len(w.dev))
	}
}

// Event ids are scoped to their user: the same id of another user is no duplicate.
func TestDuplicateIsPerUser(t *testing.T) {
	w := NewWindow(time.Minute)
	at := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	if w.Duplicate("alice", "e1", at) || w.Duplicate("bob", "e1", at) {
		t.Fatal("a first sighting was a duplicate")
	}
	if !w.Duplicate("alice", "e1", at.Add(time.Second)) || !w.Duplicate("bob", "e1", at.Add(time.Second)) {
		t.Fatal("a user's repeated id was not a duplicate")
	}
	if w.Duplicate("alic", "ee1", at.Add(time.Second)) {
		t.Fatal("(alic, ee1) was taken for (alice, e1)")
	}
}

// An erasure drops the user's events dated at or before it, for the horizon, and no
// one else's; events dated after it pass.
func TestWindowErasure(t *testing.T) {
	base := time.Unix(1_700_000_000, 0)
	w := NewWindow(10 * time.Minute)
	if w.Erased("u", base, base) {
		t.Fatal("erased before any erasure")
	}
	w.Erase("u", base, base)
	for _, tc := range []struct {
		user string
		t    time.Time
		want bool
	}{
		{"u", base.Add(-time.Minute), true},
		{"u", base, true},
		{"u", base.Add(time.Microsecond), false},
		{"v", base.Add(-time.Minute), false},
	} {
		if got := w.Erased(tc.user, tc.t, base.Add(time.Second)); got != tc.want {
			t.Errorf("Erased(%s, %v) = %v, want %v", tc.user, tc.t.Sub(base), got, tc.want)
		}
	}
	// An older erasure replayed does not move the cut back.
	w.Erase("u", base.Add(-time.Hour), base.Add(2*time.Second))
	if !w.Erased("u", base, base.Add(3*time.Second)) {
		t.Error("an older erasure moved the cut back")
	}
	// Past the horizon the tombstone goes, as every entry does.
	if w.Erased("u", base.Add(-time.Minute), base.Add(11*time.Minute)) {
		t.Error("the tombstone outlived the horizon")
	}
}
