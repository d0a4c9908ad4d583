package main

import (
	"reflect"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

// deletes is the deletions written, by statement, each as its values.
func deletes(hs *harness) map[historystore.Statement][][]any {
	hs.store.mu.Lock()
	defer hs.store.mu.Unlock()
	out := map[historystore.Statement][][]any{}
	for _, st := range hs.store.stmts {
		switch st.Statement() {
		case historystore.DeleteUserStatus, historystore.DeleteActivityDay, historystore.DeleteSessionsMonth,
			historystore.DeleteUserDailyYear, historystore.DeleteDayUser, historystore.DeleteUserIndex, historystore.DeleteShardUser:
			out[st.Statement()] = append(out[st.Statement()], st.Values())
		}
	}
	return out
}

// An erase event deletes the user's user_status row and user_activity days at the
// erasure's instant; an event of the user dated before it that arrives afterwards
// leaves no row, one dated after it does; nobody else is touched.
func TestEraseEventDeletesTheUsersRows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hs := newHarness(t, nil)
		recs, done := hs.start(t.Context(), "ev")
		at := ms(5000)
		erase := presence.Event{ID: "x1", UserID: "u1", Kind: presence.KindErase, DeviceID: presence.AllDevices,
			OccurredAt: at, ReceivedAt: at, Source: presence.SourceSystem}
		recs <- []*kgo.Record{
			eventRecord(0, event("e1", "u1", "phone", presence.KindStatus, ms(1000), ms(1000))),
			eventRecord(1, event("e2", "u2", "phone", presence.KindStatus, ms(2000), ms(2000))),
			eventRecord(2, erase),
			eventRecord(3, event("e3", "u1", "phone", presence.KindStatus, ms(4000), ms(6000))), // in flight
			eventRecord(4, event("e4", "u1", "phone", presence.KindStatus, ms(7000), ms(7000))), // after
		}
		close(recs)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got, want := rowIDs(hs.store.rows()), []string{"e:e1", "e:e2", "e:e4"}; !reflect.DeepEqual(filterEvents(got), want) {
			t.Fatalf("event rows %v, want %v: the event in flight from before the erasure leaves none", filterEvents(got), want)
		}
		d := deletes(hs)
		ts := presence.Micros(at)
		if got := d[historystore.DeleteUserStatus]; !reflect.DeepEqual(got, [][]any{{ts, "u1"}}) {
			t.Errorf("user_status deletions %v, want u1's at the erasure's instant", got)
		}
		days := d[historystore.DeleteActivityDay]
		if len(days) != 402 {
			t.Errorf("%d user_activity days deleted, want 400 back, the erasure's day and the next", len(days))
		}
		covered := false
		for _, v := range days {
			if v[0] != ts || v[1] != "u1" {
				t.Fatalf("user_activity deletion %v: want u1's at %d", v, ts)
			}
			covered = covered || v[2].(time.Time).Equal(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
		}
		if !covered {
			t.Error("the day of u1's events is not among the deleted user_activity days")
		}
		if n := testutilValue(hs.h.m.skipped.WithLabelValues(skipErased)); n != 1 {
			t.Errorf("%v events skipped as erased, want 1", n)
		}
	})
}

// filterEvents keeps the event rows of rowIDs' output.
func filterEvents(ids []string) []string {
	var out []string
	for _, id := range ids {
		if len(id) > 2 && id[:2] == "e:" {
			out = append(out, id)
		}
	}
	return out
}

// An erasure change makes the fold forget the user: the flush deletes the user's
// rollup rows at its own timestamp less one, after every rollup row of the user
// written before, and writes no row of the user itself.
func TestEraseChangeDeletesTheUsersRollups(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hs := newHarness(t, nil)
		on, off := pulsev1.Status_STATUS_ONLINE, pulsev1.Status_STATUS_OFFLINE
		mk := func(off0 int64, user string, index uint32, prev, cur pulsev1.Status, at time.Time, cause pulsev1.Cause) *kgo.Record {
			return changeRecord(off0, &pulsev1.Change{UserId: user, EventId: "e" + user + at.Format("150405.000"), Previous: prev, Current: cur,
				ChangedAtUs: presence.Micros(at), Cause: cause, DeviceId: "phone", SourcePartition: 3, SourceOffset: off0, UserIndex: index})
		}
		// The rows that hold u1's index without naming u1, as the store would find them.
		scrubbed := historystore.ShardChangeDeletion(3, sec(0), 10e6, 0, 0)
		hs.store.scrub = historystore.Scrub{Located: []historystore.Write{scrubbed}}
		recs, done := hs.start(t.Context(), "ch")
		recs <- []*kgo.Record{
			mk(0, "u1", 0, off, on, sec(10), pulsev1.Cause_CAUSE_EVENT),
			mk(1, "u2", 1, off, on, sec(11), pulsev1.Cause_CAUSE_EVENT),
		}
		time.Sleep(2 * time.Minute) // a flush and a checkpoint of what u1 did
		recs <- []*kgo.Record{mk(2, "u1", 0, on, off, sec(200), pulsev1.Cause_CAUSE_ERASE)}
		close(recs)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		var lastU1 int64 = -1 // the latest write time of a rollup row of u1
		eraseTS := int64(-1)
		scrubAt := -1
		hs.store.mu.Lock()
		for _, st := range hs.store.stmts {
			v := st.Values()
			switch st.Statement() {
			case historystore.InsertSession, historystore.InsertUserDay, historystore.InsertUserIndex:
				if v[0] == "u1" {
					if eraseTS >= 0 {
						t.Errorf("a rollup row of u1 written after its erasure: %s", describe(st))
					}
					lastU1 = max(lastU1, v[len(v)-1].(int64))
				}
			case historystore.InsertChange, historystore.UpdateStatus:
				if eraseTS >= 0 && (v[0] == "u1" || v[len(v)-1] == "u1") {
					t.Errorf("the erasure wrote a row of u1: %s", describe(st))
				}
			case historystore.DeleteUserIndex:
				eraseTS = v[0].(int64)
			case historystore.DeleteShardChange:
				if eraseTS >= 0 {
					t.Errorf("the index's rows were scrubbed after the rows that locate them were deleted")
				}
				scrubAt = len(hs.store.scrubbed)
			}
		}
		calls := hs.store.scrubbed
		hs.store.mu.Unlock()
		if scrubAt < 0 {
			t.Error("the rows the store found holding u1's index were not written")
		}
		if len(calls) != 1 || calls[0][0] != "u1" || calls[0][1] != int32(3) || calls[0][2] != uint32(0) || !calls[0][3].(time.Time).Equal(sec(200)) || calls[0][5] != eraseTS {
			t.Errorf("the store was asked for the rows holding %v, want u1's index 0 of shard 3, erased at %v, at the deletions' timestamp %d", calls, sec(200), eraseTS)
		}
		if lastU1 < 0 || eraseTS < lastU1 {
			t.Fatalf("u1's rollup rows were written up to timestamp %d, its deletion at %d: the deletion must shadow them", lastU1, eraseTS)
		}
		d := deletes(hs)
		if got := d[historystore.DeleteShardUser]; !reflect.DeepEqual(got, [][]any{{eraseTS, 3, 0, 0}}) {
			t.Errorf("shard_users deletions %v, want u1's index 0 of shard 3", got)
		}
		if n := len(d[historystore.DeleteDayUser]); n != 402 {
			t.Errorf("%d daily_users rows deleted, want 402", n)
		}
		if len(d[historystore.DeleteSessionsMonth]) < 13 || len(d[historystore.DeleteUserDailyYear]) < 2 {
			t.Errorf("sessions months %d, daily years %d deleted: want every month and year of 400 days", len(d[historystore.DeleteSessionsMonth]), len(d[historystore.DeleteUserDailyYear]))
		}
		cp, _, err := hs.store.LoadCheckpoint(t.Context(), hs.h.cfg.Group, 3)
		if err != nil {
			t.Fatal(err)
		}
		if contains(cp.Data, "u1") {
			t.Error("the checkpoint after the erasure still names u1")
		}
	})
}

func contains(b []byte, s string) bool {
	for i := 0; i+len(s) <= len(b); i++ {
		if string(b[i:i+len(s)]) == s {
			return true
		}
	}
	return false
}
