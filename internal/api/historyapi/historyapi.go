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
	Status         string     `json:"status"`
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

// Export is everything Pulse holds about one user (GET /v1/users/{id}/export, the
// operator's alone): the live state in Redis and every history row in Cassandra. The
// timeline comes in pages: the first page (no cursor) holds every section, the pages
// after it (cursor=) only userId, exportedAt and history.timeline, with the same
// exportedAt and timeline bounds. Sections the first page finds nothing in are null
// (current, history.status, history.pointInTime) or empty lists.
type Export struct {
	UserID string `json:"userId"`
	// ExportedAt is when the first page was read: every page of one export carries it.
	ExportedAt time.Time `json:"exportedAt"`
	// Current is the user's state in Redis; null when Redis holds none.
	Current *ExportCurrent `json:"current"`
	History ExportHistory  `json:"history"`
}

// ExportPage is a page of an export after the first (cursor=): its timeline alone.
// Decoded as an Export, its other sections are nil.
type ExportPage struct {
	UserID     string    `json:"userId"`
	ExportedAt time.Time `json:"exportedAt"`
	History    struct {
		Timeline TimelinePage `json:"timeline"`
	} `json:"history"`
}

// ExportHistory is what Cassandra holds of the user.
type ExportHistory struct {
	// Status is the user_status row; null when there is none.
	Status *ExportStatus `json:"status"`
	// Timeline is every user_activity row from Timeline.From to Timeline.To, newest
	// first, a page at a time.
	Timeline TimelinePage `json:"timeline"`
	// Sessions are the user_sessions rows that started in the same range, newest
	// first (at most 10,000: Truncated says when there were more).
	Sessions *Sessions `json:"sessions"`
	// Daily are the user_daily rows of the days of the same range, newest first.
	Daily *UserDays `json:"daily"`
	// PointInTime is the user's shard and dense index in user_indexes; null when
	// history never indexed the user.
	PointInTime *ExportIndex `json:"pointInTime"`
}

// ExportCurrent is a user's state as Redis holds it, every field of it, as operators
// see it (invisible as invisible).
type ExportCurrent struct {
	// Status is the effective status; Invisible the user's choice to be invisible,
	// kept while devices come and go.
	Status    string `json:"status"`
	Invisible bool   `json:"invisible"`
	// LastUpdated is when Status last changed; LastActive the newest status or
	// activity event; LastSeen the newest event of any kind. Null when never.
	LastUpdated *time.Time `json:"lastUpdated"`
	LastActive  *time.Time `json:"lastActive"`
	LastSeen    *time.Time `json:"lastSeen"`
	// Public are the times readers who are not operators are shown (docs/design.md,
	// "Invisible looks offline").
	Public ExportTimes `json:"public"`
	// Devices are the user's devices, by id.
	Devices []ExportDevice `json:"devices"`
	// Custom is the custom status as held, its until possibly past (status reads then
	// show none); null for none. CustomSetAt is the time of the status event that last
	// set or cleared it; null when none ever did.
	Custom      *customjson.Out `json:"custom"`
	CustomSetAt *time.Time      `json:"customSetAt"`
	// Groups are the groups whose members in Redis include the user, by name.
	Groups []string `json:"groups"`
	// Shard and Index locate the user in the shards' bitmaps; LogOffset is the
	// presence.events offset (in partition Shard) of the last event folded in, -1 for
	// none.
	Shard     int    `json:"shard"`
	Index     uint32 `json:"index"`
	LogOffset int64  `json:"logOffset"`
}

// ExportTimes are a user's times as readers who are not operators are shown them.
type ExportTimes struct {
	LastUpdated *time.Time `json:"lastUpdated"`
	LastActive  *time.Time `json:"lastActive"`
	LastSeen    *time.Time `json:"lastSeen"`
}

// ExportDevice is one device of a user in Redis.
type ExportDevice struct {
	DeviceID string    `json:"deviceId"`
	Status   string    `json:"status"`
	LastSeen time.Time `json:"lastSeen"`
	// PublicLastSeen is LastSeen as readers who are not operators know it; null for
	// a hidden device. Hidden: the device was seen only while the user was invisible.
	PublicLastSeen *time.Time `json:"publicLastSeen"`
	Hidden         bool       `json:"hidden"`
}

// ExportStatus is a user's user_status row: history's copy of the latest presence,
// which may lag the live state.
type ExportStatus struct {
	// Status is null when no change of the user was ever written.
	Status      *string    `json:"status"`
	LastUpdated *time.Time `json:"lastUpdated"`
	LastActive  *time.Time `json:"lastActive"`
	LastSeen    *time.Time `json:"lastSeen"`
	// LastEventID is the event that last wrote LastSeen; null when none.
	LastEventID *string `json:"lastEventId"`
	// Custom is the custom status of the newest status event carrying one ({} for a
	// clear), set at CustomSetAt; both null when none ever did.
	Custom      *customjson.Out `json:"custom"`
	CustomSetAt *time.Time      `json:"customSetAt"`
	Groups      []string        `json:"groups"`
}

// ExportIndex is a user's row in user_indexes: where history's point-in-time rows
// (Q5) count them.
type ExportIndex struct {
	Shard int32  `json:"shard"`
	Index uint32 `json:"index"`
}
