package historystore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// Point in time (Q5 of docs/analytics.md; migrations/0007_point_in_time.cql): who was
// online, idle or invisible at any past instant, and any user's status then, from the
// rows pulse-history writes for it (RollupRows). A shard's state at T is its latest
// snapshot at or before T with the shard's changes dated from that snapshot up to T
// applied in time order; a change takes effect at its instant, so the state at T
// includes a change dated exactly T. internal/domain/rollup computes the rows.

// ErrNoSnapshot is returned when no snapshot of the shard lies within Lookback before
// the instant asked: before history started, beyond retention, or history is more than
// Lookback behind.
var ErrNoSnapshot = errors.New("no snapshot covers that instant")

// Lookback is how far before an instant a snapshot is searched for. Snapshots are
// written once final, about the fold's lateness (10 minutes) after their instant, so
// the latest one may be that old; an hour more covers a history that fell behind.
const Lookback = 75 * time.Minute

// ShardState is a shard's users in each status at an instant, as dense indexes.
type ShardState struct {
	At time.Time
	// Snapshot is the instant of the snapshot the state was built from.
	Snapshot                time.Time
	Online, Idle, Invisible *roaring.Bitmap
}

// Status is the status of index in s: offline when in no bitmap.
func (s *ShardState) Status(index uint32) presence.Status {
	switch {
	case s.Online.Contains(index):
		return presence.Online
	case s.Idle.Contains(index):
		return presence.Idle
	case s.Invisible.Contains(index):
		return presence.Invisible
	}
	return presence.Offline
}

// Apply moves c's user to the status c sets.
func (s *ShardState) Apply(c IndexChange) {
	s.Online.Remove(c.Index)
	s.Idle.Remove(c.Index)
	s.Invisible.Remove(c.Index)
	switch c.Status {
	case presence.Online:
		s.Online.Add(c.Index)
	case presence.Idle:
		s.Idle.Add(c.Index)
	case presence.Invisible:
		s.Invisible.Add(c.Index)
	}
}

// Restrict keeps in s only the indexes of members.
func (s *ShardState) Restrict(members *roaring.Bitmap) {
	s.Online.And(members)
	s.Idle.And(members)
	s.Invisible.And(members)
}

// IndexChange is one row of shard_changes: from AtUs (µs since the epoch) on, the
// user of Index is in Status.
type IndexChange struct {
	AtUs   int64
	Index  uint32
	Status presence.Status
}

const (
	snapshotCQL     = `SELECT at, online, idle, invisible FROM shard_snapshots WHERE shard = ? AND hour = ? AND at <= ? LIMIT 1`
	shardChangesCQL = `SELECT at_us, user_index, status FROM shard_changes WHERE shard = ? AND minute IN ? AND at_us >= ? AND at_us < ?`
	userNamesCQL    = `SELECT user_index, user_id FROM shard_users WHERE shard = ? AND block = ? AND user_index IN ?`
	locateCQL       = `SELECT shard, user_index FROM user_indexes WHERE user_id = ?`
	progressCQL     = `SELECT shard, final_through, provisional_through FROM shard_progress`
)

// StateAt is the state of shard at instant at.
func (s *Store) StateAt(ctx context.Context, shard int32, at time.Time) (*ShardState, error) {
	at = at.UTC()
	st := &ShardState{At: at}
	found := false
	for h := at.Truncate(time.Hour); !found && !h.Before(at.Add(-Lookback).Truncate(time.Hour)); h = h.Add(-time.Hour) {
		var on, idle, inv []byte
		err := s.session.Query(snapshotCQL, int(shard), h, at).ScanContext(ctx, &st.Snapshot, &on, &idle, &inv)
		if errors.Is(err, gocql.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the snapshot of shard %d: %w", shard, err)
		}
		found = true
		bms := [3]*roaring.Bitmap{roaring.New(), roaring.New(), roaring.New()}
		for k, raw := range [][]byte{on, idle, inv} {
			// raw is this query's own buffer: the bitmap may keep it.
			if _, err := bms[k].FromUnsafeBytes(raw); err != nil {
				return nil, fmt.Errorf("snapshot of shard %d at %s: %w", shard, st.Snapshot.UTC().Format(time.RFC3339), err)
			}
		}
		st.Online, st.Idle, st.Invisible = bms[0], bms[1], bms[2]
	}
	if !found || st.Snapshot.Before(at.Add(-Lookback)) {
		return nil, fmt.Errorf("shard %d at %s: %w", shard, at.Format(time.RFC3339Nano), ErrNoSnapshot)
	}
	st.Snapshot = st.Snapshot.UTC()
	// The changes dated from the snapshot up to at, at included.
	err := s.Changes(ctx, shard, st.Snapshot, at.Add(time.Microsecond), func(c IndexChange) bool {
		st.Apply(c)
		return true
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// changesMinutes is how many minute partitions of shard_changes one read asks for at
// once: one round trip for an hour of a shard rather than sixty (on the local stack,
// 16 shards × 60 minutes took ~1 s one minute at a time, ~35 ms an hour at a time).
const changesMinutes = 60

// Changes yields shard's changes dated in [from, to) in time order (the changes of one
// instant by index), until yield returns false. It reads up to changesMinutes minute
// partitions per query and holds their rows while it sorts them.
func (s *Store) Changes(ctx context.Context, shard int32, from, to time.Time, yield func(IndexChange) bool) error {
	lo, hi := from.UnixMicro(), to.UnixMicro()
	for m := from.UTC().Truncate(time.Minute); m.Before(to); {
		var minutes []time.Time
		for ; m.Before(to) && len(minutes) < changesMinutes; m = m.Add(time.Minute) {
			minutes = append(minutes, m)
		}
		rows, err := s.changesIn(ctx, shard, minutes, lo, hi)
		if err != nil {
			return err
		}
		for _, c := range rows {
			if !yield(c) {
				return nil
			}
		}
	}
	return nil
}

// changesIn reads shard's changes of the given minute partitions dated in [lo, hi)
// µs, sorted by time then index: a query over several partitions does not promise
// their order.
func (s *Store) changesIn(ctx context.Context, shard int32, minutes []time.Time, lo, hi int64) ([]IndexChange, error) {
	it := s.session.Query(shardChangesCQL, int(shard), minutes, lo, hi).PageSize(5000).IterContext(ctx)
	var (
		out    []IndexChange
		us     int64
		index  int
		status string
	)
	for it.Scan(&us, &index, &status) {
		parsed, err := presence.ParseStatus(status)
		if err != nil {
			_ = it.Close()
			return nil, fmt.Errorf("shard %d: change at %d of index %d has status %q", shard, us, index, status)
		}
		out = append(out, IndexChange{AtUs: us, Index: uint32(index), Status: parsed})
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("reading the changes of shard %d: %w", shard, err)
	}
	slices.SortFunc(out, func(a, b IndexChange) int {
		return cmp.Or(cmp.Compare(a.AtUs, b.AtUs), cmp.Compare(a.Index, b.Index))
	})
	return out, nil
}

// StatesAt is the state of shards 0 to n-1 at instant at, read concurrently.
func (s *Store) StatesAt(ctx context.Context, n int32, at time.Time) ([]*ShardState, error) {
	out := make([]*ShardState, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for shard := range n {
		wg.Go(func() { out[shard], errs[shard] = s.StateAt(ctx, shard, at) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// UserNames names the given indexes of shard; an index nobody holds is left out.
func (s *Store) UserNames(ctx context.Context, shard int32, indexes []uint32) (map[uint32]string, error) {
	byBlock := map[int][]int{}
	for _, i := range indexes {
		byBlock[int(i/ShardUsersBlock)] = append(byBlock[int(i/ShardUsersBlock)], int(i))
	}
	out := make(map[uint32]string, len(indexes))
	for block, idx := range byBlock {
		it := s.session.Query(userNamesCQL, int(shard), block, idx).IterContext(ctx)
		var (
			i  int
			id string
		)
		for it.Scan(&i, &id) {
			out[uint32(i)] = id
		}
		if err := it.Close(); err != nil {
			return nil, fmt.Errorf("naming users of shard %d: %w", shard, err)
		}
	}
	return out, nil
}

// Locate is the shard and index of userID; found is false for a user whose status
// never changed (offline at every instant).
func (s *Store) Locate(ctx context.Context, userID string) (shard int32, index uint32, found bool, err error) {
	var sh, i int
	err = s.session.Query(locateCQL, userID).ScanContext(ctx, &sh, &i)
	if errors.Is(err, gocql.ErrNotFound) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("locating user %q: %w", userID, err)
	}
	return int32(sh), uint32(i), true, nil
}

// Progress is how far the point-in-time rows of shards 0 to n-1 are written: Final is
// the instant up to which every shard's rows are final, Provisional the instant up to
// which every shard has written every change it has received. Each is the earliest of
// the shards' marks, zero when a shard has none yet.
type Progress struct {
	Final, Provisional time.Time
}

// Progress reads how far the point-in-time rows of shards 0 to n-1 are written.
func (s *Store) Progress(ctx context.Context, n int32) (Progress, error) {
	it := s.session.Query(progressCQL).IterContext(ctx)
	type marks struct{ final, provisional time.Time }
	byShard := map[int32]marks{}
	var (
		shard              int
		final, provisional time.Time
	)
	for it.Scan(&shard, &final, &provisional) {
		byShard[int32(shard)] = marks{final.UTC(), provisional.UTC()}
	}
	if err := it.Close(); err != nil {
		return Progress{}, fmt.Errorf("reading shard_progress: %w", err)
	}
	var p Progress
	earliest := func(acc *time.Time, t time.Time, first bool) {
		if first || t.Before(*acc) {
			*acc = t
		}
	}
	for sh := range n {
		m, ok := byShard[sh]
		if !ok {
			return Progress{}, nil
		}
		earliest(&p.Final, m.final, sh == 0)
		// A row written before provisional_through existed has none: its final mark
		// is as far as it is written.
		prov := m.provisional
		if prov.Before(m.final) {
			prov = m.final
		}
		earliest(&p.Provisional, prov, sh == 0)
	}
	return p, nil
}

// FinalThrough is the instant up to which the rows of all shards 0 to n-1 are final:
// the earliest of their progress marks (zero when a shard has none yet).
func (s *Store) FinalThrough(ctx context.Context, n int32) (time.Time, error) {
	p, err := s.Progress(ctx, n)
	return p.Final, err
}
