package historystore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// The last known state of a shard's users: who the shard ever held (shard_users) and
// each one's status and times (user_status). The aggregator rebuilds a shard from it
// for the users whose every event is older than the start of presence.events, which
// the log alone can no longer bring back (docs/design.md guarantee 10).

// LastKnown is what history last recorded of one user.
type LastKnown struct {
	// Status is the user's effective status (operator view) as of its last change.
	Status presence.Status
	// LastUpdated is when Status last changed; LastActive the newest status or
	// activity event; LastSeen the newest event of any kind. Zero when unknown.
	LastUpdated, LastActive, LastSeen time.Time
	// Custom is the custom status the newest status event carrying one set (the zero
	// value for none or a clear), at CustomSetAt; zero when none ever did.
	Custom      presence.CustomStatus
	CustomSetAt time.Time
	// Groups are the groups the user is a member of (docs/design.md, "Groups").
	Groups []string
}

// ErrNoHistory is returned by LastKnownOfShard when history's tables hold nobody of
// the shard.
var ErrNoHistory = errors.New("history holds no user of the shard")

// lastKnownBatch is how many users one user_status read asks for;
// lastKnownParallel how many such reads run at once.
const (
	lastKnownBatch    = 100
	lastKnownParallel = 8
)

const (
	shardUsersCQL = `SELECT user_id FROM shard_users WHERE shard = ? AND block = ?`
	userStatusCQL = `SELECT user_id, status, last_updated, last_active, last_seen,
 custom_text, custom_emoji, custom_until_us, custom_set_at_us, groups FROM user_status WHERE user_id IN ?`
	// Every partition of shard_users: a scan of partition keys alone.
	shardBlocksCQL = `SELECT DISTINCT shard, block FROM shard_users`
)

// ShardUsers is every user history indexes in shard: the rows of every block of
// shard_users. Blocks are found by listing the table's partitions, not by counting up
// from 0: rows expire with the table's retention (a block whose users were all silent
// that long is empty), so an empty block does not end them.
func (s *Store) ShardUsers(ctx context.Context, shard int32) ([]string, error) {
	var blocks []int
	it := s.session.Query(shardBlocksCQL).IterContext(ctx)
	var sh, block int
	for it.Scan(&sh, &block) {
		if int32(sh) == shard {
			blocks = append(blocks, block)
		}
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("listing the blocks of shard_users: %w", err)
	}
	slices.Sort(blocks)
	var ids []string
	for _, block := range blocks {
		it := s.session.Query(shardUsersCQL, int(shard), block).PageSize(ShardUsersBlock).IterContext(ctx)
		var id string
		for it.Scan(&id) {
			ids = append(ids, id)
		}
		if err := it.Close(); err != nil {
			return nil, fmt.Errorf("reading the users of shard %d, block %d: %w", shard, block, err)
		}
	}
	return ids, nil
}

// LastKnownStates reads the last known state of each of ids; a user without a
// user_status row, or with neither a status nor a group in it, is left out. A member
// of groups whose status never changed is offline.
func (s *Store) LastKnownStates(ctx context.Context, ids []string) (map[string]LastKnown, error) {
	out := make(map[string]LastKnown, len(ids))
	var mu sync.Mutex
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(lastKnownParallel)
	for lo := 0; lo < len(ids); lo += lastKnownBatch {
		part := ids[lo:min(lo+lastKnownBatch, len(ids))]
		g.Go(func() error {
			it := s.session.Query(userStatusCQL, part).IterContext(ctx)
			var (
				id, status, text, emoji string
				updated, active, seen   time.Time
				untilUs, setAtUs        int64
				groups                  []string
			)
			for it.Scan(&id, &status, &updated, &active, &seen, &text, &emoji, &untilUs, &setAtUs, &groups) {
				if status == "" && len(groups) == 0 {
					continue
				}
				st := presence.Offline
				if status != "" {
					var err error
					if st, err = presence.ParseStatus(status); err != nil {
						_ = it.Close()
						return fmt.Errorf("user_status of %q: %w", id, err)
					}
				}
				lk := LastKnown{Status: st, LastUpdated: utc(updated), LastActive: utc(active), LastSeen: utc(seen), Groups: slices.Clone(groups)}
				if setAtUs != 0 {
					lk.Custom = presence.CustomStatus{Text: text, Emoji: emoji, Until: presence.FromMicros(untilUs)}
					lk.CustomSetAt = presence.FromMicros(setAtUs)
				}
				mu.Lock()
				out[id] = lk
				mu.Unlock()
			}
			if err := it.Close(); err != nil {
				return fmt.Errorf("reading user_status: %w", err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// LastKnownOfShard is the last known state of every user of shard but those skip
// names.
func (s *Store) LastKnownOfShard(ctx context.Context, shard int32, skip func(userID string) bool) (map[string]LastKnown, error) {
	all, err := s.ShardUsers(ctx, shard)
	if err != nil {
		return nil, err
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("shard %d: %w", shard, ErrNoHistory)
	}
	ids := all[:0:0]
	for _, id := range all {
		if !skip(id) {
			ids = append(ids, id)
		}
	}
	return s.LastKnownStates(ctx, ids)
}

// utc is t in UTC, and the zero time for Cassandra's empty timestamp.
func utc(t time.Time) time.Time {
	if t.IsZero() || t.UnixMilli() == 0 {
		return time.Time{}
	}
	return t.UTC()
}
