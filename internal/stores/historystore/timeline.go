package historystore

import (
	"context"
	"fmt"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// Activity is one user_activity row: an event or an effective change of a user (Q1).
type Activity struct {
	OccurredAt time.Time
	// EntryID is "e:<event id>" for an event, "c:<causing event id>" for a change;
	// EntryType "event" or "change".
	EntryID, EntryType string
	// Kind, DeviceID and Source are an event's; Status its status, or a change's new
	// one; PreviousStatus and Cause a change's; each "" when not written.
	Kind, Status, PreviousStatus, DeviceID, Source, Cause string
	// ReceivedAt is an event's; zero for a change.
	ReceivedAt time.Time
	Stale      bool
	// LogPartition and LogOffset are the event's (a change's causing event's) position
	// in presence.events.
	LogPartition int
	LogOffset    int64
	// Custom is what an event did to the user's custom status: nil when it left it as
	// it was (and for changes), the zero CustomStatus when it cleared it, else the
	// custom status it set, its until to the millisecond.
	Custom *presence.CustomStatus
}

const timelineCQL = `SELECT occurred_at, entry_id, entry_type, kind, status, previous_status, device_id, source, cause,
			received_at, stale, log_partition, log_offset, custom, custom_text, custom_emoji, custom_until FROM user_activity
			WHERE user_id = ? AND bucket = ? AND occurred_at >= ? AND occurred_at < ?`

// Timeline yields the rows of userID's day partition (a UTC midnight) that occurred
// in [from, to), newest first, until yield returns false. pageSize is how many rows
// one page fetches: a reader that wants n rows asks for as many.
func (s *Store) Timeline(ctx context.Context, userID string, day, from, to time.Time, pageSize int, yield func(Activity) bool) error {
	it := s.session.Query(timelineCQL, userID, day, from, to).PageSize(pageSize).IterContext(ctx)
	var (
		a      Activity
		custom bool // null, as in every row of an event that carried none, scans as false
		c      presence.CustomStatus
	)
	for it.Scan(&a.OccurredAt, &a.EntryID, &a.EntryType, &a.Kind, &a.Status, &a.PreviousStatus, &a.DeviceID,
		&a.Source, &a.Cause, &a.ReceivedAt, &a.Stale, &a.LogPartition, &a.LogOffset,
		&custom, &c.Text, &c.Emoji, &c.Until) {
		if custom {
			set := c // a's own copy: c is scanned into again
			a.Custom = &set
		}
		if !yield(a) {
			break
		}
		a, custom, c = Activity{}, false, presence.CustomStatus{}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("timeline of %s on %s: %w", userID, day.Format(time.DateOnly), err)
	}
	return nil
}
