package online

import (
	"context"
	"sync"
	"time"

	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// BitmapCache keeps shards' bitmaps a short while: a burst of friends lists then
// costs one load of each shard's bitmaps instead of one per request.
type BitmapCache struct {
	store *statestore.Store
	ttl   time.Duration
	now   func() time.Time

	mu      sync.Mutex
	entries map[int]cachedBitmaps
}

type cachedBitmaps struct {
	bms *statestore.ShardBitmaps
	at  time.Time
}

// NewBitmapCache serves every tracked bitmap of a shard for ttl after loading it, by
// the clock now; a ttl of 0 loads them on every Get.
func NewBitmapCache(store *statestore.Store, ttl time.Duration, now func() time.Time) *BitmapCache {
	return &BitmapCache{store: store, ttl: ttl, now: now, entries: make(map[int]cachedBitmaps)}
}

// Get returns every tracked bitmap of shards, loading those not fresh in one round
// trip. The bitmaps returned are shared: read them, never change them.
func (bc *BitmapCache) Get(ctx context.Context, shards []int) (map[int]*statestore.ShardBitmaps, error) {
	out := make(map[int]*statestore.ShardBitmaps, len(shards))
	now := bc.now()
	var missing []int
	bc.mu.Lock()
	for _, sh := range shards {
		if e, ok := bc.entries[sh]; ok && now.Sub(e.at) < bc.ttl {
			out[sh] = e.bms
		} else {
			missing = append(missing, sh)
		}
	}
	bc.mu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}
	loaded, err := bc.store.LoadBitmaps(ctx, missing, statestore.Tracked[:])
	if err != nil {
		return nil, err
	}
	bc.mu.Lock()
	defer bc.mu.Unlock()
	for k, sh := range missing {
		out[sh] = &loaded[k]
		if e, ok := bc.entries[sh]; !ok || e.at.Before(now) {
			bc.entries[sh] = cachedBitmaps{bms: &loaded[k], at: now}
		}
	}
	return out, nil
}
