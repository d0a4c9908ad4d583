package rollup

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// # Point in time (Q5)
//
// Who was online, idle or invisible at an instant T, and any user's status at T, are
// read from two kinds of rows the fold hands out besides the rollups:
//
//   - a Snapshot of the shard every SnapshotEvery (a minute by default), at each
//     multiple of it: the users in each status just before that instant, as roaring
//     bitmaps of their dense indexes — the state after every change dated before it;
//   - every effective change, as a ShardChange keyed by shard, minute, time and index.
//
// The status at T is then the snapshot at the latest boundary S ≤ T with the changes
// dated in [S, T] applied in time order: exact to the microsecond, the same rule as
// everywhere in this package (a change takes effect at its instant). A snapshot is
// handed out once its boundary is at or before the frontier, when no change dated
// before it can come any more, so it never changes once written; a change is handed
// out at the Flush after it was applied (or sooner, by TakeChanges), at the time the
// fold gave it (a late change moved up to the frontier is written there), so snapshots
// and changes always agree. UserIndex rows name the user behind each index; a user's
// index never changes.
//
// Boundaries after the frontier, up to the watermark, are handed out too, marked
// Provisional: the state as the fold knows it, which only a late change (one dated
// before the boundary, arriving after it was handed out) can still alter. A Flush
// hands out again every provisional boundary such a change touched, and each boundary
// once more when it becomes final, under the same key: the last write wins. Readers
// of the recent past (inside the lateness) read them instead of the changes of the
// whole lateness. The first boundary is the first after the frontier of the first
// Advance, so a shard that never saw a change still has snapshots (of nobody) from
// then on: it is final by the clock.

// Snapshot is the users of a shard in each status just before At.
type Snapshot struct {
	Shard                   int32
	At                      time.Time
	Online, Idle, Invisible *roaring.Bitmap // the row's own copies
	// Provisional: At is after the frontier, so a late change may still alter it.
	Provisional bool
}

// ShardChange is one effective change of a shard, at the time the fold applied it.
type ShardChange struct {
	Shard  int32
	At     time.Time
	Index  uint32
	Status presence.Status
}

// UserIndex names the user holding a dense index of a shard.
type UserIndex struct {
	Shard  int32
	Index  uint32
	UserID string
}

// pitChange is an effective change waiting to be applied to the snapshot state.
type pitChange struct {
	at        int64
	index     uint32
	prev, cur presence.Status
}

// pit is the fold's point-in-time state: the bitmaps as of next (every change dated
// before the last boundary handed out), and the changes applied to the fold since.
type pit struct {
	every   int64 // µs between snapshots; a divisor of an hour
	next    int64 // the next boundary to hand out; noFrontier before the first change
	status  [3]*roaring.Bitmap
	pending []pitChange // not yet in status, in the order applied

	// Since the last Flush (or TakeChanges):
	changes []ShardChange
	users   []UserIndex

	// provDone is the latest boundary handed out provisionally (noFrontier: none),
	// dirtyAt the earliest time of a change recorded since the last Flush
	// (math.MaxInt64: none): the provisional boundaries after it are stale. Neither is
	// in a checkpoint: a restored fold hands every provisional boundary out again.
	provDone, dirtyAt int64
}

func newPIT(every time.Duration) pit {
	return pit{every: int64(every / time.Microsecond), next: noFrontier,
		status:   [3]*roaring.Bitmap{roaring.New(), roaring.New(), roaring.New()},
		provDone: noFrontier, dirtyAt: math.MaxInt64}
}

// startPIT sets the first boundary, the first after the frontier, once there is one.
func (f *Fold) startPIT() {
	if p := &f.pit; p.next == noFrontier && f.frontier != noFrontier {
		p.next = (floorDiv(f.frontier, p.every) + 1) * p.every
	}
}

// record notes an effective change; c.Index is its user's index.
func (f *Fold) recordPIT(userID string, index uint32, prev, cur presence.Status, at int64, newUser bool) {
	p := &f.pit
	// Before the first change nobody of the shard was present, so the first boundary
	// after the frontier holds the empty state plus what came since.
	f.startPIT()
	p.pending = append(p.pending, pitChange{at: at, index: index, prev: prev, cur: cur})
	p.dirtyAt = min(p.dirtyAt, at)
	p.changes = append(p.changes, ShardChange{Shard: f.shard, At: time.UnixMicro(at).UTC(), Index: index, Status: cur})
	if newUser {
		p.users = append(p.users, UserIndex{Shard: f.shard, Index: index, UserID: userID})
	}
}

// TakeChanges hands out the changes and user indexes recorded since they were last
// handed out, and nothing else. They are written once and never rewritten, so they
// can be written as soon as they are known, ahead of the rows a Flush gathers: readers
// of the recent past then see every change that has arrived.
func (f *Fold) TakeChanges() Rows {
	var r Rows
	p := &f.pit
	r.Changes, p.changes = p.changes, nil
	r.UserIndexes, p.users = p.users, nil
	return r
}

// flushPIT hands out the changes and user indexes recorded since the last Flush, a
// Snapshot for every boundary at or before the frontier, and a provisional one for
// every later boundary up to the watermark that is new or that a change since the last
// Flush altered.
func (f *Fold) flushPIT(r *Rows) {
	p := &f.pit
	r.Changes, p.changes = p.changes, nil
	r.UserIndexes, p.users = p.users, nil
	if p.next == noFrontier {
		return
	}
	slices.SortStableFunc(p.pending, func(a, b pitChange) int { return cmp.Compare(a.at, b.at) })
	i := 0
	for ; p.next <= f.frontier; p.next += p.every {
		for ; i < len(p.pending) && p.pending[i].at < p.next; i++ {
			c := p.pending[i]
			if k := slot(c.prev); k >= 0 {
				p.status[k].Remove(c.index)
			}
			if k := slot(c.cur); k >= 0 {
				p.status[k].Add(c.index)
			}
		}
		r.Snapshots = append(r.Snapshots, Snapshot{Shard: f.shard, At: time.UnixMicro(p.next).UTC(),
			Online: p.status[0].Clone(), Idle: p.status[1].Clone(), Invisible: p.status[2].Clone()})
	}
	p.pending = slices.Delete(p.pending, 0, i)
	f.flushProvisional(r)
}

// flushProvisional hands out the provisional boundaries in (frontier, watermark] that
// are new since the last Flush or after a change recorded since.
func (f *Fold) flushProvisional(r *Rows) {
	p := &f.pit
	defer func() { p.dirtyAt = math.MaxInt64 }()
	if f.watermark < p.next {
		return
	}
	first := p.provDone + p.every
	if p.dirtyAt != math.MaxInt64 {
		first = min(first, (floorDiv(p.dirtyAt, p.every)+1)*p.every)
	}
	last := floorDiv(f.watermark, p.every) * p.every
	if first > last {
		return
	}
	var work [3]*roaring.Bitmap
	for k, bm := range p.status {
		work[k] = bm.Clone()
	}
	i := 0
	for b := p.next; b <= last; b += p.every {
		for ; i < len(p.pending) && p.pending[i].at < b; i++ {
			c := p.pending[i]
			if k := slot(c.prev); k >= 0 {
				work[k].Remove(c.index)
			}
			if k := slot(c.cur); k >= 0 {
				work[k].Add(c.index)
			}
		}
		if b >= first {
			r.Snapshots = append(r.Snapshots, Snapshot{Shard: f.shard, At: time.UnixMicro(b).UTC(), Provisional: true,
				Online: work[0].Clone(), Idle: work[1].Clone(), Invisible: work[2].Clone()})
		}
	}
	p.provDone = max(p.provDone, last)
}

func (p *pit) marshal(b []byte) ([]byte, error) {
	b = binary.AppendVarint(b, p.every)
	b = binary.AppendVarint(b, p.next)
	for _, bm := range p.status {
		raw, err := bm.ToBytes()
		if err != nil {
			return nil, fmt.Errorf("encoding a snapshot bitmap: %w", err)
		}
		b = binary.AppendUvarint(b, uint64(len(raw)))
		b = append(b, raw...)
	}
	b = binary.AppendUvarint(b, uint64(len(p.pending)))
	for _, c := range p.pending {
		b = binary.AppendVarint(b, c.at)
		b = binary.AppendUvarint(b, uint64(c.index))
		b = append(b, byte(c.prev), byte(c.cur))
	}
	// Changes and user indexes not yet handed out: a checkpoint is taken after a Flush,
	// but keeping them makes the fold whole whenever it is taken.
	b = binary.AppendUvarint(b, uint64(len(p.changes)))
	for _, c := range p.changes {
		b = binary.AppendVarint(b, c.At.UnixMicro())
		b = binary.AppendUvarint(b, uint64(c.Index))
		b = append(b, byte(c.Status))
	}
	b = binary.AppendUvarint(b, uint64(len(p.users)))
	for _, u := range p.users {
		b = binary.AppendUvarint(b, uint64(u.Index))
		b = appendString(b, u.UserID)
	}
	return b, nil
}

func (d *decoder) pit(shard int32) pit {
	p := pit{every: d.varint(), next: d.varint(), provDone: noFrontier, dirtyAt: math.MaxInt64}
	if d.err == nil && (p.every <= 0 || usHour%p.every != 0) {
		d.fail("bad snapshot interval")
	}
	if d.err == nil && p.next != noFrontier && p.next%p.every != 0 {
		d.fail("snapshot boundary off the interval")
	}
	for k := range p.status {
		bm, err := d.bitmap()
		if err != nil {
			d.fail("bad snapshot bitmap: " + err.Error())
			bm = roaring.New()
		}
		p.status[k] = bm
	}
	p.pending = make([]pitChange, d.count(4))
	for i := range p.pending {
		c := &p.pending[i]
		c.at, c.index = d.time(), uint32(d.uvarint())
		c.prev, c.cur = d.status(false), d.status(false)
	}
	p.changes = make([]ShardChange, d.count(3))
	for i := range p.changes {
		c := &p.changes[i]
		c.Shard, c.At = shard, time.UnixMicro(d.time()).UTC()
		c.Index, c.Status = uint32(d.uvarint()), d.status(false)
	}
	p.users = make([]UserIndex, d.count(2))
	for i := range p.users {
		p.users[i] = UserIndex{Shard: shard, Index: uint32(d.uvarint()), UserID: d.string()}
	}
	return p
}
