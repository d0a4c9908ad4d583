package historystore

import (
	"context"
	"fmt"
	"time"
)

// Session is one user_sessions row (Q2): a session from a change out of offline to the
// next change into offline. internal/domain/rollup defines each field.
type Session struct {
	Start time.Time
	// End is zero while the session is open.
	End  time.Time
	Open bool
	// The time in each status inside the session up to Through, in microseconds; from
	// Through on the user was in Status.
	OnlineMicros, IdleMicros, InvisibleMicros int64
	Through                                   time.Time
	Status                                    string
}

const sessionsCQL = `SELECT session_start, session_end, open, online_us, idle_us, invisible_us, through, status
			FROM user_sessions WHERE user_id = ? AND month = ? AND session_start >= ? AND session_start < ?`

// Sessions yields userID's sessions of month (its first day, UTC) that started in
// [from, to), newest first, until yield returns false.
func (s *Store) Sessions(ctx context.Context, userID string, month, from, to time.Time, yield func(Session) bool) error {
	it := s.session.Query(sessionsCQL, userID, month, from, to).PageSize(1000).IterContext(ctx)
	var v Session
	for it.Scan(&v.Start, &v.End, &v.Open, &v.OnlineMicros, &v.IdleMicros, &v.InvisibleMicros, &v.Through, &v.Status) {
		if !yield(v) {
			break
		}
		v = Session{}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("sessions of %s in %s: %w", userID, month.Format("2006-01"), err)
	}
	return nil
}
