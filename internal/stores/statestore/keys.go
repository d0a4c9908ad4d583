// Package statestore is Pulse's current state in Redis: each user's folded state, the
// per-shard roaring bitmaps of who is online, idle or invisible, their counts, and the
// bookkeeping that keeps replays from regressing anything.
//
// Layout, for prefix P, shard s (s = the user's partition of presence.events) and B
// state buckets per shard:
//
//	P:shards            number of shards, set by the aggregator, read by readers
//	P:buckets           B, set by the aggregator before P:shards, read by readers
//	P:{s}:meta          hash: offset (last folded record), next (next bitmap index)
//	P:{s}:st:<b>        hash: user id -> the user's state (state.go's compact encoding),
//	                    for the users with bucket(id) = b, b in [0, B)
//	P:{s}:rev:<i>       hash: index & 127 -> user id, for the indexes with index >> 7 = i
//	P:{s}:bm:<status>   roaring bitmap of the indexes of users in status
//	P:{s}:cnt           hash: status -> cardinality of its bitmap
//	P:{s}:outbox        the last window's changes (pulse.v1.ChangeBatch)
//
// Users live in bucketed hashes rather than one key each because memory per registered
// user is what a presence store is sized by: a key costs about 80 bytes of Redis
// bookkeeping (dict entry, key string, object header) before its value, while an entry
// of a small hash, which Redis keeps as one contiguous listpack, costs its id, its value
// and two or three bytes. B is fixed when the shard count is registered (the buckets a
// user is in must not move) and chosen so that a bucket holds well under Redis' default
// hash-max-listpack-entries (512) users; docs/redis.md says how to size it.
//
// bucket(id) is FNV-1a 32 of the id modulo B. It must be independent of the shard
// function (murmur2 modulo the partitions, internal/domain/shard): were it the same hash, the users
// of one shard would fill only the buckets congruent to s and leave the rest empty.
//
// The id -> index direction needs no map of its own: a user's state carries its bitmap
// index, so Locate reads the state. The index -> id direction (listings, rebuilding
// deadlines) is bucketed by index: indexes are dense, so every rev bucket but a
// shard's last holds exactly 128 entries, with fields small integers that a listpack
// stores in one byte.
//
// The {s} hash tag puts every key of a shard in one Redis Cluster slot, so a window's
// writes for a shard are one atomic script on one node (docs/design.md guarantee 9).
package statestore

import (
	"strconv"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// Tracked are the statuses with a bitmap. Offline is everyone else: registered users
// (every index below next) not in any bitmap.
var Tracked = [...]presence.Status{presence.Online, presence.Idle, presence.Invisible}

// DefaultBuckets is the default number of state buckets over all shards: 10,000,000
// users make 76 per bucket, far below Redis' listpack limit of 512 entries, and
// 1,000,000 users still 7.6, which keeps the per-bucket overhead under 12 bytes a user.
const DefaultBuckets = 1 << 17

// revBits is how many low bits of a bitmap index select the field in its rev bucket.
const revBits = 7

// Keys names the keys of one prefix.
type Keys struct {
	Prefix string
}

func (k Keys) tag(s int) string { return k.Prefix + ":{" + strconv.Itoa(s) + "}:" }

// Shards is the key holding the shard count.
func (k Keys) Shards() string { return k.Prefix + ":shards" }

// Buckets is the key holding the number of state buckets per shard.
func (k Keys) Buckets() string { return k.Prefix + ":buckets" }

// Meta is shard s's bookkeeping hash.
func (k Keys) Meta(s int) string { return k.tag(s) + "meta" }

// State is shard s's state bucket b.
func (k Keys) State(s, b int) string { return k.tag(s) + "st:" + strconv.Itoa(b) }

// RevBucket is the index -> user id hash of shard s holding index i.
func (k Keys) RevBucket(s int, i uint32) string {
	return k.tag(s) + "rev:" + strconv.FormatUint(uint64(i>>revBits), 10)
}

// revField is index i's field in its rev bucket.
func revField(i uint32) string { return strconv.FormatUint(uint64(i&(1<<revBits-1)), 10) }

// legacyIDs is shard s's user id -> index hash of the layout before buckets, which
// RegisterShards looks for to refuse state it cannot read.
func (k Keys) legacyIDs(s int) string { return k.tag(s) + "ids" }

// Bitmap is shard s's bitmap of status st.
func (k Keys) Bitmap(s int, st presence.Status) string { return k.tag(s) + "bm:" + st.String() }

// Counts is shard s's status -> count hash.
func (k Keys) Counts(s int) string { return k.tag(s) + "cnt" }

// Outbox holds shard s's last window of changes.
func (k Keys) Outbox(s int) string { return k.tag(s) + "outbox" }

// BucketOf is the state bucket, among n, of userID: FNV-1a 32 of the id modulo n,
// computed inline because hash/fnv's hasher would cost an allocation per user.
func BucketOf(userID string, n int) int {
	if n <= 1 {
		return 0
	}
	h := uint32(2166136261)
	for i := 0; i < len(userID); i++ {
		h ^= uint32(userID[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}
