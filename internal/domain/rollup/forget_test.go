package rollup_test

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/rollup"
)

// TestForgetLeavesNoTrace: a fold that forgets a user half way through its history
// hands out, from then on, no row naming the user and no bitmap or change holding the
// user's index, and its checkpoint holds neither; every other user's sessions and days
// end up exactly as in a fold that never saw the forgotten user.
func TestForgetLeavesNoTrace(t *testing.T) {
	for seed := range uint64(4) {
		r := genRun(rand.New(rand.NewPCG(seed, 41)), 60)
		// The forgotten user: the one with the most changes.
		x := 0
		for u := range r.changes {
			if len(r.changes[u]) > len(r.changes[x]) {
				x = u
			}
		}
		id, index := r.ids[x], r.index[x]
		isX := func(o op) bool { return o.kind == opApply && o.c.UserID == id }
		// The cut: just after a change that makes the user present, from the middle
		// on, so the provisional snapshots written before it hold the index.
		cut := len(r.ops) / 2
		for ; cut < len(r.ops) && !(isX(r.ops[cut]) && r.ops[cut].c.Current != presence.Offline); cut++ {
		}
		for cut++; cut < len(r.ops) && r.ops[cut].kind != opFlush; cut++ {
		}
		cut++
		var without []op
		for _, o := range r.ops {
			if !isX(o) {
				without = append(without, o)
			}
		}
		never := upsert(t, do(t, newFold(t), without))

		f := newFold(t)
		before := do(t, f, r.ops[:cut])
		frontier := f.Frontier()
		f.Forget(id, index)
		var rest []op
		for _, o := range r.ops[cut:] {
			if !isX(o) {
				rest = append(rest, o)
			}
		}
		// A Flush right after the forgetting, before any other change could make the
		// fold write the provisional snapshots again anyway.
		after := append([]rollup.Rows{f.Flush()}, do(t, f, append(rest, op{kind: opFlush}))...)
		for i, rows := range after {
			for _, s := range rows.Sessions {
				if s.UserID == id {
					t.Fatalf("seed %d, flush %d after forgetting %s: its session %v", seed, i, id, s.Start)
				}
			}
			for _, d := range rows.Days {
				if d.UserID == id {
					t.Fatalf("seed %d, flush %d after forgetting %s: its day %v", seed, i, id, d.Day)
				}
			}
			for _, h := range rows.Hours {
				if h.Users.Contains(index) || h.Shown.Contains(index) {
					t.Fatalf("seed %d, flush %d: hour %v holds the forgotten index %d", seed, i, h.Hour, index)
				}
			}
			for _, s := range rows.Snapshots {
				if s.Online.Contains(index) || s.Idle.Contains(index) || s.Invisible.Contains(index) {
					t.Fatalf("seed %d, flush %d: snapshot %v (provisional %v) holds the forgotten index %d", seed, i, s.At, s.Provisional, index)
				}
			}
			for _, c := range rows.Changes {
				if c.Index == index {
					t.Fatalf("seed %d, flush %d: a change of the forgotten index at %v", seed, i, c.At)
				}
			}
			for _, u := range rows.UserIndexes {
				if u.UserID == id {
					t.Fatalf("seed %d, flush %d: the index row of %s", seed, i, id)
				}
			}
		}
		// Snapshots written provisionally before the forgetting are written again
		// without the index by the next Flush: the table holds it at no instant after
		// the frontier then, nor at the end.
		for _, s := range append(snapshotTable(append(before, after[0])), snapshotTable(append(before, after...))...) {
			if s.At.After(frontier) && (s.Online.Contains(index) || s.Idle.Contains(index) || s.Invisible.Contains(index)) {
				t.Fatalf("seed %d: the snapshot held at %v (after the frontier %v) still holds the forgotten index", seed, s.At, frontier)
			}
		}
		cp, err := f.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(cp, []byte(id)) {
			t.Fatalf("seed %d: the checkpoint still names %s", seed, id)
		}
		got := upsert(t, append(before, after...))
		for k, s := range got.sessions {
			if s.UserID == id {
				delete(got.sessions, k) // written before the forgetting: the caller erases them
			}
		}
		for k, d := range got.days {
			if d.UserID == id {
				delete(got.days, k)
			}
		}
		if !reflect.DeepEqual(got.sessions, never.sessions) || !reflect.DeepEqual(got.days, never.days) {
			t.Fatalf("seed %d: the other users' sessions or days differ from a fold that never saw %s", seed, id)
		}
		t.Logf("seed %d: forgot %s (%d changes) after op %d of %d", seed, id, len(r.changes[x]), cut, len(r.ops))
	}
}
