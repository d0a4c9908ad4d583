package online

import (
	"context"

	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// Members lists up to limit members of group, whatever their status, of a state of
// shards shards from pos on, in (shard, index) order, and the position the next page
// starts at (Shard == shards: the listing is complete). Members who join or leave
// meanwhile may or may not be listed; every member throughout is listed once.
func Members(ctx context.Context, store *statestore.Store, shards int, group string, limit int, pos Position) ([]string, Position, error) {
	counts, err := store.GroupCounts(ctx, shards, group)
	if err != nil {
		return nil, pos, err
	}
	out := make([]string, 0, min(limit, 128))
	for pos.Shard < shards && len(out) < limit {
		if counts[pos.Shard].Registered == 0 {
			pos = Position{Shard: pos.Shard + 1}
			continue
		}
		bms, err := store.LoadGroupBitmaps(ctx, []int{pos.Shard}, group)
		if err != nil {
			return nil, pos, err
		}
		it := bms[0].Iterator()
		it.AdvanceIfNeeded(pos.From)
		var idx []uint32
		for it.HasNext() && len(idx) < limit-len(out) {
			idx = append(idx, it.Next())
		}
		next := Position{Shard: pos.Shard + 1}
		if it.HasNext() {
			next = Position{Shard: pos.Shard, From: it.PeekNext()}
		}
		if len(idx) > 0 {
			ids, err := store.UserIDs(ctx, []statestore.ShardIndexes{{Shard: pos.Shard, Indexes: idx}})
			if err != nil {
				return nil, pos, err
			}
			for _, id := range ids[0] {
				if id != "" {
					out = append(out, id)
				}
			}
		}
		pos = next
	}
	return out, pos, nil
}
