package main

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

// progress is the shard_progress writes of the store so far: final marks (ProgressRow)
// and provisional marks (either row).
func progress(hs *harness) (final, provisional []time.Time) {
	hs.store.mu.Lock()
	defer hs.store.mu.Unlock()
	for _, st := range hs.store.stmts {
		v := st.Values()
		switch st.Statement() {
		case historystore.UpsertProgress:
			final = append(final, v[1].(time.Time))
			provisional = append(provisional, v[2].(time.Time))
		case historystore.UpsertProvisional:
			provisional = append(provisional, v[1].(time.Time))
		}
	}
	return final, provisional
}

// snapshots is the instants of the shard_snapshots written, with the users they hold.
func snapshots(hs *harness) map[int64]int {
	hs.store.mu.Lock()
	defer hs.store.mu.Unlock()
	out := map[int64]int{}
	for _, st := range hs.store.stmts {
		if st.Statement() == historystore.InsertSnapshot {
			v := st.Values()
			out[v[2].(time.Time).UnixMicro()] = v[6].(int) + v[7].(int) + v[8].(int)
		}
	}
	return out
}

func quietHarness(t *testing.T, end int64, committed int64, hasCommit bool) *harness {
	return quietHarnessSpan(t, span{0, end}, committed, hasCommit)
}

func quietHarnessSpan(t *testing.T, sp span, committed int64, hasCommit bool) *harness {
	hs := newHarness(t, func(c *Config) {
		c.QuietAfter = 2 * time.Second
		c.RollupInterval = 30 * time.Second
		c.FlushInterval = time.Second
	})
	hs.h.ends = &endOffsets{maxAge: time.Second, list: func(context.Context) (map[int32]span, error) {
		return map[int32]span{3: sp}, nil
	}}
	hs.h.committed = func(string, int32) (int64, bool) { return committed, hasCommit }
	return hs
}

// A changes partition that never had a record is final by the clock: its provisional
// mark follows the clock from the first quiet check, its final mark trails it by the
// lateness, and its snapshots (of nobody) start at the first boundary after the first
// frontier.
func TestQuietPartitionIsFinalByTheClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hs := quietHarness(t, 0, 0, false)
		start := time.Now()
		recs, done := hs.start(t.Context(), "ch")
		time.Sleep(3 * time.Second)
		synctest.Wait()
		_, prov := progress(hs)
		if len(prov) == 0 || !prov[len(prov)-1].Equal(start.Add(2*time.Second)) {
			t.Fatalf("after 3 s of a quiet partition, provisional marks %v; want the last at %v", prov, start.Add(2*time.Second))
		}
		time.Sleep(12 * time.Minute)
		synctest.Wait()
		final, prov := progress(hs)
		if len(final) == 0 {
			t.Fatal("no final mark after 12 minutes")
		}
		lastFinal, lastProv := final[len(final)-1], prov[len(prov)-1]
		if d := time.Since(lastProv); d < 0 || d > 2*time.Second {
			t.Errorf("provisional mark %v is %v behind the clock, want at most the quiet interval", lastProv, d)
		}
		if d := time.Since(lastFinal); d < 10*time.Minute || d > 10*time.Minute+30*time.Second+2*time.Second {
			t.Errorf("final mark %v is %v behind the clock, want the lateness (10m) plus at most a rollup interval", lastFinal, d)
		}
		snaps := snapshots(hs)
		first := start.Add(2 * time.Second).Add(-10 * time.Minute).Truncate(time.Minute).Add(time.Minute)
		for at := first; !at.After(lastFinal); at = at.Add(time.Minute) {
			if n, ok := snaps[at.UnixMicro()]; !ok || n != 0 {
				t.Errorf("snapshot at %v: written %v, users %d; want an empty one", at, ok, n)
			}
		}
		if _, ok := snaps[first.Add(-time.Minute).UnixMicro()]; ok {
			t.Errorf("a snapshot before the first frontier (%v)", first.Add(-time.Minute))
		}
		close(recs)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// A partition whose records the group has yet to deliver (committed before the end)
// waits for them: moving it to the clock first would make them late.
func TestQuietCheckWaitsForUndeliveredRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hs := quietHarness(t, 7, 5, true)
		recs, done := hs.start(t.Context(), "ch")
		time.Sleep(time.Minute)
		synctest.Wait()
		if final, prov := progress(hs); len(final)+len(prov) != 0 {
			t.Fatalf("marks written for a partition with records to come: final %v, provisional %v", final, prov)
		}
		close(recs)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// A partition whose records all went with the retention, with an older offset
// committed, has nothing left to deliver: it starts and moves to the clock.
func TestQuietPartitionWhoseLogAgedOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hs := quietHarnessSpan(t, span{7, 7}, 5, true)
		recs, done := hs.start(t.Context(), "ch")
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if _, prov := progress(hs); len(prov) == 0 {
			t.Fatal("no provisional mark for a partition whose log is empty")
		}
		close(recs)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// A partition that has read every record, and had none for the quiet interval, moves
// to the clock; one behind its end does not.
func TestQuietPartitionWithRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		on, off := pulsev1.Status_STATUS_ONLINE, pulsev1.Status_STATUS_OFFLINE
		var log []*kgo.Record
		for i, c := range []struct {
			user      string
			prev, cur pulsev1.Status
		}{{"u1", off, on}, {"u2", off, on}, {"u1", on, off}, {"u3", off, on}} {
			at := time.Now().Add(time.Duration(i-10) * time.Second)
			log = append(log, changeRecord(int64(i), &pulsev1.Change{UserId: c.user, EventId: fmt.Sprint("e", i),
				Previous: c.prev, Current: c.cur, ChangedAtUs: presence.Micros(at), Cause: pulsev1.Cause_CAUSE_EVENT,
				DeviceId: "phone", SourcePartition: 3, SourceOffset: int64(i), UserIndex: uint32(len(c.user))}))
		}
		hs := quietHarness(t, int64(len(log)), 0, false)
		recs, done := hs.start(t.Context(), "ch")
		recs <- log[:2]
		time.Sleep(10 * time.Second)
		synctest.Wait()
		_, prov := progress(hs)
		maxAt := log[1].Timestamp
		if len(prov) == 0 {
			t.Fatal("no provisional mark after a flush")
		}
		for _, p := range prov {
			if !p.Equal(maxAt) {
				t.Fatalf("provisional mark %v while the partition is behind its end; want the latest change's time %v", p, maxAt)
			}
		}
		recs <- log[2:]
		time.Sleep(10 * time.Second)
		synctest.Wait()
		_, prov = progress(hs)
		if last := prov[len(prov)-1]; time.Since(last) > 2*time.Second || time.Since(last) < 0 {
			t.Fatalf("caught up and quiet: provisional mark %v, want within the quiet interval of the clock %v", last, time.Now())
		}
		close(recs)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
