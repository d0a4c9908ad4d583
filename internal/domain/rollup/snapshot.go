package rollup

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// snapshotVersion leads every checkpoint so that a later layout can still read this one.
// Version 2 added the point-in-time state, version 3 each hour's shown users.
const snapshotVersion = 3

// MarshalBinary is a checkpoint of the whole fold: restoring it with UnmarshalBinary and
// folding the rest of the log hands out the same rows as never having stopped. It is a
// function of the fold's content only (users in id order), so equal folds give equal
// bytes. Its size is about that of the state: the users with an unfinished day or
// session and the unfinished minutes and hours.
func (f *Fold) MarshalBinary() ([]byte, error) {
	b := []byte{snapshotVersion}
	b = binary.AppendVarint(b, int64(f.shard))
	b = appendBool(b, f.started)
	for _, v := range []int64{f.watermark, f.frontier, f.now} {
		b = binary.AppendVarint(b, v)
	}
	for _, v := range []uint64{f.stats.Applied, f.stats.Late, f.stats.Dropped, f.stats.Mismatched} {
		b = binary.AppendUvarint(b, v)
	}

	b = binary.AppendVarint(b, f.minStart)
	b = binary.AppendUvarint(b, uint64(len(f.mins)))
	dirty := f.minDirty != math.MaxInt64
	b = appendBool(b, dirty)
	if dirty {
		b = binary.AppendVarint(b, f.minDirty)
	}
	for _, v := range f.base {
		b = binary.AppendVarint(b, v)
	}
	for i := range f.mins {
		n := 0
		for s := range f.mins[i] {
			for k := range f.mins[i][s] {
				if f.mins[i][s][k] != 0 {
					n++
				}
			}
		}
		b = binary.AppendUvarint(b, uint64(n))
		for s := range f.mins[i] {
			for k, v := range f.mins[i][s] {
				if v != 0 {
					b = binary.AppendUvarint(b, uint64(s*3+k))
					b = binary.AppendVarint(b, int64(v))
				}
			}
		}
	}

	b = binary.AppendVarint(b, f.hourStart)
	b = binary.AppendUvarint(b, uint64(len(f.hours)))
	for _, h := range f.hours {
		b = appendBool(b, h.dirty)
		for _, set := range []*roaring.Bitmap{h.users, h.shown} {
			bm, err := set.ToBytes()
			if err != nil {
				return nil, fmt.Errorf("encoding an hour's users: %w", err)
			}
			b = binary.AppendUvarint(b, uint64(len(bm)))
			b = append(b, bm...)
		}
	}

	b = binary.AppendVarint(b, f.dayDone)
	b = binary.AppendVarint(b, f.dayBegun)

	b = binary.AppendUvarint(b, uint64(len(f.closed)))
	for _, c := range f.closed {
		b = appendString(b, c.user)
		b = binary.AppendVarint(b, c.start)
		b = binary.AppendVarint(b, c.end)
		for _, v := range c.spent {
			b = binary.AppendVarint(b, v)
		}
	}

	users := make([]*user, 0, len(f.users))
	for _, u := range f.users {
		users = append(users, u)
	}
	slices.SortFunc(users, func(a, b *user) int { return cmp.Compare(a.id, b.id) })
	b = binary.AppendUvarint(b, uint64(len(users)))
	for _, u := range users {
		b = appendString(b, u.id)
		b = binary.AppendUvarint(b, uint64(u.index))
		b = append(b, byte(u.status))
		b = binary.AppendVarint(b, u.since)
		b = binary.AppendVarint(b, u.last)
		b = binary.AppendVarint(b, u.sessStart)
		for _, v := range u.spent {
			b = binary.AppendVarint(b, v)
		}
		b = append(b, flags(u.sessDirty, u.inDirty))
		b = binary.AppendUvarint(b, uint64(len(u.days)))
		for _, p := range u.days {
			b = binary.AppendVarint(b, p.day)
			for _, v := range p.spent {
				b = binary.AppendVarint(b, v)
			}
			b = binary.AppendVarint(b, p.sessions)
			b = binary.AppendVarint(b, p.first)
			b = binary.AppendVarint(b, p.last)
			b = append(b, byte(p.lastStatus))
			b = binary.AppendVarint(b, p.sess)
			b = append(b, flags(p.seen, p.hasSess, p.dirty))
		}
	}
	return f.pit.marshal(b)
}

// UnmarshalBinary replaces the fold's state with checkpoint data taken by MarshalBinary
// from a fold of the same shard. The fold keeps its own Lateness; the frontier reached
// never moves back.
func (f *Fold) UnmarshalBinary(data []byte) error {
	g, err := decode(data)
	if err != nil {
		return fmt.Errorf("restoring rollup checkpoint: %w", err)
	}
	if g.shard != f.shard {
		return fmt.Errorf("restoring rollup checkpoint: it is of shard %d, not %d", g.shard, f.shard)
	}
	if g.pit.every != f.pit.every {
		return fmt.Errorf("restoring rollup checkpoint: it snapshots every %v, this fold every %v",
			time.Duration(g.pit.every)*time.Microsecond, time.Duration(f.pit.every)*time.Microsecond)
	}
	g.lateness = f.lateness
	*f = *g
	return nil
}

func decode(data []byte) (*Fold, error) {
	d := decoder{b: data}
	version := d.byte()
	if version != snapshotVersion && version != 2 {
		return nil, fmt.Errorf("unknown version %d", version)
	}
	f, _ := New(Config{})
	f.shard = int32(d.varint())
	if int64(f.shard) < 0 {
		d.fail("negative shard")
	}
	f.started = d.bool()
	f.watermark, f.frontier, f.now = d.time(), d.time(), d.time()
	f.stats.Applied, f.stats.Late, f.stats.Dropped, f.stats.Mismatched = d.uvarint(), d.uvarint(), d.uvarint(), d.uvarint()

	f.minStart = d.bucket()
	f.mins = make([]minute, d.count(1))
	if d.bool() {
		f.minDirty = d.bucket()
	}
	for k := range f.base {
		f.base[k] = d.varint()
	}
	for i := range f.mins {
		n := d.count(2)
		for range n {
			pos := d.uvarint()
			v := d.varint()
			if pos >= 60*3 || v < math.MinInt32 || v > math.MaxInt32 {
				d.fail("bad per-second count")
				break
			}
			f.mins[i][pos/3][pos%3] = int32(v)
		}
	}

	f.hourStart = d.bucket()
	f.hours = make([]hour, d.count(2))
	for i := range f.hours {
		h := &f.hours[i]
		h.dirty = d.bool()
		var err error
		if h.users, err = d.bitmap(); err != nil {
			return nil, fmt.Errorf("hour %d: %w", i, err)
		}
		if version == 2 {
			// A version 2 checkpoint holds no shown users: those of the hours it holds
			// are taken as all their users, as readers counted them before.
			h.shown = h.users.Clone()
			continue
		}
		if h.shown, err = d.bitmap(); err != nil {
			return nil, fmt.Errorf("hour %d: %w", i, err)
		}
	}

	f.dayDone, f.dayBegun = d.bucket(), d.bucket()
	// The held minutes and hours always end with the one holding the fold's time; a
	// checkpoint that says otherwise would make the next change fill a vast range.
	if f.started && d.err == nil &&
		(f.minStart+int64(len(f.mins)) != floorDiv(f.now, usMinute)+1 ||
			f.hourStart+int64(len(f.hours)) != floorDiv(f.now, usHour)+1) {
		d.fail("buckets do not end at the fold's time")
	}
	if !f.started && (len(f.mins) != 0 || len(f.hours) != 0) {
		d.fail("buckets before any time")
	}

	f.closed = make([]closedSession, d.count(4))
	for i := range f.closed {
		c := &f.closed[i]
		c.user = d.string()
		c.start, c.end = d.time(), d.time()
		for k := range c.spent {
			c.spent[k] = d.varint()
		}
	}

	n := d.count(8)
	for range n {
		u := &user{id: d.string()}
		u.index = uint32(d.uvarint())
		u.status = d.status(false)
		u.since, u.last, u.sessStart = d.time(), d.time(), d.time()
		for k := range u.spent {
			u.spent[k] = d.varint()
		}
		u.sessDirty, u.inDirty = d.flag(0), d.flag(1)
		d.next()
		if u.sessDirty && !present(u.status) {
			d.fail("open session of an offline user")
		}
		u.days = make([]dayPart, d.count(8))
		for i := range u.days {
			p := &u.days[i]
			p.day = d.bucket()
			for k := range p.spent {
				p.spent[k] = d.varint()
			}
			p.sessions = d.varint()
			p.first, p.last = d.time(), d.time()
			p.lastStatus = d.status(true)
			p.sess = d.time()
			p.seen, p.hasSess, p.dirty = d.flag(0), d.flag(1), d.flag(2)
			d.next()
			if i > 0 && p.day <= u.days[i-1].day {
				d.fail("days out of order")
			}
		}
		if d.err != nil {
			break
		}
		if _, dup := f.users[u.id]; dup || u.id == "" {
			return nil, errors.New("duplicate or empty user id")
		}
		f.users[u.id] = u
		if present(u.status) {
			f.alive.Add(u.index)
		}
		if visible(u.status) {
			f.shown.Add(u.index)
		}
		if u.inDirty {
			f.dirty = append(f.dirty, u)
		}
	}
	f.pit = d.pit(f.shard)
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, errors.New("trailing bytes")
	}
	slices.SortFunc(f.dirty, func(a, b *user) int { return cmp.Compare(a.id, b.id) })
	return f, nil
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func flags(bits ...bool) byte {
	var f byte
	for i, v := range bits {
		if v {
			f |= 1 << i
		}
	}
	return f
}

// decoder reads a checkpoint, remembering the first error so that the code above
// reads as a list of fields.
type decoder struct {
	b   []byte
	err error
	cur byte // flags byte being read
}

func (d *decoder) fail(msg string) {
	if d.err == nil {
		d.err = errors.New(msg)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) bool() bool {
	switch d.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail("bad boolean")
	return false
}

func (d *decoder) flag(i uint) bool {
	if i == 0 {
		d.cur = d.byte()
	}
	return d.cur&(1<<i) != 0
}

// next checks that a flags byte held no unknown bits.
func (d *decoder) next() {
	if d.cur&^7 != 0 {
		d.fail("unknown flags")
	}
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// time reads a microsecond time, refusing values whose arithmetic could overflow.
func (d *decoder) time() int64 {
	v := d.varint()
	if v < noFrontier || v > -noFrontier {
		d.fail("time out of range")
	}
	return v
}

// bucket reads a minute, hour or day number.
func (d *decoder) bucket() int64 {
	v := d.varint()
	if v < noFrontier/usSecond || v > -noFrontier/usSecond {
		d.fail("bucket out of range")
	}
	return v
}

// count reads a length, each element of which takes at least min bytes, so that a
// corrupt length cannot make the decoder allocate more than the data could hold.
func (d *decoder) count(min int) int {
	v := d.uvarint()
	if v > uint64(len(d.b)/min) {
		d.fail("count exceeds data")
		return 0
	}
	return int(v)
}

func (d *decoder) bytes() []byte {
	n := d.count(1)
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string { return string(d.bytes()) }

// bitmap reads a roaring bitmap in its portable format; a malformed one is an error,
// and so is reading past a failure (the bitmap is then empty).
func (d *decoder) bitmap() (*roaring.Bitmap, error) {
	bm := roaring.New()
	raw := d.bytes()
	if d.err != nil {
		return bm, nil
	}
	if err := bm.UnmarshalBinary(raw); err != nil {
		return nil, err
	}
	if err := bm.Validate(); err != nil {
		return nil, err
	}
	return bm, nil
}

// status reads a status; unset is allowed only where no span has set one yet.
func (d *decoder) status(unset bool) presence.Status {
	s := presence.Status(d.byte())
	if !valid(s) && (!unset || s != presence.StatusUnknown) {
		d.fail("bad status")
	}
	return s
}
