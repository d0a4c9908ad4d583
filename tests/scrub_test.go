package tests

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/rollup"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
)

// TestErasureScrubsTheIndexFromOldRows: an erasure finds the final rows of weeks ago
// that hold the user's index without naming the user — the uniques hours the user's day
// rows say they were seen in, the snapshots and shard_changes of those hours, including a
// change on the hour's last boundary — and takes the index out of each, keeping the
// other indexes, the other shards' rows and what remains of each row's TTL. Rows the
// old write times write again (a replay) stay scrubbed, and a second erasure finds
// nothing left. TestForgetLeavesNoTrace covers the same end to end on recent rows.
func TestErasureScrubsTheIndexFromOldRows(t *testing.T) {
	session, ks := migratedKeyspace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := historyStoreOn(t, ks)

	const gone, kept, other = 7, 3, 9
	bm := func(xs ...uint32) *roaring.Bitmap { return roaring.BitmapOf(xs...) }
	now := time.Now().UTC().Truncate(time.Second)
	day := func(back int) time.Time { return now.Truncate(24*time.Hour).AddDate(0, 0, -back) }
	old, recent := day(40).Add(13*time.Hour), day(3).Add(9*time.Hour) // two hours the user was present
	rows := func(shard int32) *rollup.Rows {
		r := &rollup.Rows{
			Hours: []rollup.Hour{
				{Shard: shard, Hour: old, Users: bm(kept, gone), Shown: bm(gone)},
				{Shard: shard, Hour: recent, Users: bm(gone, other), Shown: bm(gone)},
				{Shard: shard, Hour: recent.Add(2 * time.Hour), Users: bm(kept), Shown: bm(kept)},
			},
			Snapshots: []rollup.Snapshot{
				{Shard: shard, At: recent.Add(10 * time.Minute), Online: bm(kept, gone), Idle: bm(), Invisible: bm(other)},
				{Shard: shard, At: recent.Add(20 * time.Minute), Online: bm(kept), Idle: bm(gone), Invisible: bm()},
			},
			Changes: []rollup.ShardChange{
				{Shard: shard, At: recent.Add(5 * time.Minute), Index: gone, Status: presence.Online},
				{Shard: shard, At: recent.Add(5 * time.Minute), Index: kept, Status: presence.Online},
				{Shard: shard, At: recent.Add(15 * time.Minute), Index: gone, Status: presence.Idle},
				{Shard: shard, At: recent.Add(time.Hour), Index: gone, Status: presence.Offline}, // on the boundary
			},
		}
		if shard == 2 {
			// The user's days, seen within the two hours above: the hours read.
			for _, seen := range [][2]time.Time{{old.Add(10 * time.Minute), old.Add(50 * time.Minute)}, {recent.Add(5 * time.Minute), recent.Add(time.Hour)}} {
				d := seen[0].Truncate(24 * time.Hour)
				r.Days = append(r.Days, rollup.Day{UserID: "gone", Day: d, Online: time.Hour, Sessions: 1,
					FirstSeen: seen[0], LastSeen: seen[1], Through: d.AddDate(0, 0, 1), Status: presence.Offline})
			}
		}
		return r
	}
	// The user's shard is 2; shard 5 has rows of its own index 7, another user's.
	ttl := historystore.Retention{Snapshots: 24 * time.Hour, Changes: 30 * 24 * time.Hour}
	const written, erasedTS = 1000, 5000
	write := func() {
		for _, shard := range []int32{2, 5} {
			for _, w := range historystore.RollupRows(rows(shard), shard, written, ttl) {
				if err := store.Write(ctx, historystore.Single(w)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	write()

	scrub, err := store.ErasedIndexRows(ctx, "gone", 2, gone, now, now.Add(-10*time.Minute), erasedTS)
	if err != nil {
		t.Fatal(err)
	}
	// 2 snapshots and 3 changes located, 2 uniques hours.
	if len(scrub.Located) != 5 || len(scrub.Uniques) != 2 {
		t.Fatalf("the erasure found %d located rows and %d uniques hours, want 5 and 2", len(scrub.Located), len(scrub.Uniques))
	}
	for _, ws := range [][]historystore.Write{scrub.Located, scrub.Uniques} {
		for _, w := range ws {
			if err := store.Write(ctx, historystore.Single(w)); err != nil {
				t.Fatal(err)
			}
		}
	}

	decode := func(b []byte) []uint32 {
		m := roaring.New()
		if _, err := m.ReadFrom(bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		return m.ToArray()
	}
	check := func(when string) {
		t.Helper()
		type hourRow struct {
			users, shown []uint32
			card         int64
		}
		want := map[int]map[time.Time]hourRow{
			2: {old: {[]uint32{kept}, []uint32{}, 1}, recent: {[]uint32{other}, []uint32{}, 1}, recent.Add(2 * time.Hour): {[]uint32{kept}, []uint32{kept}, 1}},
			5: {old: {[]uint32{kept, gone}, []uint32{gone}, 2}, recent: {[]uint32{gone, other}, []uint32{gone}, 2}, recent.Add(2 * time.Hour): {[]uint32{kept}, []uint32{kept}, 1}},
		}
		for _, d := range []time.Time{day(40), day(3)} {
			it := session.Query(`SELECT hour, shard, users, shown, cardinality, TTL(users) FROM `+ks+`.uniques WHERE day = ?`, d).IterContext(ctx)
			var (
				hour         time.Time
				shard, left  int
				users, shown []byte
				card         int64
			)
			for it.Scan(&hour, &shard, &users, &shown, &card, &left) {
				w := want[shard][hour]
				got := hourRow{decode(users), decode(shown), card}
				if !slices.Equal(got.users, w.users) || !slices.Equal(got.shown, w.shown) || got.card != w.card {
					t.Errorf("%s: uniques of shard %d at %s = %v, want %v", when, shard, hour, got, w)
				}
				if left <= 0 || left > 400*24*3600 {
					t.Errorf("%s: uniques of shard %d at %s lives %d s more, want what remained of 400 days", when, shard, hour, left)
				}
			}
			if err := it.Close(); err != nil {
				t.Fatal(err)
			}
		}
		for _, shard := range []int{2, 5} {
			it := session.Query(`SELECT at, online, idle, invisible, online_count, idle_count, TTL(online) FROM `+ks+`.shard_snapshots WHERE shard = ? AND hour = ?`, shard, recent).IterContext(ctx)
			var (
				at              time.Time
				on, idle, invis []byte
				nOn, nIdle      int
				left            int
				got             [][]uint32
			)
			for it.Scan(&at, &on, &idle, &invis, &nOn, &nIdle, &left) {
				got = append(got, decode(on), decode(idle), decode(invis))
				if nOn != len(decode(on)) || nIdle != len(decode(idle)) {
					t.Errorf("%s: snapshot of shard %d at %s counts %d online, %d idle; its bitmaps hold %v, %v", when, shard, at, nOn, nIdle, decode(on), decode(idle))
				}
				if left <= 0 || left > 24*3600 {
					t.Errorf("%s: snapshot of shard %d at %s lives %d s more, want what remained of its day", when, shard, at, left)
				}
			}
			if err := it.Close(); err != nil {
				t.Fatal(err)
			}
			// Newest first.
			want := [][]uint32{{kept}, {}, {}, {kept}, {}, {other}}
			if shard == 5 {
				want = [][]uint32{{kept}, {gone}, {}, {kept, gone}, {}, {other}}
			}
			if !slices.EqualFunc(got, want, slices.Equal[[]uint32]) {
				t.Errorf("%s: snapshots of shard %d = %v, want %v", when, shard, got, want)
			}
			var changes []string
			err := store.Changes(ctx, int32(shard), recent, recent.Add(2*time.Hour), func(c historystore.IndexChange) bool {
				changes = append(changes, time.UnixMicro(c.AtUs).Sub(recent).String()+"/"+strconv.Itoa(int(c.Index)))
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			wantChanges := []string{"5m0s/3"}
			if shard == 5 {
				wantChanges = []string{"5m0s/3", "5m0s/7", "15m0s/7", "1h0m0s/7"}
			}
			if !slices.Equal(changes, wantChanges) {
				t.Errorf("%s: changes of shard %d = %v, want %v", when, shard, changes, wantChanges)
			}
		}
	}
	check("after the erasure")

	write() // a replay writes the old rows again, at their old write times
	check("after a replay")
	again, err := store.ErasedIndexRows(ctx, "gone", 2, gone, now, now.Add(-10*time.Minute), erasedTS)
	if err != nil || again.Len() != 0 {
		t.Errorf("a second erasure found %d rows (%v), want none", again.Len(), err)
	}
}
