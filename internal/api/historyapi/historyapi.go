// Package historyapi is the JSON form of the query service's history routes
// (docs/analytics.md): the answers query writes and pulsectl reads, defined once so
// the two cannot drift apart. What each number means is defined by internal/domain/rollup.
package historyapi

import (
	"time"

	"github.com/pulse-presence/pulse/internal/api/customjson"
)

// TimelineEntry is one event or effective change of a user (GET /v1/users/{id}/timeline).
type TimelineEntry struct {
	OccurredAt     time.Time  `json:"occurredAt"`
	EntryID        string     `json:"entryId"`
	EntryType      string     `json:"entryType"`
	Kind           string     `json:"kind,omitempty"`
	Status         string     `json:"status,omitempty"`
	PreviousStatus string     `json:"previousStatus,omitempty"`
	DeviceID       string     `json:"deviceId,omitempty"`
	Source         string     `json:"source,omitempty"`
	Cause          string     `json:"cause,omitempty"`
	ReceivedAt     *time.Time `json:"receivedAt,omitempty"`
	Stale          bool       `json:"stale"`
	LogPartition   int        `json:"logPartition"`
	LogOffset      int64      `json:"logOffset"`
	// Data is what an event did to the user's custom status: left out when nothing
	// (and on changes), {} when it cleared it, else the custom status it set.
	Data *customjson.Out `json:"data,omitempty"`
}

// TimelinePage is one page of a user's timeline, newest first.
type TimelinePage struct {
	UserID  string          `json:"userId"`
	From    time.Time       `json:"from"`
	To      time.Time       `json:"to"`
	Entries []TimelineEntry `json:"entries"`
	// NextCursor is null once the range is exhausted.
	NextCursor *string `json:"nextCursor"`
}

// Session is one session of a user (GET /v1/users/{id}/sessions).
type Session struct {
	Start time.Time `json:"start"`
	// End is null while the session is open.
	End  *time.Time `json:"end"`
	Open bool       `json:"open"`
	// The time in each status inside the session, up to Through; from Through on the
	// user was in Status (offline for a closed session, whose Through is End).
	OnlineSeconds    float64   `json:"onlineSeconds"`
	IdleSeconds      float64   `json:"idleSeconds"`
	InvisibleSeconds float64   `json:"invisibleSeconds"`
	Through          time.Time `json:"through"`
	Status           string    `json:"status"`
}

// Sessions is a user's sessions over a range, newest first.
type Sessions struct {
	UserID   string    `json:"userId"`
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	Sessions []Session `json:"sessions"`
	// Truncated says the range held more sessions than one answer lists; the newest
	// are listed.
	Truncated bool `json:"truncated"`
}

// DayTotals is a user's time in each status within one UTC day.
type DayTotals struct {
	OnlineSeconds    float64    `json:"onlineSeconds"`
	IdleSeconds      float64    `json:"idleSeconds"`
	InvisibleSeconds float64    `json:"invisibleSeconds"`
	Sessions         int        `json:"sessions"`
	FirstSeen        *time.Time `json:"firstSeen"`
	LastSeen         *time.Time `json:"lastSeen"`
	// Through is the end of the time counted: the next midnight once the day is
	// complete; from Through on the user was in Status.
	Through time.Time `json:"through"`
	Status  string    `json:"status"`
}

// UserDay is one day of a user (GET /v1/users/{id}/daily).
type UserDay struct {
	Day string `json:"day"`
	DayTotals
}

// UserDays is a user's days over a range, newest first.
type UserDays struct {
	UserID string    `json:"userId"`
	From   string    `json:"from"`
	To     string    `json:"to"`
	Days   []UserDay `json:"days"`
}

// DayUser is one user of a day (GET /v1/stats/daily).
type DayUser struct {
	UserID string `json:"userId"`
	DayTotals
}

// DailyPage is one page of every user's totals of a day.
type DailyPage struct {
	Day   string    `json:"day"`
	Users []DayUser `json:"users"`
	// NextCursor is null once every bucket of the day was read.
	NextCursor *string `json:"nextCursor"`
}

// ConcurrencyPoint is the whole service's concurrency over one step.
type ConcurrencyPoint struct {
	// At is the start of the point's minute, hour or day.
	At time.Time `json:"at"`
	// Close* are the users in each status at the last instant of the point's last
	// minute that has rows: the sum over shards of the shards' second 59.
	// CloseInvisible is in the operator view only: to everyone else an invisible user
	// is offline, and a count of them would tell that someone is invisible.
	CloseOnline    int64  `json:"closeOnline"`
	CloseIdle      int64  `json:"closeIdle"`
	CloseInvisible *int64 `json:"closeInvisible,omitempty"`
	// PeakOnline is the largest number of users online at the end of any second of
	// the point, each second's number being the sum over shards.
	PeakOnline int64 `json:"peakOnline"`
	// Minutes is how many minutes had rows.
	Minutes int `json:"minutes"`
}

// Concurrency is the answer of GET /v1/stats/concurrency.
type Concurrency struct {
	From   time.Time          `json:"from"`
	To     time.Time          `json:"to"`
	Step   string             `json:"step"`
	Points []ConcurrencyPoint `json:"points"`
	GroupAnswer
	// FinalThrough, in a group's answer, is the instant up to which history is final:
	// the points cover the minutes that ended by then, and later ones are left out.
	FinalThrough *time.Time `json:"finalThrough,omitempty"`
}

// GroupAnswer names the group a statistic was restricted to (group=): GroupID, and
// Members, the number of its members now, whose past the answer counts. Both are
// absent from the whole service's answers.
type GroupAnswer struct {
	GroupID string  `json:"groupId,omitempty"`
	Members *uint64 `json:"members,omitempty"`
}

// UniquesPoint is the number of distinct users of one period.
type UniquesPoint struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Users is the number of distinct users present at some instant of the period:
	// per shard the cardinality of the union of its hours, summed over shards.
	Users uint64 `json:"users"`
	// Shards is how many shards had rows in the period.
	Shards int `json:"shards"`
	// BitmapBytes is the size of the shards' unions in the portable roaring format;
	// HyperLogLogBytes what as many dense HyperLogLogs (12 KiB each) would take.
	BitmapBytes      uint64 `json:"bitmapBytes"`
	HyperLogLogBytes uint64 `json:"hyperLogLogBytes"`
}

// Uniques is the answer of GET /v1/stats/uniques.
type Uniques struct {
	From   time.Time      `json:"from"`
	To     time.Time      `json:"to"`
	Period string         `json:"period"`
	Points []UniquesPoint `json:"points"`
	GroupAnswer
}
