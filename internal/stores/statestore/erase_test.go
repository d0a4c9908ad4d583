package statestore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// A window's erasures delete the user's state field and their index's id entry, in the
// same atomic write, and nothing of anyone else's; a reader then finds no such user.
func TestWindowErases(t *testing.T) {
	s := readStore(t)
	ctx := context.Background()
	w := newWriter(t, s, 1, 1)
	evs := events(3, time.Date(2026, 11, 26, 7, 0, 0, 0, time.UTC))
	if ok, err := s.WriteWindow(ctx, w.window(0, evs)); err != nil || !ok {
		t.Fatalf("WriteWindow = %v, %v", ok, err)
	}
	gone := w.users["user-1"]
	win := w.window(0, nil)
	w.offset[0]++
	win.LastOffset = w.offset[0]
	win.Bitmaps[TrackedPos(gone.Status)].Remove(gone.Index)
	win.Erased = []Erased{{UserID: "user-1", Index: gone.Index, State: gone}}
	if ok, err := s.WriteWindow(ctx, win); err != nil || !ok {
		t.Fatalf("WriteWindow of the erasure = %v, %v", ok, err)
	}
	if u, err := s.Get(ctx, "user-1"); err != nil || u != nil {
		t.Errorf("Get(user-1) after its erasure = %+v, %v; want nil, nil", u, err)
	}
	if n, err := s.rdb.HExists(ctx, s.keys.State(0, 0), "user-1").Result(); err != nil || n {
		t.Errorf("state field of user-1 = %v, %v; want gone", n, err)
	}
	if n, err := s.rdb.HExists(ctx, s.keys.RevBucket(0, gone.Index), strconv.Itoa(int(gone.Index))).Result(); err != nil || n {
		t.Errorf("rev entry of index %d = %v, %v; want gone", gone.Index, n, err)
	}
	for _, id := range []string{"user-0", "user-2"} {
		if u, err := s.Get(ctx, id); err != nil || u == nil || u.Index != w.users[id].Index {
			t.Errorf("Get(%s) = %+v, %v; want untouched", id, u, err)
		}
	}
	_ = presence.Offline
}
