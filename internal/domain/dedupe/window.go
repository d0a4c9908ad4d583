// Package dedupe is what a partition worker remembers of the recent log, to drop
// duplicate events and flag stale ones.
//
// A Window remembers what one Kafka partition saw within a horizon of log time:
// the event ids it carried, per user (to drop duplicates) and, per (user, device), the newest
// event time (to flag stale events). A partition worker rebuilds a Window from the log
// when it is assigned the partition, so its answers survive restarts and rebalances.
//
// # Why a bounded horizon decides staleness exactly
//
// Ingest refuses an event whose occurred-at is more than MaxSkew (PULSE_INGEST_MAX_SKEW,
// default 5m) away from its own clock at received-at, and an event without occurred-at
// takes its received-at as its time. So every event E satisfies
//
//	|E.time − E.received| ≤ MaxSkew.
//
// Event B is stale when an earlier event A of the same device has A.time > B.time.
// Then A.received − MaxSkew ≤ A.time, A.time > B.time, and B.time ≥ B.received − MaxSkew,
// hence A.received > B.received − 2×MaxSkew: any event that can make B stale was
// received less than 2×MaxSkew before B. A Window whose horizon is at least 2×MaxSkew
// therefore still holds every time that can matter, and forgetting older ones changes
// no answer. The history service checks horizon ≥ 2×MaxSkew at start.
//
// # Log time
//
// The clock of a Window is log time: the received-at of the events it is fed, in log
// order. It never goes backwards: a call whose at is earlier than one already seen
// (ingest instances' clocks disagree by milliseconds) is taken to happen at the newest at
// seen. Decisions thus depend only on the sequence of records, so a Window rebuilt by
// replaying the log answers exactly as the one that saw it live.
//
// # Memory
//
// Keys are kept as 128-bit keyed hashes (hash/maphash with two per-Window random seeds),
// not as strings: an entry costs the same whatever the id's length, and the chance that
// two distinct keys collide is about n²/2¹²⁹ for n remembered keys — nil in practice,
// and not steerable by a client because the seeds are secret and change per process.
// BenchmarkMemoryPerID reports the bytes per remembered id: about 77 on amd64 with Go 1.26
// (a 24-byte map slot and a 24-byte FIFO slot, plus the spare capacity of both), however
// long the ids are; keeping a 36-byte UUID string instead would add its 48-byte
// allocation and a 16-byte header in both the map and the FIFO.
package dedupe

import (
	"hash/maphash"
	"time"
)

// key is a 128-bit keyed hash of a (user, event id) or a (user, device) pair.
type key struct{ a, b uint64 }

// seen is a FIFO entry: key k was recorded at log time at (unix nanoseconds).
type seen struct {
	k  key
	at int64
}

// newest is what the Window keeps per (user, device): the newest event time and the
// log time at which it was recorded.
type newest struct {
	t  int64
	at int64
}

// Window is what one partition saw within the horizon. It is not safe for concurrent
// use: each partition worker owns one.
type Window struct {
	horizon int64 // nanoseconds
	clock   int64 // newest log time seen, unix nanoseconds; 0 before the first call
	s1, s2  maphash.Seed

	ids    map[key]int64 // id -> log time of its latest sighting
	idPeak int
	idFIFO fifo
	// maxIDs bounds the ids remembered (0: only the horizon does); evicted counts
	// the ids forgotten before their horizon to keep it.
	maxIDs  int
	evicted uint64
	dev     map[key]newest
	devPeak int
	devFIFO fifo
}

// NewWindow returns an empty Window that remembers for horizon of log time.
func NewWindow(horizon time.Duration) *Window {
	return &Window{
		horizon: int64(horizon),
		s1:      maphash.MakeSeed(),
		s2:      maphash.MakeSeed(),
		ids:     make(map[key]int64),
		dev:     make(map[key]newest),
	}
}

// Duplicate records event id of user at log time at (the event's received-at) and
// reports whether the user had an event of that id within the horizon before at. Ids
// are a client's idempotency keys, scoped to the user: one user's id never makes
// another user's event a duplicate.
func (w *Window) Duplicate(user, id string, at time.Time) bool {
	now := w.advance(at)
	k := w.pairKey(user, id)
	prev, dup := w.ids[k]
	if dup && prev == now {
		return true // already recorded at this very log time
	}
	w.ids[k] = now
	w.idPeak = max(w.idPeak, len(w.ids))
	w.idFIFO.push(seen{k, now})
	for w.maxIDs > 0 && len(w.ids) > w.maxIDs {
		e, _ := w.idFIFO.front()
		w.idFIFO.pop()
		if w.ids[e.k] == e.at {
			delete(w.ids, e.k)
			w.evicted++
		}
	}
	return dup
}

// LimitIDs bounds the ids remembered to n (0: no bound but the horizon's). Past it the
// oldest are forgotten before their horizon: a copy of one arriving later is no longer
// recognised as a duplicate. Staleness ((user, device) times) is not bounded: it
// decides answers, and the horizon alone bounds it.
func (w *Window) LimitIDs(n int) { w.maxIDs = max(n, 0) }

// EvictedIDs is how many ids were forgotten before their horizon because of LimitIDs.
func (w *Window) EvictedIDs() uint64 { return w.evicted }

// IDSpan is the log time the remembered ids cover now: the horizon, or less once
// LimitIDs evicts.
func (w *Window) IDSpan() time.Duration {
	e, ok := w.idFIFO.front()
	if !ok {
		return 0
	}
	return time.Duration(w.clock - e.at)
}

// Stale reports whether an event of (user, device) with event time t is older than
// the newest t seen for that pair within the horizon, and records t when newer. at is
// the event's log time (received-at). An event as old as the newest is not stale.
func (w *Window) Stale(user, device string, t time.Time, at time.Time) bool {
	now := w.advance(at)
	k := w.pairKey(user, device)
	ts := t.UnixNano()
	cur, ok := w.dev[k]
	if ok && ts <= cur.t {
		return ts < cur.t
	}
	// Only the event that set the newest time starts its horizon: by the argument in
	// the package comment, nothing received 2×MaxSkew after it can be older than it.
	w.dev[k] = newest{t: ts, at: now}
	w.devPeak = max(w.devPeak, len(w.dev))
	if !ok || cur.at != now {
		w.devFIFO.push(seen{k, now})
	}
	return false
}

// Len is the number of ids and (user, device) pairs remembered.
func (w *Window) Len() int { return len(w.ids) + len(w.dev) }

func (w *Window) pairKey(user, device string) key {
	// User, device and event ids never contain control characters
	// (presence.ValidateID), so a NUL between them keeps ("ab","c") and ("a","bc")
	// apart.
	var h maphash.Hash
	h.SetSeed(w.s1)
	h.WriteString(user)
	h.WriteByte(0)
	h.WriteString(device)
	a := h.Sum64()
	h.SetSeed(w.s2)
	h.WriteString(user)
	h.WriteByte(0)
	h.WriteString(device)
	return key{a, h.Sum64()}
}

// advance moves the clock to at (never backwards) and forgets what fell out of the
// horizon. Every entry is pushed and popped once, so the cost is amortised O(1).
func (w *Window) advance(at time.Time) int64 {
	if ns := at.UnixNano(); ns > w.clock {
		w.clock = ns
	}
	cutoff := w.clock - w.horizon
	for {
		e, ok := w.idFIFO.front()
		if !ok || e.at >= cutoff {
			break
		}
		w.idFIFO.pop()
		// A later sighting of the same id has its own, younger entry further back.
		if w.ids[e.k] == e.at {
			delete(w.ids, e.k)
		}
	}
	for {
		e, ok := w.devFIFO.front()
		if !ok || e.at >= cutoff {
			break
		}
		w.devFIFO.pop()
		if n, ok := w.dev[e.k]; ok && n.at == e.at {
			delete(w.dev, e.k)
		}
	}
	w.shrink()
	return w.clock
}

// shrink rebuilds a map that has emptied to a quarter of its peak: Go maps never give
// memory back, and a burst of traffic should not pin its footprint for the process's
// life. The copy costs O(len) once per 3/4·peak deletions: amortised O(1).
func (w *Window) shrink() {
	const minPeak = 4096
	if w.idPeak >= minPeak && len(w.ids) < w.idPeak/4 {
		m := make(map[key]int64, len(w.ids))
		for k, v := range w.ids {
			m[k] = v
		}
		w.ids, w.idPeak = m, len(m)
	}
	if w.devPeak >= minPeak && len(w.dev) < w.devPeak/4 {
		m := make(map[key]newest, len(w.dev))
		for k, v := range w.dev {
			m[k] = v
		}
		w.dev, w.devPeak = m, len(m)
	}
}

// fifo is a growable ring buffer of entries in log-time order.
type fifo struct {
	buf  []seen
	head int
	n    int
}

func (f *fifo) push(e seen) {
	if f.n == len(f.buf) {
		f.resize(max(16, 2*len(f.buf)))
	}
	f.buf[(f.head+f.n)%len(f.buf)] = e
	f.n++
}

func (f *fifo) front() (seen, bool) {
	if f.n == 0 {
		return seen{}, false
	}
	return f.buf[f.head], true
}

func (f *fifo) pop() {
	f.head = (f.head + 1) % len(f.buf)
	f.n--
	// Give memory back after a burst; halving at a quarter full keeps it amortised O(1).
	if len(f.buf) > 64 && f.n < len(f.buf)/4 {
		f.resize(len(f.buf) / 2)
	}
}

func (f *fifo) resize(size int) {
	buf := make([]seen, size)
	if f.n > 0 {
		if f.head+f.n <= len(f.buf) {
			copy(buf, f.buf[f.head:f.head+f.n])
		} else {
			k := copy(buf, f.buf[f.head:])
			copy(buf[k:], f.buf[:f.n-k])
		}
	}
	f.buf, f.head = buf, 0
}

// eraseDevice is the pseudo-device under which a Window keeps a user's erasure: no
// device id contains a NUL (presence.ValidateID).
const eraseDevice = "\x00erase"

// Erase records that user was erased at t (the erase event's occurred-at), at log time
// at (its received-at): until the horizon passes, Erased reports the user's events
// dated at or before t as in flight from before the erasure (docs/design.md,
// "Erasure"). By the argument of the package comment, an event dated at or before t
// is received at most MaxSkew after t, well within a horizon of 2×MaxSkew; and a
// Window rebuilt from the log replays the erase event, so the tombstone survives a
// restart.
func (w *Window) Erase(user string, t, at time.Time) {
	now := w.advance(at)
	k := w.pairKey(user, eraseDevice)
	ts := t.UnixNano()
	if cur, ok := w.dev[k]; ok && cur.t >= ts {
		return
	}
	w.dev[k] = newest{t: ts, at: now}
	w.devPeak = max(w.devPeak, len(w.dev))
	w.devFIFO.push(seen{k, now})
}

// Erased reports whether user was erased, within the horizon, at a time at or after t:
// an event of theirs dated t came from before the erasure and must not be applied.
// at is the event's log time.
func (w *Window) Erased(user string, t, at time.Time) bool {
	w.advance(at)
	cur, ok := w.dev[w.pairKey(user, eraseDevice)]
	return ok && t.UnixNano() <= cur.t
}
