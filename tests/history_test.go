package tests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/tests/harness"
)

// These tests run the history binary against the stack's real Kafka and Cassandra. Each
// test has topics, a consumer group and user ids of its own, produces events and
// changes straight to Kafka, and compares Cassandra's user_activity and user_status
// rows with a model computed here, independently of the service's code.

const histPartitions = 4

// histEnv is one test's topics, group and users.
type histEnv struct {
	run     string
	events  string
	changes string
	group   string
	env     map[string]string
	prod    *kgo.Client
	adm     *kadm.Client
	session *gocql.Session
	ks      string
}

func histRunID(t *testing.T) string {
	t.Helper()
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func histSetup(t *testing.T) *histEnv {
	t.Helper()
	run := histRunID(t)
	h := &histEnv{
		run:     run,
		events:  "hist." + run + ".events",
		changes: "hist." + run + ".changes",
		group:   "hist-" + run,
		adm:     harness.KafkaAdmin(t),
		session: migCassandra(t),
		ks:      harness.EnvOr("PULSE_CASSANDRA_KEYSPACE", "pulse"),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := h.adm.CreateTopics(ctx, histPartitions, harness.BrokerReplication, nil, h.events, h.changes)
	if err != nil {
		t.Fatalf("creating topics: %v", err)
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil {
			t.Fatalf("creating topic %s: %v", r.Topic, r.Err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = h.adm.DeleteGroups(ctx, h.group)
		_, _ = h.adm.DeleteTopics(ctx, h.events, h.changes)
	})
	h.prod, err = kgo.NewClient(kgo.SeedBrokers(harness.KafkaBrokers()...), kgo.RetryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.prod.Close)
	h.env = harness.StackEnv()
	for k, v := range map[string]string{
		"PULSE_TOPIC_EVENTS":  h.events,
		"PULSE_TOPIC_CHANGES": h.changes,
		"PULSE_HISTORY_GROUP": h.group,
	} {
		h.env[k] = v
	}
	return h
}

// histEvent is an event as produced, with where it landed.
type histEvent struct {
	e         presence.Event
	partition int32
	offset    int64
}

// histChange is a change as produced.
type histChange struct {
	c *pulsev1.Change
}

// histGen makes a deterministic workload: several users and devices, heartbeats
// without occurred-at, client retries (duplicate ids), and events that arrive after a
// newer one of their device (stale).
type histGen struct {
	run     string
	rnd     *mrand.Rand
	base    time.Time
	i       int
	users   []string
	sent    map[string][]presence.Event // per user, for duplicates
	newest  map[string]time.Time        // per user|device, to build stale events
	changes map[string]int
}

func newHistGen(run string, users int, seed uint64) *histGen {
	g := &histGen{
		run:     run,
		rnd:     mrand.New(mrand.NewPCG(seed, 7)),
		base:    time.Now().Add(-2 * time.Minute).Truncate(time.Millisecond),
		sent:    map[string][]presence.Event{},
		newest:  map[string]time.Time{},
		changes: map[string]int{},
	}
	for u := range users {
		g.users = append(g.users, fmt.Sprintf("hist-%s-user-%02d", run, u))
	}
	return g
}

var histDevices = []string{"phone", "laptop", "default"}

// received is the next server clock reading: whole milliseconds, one per event, so
// heartbeat times never tie with the (sub-millisecond) occurred-at times.
func (g *histGen) received() time.Time {
	g.i++
	return g.base.Add(time.Duration(g.i) * time.Millisecond)
}

func (g *histGen) event() presence.Event {
	user := g.users[g.rnd.IntN(len(g.users))]
	device := histDevices[g.rnd.IntN(len(histDevices))]
	recv := g.received()
	roll := g.rnd.IntN(100)
	if prev := g.sent[user]; roll < 15 && len(prev) > 0 {
		// A client retry: same id, same occurred-at, received again.
		e := prev[g.rnd.IntN(len(prev))]
		e.ReceivedAt = recv
		return e
	}
	e := presence.Event{
		ID:         fmt.Sprintf("%s-ev-%05d", user, g.i),
		UserID:     user,
		DeviceID:   device,
		ReceivedAt: recv,
		Source:     presence.SourceAPI,
	}
	key := user + "|" + device
	switch {
	case roll < 30 && !g.newest[key].IsZero():
		// Older than what the device already sent: stale.
		e.Kind = presence.KindActivity
		e.OccurredAt = g.newest[key].Add(-time.Second - 5*time.Microsecond)
	case roll < 55:
		e.Kind = presence.KindHeartbeat
	default:
		e.Kind = presence.KindStatus
		e.Status = []presence.Status{presence.Online, presence.Idle, presence.Offline, presence.Invisible}[g.rnd.IntN(4)]
		if roll%2 == 0 {
			e.Kind, e.Status = presence.KindActivity, presence.StatusUnknown
		}
		e.OccurredAt = recv.Add(-2*time.Millisecond - 3*time.Microsecond)
	}
	if t := e.Time(); t.After(g.newest[key]) {
		g.newest[key] = t
	}
	g.sent[user] = append(g.sent[user], e)
	return e
}

func (g *histGen) change() *pulsev1.Change {
	user := g.users[g.rnd.IntN(len(g.users))]
	g.changes[user]++
	k := g.changes[user]
	statuses := []pulsev1.Status{pulsev1.Status_STATUS_ONLINE, pulsev1.Status_STATUS_IDLE, pulsev1.Status_STATUS_OFFLINE, pulsev1.Status_STATUS_INVISIBLE}
	c := &pulsev1.Change{
		UserId:          user,
		EventId:         fmt.Sprintf("%s-cause-%03d", user, k),
		Current:         statuses[g.rnd.IntN(len(statuses))],
		ChangedAtUs:     presence.Micros(g.received()) + 1,
		Cause:           pulsev1.Cause(1 + g.rnd.IntN(2)),
		DeviceId:        histDevices[g.rnd.IntN(len(histDevices))],
		SourcePartition: int32(g.rnd.IntN(histPartitions)),
		SourceOffset:    int64(k),
	}
	if k > 1 {
		c.Previous = statuses[g.rnd.IntN(len(statuses))]
	}
	return c
}

// produceEvents writes events in order and returns them with their log positions.
// produceGenerated produces nEvents events and nChanges changes from g.
func (h *histEnv) produceGenerated(t *testing.T, g *histGen, nEvents, nChanges int) ([]histEvent, []histChange) {
	t.Helper()
	evs := make([]presence.Event, 0, nEvents)
	for range nEvents {
		evs = append(evs, g.event())
	}
	chs := make([]*pulsev1.Change, 0, nChanges)
	for range nChanges {
		chs = append(chs, g.change())
	}
	return h.produceEvents(t, evs), h.produceChanges(t, chs)
}

func (h *histEnv) produceEvents(t *testing.T, events []presence.Event) []histEvent {
	t.Helper()
	recs := make([]*kgo.Record, len(events))
	for i, e := range events {
		b, err := proto.Marshal(e.ToPB())
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = &kgo.Record{Topic: h.events, Key: []byte(e.UserID), Value: b,
			Headers: []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaEvent)}}}
	}
	h.produce(t, recs)
	out := make([]histEvent, len(events))
	for i, r := range recs {
		out[i] = histEvent{e: events[i], partition: r.Partition, offset: r.Offset}
	}
	return out
}

func (h *histEnv) produceChanges(t *testing.T, changes []*pulsev1.Change) []histChange {
	t.Helper()
	recs := make([]*kgo.Record, len(changes))
	out := make([]histChange, len(changes))
	for i, c := range changes {
		b, err := proto.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = &kgo.Record{Topic: h.changes, Key: []byte(c.UserId), Value: b,
			Headers: []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaChange)}}}
		out[i] = histChange{c: c}
	}
	h.produce(t, recs)
	return out
}

func (h *histEnv) produce(t *testing.T, recs []*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing: %v", err)
	}
}

// histRow is one user_activity row.
type histRow struct {
	User, Bucket, EntryID, EntryType, Kind, Status, Previous, Cause, Device, Source string
	OccurredAt, ReceivedAt                                                          time.Time
	Stale                                                                           bool
	Partition                                                                       int32
	Offset                                                                          int64
}

// histStatus is one user_status row.
type histStatus struct {
	Status                            string
	LastUpdated, LastActive, LastSeen time.Time
	LastEventID                       string
}

type histModel struct {
	rows       map[string]histRow // user|bucket|entry id
	status     map[string]histStatus
	duplicates int
	stale      int
}

func histMillis(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Truncate(time.Millisecond).UTC()
}

func histDay(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// histBuildModel folds what was produced, in log order per user, as docs/design.md
// (History) says history must: a repeated event id writes nothing; an event older than the newest of
// its device is recorded as stale and moves no status column; the newest event and
// change win. Heartbeats and activity are no user_activity rows (PULSE_HISTORY_EVENT_ROWS=status, the
// default) but still move last_seen and decide staleness.
func histBuildModel(events []histEvent, changes []histChange) histModel {
	m := histModel{rows: map[string]histRow{}, status: map[string]histStatus{}}
	seen := map[string]bool{}
	newest := map[string]time.Time{}
	// Cassandra keeps the cell with the highest write timestamp: the event's time in
	// microseconds. The workload keeps a user's fresh event times distinct.
	lastSeen, lastActive := map[string]time.Time{}, map[string]time.Time{}
	for _, he := range events {
		e := he.e
		if seen[e.UserID+"|"+e.ID] {
			m.duplicates++
			continue
		}
		seen[e.UserID+"|"+e.ID] = true
		t := e.Time()
		key := e.UserID + "|" + e.DeviceID
		stale := t.Before(newest[key])
		if stale {
			m.stale++
		} else {
			newest[key] = t
		}
		status := ""
		if e.Kind == presence.KindStatus {
			status = e.Status.String()
		}
		r := histRow{User: e.UserID, Bucket: histDay(t), EntryID: "e:" + e.ID, EntryType: "event", Kind: e.Kind.String(),
			Status: status, Device: e.DeviceID, Source: e.Source.String(), OccurredAt: histMillis(t),
			ReceivedAt: histMillis(e.ReceivedAt), Stale: stale, Partition: he.partition, Offset: he.offset}
		if e.Kind == presence.KindStatus || e.Source == presence.SourceTimeout {
			m.rows[r.User+"|"+r.Bucket+"|"+r.EntryID] = r
		}
		if stale {
			continue
		}
		s := m.status[e.UserID]
		if t.After(lastSeen[e.UserID]) {
			lastSeen[e.UserID] = t
			s.LastSeen, s.LastEventID = histMillis(t), e.ID
		}
		if e.Kind != presence.KindHeartbeat && t.After(lastActive[e.UserID]) {
			lastActive[e.UserID] = t
			s.LastActive = histMillis(t)
		}
		m.status[e.UserID] = s
	}
	for _, hc := range changes {
		c := hc.c
		at := presence.FromMicros(c.ChangedAtUs)
		prev := ""
		if c.Previous != pulsev1.Status_STATUS_UNSPECIFIED {
			prev = presence.StatusFromPB(c.Previous).String()
		}
		cause := map[pulsev1.Cause]string{pulsev1.Cause_CAUSE_EVENT: "event", pulsev1.Cause_CAUSE_TIMEOUT: "timeout"}[c.Cause]
		r := histRow{User: c.UserId, Bucket: histDay(at), EntryID: "c:" + c.EventId, EntryType: "change",
			Status: presence.StatusFromPB(c.Current).String(), Previous: prev, Cause: cause, Device: c.DeviceId,
			OccurredAt: histMillis(at), Partition: c.SourcePartition, Offset: c.SourceOffset}
		m.rows[r.User+"|"+r.Bucket+"|"+r.EntryID] = r
		s := m.status[c.UserId]
		s.Status, s.LastUpdated = r.Status, histMillis(at)
		m.status[c.UserId] = s
	}
	return m
}

// histRead reads every row of users from Cassandra, from every bucket the model
// names and the days around the workload, so a row in an unexpected bucket shows too.
func (h *histEnv) histRead(t *testing.T, users []string, days []string) (map[string]histRow, map[string]histStatus, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	buckets := make([]time.Time, 0, len(days))
	for _, d := range days {
		b, err := time.Parse(time.DateOnly, d)
		if err != nil {
			t.Fatal(err)
		}
		buckets = append(buckets, b)
	}
	rows := map[string]histRow{}
	status := map[string]histStatus{}
	for _, u := range users {
		iter := h.session.Query(`SELECT user_id, bucket, occurred_at, entry_id, entry_type, kind, status, previous_status,
 cause, device_id, source, received_at, stale, log_partition, log_offset FROM `+h.ks+`.user_activity
 WHERE user_id = ? AND bucket IN ?`, u, buckets).IterContext(ctx)
		var r histRow
		var bucket time.Time
		for iter.Scan(&r.User, &bucket, &r.OccurredAt, &r.EntryID, &r.EntryType, &r.Kind, &r.Status, &r.Previous,
			&r.Cause, &r.Device, &r.Source, &r.ReceivedAt, &r.Stale, &r.Partition, &r.Offset) {
			r.Bucket = histDay(bucket)
			r.OccurredAt, r.ReceivedAt = histMillis(r.OccurredAt), histMillis(r.ReceivedAt)
			rows[r.User+"|"+r.Bucket+"|"+r.EntryID] = r
			r = histRow{}
		}
		if err := iter.Close(); err != nil {
			return nil, nil, fmt.Errorf("reading user_activity of %s: %w", u, err)
		}
		var s histStatus
		err := h.session.Query(`SELECT status, last_updated, last_active, last_seen, last_event_id FROM `+h.ks+`.user_status
 WHERE user_id = ?`, u).ScanContext(ctx, &s.Status, &s.LastUpdated, &s.LastActive, &s.LastSeen, &s.LastEventID)
		switch {
		case err == gocql.ErrNotFound:
		case err != nil:
			return nil, nil, fmt.Errorf("reading user_status of %s: %w", u, err)
		default:
			s.LastUpdated, s.LastActive, s.LastSeen = histMillis(s.LastUpdated), histMillis(s.LastActive), histMillis(s.LastSeen)
			status[u] = s
		}
	}
	return rows, status, nil
}

// histDiff compares Cassandra with the model and describes the first differences.
func (h *histEnv) histDiff(t *testing.T, m histModel, users []string) string {
	t.Helper()
	days := map[string]bool{}
	for _, r := range m.rows {
		days[r.Bucket] = true
	}
	now := time.Now()
	for _, d := range []time.Duration{-24 * time.Hour, 0, 24 * time.Hour} {
		days[histDay(now.Add(d))] = true
	}
	var dayList []string
	for d := range days {
		dayList = append(dayList, d)
	}
	rows, status, err := h.histRead(t, users, dayList)
	if err != nil {
		return err.Error()
	}
	var diffs []string
	for k, want := range m.rows {
		got, ok := rows[k]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("missing row %s: %+v", k, want))
		case !reflect.DeepEqual(got, want):
			diffs = append(diffs, fmt.Sprintf("row %s:\n  got  %+v\n  want %+v", k, got, want))
		}
	}
	for k, got := range rows {
		if _, ok := m.rows[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("extra row %s: %+v", k, got))
		}
	}
	for _, u := range users {
		if got, want := status[u], m.status[u]; !reflect.DeepEqual(got, want) {
			diffs = append(diffs, fmt.Sprintf("user_status %s:\n  got  %+v\n  want %+v", u, got, want))
		}
	}
	if len(diffs) == 0 {
		return ""
	}
	sort.Strings(diffs)
	if len(diffs) > 8 {
		diffs = append(diffs[:8], fmt.Sprintf("... and %d more", len(diffs)-8))
	}
	return fmt.Sprintf("%d rows in Cassandra, %d in the model; differences:\n%s", len(rows), len(m.rows), strings.Join(diffs, "\n"))
}

// histCleanup deletes the test's rows (its users are its own).
func (h *histEnv) histCleanup(t *testing.T, m *histModel, users []string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		done := map[string]bool{}
		for _, r := range m.rows {
			if k := r.User + "|" + r.Bucket; !done[k] {
				done[k] = true
				b, _ := time.Parse(time.DateOnly, r.Bucket)
				_ = h.session.Query(`DELETE FROM `+h.ks+`.user_activity WHERE user_id = ? AND bucket = ?`, r.User, b).ExecContext(ctx)
			}
		}
		for _, u := range users {
			_ = h.session.Query(`DELETE FROM `+h.ks+`.user_status WHERE user_id = ?`, u).ExecContext(ctx)
		}
	})
}

// histCommitted is the group's committed offsets summed over the events topic.
func (h *histEnv) histCommitted(t *testing.T) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := h.adm.FetchOffsets(ctx, h.group)
	if err != nil {
		return 0 // the group may not exist yet
	}
	var sum int64
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == h.events && o.Err == nil && o.At > 0 {
			sum += o.At
		}
	})
	return sum
}

func histMetric(t *testing.T, s *harness.Service, line string) string {
	t.Helper()
	_, body := harness.Get(t, s.URL+"/metrics")
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, line+" ") {
			return strings.TrimPrefix(l, line+" ")
		}
	}
	return ""
}

// History writes every event and change as the model says: duplicates dropped, stale
// events flagged, the newest event and change winning in user_status, undecodable
// records skipped, whether records were in the log before it started or arrived live.
func TestHistoryWritesEventsAndChanges(t *testing.T) {
	h := histSetup(t)
	g := newHistGen(h.run, 8, 1)
	var m histModel
	h.histCleanup(t, &m, g.users)

	var evs []presence.Event
	for range 300 {
		evs = append(evs, g.event())
	}
	var chs []*pulsev1.Change
	for range 40 {
		chs = append(chs, g.change())
	}
	events := h.produceEvents(t, evs)
	changes := h.produceChanges(t, chs)
	// Poison: no schema header, and a header over bytes that are no event.
	h.produce(t, []*kgo.Record{
		{Topic: h.events, Key: []byte(g.users[0]), Value: []byte("not a pulse record")},
		{Topic: h.events, Key: []byte(g.users[1]), Value: []byte{0xff, 0x01},
			Headers: []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaEvent)}}},
	})

	env := h.env
	env["PULSE_HISTORY_COMMIT_INTERVAL"] = "100ms"
	// user_status's last-seen and last-active are held across flushes, a row written at
	// most once per PULSE_HISTORY_STATUS_INTERVAL: 2 s rather than the default 30 s,
	// which the test would wait out twice. They still wait across flushes (1 s apart).
	env["PULSE_HISTORY_STATUS_INTERVAL"] = "2s"
	s := harness.StartService(t, "history", env)
	m = histBuildModel(events, changes)
	harness.Eventually(t, 90*time.Second, func() string { return h.histDiff(t, m, g.users) })

	// Live: more events, retries of events written before, stale ones behind them.
	evs = evs[:0]
	for range 200 {
		evs = append(evs, g.event())
	}
	chs = chs[:0]
	for range 20 {
		chs = append(chs, g.change())
	}
	events = append(events, h.produceEvents(t, evs)...)
	changes = append(changes, h.produceChanges(t, chs)...)
	m = histBuildModel(events, changes)
	if m.duplicates < 20 || m.stale < 20 {
		t.Fatalf("workload has %d duplicates and %d stale events; want at least 20 of each", m.duplicates, m.stale)
	}
	harness.Eventually(t, 90*time.Second, func() string { return h.histDiff(t, m, g.users) })
	t.Logf("%d rows for %d events (%d duplicates, %d stale) and %d changes", len(m.rows), len(events), m.duplicates, m.stale, len(changes))

	harness.Eventually(t, 10*time.Second, func() string {
		got := histMetric(t, s, `pulse_history_records_skipped_total{reason="duplicate"}`)
		if got != fmt.Sprint(m.duplicates) {
			return fmt.Sprintf("duplicates skipped = %q, want %d", got, m.duplicates)
		}
		if got := histMetric(t, s, `pulse_history_records_skipped_total{reason="undecodable"}`); got != "2" {
			return fmt.Sprintf("undecodable skipped = %q, want 2", got)
		}
		if got := histMetric(t, s, `pulse_history_stale_events_total`); got != fmt.Sprint(m.stale) {
			return fmt.Sprintf("stale = %q, want %d", got, m.stale)
		}
		return ""
	})
}

// Killed with SIGKILL in mid-stream and restarted, history ends with exactly the
// model's rows: nothing lost (uncommitted records are replayed), nothing extra (the
// replay rewrites identical rows, and the rebuilt horizon still drops duplicates and
// flags stale events across the crash).
func TestHistoryCrashReplaysExactly(t *testing.T) {
	h := histSetup(t)
	g := newHistGen(h.run, 24, 2)
	var m histModel
	h.histCleanup(t, &m, g.users)

	var events []histEvent
	var changes []histChange
	produce := func(nEvents, nChanges int) {
		evs, chs := h.produceGenerated(t, g, nEvents, nChanges)
		events, changes = append(events, evs...), append(changes, chs...)
	}
	produce(600, 60)

	env := h.env
	// Small polls, a commit after every batch and few writes at once: many commits,
	// and a crash that surely lands between two of them.
	env["PULSE_HISTORY_MAX_POLL_RECORDS"] = "20"
	env["PULSE_HISTORY_COMMIT_INTERVAL"] = "0s"
	env["PULSE_HISTORY_WRITE_CONCURRENCY"] = "2"
	// The killed member stays in the group until its session expires; the broker's
	// minimum (6s) lets the restarted one take over without waiting the default 45s.
	env["PULSE_HISTORY_SESSION_TIMEOUT"] = "6s"
	s := harness.StartService(t, "history", env)

	// Keep producing while it works; kill it once it has committed some offsets.
	deadline := time.Now().Add(90 * time.Second)
	for h.histCommitted(t) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("history committed nothing in 90s; output:\n%s", s.Out)
		}
		produce(20, 2)
		time.Sleep(20 * time.Millisecond)
	}
	produce(20, 2)
	if err := s.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s.Done
	committed := h.histCommitted(t)
	t.Logf("killed after %d of %d events were committed", committed, len(events))
	if committed >= int64(len(events)) {
		t.Logf("note: every event was committed before the kill; the crash still tests restart")
	}

	// While it is down: more events, among them retries and stale events of ones from
	// before the crash, which the restarted horizon must recognise.
	produce(300, 30)
	m = histBuildModel(events, changes)
	if m.duplicates < 30 || m.stale < 30 {
		t.Fatalf("workload has %d duplicates and %d stale events; want at least 30 of each", m.duplicates, m.stale)
	}

	harness.StartService(t, "history", env)
	harness.Eventually(t, 120*time.Second, func() string { return h.histDiff(t, m, g.users) })
	t.Logf("%d rows for %d events (%d duplicates, %d stale) and %d changes", len(m.rows), len(events), m.duplicates, m.stale, len(changes))
}
