package historystore

import (
	"context"
	"fmt"
	"time"
)

// DayTotals is a user's row of one UTC day (Q3), in user_daily and daily_users alike.
// internal/domain/rollup defines each field.
type DayTotals struct {
	// The time in each status within the day up to Through, in microseconds; from
	// Through on the user was in Status.
	OnlineMicros, IdleMicros, InvisibleMicros int64
	Sessions                                  int
	// FirstSeen and LastSeen are zero for a day without presence.
	FirstSeen, LastSeen, Through time.Time
	Status                       string
}

// UserDay is a user_daily row: one day of a user.
type UserDay struct {
	Day time.Time
	DayTotals
}

// DayUser is a daily_users row: one user of a day.
type DayUser struct {
	UserID string
	DayTotals
}

const (
	dayColumns  = `online_us, idle_us, invisible_us, sessions, first_seen, last_seen, through, status`
	userDaysCQL = `SELECT day, ` + dayColumns + ` FROM user_daily WHERE user_id = ? AND year = ? AND day >= ? AND day <= ?`
	dayUsersCQL = `SELECT user_id, ` + dayColumns + ` FROM daily_users WHERE day = ? AND bucket = ? AND user_id > ? LIMIT ?`
)

func (d *DayTotals) dest() []any {
	return []any{&d.OnlineMicros, &d.IdleMicros, &d.InvisibleMicros, &d.Sessions, &d.FirstSeen, &d.LastSeen, &d.Through, &d.Status}
}

// UserDays yields userID's days of year from from to to (UTC midnights, both
// included), newest first, until yield returns false.
func (s *Store) UserDays(ctx context.Context, userID string, year int, from, to time.Time, yield func(UserDay) bool) error {
	it := s.session.Query(userDaysCQL, userID, year, from, to).PageSize(400).IterContext(ctx)
	var d UserDay
	for it.Scan(append([]any{&d.Day}, d.dest()...)...) {
		if !yield(d) {
			break
		}
		d = UserDay{}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("daily totals of %s in %d: %w", userID, year, err)
	}
	return nil
}

// DayUsers yields up to limit users of bucket (a shard) of day (a UTC midnight), in
// user id order after the user after ("" for the bucket's first), until yield
// returns false. One page holds them all.
func (s *Store) DayUsers(ctx context.Context, day time.Time, bucket int, after string, limit int, yield func(DayUser) bool) error {
	it := s.session.Query(dayUsersCQL, day, bucket, after, limit).PageSize(limit).IterContext(ctx)
	var u DayUser
	for it.Scan(append([]any{&u.UserID}, u.dest()...)...) {
		if !yield(u) {
			break
		}
		u = DayUser{}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("daily totals of %s, bucket %d: %w", day.Format(time.DateOnly), bucket, err)
	}
	return nil
}
