package historystore

import (
	"context"
	"fmt"
	"time"
)

// HourUsers is one shard's uniques row of an hour (Q6).
type HourUsers struct {
	Hour  time.Time
	Shard int
	// Users are the dense indexes (docs/design.md guarantee 8) of the shard's users
	// present in the hour, a roaring bitmap in its portable format.
	Users []byte
	// Shown are those of them online or idle at some instant of the hour, in the same
	// format; nil in rows written before migration 0009.
	Shown []byte
}

// Public is the users a reader may count: Shown, or Users in rows that predate it.
func (h HourUsers) Public() []byte {
	if h.Shown == nil {
		return h.Users
	}
	return h.Shown
}

const uniquesCQL = `SELECT hour, shard, users, shown FROM uniques WHERE day = ? AND hour >= ? AND hour < ?`

// Uniques yields the rows of day (a UTC midnight) of the hours in [from, to), in hour
// order, until yield returns false.
func (s *Store) Uniques(ctx context.Context, day, from, to time.Time, yield func(HourUsers) bool) error {
	it := s.session.Query(uniquesCQL, day, from, to).PageSize(500).IterContext(ctx)
	var r HourUsers
	for it.Scan(&r.Hour, &r.Shard, &r.Users, &r.Shown) {
		if !yield(r) {
			break
		}
		r = HourUsers{}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("uniques of %s: %w", day.Format(time.DateOnly), err)
	}
	return nil
}
