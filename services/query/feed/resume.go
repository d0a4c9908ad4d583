package feed

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// resume brings a session that comes with a cursor back to where its client stood:
// the changes after the cursor come out of the hub's ring when it still holds them,
// else first out of the log, read up to where the ring begins. Once it reaches the
// ring the session attaches to the hub and goes on live, and the resume is done.
// Sessions that start with a snapshot never have one.
type resume struct {
	h       *Hub
	sub     *subscriber
	ids     []string            // the users watched from the start
	watches func(e *entry) bool // the session's: which changes it delivers
	from    Cursor
	// principal is whose replay slots the resume counts against.
	principal string

	// at is the position reached, the next offset per partition; nil until the
	// cursor has been checked against the log.
	at []int64
	// log reads [at, target) when the ring does not reach back to at; marks recognise
	// the duplicates it holds.
	log    *logReader
	target []int64
	marks  marks
	primed bool // the lookback before the cursor has been read into marks
	token  bool // holds one of the hub's log replay slots (Config.MaxLogReplays)
}

// Client-facing reasons a cursor cannot be served. They name no partition or offset:
// where the log stands is the server's business, and goes to its log.
const (
	whyOtherLog = "the cursor was issued for another change log"
	whyAhead    = "the cursor is ahead of the change log"
	whyRetained = "the change log no longer holds every change after the cursor (retention)"
	whyTrimmed  = "the change log was trimmed past the cursor while it was replayed"
)

// needsLog reports whether resuming from c reads the log: it belongs to this log
// and the ring no longer reaches back to it in some partition. A resume the check
// will expire needs no slot.
func (h *Hub) needsLog(c Cursor) bool {
	h.logMu.RLock()
	defer h.logMu.RUnlock()
	if c.Topic != h.fingerprint || len(c.Offsets) != len(h.base) {
		return false
	}
	for p, o := range c.Offsets {
		if o < h.base[p] {
			return true
		}
	}
	return false
}

// acquire takes a log replay slot for the resume, waiting up to Config.ReplayWait.
func (r *resume) acquire(ctx context.Context) error {
	if r.token {
		return nil
	}
	if err := r.h.replays.acquire(ctx, r.sub.ctx, r.principal, r.h.cfg.ReplayWait); err != nil {
		if errors.Is(err, ErrReplaysBusy) {
			r.h.m.resumes.WithLabelValues("busy").Inc()
		}
		return err
	}
	r.token = true
	return nil
}

// outcome is what one step of a resume got to.
type outcome struct {
	out     []outgoing // changes to send, in order
	live    bool       // attached to the hub: the session goes on live
	expired string     // why the cursor cannot be served, when it cannot
}

// step takes the resume one step further: checking the cursor, attaching to the hub
// or opening the log's next range, or reading one poll of the log. After an error a
// later step carries on where this one stopped.
func (r *resume) step(ctx context.Context) (outcome, error) {
	switch {
	case r.at == nil:
		if why, err := r.check(ctx); err != nil || why != "" {
			return outcome{expired: why}, err
		}
		return r.attach(ctx)
	case r.log == nil:
		return r.attach(ctx) // opening the next range failed before
	case r.log.finished():
		// The whole range was read, control records at its end included.
		for p, o := range r.target {
			r.at[p] = max(r.at[p], o)
		}
		return r.attach(ctx)
	}
	return r.read(ctx)
}

// check refuses a cursor of another log, then waits, up to Config.CatchUpTimeout, for
// the hub to reach the cursor: an instance further along the log may have issued it.
func (r *resume) check(ctx context.Context) (expired string, err error) {
	h := r.h
	h.logMu.RLock()
	n := len(h.pos)
	h.logMu.RUnlock()
	switch {
	case r.from.Topic != h.fingerprint:
		return whyOtherLog, nil
	case len(r.from.Offsets) != n:
		h.logger.Debug("a cursor names another partition count", "cursor_partitions", len(r.from.Offsets), "partitions", n)
		return whyOtherLog, nil
	}
	ok, err := h.waitFor(ctx, r.sub, r.from.Offsets)
	if err != nil {
		return "", err
	}
	if !ok {
		return whyAhead, nil
	}
	r.at = slices.Clone(r.from.Offsets)
	return "", nil
}

// attach registers the session live if the hub's ring reaches back to r.at, with the
// ring's changes after r.at to send first. Otherwise it opens the log from r.at to
// where the ring begins.
func (r *resume) attach(ctx context.Context) (outcome, error) {
	h := r.h
	entries, walk, res, err := h.attachAt(r.sub, r.ids, r.at)
	if err != nil {
		return outcome{}, err
	}
	switch res {
	case ahead:
		return outcome{expired: whyAhead}, nil
	case attached:
		if !r.primed {
			h.m.resumes.WithLabelValues("buffer").Inc()
		}
		return outcome{out: r.fromRing(entries, walk), live: true}, nil
	}
	// behind: walk is the ring's base, the log is read up to it.
	target := make([]int64, len(walk))
	for p := range walk {
		target[p] = max(walk[p], r.at[p])
	}
	from := r.at
	if !r.primed {
		h.m.resumes.WithLabelValues("log").Inc()
		starts, err := h.startOffsets(ctx)
		if err != nil {
			return outcome{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		for p, o := range r.at {
			if o < starts[p] {
				h.logger.Debug("a cursor is older than the change log", "partition", p, "log_start", starts[p], "cursor_offset", o)
				return outcome{expired: whyRetained}, nil
			}
		}
		// The partitions read start early enough to recognise duplicates of changes
		// delivered before the cursor.
		from = slices.Clone(target)
		for p, o := range r.at {
			if o < target[p] {
				from[p] = max(starts[p], o-int64(h.cfg.DedupeLookback))
			}
		}
		r.marks = newMarks(len(r.at))
		r.primed = true
	}
	// Open took the slot when the cursor was already behind the ring; one that fell
	// behind while the resume caught up takes it here, under the same bounds.
	if err := r.acquire(ctx); err != nil {
		return outcome{}, err
	}
	r.log.close()
	r.log = nil
	l, err := h.openLog(from, target)
	if err != nil {
		return outcome{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	r.log, r.target = l, target
	return outcome{}, nil
}

// read takes one poll of the log: records before r.at only teach the dedupe marks,
// the others are sent with the cursor after them.
func (r *resume) read(ctx context.Context) (outcome, error) {
	h := r.h
	pctx, cancel := context.WithTimeout(ctx, h.cfg.Kafka.RequestTimeout)
	stop := context.AfterFunc(r.sub.ctx, cancel)
	recs, err := r.log.poll(pctx)
	stop()
	cancel()
	if errors.Is(err, errTrimmed) {
		h.logger.Debug("the change log was trimmed during a replay", "err", err)
		return outcome{expired: whyTrimmed}, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return outcome{}, ctx.Err() // the caller gave up; the next step reads on
		}
		return outcome{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var out []outgoing
	for _, rec := range recs {
		p := rec.Partition
		e, derr := decodeChange(rec)
		if rec.Offset < r.at[p] {
			if derr == nil {
				r.marks.duplicate(e)
			}
			continue
		}
		r.at[p] = rec.Offset + 1
		if derr != nil || r.marks.duplicate(e) || !r.watches(e) {
			continue
		}
		out = append(out, outgoing{e: e, cursor: h.cursor(r.at)})
	}
	return outcome{out: out}, nil
}

// fromRing picks the ring's changes after r.at. The cursor after each is the hub's,
// unless r.at is still ahead of the walk in some partition: then the element-wise
// maximum of both.
func (r *resume) fromRing(entries []*entry, walk []int64) []outgoing {
	leading := 0 // partitions where r.at is ahead of the walk
	for p := range walk {
		if r.at[p] > walk[p] {
			leading++
		}
	}
	var out []outgoing
	for _, e := range entries {
		p := e.partition
		was := walk[p] < r.at[p]
		walk[p] = e.offset + 1
		if was && walk[p] >= r.at[p] {
			leading--
		}
		if e.offset < r.at[p] || !r.watches(e) {
			continue
		}
		o := outgoing{e: e}
		if leading > 0 {
			o.cursor = r.h.cursor(maxOffsets(r.at, walk))
		}
		out = append(out, o)
	}
	return out
}

// release closes the log and gives the replay slot back.
func (r *resume) release() {
	r.log.close()
	r.log = nil
	if r.token {
		r.h.replays.release(r.principal)
		r.token = false
	}
}

// maxOffsets is the element-wise maximum of a and b, in a new slice.
func maxOffsets(a, b []int64) []int64 {
	out := make([]int64, len(a))
	for i := range a {
		out[i] = max(a[i], b[i])
	}
	return out
}
