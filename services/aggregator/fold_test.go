package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/services/aggregator/internal/timeouts"
)

var base = time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)

func rec(off int64, id, user string, kind presence.Kind, st presence.Status, device string, sec int) record {
	return record{offset: off, event: presence.Event{ID: id, UserID: user, Kind: kind, Status: st, DeviceID: device,
		OccurredAt: base.Add(time.Duration(sec) * time.Second), ReceivedAt: base, Source: presence.SourceAPI}}
}

func newShard() *shardState {
	s := &shardState{partition: 3, offset: 9}
	for i := range s.bitmaps {
		s.bitmaps[i] = roaring.New()
	}
	return s
}

// One window: new users get consecutive indexes, duplicates and stale events change
// nothing, each effective change moves the user between bitmaps and is in the outbox.
func TestFoldWindow(t *testing.T) {
	st := newShard()
	recs := []record{
		rec(10, "a1", "alice", presence.KindStatus, presence.Online, "phone", 1),
		rec(11, "b1", "bob", presence.KindHeartbeat, 0, "laptop", 1),
		rec(12, "a1", "alice", presence.KindStatus, presence.Online, "phone", 1), // duplicate id
		rec(13, "a2", "alice", presence.KindStatus, presence.Idle, "phone", 0),   // stale: older
		rec(14, "b2", "bob", presence.KindStatus, presence.Invisible, "laptop", 2),
		rec(15, "a3", "alice", presence.KindStatus, presence.Idle, "phone", 3),
	}
	seen := map[string]bool{}
	w, stats := fold(st, recs, map[string]*presence.User{}, func(e *presence.Event) bool {
		dup := seen[e.ID]
		seen[e.ID] = true
		return dup
	})
	if stats != (foldStats{applied: 4, stale: 1, duplicates: 1}) {
		t.Errorf("stats = %+v, want 4 applied, 1 stale, 1 duplicate", stats)
	}
	if w.LastOffset != 15 || w.Next != 2 || len(w.NewIDs) != 2 ||
		w.NewIDs[0] != (statestore.NewID{UserID: "alice", Index: 0}) || w.NewIDs[1] != (statestore.NewID{UserID: "bob", Index: 1}) {
		t.Errorf("window = offset %d next %d new %v", w.LastOffset, w.Next, w.NewIDs)
	}
	online, idle, invisible := w.Bitmaps[0], w.Bitmaps[1], w.Bitmaps[2]
	if online.GetCardinality() != 0 || !idle.Contains(0) || idle.GetCardinality() != 1 || !invisible.Contains(1) || invisible.GetCardinality() != 1 {
		t.Errorf("bitmaps online=%v idle=%v invisible=%v, want alice idle, bob invisible", online, idle, invisible)
	}
	if w.Dirty != [3]bool{true, true, true} {
		t.Errorf("dirty = %v", w.Dirty)
	}
	if st.bitmaps[0].GetCardinality() != 0 || st.bitmaps[1].GetCardinality() != 0 {
		t.Error("fold changed the worker's bitmaps before the write succeeded")
	}
	want := []string{
		"alice#0 a1 offline->online @10",
		"bob#1 b1 offline->online @11",
		"bob#1 b2 online->invisible @14",
		"alice#0 a3 online->idle @15",
	}
	got := make([]string, len(w.Outbox.Changes))
	for i, c := range w.Outbox.Changes {
		got[i] = fmt.Sprintf("%s#%d %s %s->%s @%d", c.UserId, c.UserIndex, c.EventId, presence.StatusFromPB(c.Previous), presence.StatusFromPB(c.Current), c.SourceOffset)
		if c.SourcePartition != 3 || c.Cause != pulsev1.Cause_CAUSE_EVENT {
			t.Errorf("change %d: partition %d cause %v", i, c.SourcePartition, c.Cause)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("changes = %q, want %q", got, want)
	}
	if w.Outbox.FirstOffset != 10 || w.Outbox.LastOffset != 15 {
		t.Errorf("outbox offsets %d..%d, want 10..15", w.Outbox.FirstOffset, w.Outbox.LastOffset)
	}
	if u := w.Users["alice"]; u.Offset != 15 || u.Status != presence.Idle {
		t.Errorf("alice = %+v, want idle at offset 15", u)
	}
}

// A device that timed out and was revived by an event of the same time as its newest
// (here a copy of it the duplicate horizon forgot) gets the same deadline again; the
// timeout decided for it then has the id of the one already applied, and must still
// take the device offline, or it would stay online for good.
func TestFoldTimeoutAfterRevivalOfTheSameInstant(t *testing.T) {
	st := newShard()
	tr := timeouts.New(time.Minute, time.Hour)
	users := map[string]*presence.User{}
	seen := map[string]bool{}
	duplicate := func(e *presence.Event) bool {
		dup := seen[e.ID]
		seen[e.ID] = true
		return dup
	}
	var changes []string
	step := func(recs ...record) {
		t.Helper()
		w, _ := fold(st, recs, users, duplicate)
		for id, u := range w.Users {
			tr.Update(id, u)
		}
		st.offset, st.next, st.bitmaps = w.LastOffset, w.Next, w.Bitmaps
		for _, c := range w.Outbox.Changes {
			changes = append(changes, fmt.Sprintf("%s %s->%s %v", c.EventId[:min(len(c.EventId), 8)],
				presence.StatusFromPB(c.Previous), presence.StatusFromPB(c.Current), c.Cause))
		}
	}
	timeout := func(off int64) record {
		t.Helper()
		due := tr.Due(base.Add(time.Hour))
		if len(due) != 1 || due[0].DeviceID != "phone" || due[0].Kind != timeouts.DeviceOffline {
			t.Fatalf("due = %+v, want the phone's offline deadline", due)
		}
		return record{offset: off, event: due[0].Event(base.Add(time.Hour))}
	}

	step(rec(10, "a1", "alice", presence.KindStatus, presence.Online, "phone", 1))
	first := timeout(11)
	step(first)
	// Forgotten by the horizon: the copy is not a duplicate and revives the phone.
	delete(seen, "a1")
	step(rec(12, "a1", "alice", presence.KindStatus, presence.Online, "phone", 1))
	again := timeout(13)
	if again.event.ID != first.event.ID {
		t.Fatalf("the deadline decided again has id %s, the first %s; this test needs them equal", again.event.ID, first.event.ID)
	}
	step(again)

	want := []string{
		"a1 offline->online CAUSE_EVENT",
		"timeout- online->offline CAUSE_TIMEOUT",
		"a1 offline->online CAUSE_EVENT",
		"timeout- online->offline CAUSE_TIMEOUT",
	}
	if fmt.Sprint(changes) != fmt.Sprint(want) {
		t.Errorf("changes = %q, want %q", changes, want)
	}
	if u := users["alice"]; u.Status != presence.Offline || st.bitmaps[0].GetCardinality() != 0 {
		t.Errorf("alice = %v with %d online in the bitmap, want offline and none", u.Status, st.bitmaps[0].GetCardinality())
	}
	if tr.Len() != 0 {
		t.Errorf("%d deadlines left, want none: alice has no live device", tr.Len())
	}
	// The same timeout once more (decided twice by an aggregator that crashed after
	// producing it) changes nothing.
	w, stats := fold(st, []record{{offset: 14, event: again.event}}, users, duplicate)
	if stats != (foldStats{stale: 1}) || len(w.Outbox.Changes) != 0 {
		t.Errorf("a timeout applied twice: stats %+v, %d changes; want 1 stale, none", stats, len(w.Outbox.Changes))
	}
}

// BenchmarkFoldWindow folds one window of 2,000 events over 1,000 users of a shard
// holding 100,000: the aggregator's per-window CPU work apart from Redis and Kafka.
func BenchmarkFoldWindow(b *testing.B) {
	st := newShard()
	for i := range uint32(100_000) {
		st.bitmaps[i%3].Add(i)
	}
	st.next = 100_000
	recs := make([]record, 2000)
	kinds := []presence.Kind{presence.KindHeartbeat, presence.KindActivity, presence.KindStatus}
	for i := range recs {
		recs[i] = rec(int64(i), fmt.Sprintf("e%d", i), fmt.Sprintf("user-%d", i%1000), kinds[i%3], 0, "phone", i)
		if recs[i].event.Kind == presence.KindStatus {
			recs[i].event.Status = []presence.Status{presence.Online, presence.Idle, presence.Offline}[i%3]
		}
	}
	stored := make(map[string]*presence.User, 1000)
	for i := range 1000 {
		stored[fmt.Sprintf("user-%d", i)] = presence.NewUser(uint32(i * 100))
	}
	b.ReportAllocs()
	for b.Loop() {
		users := make(map[string]*presence.User, len(stored))
		for id, u := range stored {
			c := *u
			users[id] = &c
		}
		fold(st, recs, users, func(*presence.Event) bool { return false })
	}
	b.ReportMetric(float64(len(recs))*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkBitmapCount is a shard's online count straight from its bitmap.
func BenchmarkBitmapCount(b *testing.B) {
	bm := roaring.New()
	for i := uint32(0); i < 625_000; i += 3 {
		bm.Add(i)
	}
	bm.RunOptimize()
	for b.Loop() {
		_ = bm.GetCardinality()
	}
}

// BenchmarkBitmapSerialize is the encoding of one shard's bitmap for the window write.
func BenchmarkBitmapSerialize(b *testing.B) {
	bm := roaring.New()
	for i := uint32(0); i < 625_000; i += 3 {
		bm.Add(i)
	}
	bm.RunOptimize()
	var n int
	for b.Loop() {
		buf, _ := bm.ToBytes()
		n = len(buf)
	}
	b.ReportMetric(float64(n), "bytes")
}

// A custom status's until clears it through the deadline machinery: the tracker arms a
// deadline at until, its timeout event clears the custom status, and every change of
// the custom status alone reaches the outbox as custom_only, with no bitmap touched.
func TestFoldCustomStatusClearsAtUntil(t *testing.T) {
	st := newShard()
	tr := timeouts.New(time.Hour, time.Hour)
	users := map[string]*presence.User{}
	step := func(recs ...record) []*pulsev1.Change {
		t.Helper()
		w, _ := fold(st, recs, users, func(*presence.Event) bool { return false })
		for id, u := range w.Users {
			tr.Update(id, u)
		}
		st.offset, st.next, st.bitmaps = w.LastOffset, w.Next, w.Bitmaps
		return w.Outbox.Changes
	}
	meeting := &presence.CustomStatus{Text: "In a meeting", Emoji: "📅", Until: base.Add(10 * time.Minute)}
	set := rec(10, "a1", "alice", presence.KindStatus, presence.Online, "phone", 1)
	set.event.Custom = meeting

	// Set with the status that brings her online: one change carrying both.
	changes := step(set)
	if len(changes) != 1 || changes[0].GetCustomOnly() || presence.StatusFromPB(changes[0].GetCurrent()) != presence.Online ||
		changes[0].GetCustom().GetText() != "In a meeting" {
		t.Fatalf("changes = %v, want offline -> online carrying the custom status", changes)
	}
	// A new text while online: a change of the custom status alone.
	lunch := rec(11, "a2", "alice", presence.KindStatus, presence.Online, "phone", 2)
	lunch.event.Custom = &presence.CustomStatus{Text: "lunch", Until: base.Add(10 * time.Minute)}
	changes = step(lunch)
	online := st.bitmaps[trackedIndex(presence.Online)]
	if len(changes) != 1 || !changes[0].GetCustomOnly() || changes[0].GetPrevious() != changes[0].GetCurrent() ||
		changes[0].GetCustom().GetText() != "lunch" || changes[0].GetChangedAtUs() != presence.Micros(base.Add(2*time.Second)) ||
		changes[0].GetCause() != pulsev1.Cause_CAUSE_EVENT || !online.Contains(0) || online.GetCardinality() != 1 {
		t.Fatalf("changes = %v (online %v), want lunch alone at +2s, alice still online", changes, online)
	}
	// The deadline is until, decided on the set-at of the newest custom status.
	next, ok := tr.Next()
	if !ok || !next.Equal(base.Add(10*time.Minute)) {
		t.Fatalf("next deadline %v %v, want until", next, ok)
	}
	due := tr.Due(base.Add(10 * time.Minute))
	if len(due) != 1 || due[0].Kind != timeouts.CustomExpired || !due[0].Basis.Equal(base.Add(2*time.Second)) {
		t.Fatalf("due = %+v, want the custom status deadline on +2s", due)
	}
	e := due[0].Event(base.Add(10 * time.Minute))
	if err := e.Validate(); err != nil {
		t.Fatalf("the timeout event: %v", err)
	}
	changes = step(record{offset: 12, event: e})
	if len(changes) != 1 || !changes[0].GetCustomOnly() || changes[0].GetCustom() != nil ||
		changes[0].GetCause() != pulsev1.Cause_CAUSE_TIMEOUT || changes[0].GetChangedAtUs() != presence.Micros(base.Add(10*time.Minute)) {
		t.Fatalf("changes = %v, want the custom status cleared by timeout at until", changes)
	}
	if !users["alice"].Custom.IsZero() || users["alice"].Status != presence.Online {
		t.Fatalf("alice = %+v, want online without a custom status", users["alice"])
	}
	// Decided again (a restart before the commit): stale, no change.
	if changes := step(record{offset: 13, event: e}); len(changes) != 0 {
		t.Fatalf("the timeout applied twice made %v", changes)
	}
	if _, ok := tr.Next(); ok {
		if due := tr.Due(base.Add(10 * time.Minute)); len(due) != 0 {
			t.Fatalf("deadlines left: %+v", due)
		}
	}
}
