package main

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/records"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

var base = time.Date(2026, 3, 1, 23, 59, 59, 0, time.UTC)

func ms(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }

func event(id, user, device string, kind presence.Kind, occurred, received time.Time) presence.Event {
	e := presence.Event{ID: id, UserID: user, Kind: kind, DeviceID: device, OccurredAt: occurred, ReceivedAt: received, Source: presence.SourceAPI}
	if kind == presence.KindStatus {
		e.Status = presence.Online
	}
	return e
}

func eventRecord(offset int64, e presence.Event) *kgo.Record {
	b, err := proto.Marshal(e.ToPB())
	if err != nil {
		panic(err)
	}
	return &kgo.Record{
		Topic: "ev", Partition: 3, Offset: offset, Key: []byte(e.UserID), Value: b, Timestamp: e.ReceivedAt,
		Headers: []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaEvent)}},
	}
}

func changeRecord(offset int64, c *pulsev1.Change) *kgo.Record {
	b, err := proto.Marshal(c)
	if err != nil {
		panic(err)
	}
	return &kgo.Record{
		Topic: "ch", Partition: 1, Offset: offset, Key: []byte(c.UserId), Value: b, Timestamp: presence.FromMicros(c.ChangedAtUs),
		Headers: []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaChange)}},
	}
}

func TestDecodeEvent(t *testing.T) {
	good := event("e1", "u1", "phone", presence.KindStatus, ms(1), ms(2))
	tests := []struct {
		name   string
		record func() *kgo.Record
		err    string
	}{
		{"valid", func() *kgo.Record { return eventRecord(0, good) }, ""},
		{"no header", func() *kgo.Record { r := eventRecord(0, good); r.Headers = nil; return r }, "no pulse-schema header"},
		{"other schema", func() *kgo.Record {
			r := eventRecord(0, good)
			r.Headers[0].Value = []byte(pulsev1.SchemaChange)
			return r
		}, `schema "pulse.v1.Change"`},
		{"garbage", func() *kgo.Record { r := eventRecord(0, good); r.Value = []byte{0xff, 0xff, 0xff}; return r }, "decoding event"},
		{"invalid event", func() *kgo.Record {
			bad := good
			bad.UserID = ""
			r := eventRecord(0, bad)
			r.Key = nil
			return r
		}, "invalid event: user id"},
		{"key differs", func() *kgo.Record { r := eventRecord(0, good); r.Key = []byte("u2"); return r }, "record key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := records.DecodeEvent(tt.record())
			if tt.err == "" {
				if err != nil || !reflect.DeepEqual(e, good) {
					t.Fatalf("decodeEvent = %+v, %v; want %+v", e, err, good)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("decodeEvent error = %v, want one containing %q", err, tt.err)
			}
		})
	}
}

func goodChange() *pulsev1.Change {
	return &pulsev1.Change{
		UserId: "u1", EventId: "e1", Previous: pulsev1.Status_STATUS_OFFLINE, Current: pulsev1.Status_STATUS_ONLINE,
		ChangedAtUs: presence.Micros(ms(5)), Cause: pulsev1.Cause_CAUSE_EVENT, DeviceId: "phone", SourcePartition: 3, SourceOffset: 42,
		UserIndex: 7,
	}
}

func TestDecodeChange(t *testing.T) {
	want := change{UserID: "u1", EventID: "e1", Previous: presence.Offline, Current: presence.Online, At: ms(5),
		Cause: "event", DeviceID: "phone", SourcePartition: 3, SourceOffset: 42, UserIndex: 7}
	tests := []struct {
		name   string
		modify func(*pulsev1.Change)
		record func(*kgo.Record)
		err    string
	}{
		{"valid", nil, nil, ""},
		{"no header", nil, func(r *kgo.Record) { r.Headers = nil }, "no pulse-schema header"},
		{"event schema", nil, func(r *kgo.Record) { r.Headers[0].Value = []byte(pulsev1.SchemaEvent) }, "schema"},
		{"garbage", nil, func(r *kgo.Record) { r.Value = []byte{0x0a, 0xff} }, "decoding change"},
		{"no user", func(c *pulsev1.Change) { c.UserId = "" }, func(r *kgo.Record) { r.Key = nil }, "user id"},
		{"no event id", func(c *pulsev1.Change) { c.EventId = "" }, nil, "event id"},
		{"no current status", func(c *pulsev1.Change) { c.Current = pulsev1.Status_STATUS_UNSPECIFIED }, nil, "current status"},
		{"no changed-at", func(c *pulsev1.Change) { c.ChangedAtUs = 0 }, nil, "changed-at"},
		{"bad device", func(c *pulsev1.Change) { c.DeviceId = "a\nb" }, nil, "device id"},
		{"key differs", nil, func(r *kgo.Record) { r.Key = []byte("u9") }, "record key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := goodChange()
			if tt.modify != nil {
				tt.modify(c)
			}
			r := changeRecord(0, c)
			if tt.record != nil {
				tt.record(r)
			}
			got, err := decodeChange(r)
			if tt.err == "" {
				if err != nil || !reflect.DeepEqual(got, want) {
					t.Fatalf("decodeChange = %+v, %v; want %+v", got, err, want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("decodeChange error = %v, want one containing %q", err, tt.err)
			}
		})
	}
}

// rollupTables are the tables of the rows a rollup fold hands out, and of its
// checkpoints.
var rollupTables = []string{historystore.TableSessions, historystore.TableUserDaily, historystore.TableDailyUsers,
	historystore.TableConcurrency, historystore.TableUniques, historystore.TableCheckpoints, historystore.TableSnapshots,
	historystore.TableShardChanges, historystore.TableShardUsers, historystore.TableUserIndexes, historystore.TableProgress}

// describe renders a statement compactly for comparisons.
func describe(w historystore.Write) string {
	a := w.Values()
	val := func(v any) string {
		if v == gocql.UnsetValue {
			return "unset"
		}
		if t, ok := v.(time.Time); ok {
			return t.UTC().Format("2006-01-02T15:04:05.000")
		}
		return fmt.Sprint(v)
	}
	switch w.Statement() {
	case historystore.InsertEvent:
		s := fmt.Sprintf("event user=%v bucket=%v at=%v id=%v kind=%v status=%v device=%v source=%v received=%v stale=%v pos=%v/%v ts=%v",
			a[0], val(a[1])[:10], val(a[2]), a[3], a[4], val(a[5]), a[6], a[7], val(a[8]), a[9], a[10], a[11], a[16])
		if a[12] != gocql.UnsetValue {
			s += fmt.Sprintf(" custom=%v text=%v emoji=%v until=%v", a[12], val(a[13]), val(a[14]), val(a[15]))
		}
		return s
	case historystore.InsertChange:
		return fmt.Sprintf("change user=%v bucket=%v at=%v id=%v status=%v previous=%v cause=%v device=%v pos=%v/%v ts=%v",
			a[0], val(a[1])[:10], val(a[2]), a[3], a[4], val(a[5]), val(a[6]), val(a[7]), a[8], a[9], a[10])
	case historystore.UpdateSeen:
		return fmt.Sprintf("seen user=%v ts=%v last_seen=%v event=%v", a[3], a[0], val(a[1]), a[2])
	case historystore.UpdateActive:
		return fmt.Sprintf("active user=%v ts=%v last_seen=%v last_active=%v event=%v", a[4], a[0], val(a[1]), val(a[2]), a[3])
	case historystore.UpdateStatus:
		return fmt.Sprintf("status user=%v ts=%v status=%v last_updated=%v", a[3], a[0], a[1], val(a[2]))
	}
	if slices.Contains(rollupTables, w.Table()) {
		vals := make([]string, len(a))
		for i, v := range a {
			if b, ok := v.([]byte); ok {
				vals[i] = fmt.Sprintf("%x", b)
				continue
			}
			vals[i] = val(v)
		}
		return w.Table() + " " + strings.Join(vals, " ")
	}
	return fmt.Sprintf("unknown statement %d", w.Statement())
}

func describeKeys(ps []*historystore.Partition) []string {
	var out []string
	for _, p := range ps {
		for _, w := range p.Writes {
			out = append(out, strings.ReplaceAll(p.Key, "\x00", "|")+": "+describe(w))
		}
	}
	return out
}

func TestPlan(t *testing.T) {
	p := batchPlan{allEvents: true}
	// A status event just before midnight UTC, received just after: the bucket follows
	// the event's time; the write timestamp follows received-at.
	st := event("e1", "u1", "phone", presence.KindStatus, ms(500), ms(1500))
	p.addEvent(&st, false, 3, 10)
	hb := event("e2", "u1", "phone", presence.KindHeartbeat, time.Time{}, ms(2000))
	p.addEvent(&hb, false, 3, 11)
	old := event("e3", "u1", "laptop", presence.KindActivity, ms(100), ms(2100))
	p.addEvent(&old, true, 3, 12)
	c := change{UserID: "u1", EventID: "e2", Previous: presence.StatusUnknown, Current: presence.Online, At: ms(2000), Cause: "timeout", SourcePartition: 3, SourceOffset: 11}
	p.addChange(&c)

	us := func(t time.Time) int64 { return presence.Micros(t) }
	want := []string{
		"user_activity|u1|2026-03-01: event user=u1 bucket=2026-03-01 at=2026-03-01T23:59:59.500 id=e:e1 kind=status status=online device=phone source=api received=2026-03-02T00:00:00.500 stale=false pos=3/10 ts=" + fmt.Sprint(us(ms(1500))),
		"user_activity|u1|2026-03-01: event user=u1 bucket=2026-03-01 at=2026-03-01T23:59:59.100 id=e:e3 kind=activity status=unset device=laptop source=api received=2026-03-02T00:00:01.100 stale=true pos=3/12 ts=" + fmt.Sprint(us(ms(2100))),
		"user_activity|u1|2026-03-02: event user=u1 bucket=2026-03-02 at=2026-03-02T00:00:01.000 id=e:e2 kind=heartbeat status=unset device=phone source=api received=2026-03-02T00:00:01.000 stale=false pos=3/11 ts=" + fmt.Sprint(us(ms(2000))),
		"user_activity|u1|2026-03-02: change user=u1 bucket=2026-03-02 at=2026-03-02T00:00:01.000 id=c:e2 status=online previous=unset cause=timeout device=unset pos=3/11 ts=" + fmt.Sprint(us(ms(2000))),
		"user_status|u1: active user=u1 ts=" + fmt.Sprint(us(ms(500))) + " last_seen=2026-03-01T23:59:59.500 last_active=2026-03-01T23:59:59.500 event=e1",
		"user_status|u1: seen user=u1 ts=" + fmt.Sprint(us(ms(2000))) + " last_seen=2026-03-02T00:00:01.000 event=e2",
		"user_status|u1: status user=u1 ts=" + fmt.Sprint(us(ms(2000))) + " status=online last_updated=2026-03-02T00:00:01.000",
	}
	if got := describeKeys(p.keys()); !reflect.DeepEqual(got, want) {
		t.Fatalf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := len(p.keys()); n != 3 {
		t.Errorf("%d partition keys, want 3", n)
	}
}

// By default a heartbeat is no user_activity row, fresh or stale; a fresh one still
// moves last_seen.
func TestPlanWithoutHeartbeats(t *testing.T) {
	var p batchPlan
	hb := event("e2", "u1", "phone", presence.KindHeartbeat, time.Time{}, ms(2000))
	p.addEvent(&hb, false, 3, 11)
	old := event("e3", "u1", "phone", presence.KindHeartbeat, ms(100), ms(2100))
	p.addEvent(&old, true, 3, 12)
	want := []string{
		"user_status|u1: seen user=u1 ts=" + fmt.Sprint(presence.Micros(ms(2000))) + " last_seen=2026-03-02T00:00:01.000 event=e2",
	}
	if got := describeKeys(p.keys()); !reflect.DeepEqual(got, want) {
		t.Fatalf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A status event's row keeps what it did to the user's custom status: custom=true with
// the status it set, custom=true alone for a clear (stale or not: the row is the event
// as received) and for the aggregator's timeout at until, and no custom column at all
// for an event that carried none.
func TestPlanKeepsCustomStatus(t *testing.T) {
	var p batchPlan
	add := func(id string, at time.Time, c *presence.CustomStatus, stale bool) {
		e := event(id, "u1", "phone", presence.KindStatus, at, at)
		e.Custom = c
		p.addEvent(&e, stale, 3, 0)
	}
	until := time.Date(2026, 3, 2, 15, 0, 0, 250_000_000, time.UTC)
	add("s1", ms(100), &presence.CustomStatus{Text: "In a meeting", Emoji: "📅", Until: until}, false)
	add("s2", ms(200), &presence.CustomStatus{Emoji: "🌴"}, true)
	add("s3", ms(300), &presence.CustomStatus{}, false)
	add("s4", ms(400), nil, false)
	// The aggregator's timeout at until: a clear, though it carries no custom status.
	expired := presence.Event{ID: "t1", UserID: "u1", Kind: presence.KindCustom, DeviceID: presence.AllDevices,
		ReceivedAt: ms(500), Source: presence.SourceTimeout, LastSeen: ms(100)}
	p.addEvent(&expired, false, 3, 0)

	ev := func(id string, n int, stale bool) string {
		return fmt.Sprintf("user_activity|u1|2026-03-01: event user=u1 bucket=2026-03-01 at=%s id=e:%s kind=status status=online device=phone source=api received=%s stale=%v pos=3/0 ts=%d",
			ms(n).Format("2006-01-02T15:04:05.000"), id, ms(n).Format("2006-01-02T15:04:05.000"), stale, presence.Micros(ms(n)))
	}
	want := []string{
		ev("s1", 100, false) + " custom=true text=In a meeting emoji=📅 until=2026-03-02T15:00:00.250",
		ev("s2", 200, true) + " custom=true text=unset emoji=🌴 until=unset",
		ev("s3", 300, false) + " custom=true text=unset emoji=unset until=unset",
		ev("s4", 400, false),
		"user_activity|u1|2026-03-01: event user=u1 bucket=2026-03-01 at=2026-03-01T23:59:59.500 id=e:t1 kind=custom status=unset device=* source=timeout received=2026-03-01T23:59:59.500 stale=false pos=3/0 ts=" +
			fmt.Sprint(presence.Micros(ms(500))) + " custom=true text=unset emoji=unset until=unset",
	}
	var got []string
	for _, line := range describeKeys(p.keys()) {
		if strings.HasPrefix(line, "user_activity|") {
			got = append(got, line)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("user_activity rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A batch writes each user's user_status row once per kind of update, with the write
// Cassandra would have kept of the per-event ones: the newest, and on a tie of
// timestamps the greater value.
func TestPlanCoalescesUserStatus(t *testing.T) {
	var p batchPlan
	add := func(id string, kind presence.Kind, at time.Time, stale bool) {
		e := event(id, "u1", "phone", kind, at, at)
		p.addEvent(&e, stale, 3, 0)
	}
	add("a1", presence.KindStatus, ms(100), false)
	add("h1", presence.KindHeartbeat, ms(200), false)
	add("a2", presence.KindActivity, ms(300), false)
	add("h2", presence.KindHeartbeat, ms(400), false)
	add("h0", presence.KindHeartbeat, ms(50), false)  // older: loses
	add("h9", presence.KindHeartbeat, ms(400), false) // same time, greater id: wins the tie
	add("h3", presence.KindHeartbeat, ms(900), true)  // stale: no user_status write
	for i, st := range []presence.Status{presence.Online, presence.Idle, presence.Offline} {
		c := change{UserID: "u1", EventID: fmt.Sprint("c", i), Current: st, At: ms(100 * (i + 1))}
		p.addChange(&c)
	}
	// Only u2 is active: one write sets both last_seen and last_active.
	e := event("x1", "u2", "phone", presence.KindStatus, ms(10), ms(10))
	p.addEvent(&e, false, 3, 0)

	us := func(t time.Time) string { return fmt.Sprint(presence.Micros(t)) }
	var got []string
	for _, line := range describeKeys(p.keys()) {
		if strings.HasPrefix(line, "user_status") {
			got = append(got, line)
		}
	}
	want := []string{
		"user_status|u1: active user=u1 ts=" + us(ms(300)) + " last_seen=2026-03-01T23:59:59.300 last_active=2026-03-01T23:59:59.300 event=a2",
		"user_status|u1: seen user=u1 ts=" + us(ms(400)) + " last_seen=2026-03-01T23:59:59.400 event=h9",
		"user_status|u1: status user=u1 ts=" + us(ms(300)) + " status=offline last_updated=2026-03-01T23:59:59.300",
		"user_status|u2: active user=u2 ts=" + us(ms(10)) + " last_seen=2026-03-01T23:59:59.010 last_active=2026-03-01T23:59:59.010 event=x1",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("user_status writes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Decoders of outside input never panic, and what they accept is valid.
func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte("u1"), eventRecord(0, event("e1", "u1", "d", presence.KindStatus, ms(1), ms(2))).Value)
	f.Add([]byte("u1"), []byte{0x0a, 0x02, 'e', '1'})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		r := &kgo.Record{Key: key, Value: value, Headers: []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaEvent)}}}
		e, err := records.DecodeEvent(r)
		if err != nil {
			return
		}
		if verr := e.Validate(); verr != nil || e.UserID != string(key) {
			t.Fatalf("accepted an invalid event %+v: %v", e, verr)
		}
	})
}

func FuzzDecodeChange(f *testing.F) {
	f.Add([]byte("u1"), changeRecord(0, goodChange()).Value)
	f.Add([]byte(""), []byte{0x08, 0x01})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		r := &kgo.Record{Key: key, Value: value, Headers: []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaChange)}}}
		c, err := decodeChange(r)
		if err != nil {
			return
		}
		if c.UserID != string(key) || c.EventID == "" || c.Current == presence.StatusUnknown || c.At.IsZero() {
			t.Fatalf("accepted an invalid change %+v", c)
		}
	})
}

// user_status keeps the custom status of the newest fresh status event carrying one,
// its times in microseconds, so a rebuild of Redis from history restores it; events
// without one, stale ones and older ones plan no custom write.
func TestPlanCustomStatusInUserStatus(t *testing.T) {
	p := batchPlan{}
	set := func(id string, at time.Time, c *presence.CustomStatus, stale bool) {
		e := event(id, "u1", "phone", presence.KindStatus, at, at)
		e.Custom = c
		p.addEvent(&e, stale, 3, 10)
	}
	until := ms(90_000).Add(7 * time.Microsecond)
	set("e1", ms(1000), &presence.CustomStatus{Text: "lunch"}, false)
	set("e2", ms(3000).Add(5*time.Microsecond), &presence.CustomStatus{Text: "In a meeting", Emoji: "📅", Until: until}, false)
	set("e3", ms(2000), &presence.CustomStatus{}, false)             // older than e2
	set("e4", ms(4000), &presence.CustomStatus{Text: "stale"}, true) // stale
	set("e5", ms(5000), nil, false)                                  // carries none
	var got [][]any
	for _, k := range p.keys() {
		for _, w := range k.Writes {
			if w.Statement() == historystore.UpdateCustom {
				got = append(got, w.Values())
			}
		}
	}
	setAt := presence.Micros(ms(3000).Add(5 * time.Microsecond))
	want := [][]any{{setAt, "In a meeting", "📅", presence.Micros(until), setAt, "u1"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("custom writes %v, want %v", got, want)
	}
	// A clear is written as such: empty text and emoji, no until.
	p = batchPlan{}
	set("e6", ms(6000), &presence.CustomStatus{}, false)
	w := p.keys()[len(p.keys())-1].Writes
	last := w[len(w)-1]
	if v := last.Values(); last.Statement() != historystore.UpdateCustom || !reflect.DeepEqual(v, []any{presence.Micros(ms(6000)), "", "", int64(0), presence.Micros(ms(6000)), "u1"}) {
		t.Fatalf("a clear planned %v %v", last.Statement(), v)
	}
}
