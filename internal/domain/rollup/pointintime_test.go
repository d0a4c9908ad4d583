package rollup_test

import (
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/rollup"
)

// pitRead is what a reader does with the rows: the latest snapshot at or before x,
// then the changes dated in [snapshot, x] in time order. ok is false when no snapshot
// covers x.
func pitRead(snaps []rollup.Snapshot, changes []rollup.ShardChange, x int64) (status map[uint32]presence.Status, ok bool) {
	i := sort.Search(len(snaps), func(i int) bool { return snaps[i].At.UnixMicro() > x })
	if i == 0 {
		return nil, false
	}
	s := snaps[i-1]
	status = map[uint32]presence.Status{}
	for st, bm := range map[presence.Status]*roaring.Bitmap{presence.Online: s.Online, presence.Idle: s.Idle, presence.Invisible: s.Invisible} {
		for _, idx := range bm.ToArray() {
			status[idx] = st
		}
	}
	from := s.At.UnixMicro()
	for _, c := range changes { // sorted by time
		if at := c.At.UnixMicro(); at >= from && at <= x {
			if c.Status == presence.Offline {
				delete(status, c.Index)
			} else {
				status[c.Index] = c.Status
			}
		}
	}
	return status, true
}

// TestPointInTimeAgainstModel: at random instants and at every snapshot boundary (and a
// microsecond either side), the statuses read from the snapshots and changes the fold
// handed out equal the model's status of every user.
func TestPointInTimeAgainstModel(t *testing.T) {
	for seed := range uint64(3) {
		rng := rand.New(rand.NewPCG(seed, 77))
		r := genRun(rng, 200)
		var snaps []rollup.Snapshot
		var changes []rollup.ShardChange
		names := map[uint32]string{}
		for _, rows := range do(t, newFold(t), r.ops) {
			snaps = upsertSnapshots(snaps, rows.Snapshots)
			changes = append(changes, rows.Changes...)
			for _, u := range rows.UserIndexes {
				if prev, ok := names[u.Index]; ok && prev != u.UserID {
					t.Fatalf("index %d named %s and %s", u.Index, prev, u.UserID)
				}
				names[u.Index] = u.UserID
			}
		}
		for i := 1; i < len(snaps); i++ {
			if d := snaps[i].At.Sub(snaps[i-1].At); d != time.Minute {
				t.Fatalf("snapshots %v and %v are %v apart, want a minute", snaps[i-1].At, snaps[i].At, d)
			}
		}
		slices.SortStableFunc(changes, func(a, b rollup.ShardChange) int { return a.At.Compare(b.At) })
		var instants []int64
		for _, s := range snaps {
			at := s.At.UnixMicro()
			instants = append(instants, at-1, at, at+1)
		}
		first, last := snaps[0].At.UnixMicro(), snaps[len(snaps)-1].At.UnixMicro()
		for range 300 {
			instants = append(instants, first+rng.Int64N(last-first))
		}
		// Instants right at changes and between two changes a microsecond apart.
		for range 200 {
			c := changes[rng.IntN(len(changes))].At.UnixMicro()
			instants = append(instants, c-1, c, c+1)
		}
		checked := 0
		for _, x := range instants {
			got, ok := pitRead(snaps, changes, x)
			if !ok || x > last+usMinute {
				continue
			}
			checked++
			for u, list := range r.changes {
				want := statusAt(list, x)
				if g, ok := got[r.index[u]]; (ok && g != want) || (!ok && want != presence.Offline) {
					t.Fatalf("seed %d: %s at %s: read %v, model %v", seed, r.ids[u], ts(x), g, want)
				}
				if want != presence.Offline && names[r.index[u]] != r.ids[u] {
					t.Fatalf("seed %d: index %d names %q, want %s", seed, r.index[u], names[r.index[u]], r.ids[u])
				}
			}
		}
		if checked < 900 {
			t.Fatalf("seed %d: only %d instants covered by snapshots", seed, checked)
		}
		t.Logf("seed %d: %d snapshots, %d changes, %d instants checked", seed, len(snaps), len(changes), checked)
	}
}

// upsertSnapshots is what shard_snapshots holds after writing more in order: one row
// per instant, the last written, sorted by instant.
func upsertSnapshots(table, more []rollup.Snapshot) []rollup.Snapshot {
	for _, s := range more {
		i, found := sort.Find(len(table), func(i int) int { return s.At.Compare(table[i].At) })
		if found {
			table[i] = s
		} else {
			table = slices.Insert(table, i, s)
		}
	}
	return table
}

// TestProvisionalSnapshotsHoldWhatIsKnown: after every Flush, every snapshot row the
// table holds, final or provisional, equals the state computed from scratch from every
// change handed out so far dated before its instant. So a provisional snapshot is wrong
// only until the Flush after a late change, and once final it equals the last
// provisional write of its instant unless such a change came in between.
func TestProvisionalSnapshotsHoldWhatIsKnown(t *testing.T) {
	for seed := range uint64(3) {
		r := genRun(rand.New(rand.NewPCG(seed, 91)), 150)
		f := newFold(t)
		var (
			table          []rollup.Snapshot
			changes        []rollup.ShardChange
			provisional    = map[int64]rollup.Snapshot{} // the last provisional write of each instant
			same, differed int
		)
		for i, o := range r.ops {
			rows := do(t, f, r.ops[i:i+1])
			if o.kind != opFlush {
				continue
			}
			changes = append(changes, rows[0].Changes...)
			for _, s := range rows[0].Snapshots {
				at := s.At.UnixMicro()
				if s.Provisional {
					if s.At.After(f.Watermark()) || !s.At.After(f.Frontier()) {
						t.Fatalf("seed %d: provisional snapshot at %v outside (frontier %v, watermark %v]", seed, s.At, f.Frontier(), f.Watermark())
					}
					provisional[at] = s
				} else if p, ok := provisional[at]; ok {
					if sameSnapshot(p, s) {
						same++
					} else {
						differed++
					}
				}
			}
			table = upsertSnapshots(table, rows[0].Snapshots)
			// The model: walk the changes in time order, taking the state at each instant.
			sorted := sortedChanges(changes)
			state := map[uint32]presence.Status{}
			k := 0
			for _, s := range table {
				for ; k < len(sorted) && sorted[k].At.Before(s.At); k++ {
					state[sorted[k].Index] = sorted[k].Status
				}
				want := [3]*roaring.Bitmap{roaring.New(), roaring.New(), roaring.New()}
				for idx, st := range state {
					switch st {
					case presence.Online:
						want[0].Add(idx)
					case presence.Idle:
						want[1].Add(idx)
					case presence.Invisible:
						want[2].Add(idx)
					}
				}
				if !want[0].Equals(s.Online) || !want[1].Equals(s.Idle) || !want[2].Equals(s.Invisible) {
					t.Fatalf("seed %d, op %d: snapshot at %v (provisional %v) holds %v/%v/%v, the changes say %v/%v/%v", seed, i,
						s.At, s.Provisional, s.Online.ToArray(), s.Idle.ToArray(), s.Invisible.ToArray(),
						want[0].ToArray(), want[1].ToArray(), want[2].ToArray())
				}
			}
		}
		if len(provisional) == 0 || same == 0 {
			t.Fatalf("seed %d: %d provisional instants, %d finalized unchanged: the run does not exercise them", seed, len(provisional), same)
		}
		t.Logf("seed %d: %d instants written provisionally; once final, %d unchanged and %d altered by a late change", seed, len(provisional), same, differed)
	}
}

func sortedChanges(cs []rollup.ShardChange) []rollup.ShardChange {
	out := slices.Clone(cs)
	slices.SortStableFunc(out, func(a, b rollup.ShardChange) int { return a.At.Compare(b.At) })
	return out
}

func sameSnapshot(a, b rollup.Snapshot) bool {
	return a.Online.Equals(b.Online) && a.Idle.Equals(b.Idle) && a.Invisible.Equals(b.Invisible)
}

// A snapshot interval that does not divide an hour is refused.
func TestSnapshotIntervalDividesAnHour(t *testing.T) {
	for _, d := range []time.Duration{7 * time.Minute, 2 * time.Hour, -time.Minute} {
		if _, err := rollup.New(rollup.Config{SnapshotEvery: d}); err == nil {
			t.Errorf("interval %v accepted", d)
		}
	}
	for _, d := range []time.Duration{time.Second, 5 * time.Minute, time.Hour} {
		if _, err := rollup.New(rollup.Config{SnapshotEvery: d}); err != nil {
			t.Errorf("interval %v: %v", d, err)
		}
	}
}
