// Package statestore is Pulse's current state in Redis: each user's folded state, the
// per-shard roaring bitmaps of who is online, idle or invisible, their counts, and the
// bookkeeping that keeps replays from regressing anything.
//
// Layout, for prefix P and shard s (s = the user's partition of presence.events):
//
//	P:shards            number of shards, set by the aggregator, read by readers
//	P:{s}:meta          hash: offset (last folded record), next (next bitmap index)
//	P:{s}:u:<user id>   the user's state, a pulse.v1.UserState
//	P:{s}:ids           hash: user id -> bitmap index (exact, no hashing)
//	P:{s}:rev           hash: bitmap index -> user id (listings, rebuilding deadlines)
//	P:{s}:bm:<status>   roaring bitmap of the indexes of users in status
//	P:{s}:cnt           hash: status -> cardinality of its bitmap
//	P:{s}:outbox        the last window's changes (pulse.v1.ChangeBatch)
//
// The {s} hash tag puts every key of a shard in one Redis Cluster slot, so a window's
// writes for a shard are one atomic script on one node (DESIGN.md guarantee 9).
package statestore

import (
	"strconv"

	"github.com/pulse-presence/pulse/pkg/presence"
)

// Tracked are the statuses with a bitmap. Offline is everyone else: registered users
// (every index below next) not in any bitmap.
var Tracked = [...]presence.Status{presence.Online, presence.Idle, presence.Invisible}

// Keys names the keys of one prefix.
type Keys struct {
	Prefix string
}

func (k Keys) tag(s int) string { return k.Prefix + ":{" + strconv.Itoa(s) + "}:" }

// Shards is the key holding the shard count.
func (k Keys) Shards() string { return k.Prefix + ":shards" }

// Meta is shard s's bookkeeping hash.
func (k Keys) Meta(s int) string { return k.tag(s) + "meta" }

// User is the key of a user's state in shard s.
func (k Keys) User(s int, userID string) string { return k.tag(s) + "u:" + userID }

// IDs is shard s's user id -> index hash.
func (k Keys) IDs(s int) string { return k.tag(s) + "ids" }

// Rev is shard s's index -> user id hash.
func (k Keys) Rev(s int) string { return k.tag(s) + "rev" }

// Bitmap is shard s's bitmap of status st.
func (k Keys) Bitmap(s int, st presence.Status) string { return k.tag(s) + "bm:" + st.String() }

// Counts is shard s's status -> count hash.
func (k Keys) Counts(s int) string { return k.tag(s) + "cnt" }

// Outbox holds shard s's last window of changes.
func (k Keys) Outbox(s int) string { return k.tag(s) + "outbox" }
