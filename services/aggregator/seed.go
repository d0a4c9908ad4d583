package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/cassx"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// HistoryDevice is the device a user restored from history is given while history
// says they are present: history keeps a user's status and times, not their devices.
// It times out like any device, OfflineAfter after the user's last-seen time.
const HistoryDevice = "pulse-history"

// history is where a rebuild finds the users the log no longer reaches back to.
type history interface {
	// Shard is the last known state of every user of shard but those skip names.
	Shard(ctx context.Context, shard int32, skip func(userID string) bool) (map[string]historystore.LastKnown, error)
}

// logStart is the first offset the partition's log still holds: above 0 once
// retention deleted its oldest records.
func (w *worker) logStart(ctx context.Context) (int64, error) {
	offs, err := kadm.NewClient(w.cl).ListStartOffsets(ctx, w.topic)
	if err != nil {
		return 0, fmt.Errorf("listing the start offsets of %s: %w", w.topic, err)
	}
	o, ok := offs.Lookup(w.topic, w.st.partition)
	if !ok {
		return 0, fmt.Errorf("no start offset of %s partition %d", w.topic, w.st.partition)
	}
	if o.Err != nil {
		return 0, fmt.Errorf("the start offset of %s partition %d: %w", w.topic, w.st.partition, o.Err)
	}
	return o.Offset, nil
}

// historyCaughtUp waits until history has written what a restore reads: every event
// of the partition before start (last-seen times) and every change presence.changes
// held when it was called (statuses). Changes are keyed by user like events, so with
// as many partitions a user's changes share its shard's number.
func (w *worker) historyCaughtUp(ctx context.Context, start int64) error {
	adm := kadm.NewClient(w.cl)
	changes, p := w.cfg.Kafka.ChangesTopic, w.st.partition
	ends, err := adm.ListEndOffsets(ctx, changes, w.topic)
	if err != nil {
		return fmt.Errorf("listing the end offsets of %s: %w", changes, err)
	}
	if n, m := len(ends[changes]), len(ends[w.topic]); n != m {
		return fmt.Errorf("%s has %d partitions and %s %d: history's shards are not the aggregator's", changes, n, w.topic, m)
	}
	end, ok := ends.Lookup(changes, p)
	if !ok || end.Err != nil {
		return fmt.Errorf("no end offset of %s partition %d: %v", changes, p, end.Err)
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		committed, err := adm.FetchOffsets(ctx, w.cfg.HistoryGroup)
		if err != nil {
			return fmt.Errorf("fetching the offsets of group %s: %w", w.cfg.HistoryGroup, err)
		}
		at := func(topic string) int64 {
			if o, ok := committed.Lookup(topic, p); ok && o.Err == nil {
				return o.At
			}
			return 0
		}
		atChanges, atEvents := at(changes), at(w.topic)
		if atChanges >= end.Offset && atEvents >= start {
			return nil
		}
		w.logger.Info("waiting for history to write the shard's last events and changes before restoring users from it",
			"group", w.cfg.HistoryGroup, "changes_committed", atChanges, "changes_end", end.Offset,
			"events_committed", atEvents, "log_start", start)
		select {
		case <-ctx.Done():
			return fmt.Errorf("history (group %s) has committed partition %d of %s through %d of %d and of %s through %d of %d: %w",
				w.cfg.HistoryGroup, p, changes, atChanges, end.Offset, w.topic, atEvents, start, ctx.Err())
		case <-tick.C:
		}
	}
}

// logUsers is every user with a record in the partition from offset from through upTo.
func (w *worker) logUsers(ctx context.Context, from, upTo int64) (map[string]struct{}, error) {
	users := map[string]struct{}{}
	err := w.readRange(ctx, w.topic, w.st.partition, time.UnixMilli(0), upTo+1, func(r *kgo.Record) error {
		if r.Offset >= from {
			users[string(r.Key)] = struct{}{}
		}
		return nil
	})
	return users, err
}

// seedFromHistory writes, before the log is folded, the users of the shard whose every
// event is older than start, the log's first offset: as history last recorded them.
// They are written in windows at offsets just below start, so the log's own windows
// follow them under the offset guard. It returns how many users it restored.
func (w *worker) seedFromHistory(ctx context.Context, start, upTo int64) (int, error) {
	if w.history == nil {
		return 0, errors.New("no history to restore from (PULSE_AGGREGATOR_REBUILD_FROM_HISTORY=false)")
	}
	if err := w.retryWithin(ctx, "waiting for history to catch up", w.cfg.HistoryWait, func(ctx context.Context) error {
		return w.historyCaughtUp(ctx, start)
	}); err != nil {
		return 0, err
	}
	// History commits an event before it writes the user's last-seen time, which it
	// holds for up to its status interval (docs/design.md, History).
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(w.cfg.HistoryStatusInterval):
	}
	inLog, err := w.logUsers(ctx, start, upTo)
	if err != nil {
		return 0, err
	}
	// Every user of the shard is read: users the log holds records of are folded from
	// the log, but a custom status set, or a group joined, before start is only in
	// history, and comes back from it (seedWindow).
	var states map[string]historystore.LastKnown
	err = w.retry(ctx, "reading the shard's users from history", func(ctx context.Context) (err error) {
		states, err = w.history.Shard(ctx, w.st.partition, func(string) bool { return false })
		if errors.Is(err, historystore.ErrNoHistory) {
			// Nothing to restore is a fact, not a failure: the shard had nobody
			// history saw (or history never ran), and the log is all there is.
			states, err = nil, nil
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	ids := make([]string, 0, len(states))
	restored := 0
	for id, st := range states {
		if _, ok := inLog[id]; !ok {
			restored++
		} else if st.CustomSetAt.IsZero() && len(st.Groups) == 0 {
			continue // the log tells all there is to know
		}
		ids = append(ids, id)
	}
	sort.Strings(ids)
	// Each restored user had at least one record before start, so there are at most
	// start of them, and one window per user at most fits below start.
	size := max(w.cfg.MaxWindowRecords, (len(ids)+int(start)-1)/int(max(start, 1)))
	windows := (len(ids) + size - 1) / size
	for k := range windows {
		part := ids[k*size : min((k+1)*size, len(ids))]
		win := seedWindow(&w.st, start-int64(windows-k), part, states, inLog)
		win.Written, win.Rebuilding = w.st.written, true
		if err := w.retry(ctx, "writing restored users", func(ctx context.Context) error {
			_, err := w.store.WriteWindow(ctx, win)
			return err
		}); err != nil {
			return 0, err
		}
		w.st.written, w.st.offset = win.LastOffset+1, win.LastOffset
		w.st.next, w.st.bitmaps = win.Next, win.Bitmaps
		w.st.staged.commit()
	}
	return restored, nil
}

// seedWindow is the window that registers ids, users new to the shard, with their
// last known states, at offset last: in full for users the log holds no record of,
// and only their custom status and groups for those in inLog, which the log's records
// then fold on (a member event still in the log applies after the membership history
// recorded, which it may repeat). It has no changes: restoring a user changes nothing
// anyone saw. Its group changes are staged in st.staged, like a fold's.
func seedWindow(st *shardState, last int64, ids []string, states map[string]historystore.LastKnown, inLog map[string]struct{}) *statestore.Window {
	w := &statestore.Window{
		Shard:      int(st.partition),
		LastOffset: last,
		Next:       st.next,
		Users:      make(map[string]*presence.User, len(ids)),
	}
	for i := range w.Bitmaps {
		w.Bitmaps[i] = st.bitmaps[i].Clone()
	}
	if st.groups.groups == nil {
		st.groups = newShardGroups(nil, st.bitmaps)
	}
	groups := newGroupFold(&st.groups)
	st.staged = groups
	w.Groups = groups.touched
	// join restores u's groups once u's status is set, so that they count it.
	join := func(u *presence.User, s historystore.LastKnown) {
		for _, g := range s.Groups {
			groups.apply(&presence.Event{Kind: presence.KindMember, GroupID: g}, u)
		}
	}
	for _, id := range ids {
		s := states[id]
		u := presence.NewUser(w.Next)
		w.NewIDs = append(w.NewIDs, statestore.NewID{UserID: id, Index: w.Next})
		w.Next++
		u.Offset = last
		// A custom status past its until is restored too: readers never see it, and
		// the user's next event drops it (docs/design.md, "Custom status").
		u.Custom, u.CustomSetAt = s.Custom, s.CustomSetAt
		if _, ok := inLog[id]; ok {
			w.Users[id] = u
			join(u, s)
			continue
		}
		u.Status, u.Invisible = s.Status, s.Status == presence.Invisible
		u.LastUpdated, u.LastActive, u.LastSeen = s.LastUpdated, s.LastActive, s.LastSeen
		if s.Status != presence.Offline {
			d := presence.Device{ID: HistoryDevice, Status: presence.Online, LastSeen: s.LastSeen}
			if s.Status == presence.Idle {
				d.Status = presence.Idle
			}
			u.Devices = []presence.Device{d}
		}
		if s.Status == presence.Invisible {
			// History keeps no public times: what readers who are not operators knew
			// before the user went invisible is lost, so they know nothing, rather
			// than the times of the invisible period (docs/design.md, "Invisible
			// looks offline").
			u.Devices[0].Hidden = true
		} else {
			u.ResetPublic()
		}
		w.Users[id] = u
		if i := trackedIndex(s.Status); i >= 0 {
			w.Bitmaps[i].Add(u.Index)
			w.Dirty[i] = true
		}
		join(u, s)
	}
	return w
}

// cassandraHistory reads history's tables through a store opened at the first
// rebuild that needs it: an aggregator never needs Cassandra until its log has been
// trimmed and Redis lost a shard, so it neither waits for Cassandra at start nor
// fails when Cassandra is down.
type cassandraHistory struct {
	cfg   cassx.Config
	mu    sync.Mutex
	store *historystore.Store
}

func (h *cassandraHistory) Shard(ctx context.Context, shard int32, skip func(string) bool) (map[string]historystore.LastKnown, error) {
	h.mu.Lock()
	if h.store == nil {
		s, err := historystore.Open(h.cfg)
		if err != nil {
			h.mu.Unlock()
			return nil, err
		}
		h.store = s
	}
	s := h.store
	h.mu.Unlock()
	return s.LastKnownOfShard(ctx, shard, skip)
}

// Close closes the store, if one was opened.
func (h *cassandraHistory) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.store != nil {
		h.store.Close()
	}
}
