package historystore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// StatusRow is a user's user_status row (Q7) as stored, every column of it: what the
// operator's export of a user (GET /v1/users/{id}/export) answers as history's
// status. LastKnownStates reads the same row for the aggregator's rebuild, but leaves
// out the last event id and the rows that hold neither a status nor a group (a user
// whose events never changed their status still has last_seen and last_event_id),
// which an export must show.
type StatusRow struct {
	// Status is the effective status (operator view) the newest change set; "" when
	// no change of the user was ever written.
	Status string
	// LastUpdated is when Status last changed; LastActive the newest status or
	// activity event; LastSeen the newest event of any kind. Zero when not written.
	LastUpdated, LastActive, LastSeen time.Time
	// LastEventID is the event that last wrote last_seen.
	LastEventID string
	// Custom is the custom status the newest status event carrying one set (the zero
	// value for a clear), at CustomSetAt; CustomSetAt is zero when none ever did.
	Custom      presence.CustomStatus
	CustomSetAt time.Time
	// Groups are the groups the user is a member of, sorted.
	Groups []string
}

const statusRowCQL = `SELECT status, last_updated, last_active, last_seen, last_event_id,
 custom_text, custom_emoji, custom_until_us, custom_set_at_us, groups FROM user_status WHERE user_id = ?`

// UserStatus reads userID's user_status row; found is false when there is none. The
// history service writes the row with UPDATEs only, which leave no row marker: a row
// exists exactly while one of its columns holds a value.
func (s *Store) UserStatus(ctx context.Context, userID string) (row StatusRow, found bool, err error) {
	var untilUs, setAtUs int64
	err = s.session.Query(statusRowCQL, userID).ScanContext(ctx, &row.Status, &row.LastUpdated, &row.LastActive, &row.LastSeen,
		&row.LastEventID, &row.Custom.Text, &row.Custom.Emoji, &untilUs, &setAtUs, &row.Groups)
	if errors.Is(err, gocql.ErrNotFound) {
		return StatusRow{}, false, nil
	}
	if err != nil {
		return StatusRow{}, false, fmt.Errorf("reading the user_status of %q: %w", userID, err)
	}
	row.LastUpdated, row.LastActive, row.LastSeen = utc(row.LastUpdated), utc(row.LastActive), utc(row.LastSeen)
	if setAtUs != 0 {
		row.Custom.Until = presence.FromMicros(untilUs)
		row.CustomSetAt = presence.FromMicros(setAtUs)
	} else {
		row.Custom = presence.CustomStatus{}
	}
	slices.Sort(row.Groups)
	return row, true, nil
}
