package rollup

import "slices"

// Forget removes every trace of userID, whose dense index is index, from the fold (an
// erasure, docs/design.md "Erasure"): the user's open session and unfinished days,
// the rows of theirs not handed out yet, their index in the bitmaps the fold still
// holds (present and shown now, every unfinished hour, the point-in-time state and
// its pending changes), and the point-in-time changes and index row not written yet.
// No later Flush, and no checkpoint, holds the user again; the unfinished hours and
// the provisional snapshots that held the index are handed out again without it. The
// per-second counts of the unfinished minutes stay: they are aggregates, as the
// minutes, hours and snapshots already written are (the caller erases what names the
// user). A change of the same user id applied afterwards starts a new user.
func (f *Fold) Forget(userID string, index uint32) {
	indexes := []uint32{index}
	if u := f.users[userID]; u != nil {
		if u.index != index {
			indexes = append(indexes, u.index)
		}
		delete(f.users, userID)
		if u.inDirty {
			f.dirty = slices.DeleteFunc(f.dirty, func(d *user) bool { return d == u })
		}
	}
	f.closed = slices.DeleteFunc(f.closed, func(c closedSession) bool { return c.user == userID })
	for _, i := range indexes {
		f.alive.Remove(i)
		f.shown.Remove(i)
		for k := range f.hours {
			h := &f.hours[k]
			if h.users.Contains(i) || h.shown.Contains(i) {
				h.users.Remove(i)
				h.shown.Remove(i)
				h.dirty = true
			}
		}
	}
	p := &f.pit
	held := func(i uint32) bool { return slices.Contains(indexes, i) }
	for _, bm := range p.status {
		for _, i := range indexes {
			bm.Remove(i)
		}
	}
	p.pending = slices.DeleteFunc(p.pending, func(c pitChange) bool { return held(c.index) })
	p.changes = slices.DeleteFunc(p.changes, func(c ShardChange) bool { return held(c.Index) })
	p.users = slices.DeleteFunc(p.users, func(u UserIndex) bool { return u.UserID == userID })
	// Every provisional boundary may hold the index: hand them all out again.
	p.provDone = noFrontier
}
