package rollup

import (
	"cmp"
	"encoding/binary"
	"fmt"
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
// out at the Flush after it was applied, at the time the fold gave it (a late change
// moved up to the frontier is written there), so snapshots and changes always agree.
// UserIndex rows name the user behind each index; a user's index never changes.

// Snapshot is the users of a shard in each status just before At.
type Snapshot struct {
	Shard                   int32
	At                      time.Time
	Online, Idle, Invisible *roaring.Bitmap // the row's own copies
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

	// Since the last Flush:
	changes []ShardChange
	users   []UserIndex
}

func newPIT(every time.Duration) pit {
	return pit{every: int64(every / time.Microsecond), next: noFrontier,
		status: [3]*roaring.Bitmap{roaring.New(), roaring.New(), roaring.New()}}
}

// record notes an effective change; c.Index is its user's index.
func (f *Fold) recordPIT(userID string, index uint32, prev, cur presence.Status, at int64, newUser bool) {
	p := &f.pit
	if p.next == noFrontier {
		// The first change: nobody of the shard was present before it, so the first
		// boundary after the frontier holds the empty state plus what came since.
		p.next = (floorDiv(f.frontier, p.every) + 1) * p.every
	}
	p.pending = append(p.pending, pitChange{at: at, index: index, prev: prev, cur: cur})
	p.changes = append(p.changes, ShardChange{Shard: f.shard, At: time.UnixMicro(at).UTC(), Index: index, Status: cur})
	if newUser {
		p.users = append(p.users, UserIndex{Shard: f.shard, Index: index, UserID: userID})
	}
}

// flushPIT hands out the changes and user indexes recorded since the last Flush and a
// Snapshot for every boundary at or before the frontier.
func (f *Fold) flushPIT(r *Rows) {
	p := &f.pit
	r.Changes, p.changes = p.changes, nil
	r.UserIndexes, p.users = p.users, nil
	if p.next == noFrontier || p.next > f.frontier {
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
	p := pit{every: d.varint(), next: d.varint()}
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
