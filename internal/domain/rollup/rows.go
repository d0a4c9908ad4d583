package rollup

import (
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// Rows are what a Flush hands out to be written: every row whose content may have
// changed since the previous Flush, each kind sorted by its key.
type Rows struct {
	Sessions []Session // by UserID, Start
	Days     []Day     // by UserID, Day
	Minutes  []Minute  // by Minute
	Hours    []Hour    // by Hour
	// Point in time (pointintime.go).
	Snapshots   []Snapshot    // by At
	Changes     []ShardChange // in the order applied
	UserIndexes []UserIndex   // in the order first seen
}

// Len is the number of rows.
func (r *Rows) Len() int {
	return len(r.Sessions) + len(r.Days) + len(r.Minutes) + len(r.Hours) +
		len(r.Snapshots) + len(r.Changes) + len(r.UserIndexes)
}

// Session is one session of a user (Q2), keyed by UserID and Start.
type Session struct {
	UserID string
	Start  time.Time
	// End is the change into offline that closed the session; zero while Open.
	End time.Time
	// Time inside the session in each status, up to Through.
	Online, Idle, Invisible time.Duration
	Open                    bool
	// Through is End for a closed session; for an open one, the fold's time when the
	// row was written.
	Through time.Time
	// Status is the status from Through on: offline for a closed session.
	Status presence.Status
}

// Day is a user's totals for one UTC day (Q3), keyed by UserID and Day.
type Day struct {
	UserID string
	Day    time.Time // midnight UTC
	// Time in each status within [Day, Through).
	Online, Idle, Invisible time.Duration
	// Sessions overlapping [Day, Through).
	Sessions int
	// First and last instants of [Day, Through) at which the user was not offline.
	FirstSeen, LastSeen time.Time
	// Through is the end of the time counted: the next midnight once the day is final.
	Through time.Time
	// Status is the user's status at Through, or at the day's last instant when
	// Through is the next midnight.
	Status presence.Status
}

// Minute is a shard's concurrency in one UTC minute (Q4), keyed by Shard and Minute:
// the users in each status at the end of every second of the minute.
type Minute struct {
	Shard                   int32
	Minute                  time.Time
	Online, Idle, Invisible [60]uint32
}

// Close is the minute's last second: the statuses in force at its last instant.
func (m *Minute) Close() (online, idle, invisible uint32) {
	return m.Online[59], m.Idle[59], m.Invisible[59]
}

// PeakOnline is the largest number of users online at the end of a second of the minute.
func (m *Minute) PeakOnline() uint32 {
	var peak uint32
	for _, n := range m.Online {
		peak = max(peak, n)
	}
	return peak
}

// Hour is the set of a shard's users present at some instant of one UTC hour (Q6),
// keyed by Shard and Hour. Users holds dense indexes of the shard (guarantee 8); Shown,
// a subset of Users, those of them online or idle at some instant of the hour: the
// users a reader may count, to whom a user who was only invisible was offline. Both
// are the row's own copies. Store them with WriteTo, the portable roaring format.
type Hour struct {
	Shard int32
	Hour  time.Time
	Users *roaring.Bitmap
	Shown *roaring.Bitmap
}

// Union is the users of one shard present in any of the given hours: the hours of a
// period make its unique users. Bitmaps of different shards must not be mixed, since
// each shard numbers its users from zero.
func Union(hours ...*roaring.Bitmap) *roaring.Bitmap {
	return roaring.FastOr(hours...)
}

// Cardinality is the number of unique users in the given hours of one shard. The unique
// users of several shards are the sum of each shard's Cardinality.
func Cardinality(hours ...*roaring.Bitmap) uint64 {
	switch len(hours) {
	case 0:
		return 0
	case 1:
		return hours[0].GetCardinality()
	}
	return Union(hours...).GetCardinality()
}

// Period is a span of unique users: an hour, a UTC day, an ISO week or a month.
type Period uint8

const (
	PeriodHour Period = iota
	PeriodDay
	// PeriodWeek starts on Monday at midnight UTC (ISO 8601).
	PeriodWeek
	PeriodMonth
)

// Bounds is the period holding t: [start, end) in UTC.
func (p Period) Bounds(t time.Time) (start, end time.Time) {
	t = t.UTC()
	switch p {
	case PeriodHour:
		start = t.Truncate(time.Hour)
		return start, start.Add(time.Hour)
	case PeriodDay:
		start = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 0, 1)
	case PeriodWeek:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		start = time.Date(t.Year(), t.Month(), t.Day()-back, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 0, 7)
	default:
		start = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 1, 0)
	}
}

// Hours lists the start of every hour of the period holding t: the Hour rows whose
// Union is the period's unique users.
func (p Period) Hours(t time.Time) []time.Time {
	start, end := p.Bounds(t)
	hours := make([]time.Time, 0, int(end.Sub(start)/time.Hour))
	for h := start; h.Before(end); h = h.Add(time.Hour) {
		hours = append(hours, h)
	}
	return hours
}
