package main

import (
	"slices"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

// record is one decoded event of the window with its log position.
type record struct {
	offset int64
	event  presence.Event
}

// shardState is what a partition's worker keeps between windows: the shard's bitmaps
// and next free index. User states are read per window; the bitmaps are too large to.
type shardState struct {
	partition int32
	offset    int64 // last record folded into Redis
	// written is one past the last offset this worker knows Redis holds for the shard
	// (loaded or written): a shard holding less lost its data (statestore.ErrStateLost).
	written int64
	next    uint32
	bitmaps [len(statestore.Tracked)]*roaring.Bitmap
	groups  shardGroups
	// staged is the last fold's group changes, which the caller commits once the
	// window is written.
	staged *groupFold
	// tombstones remembers erasures within the duplicate horizon (the worker's
	// dedupe.Window); nil: none are remembered (unit tests of other things).
	tombstones tombstones
}

// tombstones is the part of dedupe.Window that remembers erasures.
type tombstones interface {
	Erase(user string, t, at time.Time)
	Erased(user string, t, at time.Time) bool
}

// inFlight reports whether e is an event of an erased user dated at or before the
// erasure (docs/design.md, "Erasure"): sent before it, it must not bring them back. A
// timeout counts by its basis too: it was decided on the state the erasure removed.
func (st *shardState) inFlight(e *presence.Event) bool {
	if st.tombstones == nil {
		return false
	}
	if e.Source == presence.SourceTimeout && !e.LastSeen.IsZero() && st.tombstones.Erased(e.UserID, e.LastSeen, e.ReceivedAt) {
		return true
	}
	return st.tombstones.Erased(e.UserID, e.Time(), e.ReceivedAt)
}

// foldStats counts what a window did, for metrics.
type foldStats struct {
	applied, stale, duplicates int
	// devicesDropped counts live devices dropped past presence.MaxLiveDevices.
	devicesDropped int
	// groupJoinsRefused counts joins past presence.MaxGroupsPerUser.
	groupJoinsRefused int
	// erased counts users erased; inFlight the events of erased users dated at or
	// before their erasure, dropped.
	erased, inFlight int
}

// fold applies a window's records, in log order, to users (the current states of
// every user the window touches; missing ones are new) and returns the window's net
// write and its effective changes. duplicate decides docs/design.md guarantee 2 for
// every event but timeouts.
//
// fold mutates st and users only through the returned window: the caller commits st
// changes by replacing its shardState once the write succeeded.
func fold(st *shardState, recs []record, users map[string]*presence.User, duplicate func(*presence.Event) bool) (*statestore.Window, foldStats) {
	var stats foldStats
	w := &statestore.Window{
		Shard:      int(st.partition),
		LastOffset: st.offset,
		Next:       st.next,
		Users:      make(map[string]*presence.User),
		Outbox:     &pulsev1.ChangeBatch{Partition: st.partition, FirstOffset: -1},
	}
	for i := range w.Bitmaps {
		w.Bitmaps[i] = st.bitmaps[i]
	}
	if st.groups.groups == nil {
		st.groups = newShardGroups(nil, st.bitmaps)
	}
	groups := newGroupFold(&st.groups)
	st.staged = groups
	w.Groups = groups.touched
	copied := [len(statestore.Tracked)]bool{}
	bitmap := func(s presence.Status) *roaring.Bitmap {
		i := trackedIndex(s)
		if i < 0 {
			return nil
		}
		// Copy on first write, so a failed write leaves the worker's bitmaps as Redis has them.
		if !copied[i] {
			w.Bitmaps[i] = w.Bitmaps[i].Clone()
			copied[i] = true
		}
		w.Dirty[i] = true
		return w.Bitmaps[i]
	}

	for _, r := range recs {
		if w.Outbox.FirstOffset < 0 {
			w.Outbox.FirstOffset = r.offset
		}
		w.LastOffset = r.offset
		e := &r.event
		// A timeout is not checked against the duplicate horizon: applying one twice
		// is harmless (the second finds its device offline, or seen since, and is
		// stale), while dropping one can leave a device online for good. A device that
		// timed out is revived by a later event of the same time as its newest (a copy
		// of it past the horizon, or a second event of that instant); its deadline then
		// has the same basis, so the timeout decided again has the same id as the one
		// already applied.
		if e.Source != presence.SourceTimeout && duplicate(e) {
			stats.duplicates++
			continue
		}
		if e.Kind == presence.KindErase {
			if st.tombstones != nil {
				st.tombstones.Erase(e.UserID, e.OccurredAt, e.ReceivedAt)
			}
			if u, ok := users[e.UserID]; ok {
				stats.erased++
				w.Outbox.Changes = append(w.Outbox.Changes, erase(w, groups, bitmap, st.partition, r.offset, e, u))
				delete(users, e.UserID)
			}
			continue
		}
		if st.inFlight(e) {
			stats.inFlight++
			continue
		}
		u, ok := users[e.UserID]
		if !ok && e.Kind == presence.KindMember && e.Leave {
			// Nothing to leave: the user was never a member of anything.
			stats.applied++
			continue
		}
		if !ok {
			u = presence.NewUser(w.Next)
			w.NewIDs = append(w.NewIDs, statestore.NewID{UserID: e.UserID, Index: w.Next})
			w.Next++
			users[e.UserID] = u
		}
		if e.Kind == presence.KindMember {
			// Membership is not presence: the user's state changes only by being
			// registered (a new user needs an index to be a member) and by its offset,
			// which the feed's snapshots are ordered against the changes by.
			stats.applied++
			changed := groups.apply(e, u)
			if !ok || changed {
				u.Offset = r.offset
				w.Users[e.UserID] = u
			}
			if changed {
				w.Outbox.Changes = append(w.Outbox.Changes, &pulsev1.Change{
					UserId:          e.UserID,
					EventId:         e.ID,
					Previous:        presence.StatusToPB(u.Status),
					Current:         presence.StatusToPB(u.Status),
					ChangedAtUs:     presence.Micros(e.Time()),
					Cause:           pulsev1.Cause_CAUSE_EVENT,
					DeviceId:        e.DeviceID,
					SourcePartition: st.partition,
					SourceOffset:    r.offset,
					UserIndex:       u.Index,
					GroupId:         e.GroupID,
					Left:            e.Leave,
					Groups:          groups.of(u.Index),
				})
			}
			continue
		}
		out := u.Apply(e)
		if out.Stale {
			stats.stale++
			continue
		}
		stats.applied++
		stats.devicesDropped += out.DevicesDropped
		u.Offset = r.offset
		w.Users[e.UserID] = u
		if !out.Changed && !out.CustomChanged {
			continue
		}
		c := &pulsev1.Change{
			UserId:          e.UserID,
			EventId:         e.ID,
			Previous:        presence.StatusToPB(out.Previous),
			Current:         presence.StatusToPB(out.Current),
			Cause:           pulsev1.Cause_CAUSE_EVENT,
			DeviceId:        e.DeviceID,
			SourcePartition: st.partition,
			SourceOffset:    r.offset,
			UserIndex:       u.Index,
		}
		if e.Source == presence.SourceTimeout {
			c.Cause = pulsev1.Cause_CAUSE_TIMEOUT
		}
		if !u.Custom.IsZero() {
			c.Custom = u.Custom.ToPB()
		}
		c.Groups = groups.of(u.Index)
		if !out.Changed {
			// The custom status alone changed: the bitmaps, and every consumer of
			// status transitions, are untouched (docs/design.md, "Custom status").
			c.CustomOnly = true
			c.ChangedAtUs = presence.Micros(out.CustomAt)
			w.Outbox.Changes = append(w.Outbox.Changes, c)
			continue
		}
		if bm := bitmap(out.Previous); bm != nil {
			bm.Remove(u.Index)
		}
		if bm := bitmap(out.Current); bm != nil {
			bm.Add(u.Index)
		}
		groups.statusChanged(u.Index, out.Previous, out.Current)
		c.ChangedAtUs = presence.Micros(out.At)
		if !out.PublicAt.IsZero() && !out.PublicAt.Equal(out.At) {
			c.PublicChangedAtUs = presence.Micros(out.PublicAt)
		}
		w.Outbox.Changes = append(w.Outbox.Changes, c)
	}
	w.Outbox.LastOffset = w.LastOffset
	stats.groupJoinsRefused = groups.refused
	return w, stats
}

// erase removes user u of e, an erase event at offset, from the window: their state
// and id -> index entry are deleted with the window's write, their index leaves every
// status bitmap and group, and the caller forgets them, so that a later event of the
// same id registers a new user with a new index (docs/design.md, "Erasure"). It
// returns the erasure's change: to offline from the status the user had.
func erase(w *statestore.Window, groups *groupFold, bitmap func(presence.Status) *roaring.Bitmap,
	partition int32, offset int64, e *presence.Event, u *presence.User) *pulsev1.Change {
	if bm := bitmap(u.Status); bm != nil {
		bm.Remove(u.Index)
	}
	groups.forget(u)
	delete(w.Users, e.UserID)
	// A user registered in this window leaves no id -> index entry to write.
	w.NewIDs = slices.DeleteFunc(w.NewIDs, func(n statestore.NewID) bool { return n.Index == u.Index })
	w.Erased = append(w.Erased, statestore.Erased{UserID: e.UserID, Index: u.Index, State: u})
	return &pulsev1.Change{
		UserId:          e.UserID,
		EventId:         e.ID,
		Previous:        presence.StatusToPB(u.Status),
		Current:         presence.StatusToPB(presence.Offline),
		ChangedAtUs:     presence.Micros(e.OccurredAt),
		Cause:           pulsev1.Cause_CAUSE_ERASE,
		DeviceId:        presence.AllDevices,
		SourcePartition: partition,
		SourceOffset:    offset,
		UserIndex:       u.Index,
	}
}

func trackedIndex(s presence.Status) int {
	for i, t := range statestore.Tracked {
		if t == s {
			return i
		}
	}
	return -1
}
