package main

import (
	"encoding/binary"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/pulse-presence/pulse/internal/domain/rollup"
	"github.com/pulse-presence/pulse/internal/platform/cursor"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
)

// The history routes' inputs and the arithmetic that turns the analysts' rows
// (migrations/0005, internal/domain/rollup) into answers: pure, so it is tested without Cassandra.

// Range bounds: each keeps one request to a bounded number of partition reads.
const (
	day = 24 * time.Hour
	// maxTimelineSpan: one partition per UTC day.
	maxTimelineSpan = 31 * day
	// maxSessionsSpan, maxDailySpan, maxUniquesSpan: the tables' 400-day retention.
	maxSessionsSpan = 400 * day
	maxDailySpan    = 400 * day
	maxUniquesSpan  = 400 * day
	// maxConcurrencySpan: 1,440 rows per shard and day are read whatever the step; 31
	// days of 16 shards is 714,240 rows folded as they stream.
	maxConcurrencySpan = 31 * day

	defaultHistoryLimit = 100
	maxHistoryLimit     = 1000
	// maxSessions bounds one sessions answer; a longer list is cut and says so.
	maxSessions = 10_000

	// hllBytes is a dense HyperLogLog of 2^14 six-bit registers (Redis's PFADD, ±0.81%),
	// the usual alternative to exact bitmaps; each shard's set of a period would need one.
	hllBytes = 12 << 10
)

const timeHint = "an RFC 3339 time such as 2026-11-23T20:00:00Z, or a date such as 2026-11-23 (midnight UTC)"

// checkParams refuses parameters the route does not know, naming the ones it does.
func checkParams(q url.Values, known ...string) error {
	for name := range q {
		found := false
		for _, k := range known {
			found = found || k == name
		}
		if !found {
			return httpserver.BadRequest(name, "unknown parameter; want "+strings.Join(known, ", "))
		}
	}
	return nil
}

// History holds nothing before the Unix epoch, and a range must leave room to round
// up to a whole month and still be a year JSON can write.
var (
	earliest = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	latest   = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
)

func inBounds(name, s string, t time.Time) (time.Time, error) {
	if t.Before(earliest) || !t.Before(latest) {
		return time.Time{}, httpserver.BadRequest(name, fmt.Sprintf("must be from 1970-01-01 to 9998-12-31, got %q", s))
	}
	return t, nil
}

// parseTime reads an RFC 3339 time or a date (midnight UTC).
func parseTime(name, s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return inBounds(name, s, t.UTC())
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return inBounds(name, s, t)
	}
	return time.Time{}, httpserver.BadRequest(name, fmt.Sprintf("must be %s, got %q", timeHint, s))
}

// parseDate reads a UTC date.
func parseDate(name, s string) (time.Time, error) {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return time.Time{}, httpserver.BadRequest(name, fmt.Sprintf("must be a date such as 2026-11-23, got %q", s))
	}
	return inBounds(name, s, t)
}

// spanText writes a bound in days when it is whole days.
func spanText(d time.Duration) string {
	if d%day == 0 {
		return fmt.Sprintf("%d days", d/day)
	}
	return d.String()
}

// parseRange reads from and to as the half-open range [from, to): to defaults to now,
// from to def before to; from must come before to and the range may span at most max.
func parseRange(q url.Values, now time.Time, def, maxSpan time.Duration) (from, to time.Time, err error) {
	to = now.UTC()
	if s := q.Get("to"); s != "" {
		if to, err = parseTime("to", s); err != nil {
			return
		}
	}
	from = to.Add(-def)
	if s := q.Get("from"); s != "" {
		if from, err = parseTime("from", s); err != nil {
			return
		}
	}
	if !from.Before(to) {
		return from, to, httpserver.BadRequest("from", fmt.Sprintf("must be before to (%s), got %s", to.Format(time.RFC3339Nano), from.Format(time.RFC3339Nano)))
	}
	if to.Sub(from) > maxSpan {
		return from, to, refused(reasonRange, httpserver.BadRequest("from", fmt.Sprintf("from %s to %s spans more than %s, the most one request may cover; split the range",
			from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano), spanText(maxSpan))))
	}
	return from, to, nil
}

// parseDayRange reads from and to as UTC dates, both included: to defaults to today,
// from to def days before to; at most max days.
func parseDayRange(q url.Values, now time.Time, def, maxDays int) (from, to time.Time, err error) {
	to = dayOf(now)
	if s := q.Get("to"); s != "" {
		if to, err = parseDate("to", s); err != nil {
			return
		}
	}
	from = to.AddDate(0, 0, -(def - 1))
	if s := q.Get("from"); s != "" {
		if from, err = parseDate("from", s); err != nil {
			return
		}
	}
	if from.After(to) {
		return from, to, httpserver.BadRequest("from", fmt.Sprintf("must be on or before to (%s), got %s", to.Format(time.DateOnly), from.Format(time.DateOnly)))
	}
	if n := int(to.Sub(from)/day) + 1; n > maxDays {
		return from, to, refused(reasonRange, httpserver.BadRequest("from", fmt.Sprintf("from %s to %s is %d days, more than the %d one request may cover; split the range",
			from.Format(time.DateOnly), to.Format(time.DateOnly), n, maxDays)))
	}
	return from, to, nil
}

// parseLimit reads limit: 1 to maxHistoryLimit, defaultHistoryLimit when absent.
func parseLimit(q url.Values) (int, error) {
	s := q.Get("limit")
	if s == "" {
		return defaultHistoryLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxHistoryLimit {
		return 0, httpserver.BadRequest("limit", fmt.Sprintf("must be an integer from 1 to %d, got %q", maxHistoryLimit, s))
	}
	return n, nil
}

func dayOf(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

func monthOf(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// seconds turns a stored microsecond total into seconds.
func seconds(us int64) float64 { return float64(us) / 1e6 }

// Cursors. Both are internal/platform/cursor envelopes; their bodies are positions in a walk.

// timelineCursor is the last entry a timeline page returned: the next page starts
// just after it, in (occurred_at DESC, entry_id DESC) order.
type timelineCursor struct {
	At      time.Time // millisecond precision, as Cassandra stores it
	EntryID string
}

var timelineFormat = cursor.Format{Version: 1, MinBody: 8, MaxLen: 1024}

func (c timelineCursor) Encode() string {
	b := binary.BigEndian.AppendUint64(nil, uint64(c.At.UnixMilli()))
	return timelineFormat.Encode(append(b, c.EntryID...))
}

func decodeTimelineCursor(s string) (timelineCursor, error) {
	b, err := timelineFormat.Decode(s)
	if err != nil {
		return timelineCursor{}, err
	}
	return timelineCursor{At: time.UnixMilli(int64(binary.BigEndian.Uint64(b))).UTC(), EntryID: string(b[8:])}, nil
}

// dailyCursor is where a GET /v1/stats/daily walk goes on: in bucket Bucket of a day
// split in Buckets, after user After ("" for the bucket's first).
type dailyCursor struct {
	Buckets int
	Bucket  int
	After   string
}

// dailyFormat's version differs from timelineFormat's, so neither route reads the
// other's cursors.
var dailyFormat = cursor.Format{Version: 2, MinBody: 4, MaxLen: 1024}

func (c dailyCursor) Encode() string {
	b := binary.BigEndian.AppendUint16(nil, uint16(c.Buckets))
	b = binary.BigEndian.AppendUint16(b, uint16(c.Bucket))
	return dailyFormat.Encode(append(b, c.After...))
}

func decodeDailyCursor(s string) (dailyCursor, error) {
	b, err := dailyFormat.Decode(s)
	if err != nil {
		return dailyCursor{}, err
	}
	c := dailyCursor{Buckets: int(binary.BigEndian.Uint16(b)), Bucket: int(binary.BigEndian.Uint16(b[2:])), After: string(b[4:])}
	if c.Bucket >= c.Buckets {
		return c, fmt.Errorf("%w: bucket %d of %d", cursor.ErrInvalid, c.Bucket, c.Buckets)
	}
	return c, nil
}

// Concurrency (Q4).

// step is the width of a concurrency point.
type step string

const (
	stepMinute step = "minute"
	stepHour   step = "hour"
	stepDay    step = "day"
)

func parseStep(s string) (step, error) {
	switch st := step(s); st {
	case "":
		return stepMinute, nil
	case stepMinute, stepHour, stepDay:
		return st, nil
	}
	return "", httpserver.BadRequest("step", fmt.Sprintf("must be minute, hour or day, got %q", s))
}

// start is the beginning of the point holding minute t.
func (s step) start(t time.Time) time.Time {
	switch s {
	case stepHour:
		return t.UTC().Truncate(time.Hour)
	case stepDay:
		return dayOf(t)
	}
	return t.UTC().Truncate(time.Minute)
}

// concurrencyFold sums shards per second, minute by minute, and folds the minutes
// into points of its step. Rows must come in minute order (the table's clustering
// order, day partitions read in order); the shards of a minute in any order.
type concurrencyFold struct {
	step   step
	points []concurrencyPoint
	// The minute being summed.
	minute  time.Time
	online  [60]int64
	close   [3]int64
	pending bool
}

func (f *concurrencyFold) add(r historystore.MinuteCounts) {
	if f.pending && !r.Minute.Equal(f.minute) {
		f.endMinute()
	}
	if !f.pending {
		f.minute, f.online, f.close, f.pending = r.Minute, [60]int64{}, [3]int64{}, true
	}
	for s, n := range r.Online[:min(len(r.Online), 60)] {
		f.online[s] += int64(n)
	}
	f.close[0] += int64(r.CloseOnline)
	f.close[1] += int64(r.CloseIdle)
	f.close[2] += int64(r.CloseInvisible)
}

// endMinute folds the summed minute into its point.
func (f *concurrencyFold) endMinute() {
	f.pending = false
	var peak int64
	for _, n := range f.online {
		peak = max(peak, n)
	}
	at := f.step.start(f.minute)
	if n := len(f.points); n == 0 || !f.points[n-1].At.Equal(at) {
		f.points = append(f.points, concurrencyPoint{At: at})
	}
	p := &f.points[len(f.points)-1]
	invisible := f.close[2]
	p.CloseOnline, p.CloseIdle, p.CloseInvisible = f.close[0], f.close[1], &invisible
	p.PeakOnline = max(p.PeakOnline, peak)
	p.Minutes++
}

func (f *concurrencyFold) finish() []concurrencyPoint {
	if f.pending {
		f.endMinute()
	}
	if f.points == nil {
		return []concurrencyPoint{}
	}
	return f.points
}

// Unique users (Q6).

func parsePeriod(s string) (rollup.Period, string, error) {
	switch s {
	case "hour":
		return rollup.PeriodHour, s, nil
	case "", "day":
		return rollup.PeriodDay, "day", nil
	case "week":
		return rollup.PeriodWeek, s, nil
	case "month":
		return rollup.PeriodMonth, s, nil
	}
	return 0, "", httpserver.BadRequest("period", fmt.Sprintf("must be hour, day, week or month, got %q", s))
}

// uniquesFold unions each shard's hours per period. Rows must come in hour order.
// Readers count the users shown in each hour (online or idle at some instant of it),
// operators everyone present, invisible included. With members (a group's bitmap per
// shard), only those users count: each hour is ANDed with its shard's members before
// the union.
type uniquesFold struct {
	period   rollup.Period
	operator bool
	members  []*roaring.Bitmap
	points   []uniquesPoint
	start    time.Time
	shards   map[int]*roaring.Bitmap
}

func (f *uniquesFold) add(r historystore.HourUsers) error {
	start, end := f.period.Bounds(r.Hour)
	if f.shards != nil && !start.Equal(f.start) {
		f.endPeriod()
	}
	if f.shards == nil {
		f.start, f.shards = start, map[int]*roaring.Bitmap{}
		f.points = append(f.points, uniquesPoint{Start: start, End: end})
	}
	users := r.Public()
	if f.operator {
		users = r.Users
	}
	bm := roaring.New()
	if err := bm.UnmarshalBinary(users); err != nil {
		return fmt.Errorf("uniques of shard %d at %s: %w", r.Shard, r.Hour.Format(time.RFC3339), err)
	}
	if f.members != nil {
		if r.Shard < 0 || r.Shard >= len(f.members) {
			bm.Clear() // a shard the state does not have holds no member
		} else {
			bm.And(f.members[r.Shard])
		}
	}
	if u := f.shards[r.Shard]; u != nil {
		u.Or(bm)
	} else {
		f.shards[r.Shard] = bm
	}
	return nil
}

func (f *uniquesFold) endPeriod() {
	p := &f.points[len(f.points)-1]
	for _, bm := range f.shards {
		p.Users += bm.GetCardinality()
		p.BitmapBytes += bm.GetSerializedSizeInBytes()
	}
	p.Shards = len(f.shards)
	p.HyperLogLogBytes = uint64(len(f.shards)) * hllBytes
	f.shards = nil
}

func (f *uniquesFold) finish() []uniquesPoint {
	if f.shards != nil {
		f.endPeriod()
	}
	if f.points == nil {
		return []uniquesPoint{}
	}
	return f.points
}
