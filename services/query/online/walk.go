// Package online answers who is online from the per-shard status bitmaps the
// aggregator keeps in Redis, without reading users' states where it can: Page walks
// the bitmaps in (shard, index) order behind a Cursor, and BitmapCache spares a burst
// of "which of these users are online" questions a load of the same shard's bitmaps
// each.
//
// Why a walk visits every user online throughout it exactly once: a user's shard and
// bitmap index never change, every page starts where the previous one stopped (the
// cursor is the next (shard, index) to look at), and indexes only grow along the walk.
// Users who come and go meanwhile may or may not be listed.
package online

import (
	"context"
	"math"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

const (
	// MaxScan bounds the candidates one page with Query.ActiveSince examines; a page
	// may then hold fewer users than its limit while more follow.
	MaxScan = 10_000
	// scanChunk is how many candidates' states one round trip reads.
	scanChunk = 1000
	// maxLoadShards bounds the shards whose bitmaps one round trip loads.
	maxLoadShards = 16
)

// Query is what a walk lists.
type Query struct {
	// Statuses are the statuses listed, in statestore.Tracked order.
	Statuses []presence.Status
	// Limit is the most users one page holds.
	Limit int
	// ActiveSince, when set, keeps only users active since then: their states are read
	// for it, at most MaxScan candidates per page.
	ActiveSince time.Time
	// Public judges ActiveSince by the users' public last-active (presence.Public), as
	// for readers who are not operators.
	Public bool
	// Group, when set, lists the group's members only (docs/design.md, "Groups").
	Group string
}

// User is a user a page lists.
type User struct {
	ID     string
	Status presence.Status
}

// Page lists up to q.Limit users of a state of shards shards from pos on, in (shard,
// index) order, and the position the next page starts at (Shard == shards: the walk
// is complete).
func Page(ctx context.Context, store *statestore.Store, shards int, q Query, pos Position) ([]User, Position, error) {
	w := walk{store: store, n: shards, q: q}
	return w.page(ctx, pos)
}

// candidate is a user a bitmap lists, with where the walk goes on after it.
type candidate struct {
	shard  int
	index  uint32
	status presence.Status
	after  Position
}

// walk makes one page of a listing.
type walk struct {
	store  *statestore.Store
	n      int
	q      Query
	counts []statestore.Counts
}

// count is how many users shard sh holds in the listed statuses.
func (w *walk) count(sh int) uint64 {
	var c uint64
	for _, st := range w.q.Statuses {
		c += w.counts[sh].Of(st)
	}
	return c
}

// skipEmpty moves p past the shards that hold nobody to list. A count is written
// atomically with its bitmap, so a shard counted empty held nobody at that instant,
// and anyone online during the whole walk was in it then.
func (w *walk) skipEmpty(p Position) Position {
	for p.Shard < w.n && w.count(p.Shard) == 0 {
		p = Position{Shard: p.Shard + 1}
	}
	return p
}

// page lists up to the limit's users from pos on, and where the next page starts.
func (w *walk) page(ctx context.Context, pos Position) ([]User, Position, error) {
	var err error
	if w.q.Group != "" {
		w.counts, err = w.store.GroupCounts(ctx, w.n, w.q.Group)
	} else {
		w.counts, err = w.store.ShardCounts(ctx, w.n)
	}
	if err != nil {
		return nil, pos, err
	}
	out := make([]User, 0, min(w.q.Limit, 128))
	scanned := 0
	for pos = w.skipEmpty(pos); pos.Shard < w.n && len(out) < w.q.Limit; pos = w.skipEmpty(pos) {
		want := w.q.Limit - len(out)
		if !w.q.ActiveSince.IsZero() {
			if scanned >= MaxScan {
				break
			}
			want = min(scanChunk, MaxScan-scanned)
		}
		// Load the shards that, by their counts, hold the users wanted.
		var shards []int
		var sum uint64
		for sh := pos.Shard; sh < w.n && len(shards) < maxLoadShards && sum < uint64(want); sh++ {
			if c := w.count(sh); c > 0 {
				shards, sum = append(shards, sh), sum+c
			}
		}
		bms, err := w.store.LoadBitmapsIn(ctx, shards, w.q.Statuses, w.q.Group)
		if err != nil {
			return nil, pos, err
		}
		cands, next := collect(shards, bms, pos, want)
		scanned += len(cands)
		users, took, err := w.resolve(ctx, cands, w.q.Limit-len(out))
		if err != nil {
			return nil, pos, err
		}
		out = append(out, users...)
		if took < len(cands) {
			next = cands[took-1].after
		}
		pos = next
	}
	return out, pos, nil
}

// collect takes, in (shard, index) order, up to want users from the bitmaps of
// shards (ascending, all at or after pos.Shard), starting at pos. It returns them and
// where the walk goes on.
func collect(shards []int, bms []statestore.ShardBitmaps, pos Position, want int) ([]candidate, Position) {
	var out []candidate
	for k, sh := range shards {
		var from uint32
		if sh == pos.Shard {
			from = pos.From
		}
		it := newMerged(&bms[k], from)
		for it.hasNext() {
			idx, st := it.next()
			c := candidate{shard: sh, index: idx, status: st, after: Position{Shard: sh + 1}}
			if it.hasNext() && idx < math.MaxUint32 {
				c.after = Position{Shard: sh, From: idx + 1}
			}
			out = append(out, c)
			if len(out) == want {
				return out, c.after
			}
		}
	}
	if len(shards) == 0 {
		return out, pos
	}
	return out, Position{Shard: shards[len(shards)-1] + 1}
}

// merged iterates the indexes of a shard's loaded bitmaps in order, with the status
// of the bitmap each comes from (they are disjoint: a user has one status).
type merged struct {
	its [len(statestore.Tracked)]roaring.IntPeekable
}

func newMerged(b *statestore.ShardBitmaps, from uint32) *merged {
	m := &merged{}
	for i, bm := range b {
		if bm != nil {
			m.its[i] = bm.Iterator()
			m.its[i].AdvanceIfNeeded(from)
		}
	}
	return m
}

func (m *merged) hasNext() bool {
	for _, it := range m.its {
		if it != nil && it.HasNext() {
			return true
		}
	}
	return false
}

// next is the smallest index left; call only when hasNext.
func (m *merged) next() (uint32, presence.Status) {
	best := -1
	for i, it := range m.its {
		if it != nil && it.HasNext() && (best < 0 || it.PeekNext() < m.its[best].PeekNext()) {
			best = i
		}
	}
	idx := m.its[best].Next()
	// Should two bitmaps ever share an index, list it once.
	for i, it := range m.its {
		if i != best && it != nil && it.HasNext() && it.PeekNext() == idx {
			it.Next()
		}
	}
	return idx, statestore.Tracked[best]
}

// resolve turns candidates into users: their ids in one round trip, and with
// ActiveSince their states in another, keeping those active since then. It returns at
// most room users, and how many candidates they used up.
func (w *walk) resolve(ctx context.Context, cands []candidate, room int) ([]User, int, error) {
	batches := groupByShard(cands, func(c candidate) int { return c.shard })
	idx := make([]statestore.ShardIndexes, len(batches))
	for k, b := range batches {
		idx[k].Shard = cands[b.start].shard
		for _, c := range cands[b.start:b.end] {
			idx[k].Indexes = append(idx[k].Indexes, c.index)
		}
	}
	ids, err := w.store.UserIDs(ctx, idx)
	if err != nil {
		return nil, 0, err
	}
	var states [][]*presence.User
	if !w.q.ActiveSince.IsZero() {
		users := make([]statestore.ShardUsers, len(batches))
		for k := range batches {
			users[k] = statestore.ShardUsers{Shard: idx[k].Shard, IDs: ids[k]}
		}
		if states, err = w.store.LoadUserStates(ctx, users); err != nil {
			return nil, 0, err
		}
	}
	out := make([]User, 0, min(room, len(cands)))
	for k, b := range batches {
		for j := range b.end - b.start {
			id, c := ids[k][j], cands[b.start+j]
			if id == "" {
				continue
			}
			st := c.status
			if states != nil {
				u := states[k][j]
				// The state may be a moment newer than the bitmaps; it decides.
				if u == nil || w.lastActive(u).Before(w.q.ActiveSince) || !w.listed(u.Status) {
					continue
				}
				st = u.Status
			}
			out = append(out, User{ID: id, Status: st})
			if len(out) == room {
				return out, b.start + j + 1, nil
			}
		}
	}
	return out, len(cands), nil
}

func (w *walk) listed(st presence.Status) bool {
	for _, s := range w.q.Statuses {
		if s == st {
			return true
		}
	}
	return false
}

// span is a run [start, end) of a slice.
type span struct{ start, end int }

// groupByShard splits xs, ordered by shard, into runs of one shard each.
func groupByShard[T any](xs []T, shardOf func(T) int) []span {
	var out []span
	for i := range xs {
		if i == 0 || shardOf(xs[i]) != shardOf(xs[i-1]) {
			out = append(out, span{start: i, end: i + 1})
		} else {
			out[len(out)-1].end = i + 1
		}
	}
	return out
}

// lastActive is u's last-active as the walk's reader may know it.
func (w *walk) lastActive(u *presence.User) time.Time {
	if w.q.Public {
		return u.Public.LastActive
	}
	return u.LastActive
}
