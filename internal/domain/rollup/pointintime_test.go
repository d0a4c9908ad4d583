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
			snaps = append(snaps, rows.Snapshots...)
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
