package main

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

// rollupLog is a shard's changes: two users, sessions across midnight, and a change
// the aggregator emitted twice (offset 3 repeats the source position of offset 2).
func rollupLog() []*kgo.Record {
	on, off, idle := pulsev1.Status_STATUS_ONLINE, pulsev1.Status_STATUS_OFFLINE, pulsev1.Status_STATUS_IDLE
	type ch struct {
		user      string
		index     uint32
		prev, cur pulsev1.Status
		at        time.Time
		src       int64
	}
	midnight := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	changes := []ch{
		{"u1", 0, off, on, midnight.Add(-90 * time.Second), 10},
		{"u2", 1, off, on, midnight.Add(-30 * time.Second), 11},
		{"u1", 0, on, idle, midnight.Add(20 * time.Second), 12},
		{"u1", 0, on, idle, midnight.Add(20 * time.Second), 12}, // repeat
		{"u2", 1, on, off, midnight.Add(45 * time.Second), 14},
		{"u1", 0, idle, off, midnight.Add(3 * time.Minute), 15},
		{"u2", 1, off, on, midnight.Add(4 * time.Minute), 16},
	}
	var recs []*kgo.Record
	for i, c := range changes {
		recs = append(recs, changeRecord(int64(i), &pulsev1.Change{
			UserId: c.user, EventId: fmt.Sprint("e", c.src), Previous: c.prev, Current: c.cur,
			ChangedAtUs: presence.Micros(c.at), Cause: pulsev1.Cause_CAUSE_EVENT, DeviceId: "phone",
			SourcePartition: 3, SourceOffset: c.src, UserIndex: c.index,
		}))
	}
	return recs
}

// finalRollup is what Cassandra keeps of the rollup rows written: per key (the first
// three values), the write with the highest timestamp. Two writes of one key with one
// timestamp and different contents fail the test: Cassandra would merge them cell by
// cell, keeping the greater value of each, a row nobody wrote.
func finalRollup(hs *harness) map[string]string {
	type kept struct {
		ts  int64
		row string
	}
	rows := map[string]kept{}
	hs.store.mu.Lock()
	defer hs.store.mu.Unlock()
	for _, st := range hs.store.stmts {
		switch st.Table() {
		case historystore.TableCheckpoints, historystore.TableActivity, historystore.TableStatus:
			continue
		}
		d := describe(st)
		f := strings.Fields(d)
		n := 4 // table and primary key
		switch st.Table() {
		case historystore.TableSessions:
			n = 5 // user_sessions: session_start and start_us
		case historystore.TableProgress:
			n = 2 // shard_progress: the shard
		}
		key := strings.Join(f[:n], " ")
		v := st.Values()
		ts := v[len(v)-1].(int64)
		if k, ok := rows[key]; ok && ts == k.ts && d != k.row {
			hs.t.Errorf("%s written twice at timestamp %d:\n%s\n%s", key, ts, k.row, d)
		}
		if k, ok := rows[key]; !ok || ts >= k.ts {
			rows[key] = kept{ts, d}
		}
	}
	out := map[string]string{}
	for k, v := range rows {
		// A row's write time is that of the flush that last touched it, which depends
		// on how the log was cut into batches; its content does not.
		out[k] = v.row[:strings.LastIndexByte(v.row, ' ')]
	}
	return out
}

func runChanges(t *testing.T, hs *harness, batches ...[]*kgo.Record) {
	t.Helper()
	recs, done := hs.start(t.Context(), "ch")
	for _, b := range batches {
		recs <- b
	}
	close(recs)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The changes worker writes the rollups of its partition; a worker that takes the
// partition over restores the checkpoint written on revoke, re-reads the log after it
// and ends with the rows of a worker that saw everything.
func TestRollupRowsAndCheckpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := rollupLog()
		whole := newHarness(t, nil)
		runChanges(t, whole, log)
		want := finalRollup(whole)
		// u1's session crosses midnight: one session row, a row for each day.
		var sessions, days int
		for k, v := range want {
			if strings.HasPrefix(k, historystore.TableSessions) && strings.Contains(k, " u1 ") {
				sessions++
				start := time.Date(2026, 3, 1, 23, 58, 30, 0, time.UTC)
				if !strings.Contains(v, fmt.Sprintf(" 2026-03-01T23:58:30.000 %d 2026-03-02T00:03:00.000 false 110000000 160000000 0 ", start.UnixMicro())) {
					t.Errorf("u1's session = %s", v)
				}
			}
			if strings.HasPrefix(k, historystore.TableUserDaily) && strings.Contains(k, " u1 ") {
				days++
			}
		}
		if sessions != 1 || days != 2 {
			t.Errorf("u1: %d sessions, %d user_daily rows; want 1 and 2:\n%v", sessions, days, want)
		}
		m := whole.h.m
		if got := testutilValue(m.rollupChanges.WithLabelValues("repeated")); got != 1 {
			t.Errorf("repeated changes = %v, want 1", got)
		}

		// First worker: the first four records, then a revoke (checkpoint at offset 3).
		store := &fakeStore{}
		first := newHarness(t, nil)
		first.store = store
		first.h.writer.store, first.h.checkpoints = store, store
		runChanges(t, first, log[:2], log[2:4])
		cp, ok, err := store.LoadCheckpoint(t.Context(), "", 3)
		if err != nil || !ok || cp.Offset != 3 || cp.Generation != 1 {
			t.Fatalf("checkpoint %+v ok=%v err=%v, want generation 1 at offset 3", cp, ok, err)
		}
		// The group hands the next worker offset 5 on: offset 4 comes from the log.
		second := newHarness(t, nil)
		second.store = store
		second.h.writer.store, second.h.checkpoints = store, store
		second.log = log
		runChanges(t, second, log[5:])
		if got := finalRollup(second); !reflect.DeepEqual(got, want) {
			t.Errorf("rows after a takeover:\n%s\nwant:\n%s", render(got), render(want))
		}
		if len(second.reads) != 1 {
			t.Errorf("log reads %v, want one", second.reads)
		}
		if cp, _, _ := store.LoadCheckpoint(t.Context(), "", 3); cp.Offset != 6 || cp.Generation != 2 {
			t.Errorf("checkpoint after the second worker %+v, want generation 2 at offset 6", cp)
		}
	})
}

func render(m map[string]string) string {
	var lines []string
	for _, v := range m {
		lines = append(lines, v)
	}
	slicesSort(lines)
	return strings.Join(lines, "\n")
}

func slicesSort(s []string) { slices.Sort(s) }

func testutilValue(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }

// A change that arrives after a later-dated change of another user (within the
// lateness) closes a session whose open row was written with a later Through; the
// closed row must still be the one Cassandra keeps, and so must a minute's final
// counts when the watermark did not move between two flushes.
func TestRollupLateChangeWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
		rec := func(off int64, user string, index uint32, prev, cur pulsev1.Status, at time.Time) *kgo.Record {
			return changeRecord(off, &pulsev1.Change{UserId: user, EventId: fmt.Sprint("e", off), Previous: prev, Current: cur,
				ChangedAtUs: presence.Micros(at), Cause: pulsev1.Cause_CAUSE_EVENT, SourcePartition: 3, SourceOffset: off, UserIndex: index})
		}
		on, off := pulsev1.Status_STATUS_ONLINE, pulsev1.Status_STATUS_OFFLINE
		hs := newHarness(t, nil)
		runChanges(t, hs,
			[]*kgo.Record{rec(0, "u1", 0, off, on, t0), rec(1, "u2", 1, off, on, t0.Add(30*time.Second))},
			[]*kgo.Record{rec(2, "u1", 0, on, off, t0.Add(10*time.Second))},
		)
		got := map[string]string{}
		for k, v := range finalRollup(hs) {
			if strings.HasPrefix(k, historystore.TableSessions+" u1") || strings.HasPrefix(k, historystore.TableConcurrency) {
				got[k] = v
			}
		}
		session := got[fmt.Sprintf("user_sessions u1 2026-03-01T00:00:00.000 2026-03-02T10:00:00.000 %d", t0.UnixMicro())]
		if !strings.Contains(session, " 2026-03-02T10:00:10.000 false 10000000 0 0 2026-03-02T10:00:10.000 offline") {
			t.Errorf("u1's session = %q, want closed at 10:00:10", session)
		}
		minute := got["concurrency 2026-03-02T00:00:00.000 2026-03-02T10:00:00.000 3"]
		want := "[1 1 1 1 1 1 1 1 1 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1]"
		if !strings.Contains(minute, " 3 "+want+" ") {
			t.Errorf("10:00 = %q, want online %s", minute, want)
		}
	})
}
