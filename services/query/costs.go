package main

import "time"

// The cost table: what a request takes from its credential's bucket (limits.go), in
// reads — about one Redis round trip or one Cassandra partition read each. A route's
// cost grows with the work its inputs ask for, so the rates bound work rather than
// requests: a client cannot turn a cheap allowance into ranges and batches that
// keep Cassandra busy. docs/design.md's Security section and each operation of the
// OpenAPI document state the same numbers; TestCostTable holds them.
const (
	// costRequest is every request with a credential: a status, a count, a page of
	// the listing, a feed's opening, the dashboard.
	costRequest = 1
	// idsPerRead: POST /statuses costs one read per 10 ids (one pipelined round trip
	// carries many).
	idsPerRead = 10
	// filterIDsPerRead: POST /v1/online/filter costs one read per 1,000 ids (it reads
	// bitmaps, never a user's state).
	filterIDsPerRead = 1000
	// listPerRead: the listing and every user's day cost one read per 100 of limit.
	listPerRead = 100
	// costAt is any at= answer: history's progress marks and at least one shard's
	// snapshot and changes from Cassandra.
	costAt = 20
	// costAtID: POST /statuses?at= adds one per id, each located in Cassandra.
	costAtID = 1
	// costDay: the timeline and unique users cost one per UTC day the range touches
	// (one partition each).
	costDay = 1
	// costConcurrencyDay: concurrency costs ten per UTC day: a day is every shard's
	// 1,440 minute rows.
	costConcurrencyDay = 10
	// costGroup: group= adds one to the stats routes: the group's member bitmaps, one
	// Redis round trip.
	costGroup = 1
	// groupMinutesPerRead: a group's concurrency adds to costAt (each shard's state at
	// the range's start) one per shard holding a member per 10 minutes of the range,
	// whose shard_changes are one partition per shard and minute.
	groupMinutesPerRead = 10
	// costMonth, costYear: sessions cost one per month the range touches, a user's
	// days one per year (their partitions).
	costMonth = 1
	costYear  = 1
	// costExportFirst: the first page of a user's export adds to its days, months
	// and years the user's state and groups in Redis and their user_status and
	// user_indexes rows.
	costExportFirst = 4
)

func ceilDiv(n, d int) int { return (n + d - 1) / d }

// statusesCost is POST /statuses of ids user ids; with at, each is a Cassandra read.
func statusesCost(ids int, at bool) int {
	if at {
		return costAt + ids*costAtID
	}
	return max(costRequest, ceilDiv(ids, idsPerRead))
}

// filterCost is POST /v1/online/filter of ids user ids.
func filterCost(ids int) int { return max(costRequest, ceilDiv(ids, filterIDsPerRead)) }

// pageCost is a page of limit entries: the listing (plus costAt with at=) and every
// user's day.
func pageCost(limit int, at bool) int {
	n := max(costRequest, ceilDiv(limit, listPerRead))
	if at {
		n += costAt
	}
	return n
}

// daysTouched is the number of UTC days holding an instant of [from, to).
func daysTouched(from, to time.Time) int {
	if !from.Before(to) {
		return 0
	}
	return int(dayOf(to.Add(-time.Microsecond)).Sub(dayOf(from))/day) + 1
}

// monthsTouched is the number of UTC months holding an instant of [from, to).
func monthsTouched(from, to time.Time) int {
	if !from.Before(to) {
		return 0
	}
	last := to.Add(-time.Microsecond).UTC()
	from = from.UTC()
	return (last.Year()-from.Year())*12 + int(last.Month()) - int(from.Month()) + 1
}

// timelineCost, sessionsCost, concurrencyCost and uniquesCost are the history
// ranges [from, to) (uniquesCost of a group's members with group); userDaysCost the
// dates from and to, both included.
func timelineCost(from, to time.Time) int { return max(costRequest, daysTouched(from, to)*costDay) }
func sessionsCost(from, to time.Time) int { return max(costRequest, monthsTouched(from, to)*costMonth) }
func concurrencyCost(from, to time.Time) int {
	return max(costRequest, daysTouched(from, to)*costConcurrencyDay)
}
func uniquesCost(from, to time.Time, group bool) int {
	n := max(costRequest, daysTouched(from, to)*costDay)
	if group {
		n += costGroup
	}
	return n
}
func userDaysCost(from, to time.Time) int {
	return max(costRequest, (to.Year()-from.Year()+1)*costYear)
}

// minutesTouched is the number of minutes holding an instant of [from, to).
func minutesTouched(from, to time.Time) int {
	if !from.Before(to) {
		return 0
	}
	return int(to.Add(-time.Microsecond).Truncate(time.Minute).Sub(from.Truncate(time.Minute))/time.Minute) + 1
}

// groupConcurrencyCost is a group's concurrency over [from, to) whose members are in
// shards shards: costAt, costGroup, and one per shard per groupMinutesPerRead minutes.
func groupConcurrencyCost(from, to time.Time, shards int) int {
	return costAt + costGroup + shards*ceilDiv(minutesTouched(from, to), groupMinutesPerRead)
}

// exportCost is a page of a user's export whose timeline walk covers [from, to): one
// read per UTC day, and on the first page the sessions' months and the days' years
// of the same range, and costExportFirst.
func exportCost(from, to time.Time, first bool) int {
	n := daysTouched(from, to) * costDay
	if first {
		n += monthsTouched(from, to)*costMonth + (to.Year()-from.Year()+1)*costYear + costExportFirst
	}
	return max(costRequest, n)
}
