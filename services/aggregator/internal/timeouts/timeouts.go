// Package timeouts keeps the presence deadlines of the users of one partition: when
// each live device goes offline for want of events, when each online user goes idle
// for want of activity (docs/design.md guarantee 5), and when a custom status clears
// itself at its until. It is a min-heap with lazy deletion: an update pushes the new
// deadline and makes the old one obsolete, so neither updates nor expiry ever scan
// all users.
//
// The tracker decides nothing by itself: Due hands back the deadlines that passed,
// the aggregator writes each to the log as a timeout event carrying the basis (the
// last-seen, last-active or custom status set-at it was computed from), and the fold
// applies it only if that basis is still the newest — so a heartbeat racing a timeout
// always wins, and a custom status set again outlives the old one's until.
package timeouts

import (
	"container/heap"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// Kind is what a deadline decides.
type Kind uint8

const (
	// DeviceOffline: a live device sent nothing for OfflineAfter.
	DeviceOffline Kind = iota + 1
	// UserIdle: an online user did nothing for IdleAfter.
	UserIdle
	// CustomExpired: the until of a user's custom status came.
	CustomExpired
)

// Deadline is one pending decision.
type Deadline struct {
	At     time.Time
	UserID string
	// DeviceID is the device for DeviceOffline, presence.AllDevices otherwise.
	DeviceID string
	Kind     Kind
	// Basis is the device's last-seen (DeviceOffline), the user's last-active
	// (UserIdle) or when the custom status was set (CustomExpired) the deadline was
	// computed from.
	Basis time.Time
}

type key struct {
	user, device string
	kind         Kind
}

// Tracker holds the deadlines of one partition. Not safe for concurrent use.
type Tracker struct {
	offlineAfter, idleAfter time.Duration
	h                       deadlineHeap
	// live maps each pending key to its one valid heap entry; entries with another
	// basis are obsolete and skipped when they surface, or dropped by compact.
	live map[key]entry
}

// New returns an empty tracker.
func New(offlineAfter, idleAfter time.Duration) *Tracker {
	return &Tracker{offlineAfter: offlineAfter, idleAfter: idleAfter, live: make(map[key]entry)}
}

// Update replaces the user's deadlines with those of their current state u.
func (t *Tracker) Update(userID string, u *presence.User) {
	for _, d := range u.Devices {
		k := key{userID, d.ID, DeviceOffline}
		if d.Status == presence.Offline {
			delete(t.live, k)
			continue
		}
		basis := d.Heard()
		t.set(k, basis, basis.Add(t.offlineAfter))
	}
	if k := (key{userID, presence.AllDevices, CustomExpired}); u.Custom.Until.IsZero() {
		delete(t.live, k)
	} else {
		t.set(k, u.CustomSetAt, u.Custom.Until)
	}
	k := key{userID, presence.AllDevices, UserIdle}
	if u.Status != presence.Online {
		delete(t.live, k)
		return
	}
	basis := u.LastActive
	if basis.IsZero() {
		// Online through heartbeats alone: idle counts from when they came online.
		basis = u.LastUpdated
	}
	t.set(k, basis, basis.Add(t.idleAfter))
}

// set makes at the deadline of k, computed from basis.
func (t *Tracker) set(k key, basis, at time.Time) {
	if cur, ok := t.live[k]; ok && cur.basis.Equal(basis) {
		return // unchanged: the entry in the heap is still the valid one
	}
	e := entry{at: at, key: k, basis: basis}
	t.live[k] = e
	heap.Push(&t.h, e)
	// Each heartbeat obsoletes an entry; rebuild before they outnumber the valid ones.
	if t.h.Len() > 2*len(t.live)+1024 {
		t.compact()
	}
}

func (t *Tracker) compact() {
	t.h = t.h[:0]
	for _, e := range t.live {
		t.h = append(t.h, e)
	}
	heap.Init(&t.h)
}

func (t *Tracker) valid(e entry) bool {
	cur, ok := t.live[e.key]
	return ok && cur.basis.Equal(e.basis)
}

// Next is the earliest pending deadline, if any.
func (t *Tracker) Next() (time.Time, bool) {
	for t.h.Len() > 0 {
		if e := t.h[0]; t.valid(e) {
			return e.at, true
		}
		heap.Pop(&t.h)
	}
	return time.Time{}, false
}

// Due removes and returns every deadline at or before now, earliest first. A returned
// deadline stays gone until an Update arms it again.
func (t *Tracker) Due(now time.Time) []Deadline {
	var out []Deadline
	for t.h.Len() > 0 && !t.h[0].at.After(now) {
		e := heap.Pop(&t.h).(entry)
		if !t.valid(e) {
			continue
		}
		delete(t.live, e.key)
		out = append(out, Deadline{At: e.at, UserID: e.key.user, DeviceID: e.key.device, Kind: e.key.kind, Basis: e.basis})
	}
	return out
}

// Len is the number of pending deadlines.
func (t *Tracker) Len() int { return len(t.live) }

// Event is the timeout event that writes d to the log. Its id derives from the
// deadline alone, so a deadline decided twice (an aggregator that crashed after
// producing it decides again on restart) is one event after deduplication.
func (d Deadline) Event(receivedAt time.Time) presence.Event {
	kind, status := presence.KindStatus, presence.Offline
	switch d.Kind {
	case UserIdle:
		status = presence.Idle
	case CustomExpired:
		kind, status = presence.KindCustom, presence.StatusUnknown
	}
	sum := sha256.Sum256([]byte(d.UserID + "\x00" + d.DeviceID + "\x00" + strconv.Itoa(int(d.Kind)) + "\x00" +
		strconv.FormatInt(d.Basis.UnixMicro(), 10)))
	return presence.Event{
		ID:         "timeout-" + hex.EncodeToString(sum[:16]),
		UserID:     d.UserID,
		Kind:       kind,
		Status:     status,
		DeviceID:   d.DeviceID,
		OccurredAt: d.At,
		ReceivedAt: receivedAt,
		Source:     presence.SourceTimeout,
		LastSeen:   d.Basis,
	}
}

type entry struct {
	at    time.Time
	key   key
	basis time.Time
}

type deadlineHeap []entry

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h deadlineHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *deadlineHeap) Push(x any)        { *h = append(*h, x.(entry)) }
func (h *deadlineHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// Forget drops every deadline of the user whose last state was u: the user was erased
// (docs/design.md, "Erasure"), and no timeout may be decided for them any more.
func (t *Tracker) Forget(userID string, u *presence.User) {
	for _, d := range u.Devices {
		delete(t.live, key{userID, d.ID, DeviceOffline})
	}
	delete(t.live, key{userID, presence.AllDevices, CustomExpired})
	delete(t.live, key{userID, presence.AllDevices, UserIdle})
}
