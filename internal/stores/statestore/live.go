package statestore

import (
	"context"
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// liveChunk bounds the ids and states read per round trip while loading live users.
const liveChunk = 1000

// LiveUsers reads the state of every user of shard sh who is in one of bitmaps (the
// shard's online, idle and invisible users: everyone with a live device), calling fn
// for each. It reads in chunks, two round trips each: index -> id (one HMGET per rev
// bucket, pipelined), then the states (one HMGET per state bucket, pipelined).
func (s *Store) LiveUsers(ctx context.Context, sh int, bitmaps []*roaring.Bitmap, fn func(id string, u *presence.User)) error {
	all := roaring.FastOr(bitmaps...)
	it := all.ManyIterator()
	buf := make([]uint32, liveChunk)
	for {
		n := it.NextMany(buf)
		if n == 0 {
			return nil
		}
		refs := make([]indexRef, n)
		for i, idx := range buf[:n] {
			refs[i] = indexRef{shard: sh, index: idx}
		}
		found, err := s.readIDs(ctx, refs)
		if err != nil {
			return fmt.Errorf("reading user ids of shard %d: %w", sh, err)
		}
		ids := make([]string, 0, n)
		for _, id := range found {
			if id != "" {
				ids = append(ids, id)
			}
		}
		users, err := s.LoadUsers(ctx, sh, ids)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if u, ok := users[id]; ok {
				fn(id, u)
			}
		}
	}
}
