package main

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/rollup"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
)

// timeline is one index's changes: at (µs, increasing) and the status set then.
type timeline struct {
	at []int64
	st []presence.Status
}

// statusAt is the status at instant t: that of the latest change at or before t.
func (tl *timeline) statusAt(t int64) presence.Status {
	s := presence.Offline
	for i, at := range tl.at {
		if at <= t {
			s = tl.st[i]
		}
	}
	return s
}

// randomTimelines gives n indexes a few changes each within [lo, hi) µs, some of
// them on second boundaries and a microsecond before, some two in one second.
func randomTimelines(rnd *rand.Rand, n int, lo, hi int64) []timeline {
	statuses := []presence.Status{presence.Online, presence.Idle, presence.Invisible, presence.Offline}
	const sec = int64(time.Second / time.Microsecond)
	out := make([]timeline, n)
	for i := range out {
		seen := map[int64]bool{}
		for range rnd.IntN(8) {
			at := lo + rnd.Int64N(hi-lo)
			switch rnd.IntN(4) {
			case 0:
				at = at / sec * sec // a second's first microsecond
			case 1:
				at = at/sec*sec - 1 // a second's last
			case 2:
				at = at/sec*sec + 1 // with the one before, two changes in a second
			}
			if at < lo || at >= hi || seen[at] {
				continue
			}
			seen[at] = true
			out[i].at = append(out[i].at, at)
		}
		slices.Sort(out[i].at)
		for range out[i].at {
			out[i].st = append(out[i].st, statuses[rnd.IntN(len(statuses))])
		}
	}
	return out
}

// A group's per-second counts equal the members' statuses at the end of each second
// as a model reads them from every index's timeline: the fold starts from the state
// just before the first minute and sees every change of the shard, members' and
// others', in time order.
func TestMemberSecondsMatchesAModel(t *testing.T) {
	const sec = int64(time.Second / time.Microsecond)
	m0 := time.Date(2026, 11, 22, 20, 0, 0, 0, time.UTC)
	for seed := range uint64(30) {
		rnd := rand.New(rand.NewPCG(seed, 7))
		minutes := 1 + rnd.IntN(3)
		lo, hi := m0.Add(-90*time.Second).UnixMicro(), m0.Add(time.Duration(minutes)*time.Minute).UnixMicro()
		tls := randomTimelines(rnd, 40, lo, hi)
		members := roaring.New()
		for i := range tls {
			if rnd.IntN(2) == 0 {
				members.Add(uint32(i))
			}
		}
		if seed == 0 {
			members.Clear() // a shard without members counts nothing
		}
		// The state just before m0, for every index: the fold keeps the members'.
		start := &historystore.ShardState{Online: roaring.New(), Idle: roaring.New(), Invisible: roaring.New()}
		var changes []historystore.IndexChange
		for i, tl := range tls {
			switch tl.statusAt(m0.UnixMicro() - 1) {
			case presence.Online:
				start.Online.Add(uint32(i))
			case presence.Idle:
				start.Idle.Add(uint32(i))
			case presence.Invisible:
				start.Invisible.Add(uint32(i))
			}
			for k, at := range tl.at {
				if at >= m0.UnixMicro() {
					changes = append(changes, historystore.IndexChange{AtUs: at, Index: uint32(i), Status: tl.st[k]})
				}
			}
		}
		slices.SortFunc(changes, func(a, b historystore.IndexChange) int {
			return cmp.Or(cmp.Compare(a.AtUs, b.AtUs), cmp.Compare(a.Index, b.Index))
		})
		f := newMemberSeconds(start, members, m0, minutes)
		for _, c := range changes {
			f.add(c)
		}
		got := f.finish()
		if len(got) != minutes {
			t.Fatalf("seed %d: %d minutes, want %d", seed, len(got), minutes)
		}
		for m := range minutes {
			var want minuteSums
			for s := range 60 {
				end := m0.UnixMicro() + int64(m*60+s)*sec + sec - 1
				for _, i := range members.ToArray() {
					switch tls[i].statusAt(end) {
					case presence.Online:
						want.online[s]++
						if s == 59 {
							want.close[0]++
						}
					case presence.Idle:
						if s == 59 {
							want.close[1]++
						}
					case presence.Invisible:
						if s == 59 {
							want.close[2]++
						}
					}
				}
			}
			if got[m] != want {
				t.Fatalf("seed %d minute %d:\n got %+v\nwant %+v", seed, m, got[m], want)
			}
		}
	}
}

// groupPoints folds the summed minutes as the whole service's concurrency does, and
// hides the invisible to readers.
func TestGroupPointsFoldMinutes(t *testing.T) {
	m0 := time.Date(2026, 11, 22, 20, 59, 0, 0, time.UTC)
	sums := make([]minuteSums, 2)
	sums[0].online[10], sums[0].close = 3, [3]int64{1, 2, 1}
	sums[1].online[59], sums[1].close = 2, [3]int64{2, 0, 4}
	assertPoints(t, "minute", groupPoints(stepMinute, m0, sums, true), []concurrencyPoint{
		{At: m0, CloseOnline: 1, CloseIdle: 2, CloseInvisible: ptr[int64](1), PeakOnline: 3, Minutes: 1},
		{At: m0.Add(time.Minute), CloseOnline: 2, CloseInvisible: ptr[int64](4), PeakOnline: 2, Minutes: 1},
	})
	assertPoints(t, "day", groupPoints(stepDay, m0, sums, true), []concurrencyPoint{
		{At: time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC), CloseOnline: 2, CloseInvisible: ptr[int64](4), PeakOnline: 3, Minutes: 2},
	})
	for _, p := range groupPoints(stepHour, m0, sums, false) {
		if p.CloseInvisible != nil {
			t.Errorf("a reader's point %+v counts the invisible", p)
		}
	}
	if got := groupPoints(stepMinute, m0, nil, true); got == nil || len(got) != 0 {
		t.Errorf("no minutes = %#v, want an empty list", got)
	}
}

// The minutes answered start in [from, to) and ended by final.
func TestMinuteRange(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, "2026-11-22T"+s+"Z")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		from, to, final string
		first           string
		n               int
	}{
		{"20:00:00", "21:00:00", "23:00:00", "20:00:00", 60},
		{"20:00:30", "20:03:00", "23:00:00", "20:01:00", 2},
		{"20:00:00", "20:02:00.000001", "23:00:00", "20:00:00", 3},
		{"20:00:00", "21:00:00", "20:10:00", "20:00:00", 10},
		{"20:00:00", "21:00:00", "20:10:59.999999", "20:00:00", 10},
		{"20:00:00", "21:00:00", "20:00:59", "20:00:00", 0},
		{"20:00:01", "20:00:59", "23:00:00", "20:01:00", 0},
	} {
		first, n := minuteRange(at(c.from), at(c.to), at(c.final))
		if n != c.n || (n > 0 && !first.Equal(at(c.first))) {
			t.Errorf("from %s to %s final %s: %d minutes from %s, want %d from %s", c.from, c.to, c.final, n, first.Format(time.TimeOnly), c.n, c.first)
		}
	}
}

// A group's unique users of a period are, per shard, the union of its hours ANDed
// with the members, summed over shards: the same as the members among the shard's
// users of the period, computed here with sets.
func TestUniquesFoldCountsMembersOnly(t *testing.T) {
	h0 := time.Date(2026, 11, 22, 21, 0, 0, 0, time.UTC)
	rnd := rand.New(rand.NewPCG(3, 9))
	const shards, hours, space = 3, 5, 300
	members := make([]*roaring.Bitmap, shards)
	for s := range members {
		members[s] = roaring.New()
		for i := range uint32(space) {
			if rnd.IntN(3) == 0 {
				members[s].Add(i)
			}
		}
	}
	type key struct {
		day   time.Time
		shard int
	}
	wantUsers, wantShown := map[key]map[uint32]bool{}, map[key]map[uint32]bool{}
	var rows []historystore.HourUsers
	for h := range hours {
		hour := h0.Add(time.Duration(h) * time.Hour)
		for s := range shards + 1 { // shard 3: rows of a shard the state does not have
			users, shown := roaring.New(), roaring.New()
			for i := range uint32(space) {
				if rnd.IntN(4) == 0 {
					users.Add(i)
					if rnd.IntN(2) == 0 {
						shown.Add(i)
					}
				}
			}
			k := key{dayOf(hour), s}
			for _, w := range []map[key]map[uint32]bool{wantUsers, wantShown} {
				if w[k] == nil {
					w[k] = map[uint32]bool{}
				}
			}
			for _, i := range users.ToArray() {
				if s < shards && members[s].Contains(i) {
					wantUsers[k][i] = true
					if shown.Contains(i) {
						wantShown[k][i] = true
					}
				}
			}
			rows = append(rows, historystore.HourUsers{Hour: hour, Shard: s, Users: bitmapBytes(t, users.ToArray()...), Shown: bitmapBytes(t, shown.ToArray()...)})
		}
	}
	for _, operator := range []bool{false, true} {
		f := uniquesFold{period: rollup.PeriodDay, operator: operator, members: members}
		for _, r := range rows {
			if err := f.add(r); err != nil {
				t.Fatal(err)
			}
		}
		want := wantShown
		if operator {
			want = wantUsers
		}
		got := f.finish()
		days := []time.Time{dayOf(h0), dayOf(h0).AddDate(0, 0, 1)}
		if len(got) != len(days) {
			t.Fatalf("operator %v: %d points, want %d", operator, len(got), len(days))
		}
		for i, d := range days {
			var n uint64
			for s := range shards + 1 {
				n += uint64(len(want[key{d, s}]))
			}
			if !got[i].Start.Equal(d) || got[i].Users != n || got[i].Shards != shards+1 {
				t.Errorf("operator %v, %s: %+v, want %d users of %d shards", operator, d.Format(time.DateOnly), got[i], n, shards+1)
			}
		}
	}
}

// The count of a group at T: the members by status, invisible ones offline to readers.
func TestGroupPastCountViews(t *testing.T) {
	st := &historystore.ShardState{Online: roaring.BitmapOf(1, 2, 3, 9), Idle: roaring.BitmapOf(4, 5), Invisible: roaring.BitmapOf(6, 7)}
	members := roaring.BitmapOf(1, 2, 4, 6, 8, 10)
	counts := stateCounts(st, members)
	if counts != [3]uint64{2, 1, 1} {
		t.Fatalf("counts of members %v = %v, want 2 online, 1 idle, 1 invisible", members.ToArray(), counts)
	}
	if all := stateCounts(st, nil); all != [3]uint64{4, 2, 2} {
		t.Fatalf("counts of everyone = %v", all)
	}
	at := time.Date(2026, 11, 22, 20, 13, 7, 0, time.UTC)
	for _, c := range []struct {
		operator bool
		want     string
	}{
		{false, "total=3 online=2 idle=1 invisible=0 offline=3 members=6"},
		{true, "total=4 online=2 idle=1 invisible=1 offline=2 members=6"},
	} {
		v := groupPastCount("team", at, members.GetCardinality(), counts, c.operator)
		_, hasInv := v.ByStatus["invisible"]
		got := fmt.Sprintf("total=%d online=%d idle=%d invisible=%d offline=%d members=%d", v.Total, v.ByStatus["online"], v.ByStatus["idle"], v.ByStatus["invisible"], v.ByStatus["offline"], v.Members)
		if got != c.want || hasInv != c.operator || v.GroupID != "team" || !v.At.Equal(at) {
			t.Errorf("operator %v: %s (%+v), want %s", c.operator, got, v, c.want)
		}
	}
}

// shardsToRead skips the shards where the group has no member.
func TestShardsToRead(t *testing.T) {
	members := []*roaring.Bitmap{roaring.New(), roaring.BitmapOf(3), roaring.New(), roaring.BitmapOf(0, 1)}
	if got := shardsToRead(4, members); !slices.Equal(got, []int{1, 3}) {
		t.Errorf("shards with members = %v, want [1 3]", got)
	}
	if got := shardsToRead(3, nil); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("without a group = %v, want every shard", got)
	}
}
