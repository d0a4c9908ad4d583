package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/cassx"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/tests/harness"
)

// The analysts' tables written by history from presence.changes (sessions, daily
// totals, concurrency per second, hourly uniques), checked against a model computed
// here from the changes the aggregator logged. The workload is dated on a day of the
// past no other test uses, so that the tables' partitions (by day) hold this test's
// rows alone; occurred-at times straddle that day's midnight.

const rollupLateness = 10 * time.Minute // internal/domain/rollup.DefaultLateness

// rollupTimeline is one user's effective statuses, as presence.changes says.
type rollupTimeline struct {
	user  string
	shard int32
	index uint32
	at    []int64 // changed_at, µs, increasing
	st    []presence.Status
}

// statusAt is the user's status at instant t (µs): that of the latest change at or
// before t, offline before the first.
func (tl *rollupTimeline) statusAt(t int64) presence.Status {
	i := sort.Search(len(tl.at), func(i int) bool { return tl.at[i] > t })
	if i == 0 {
		return presence.Offline
	}
	return tl.st[i-1]
}

func present(s presence.Status) bool {
	return s == presence.Online || s == presence.Idle || s == presence.Invisible
}

func slotOf(s presence.Status) int {
	switch s {
	case presence.Online:
		return 0
	case presence.Idle:
		return 1
	case presence.Invisible:
		return 2
	}
	return -1
}

type rollupSession struct {
	start, end int64
	spent      [3]int64
}

type rollupDay struct {
	spent       [3]int64
	sessions    int
	first, last int64
	status      presence.Status
}

const usDay = int64(24 * time.Hour / time.Microsecond)

// sessions and days of one user whose every session is closed.
func (tl *rollupTimeline) sessions() []rollupSession {
	var out []rollupSession
	var cur *rollupSession
	for i, s := range tl.st {
		if cur != nil {
			cur.spent[slotOf(tl.st[i-1])] += tl.at[i] - tl.at[i-1]
		}
		if present(s) && cur == nil {
			cur = &rollupSession{start: tl.at[i]}
		}
		if !present(s) && cur != nil {
			cur.end = tl.at[i]
			out = append(out, *cur)
			cur = nil
		}
	}
	return out
}

func (tl *rollupTimeline) days() map[int64]*rollupDay {
	out := map[int64]*rollupDay{}
	day := func(d int64) *rollupDay {
		if out[d] == nil {
			out[d] = &rollupDay{first: -1}
		}
		return out[d]
	}
	for i := 0; i+1 < len(tl.at); i++ {
		if !present(tl.st[i]) {
			continue
		}
		for a, b := tl.at[i], tl.at[i+1]; a < b; {
			d := a / usDay
			end := min(b, (d+1)*usDay)
			r := day(d)
			r.spent[slotOf(tl.st[i])] += end - a
			if r.first < 0 {
				r.first = a
			}
			r.last = end - 1
			a = end
		}
	}
	for _, s := range tl.sessions() {
		for d := s.start / usDay; d*usDay < s.end; d++ {
			day(d).sessions++
		}
	}
	for d, r := range out {
		r.status = tl.statusAt((d+1)*usDay - 1)
	}
	return out
}

// rollupChanges reads presence.changes and builds every user's timeline, dropping
// changes at a source position already seen (the log is at-least-once).
func rollupChanges(t *testing.T, topic string) (users map[string]*rollupTimeline, span map[int32][2]int64, timeouts int) {
	t.Helper()
	users = map[string]*rollupTimeline{}
	span = map[int32][2]int64{} // per shard: first and last changed_at
	for p, recs := range harness.ReadTopic(t, topic) {
		seen := map[int32]int64{}
		for _, r := range recs {
			var c pulsev1.Change
			if err := proto.Unmarshal(r.Value, &c); err != nil {
				t.Fatalf("change at %d/%d: %v", p, r.Offset, err)
			}
			if last, ok := seen[c.SourcePartition]; ok && c.SourceOffset <= last {
				continue
			}
			seen[c.SourcePartition] = c.SourceOffset
			if c.GroupId != "" || c.CustomOnly {
				continue // membership and custom status alone: no transition
			}
			if c.Cause == pulsev1.Cause_CAUSE_TIMEOUT {
				timeouts++
			}
			tl := users[c.UserId]
			if tl == nil {
				tl = &rollupTimeline{user: c.UserId, shard: p, index: c.UserIndex}
				users[c.UserId] = tl
			}
			if n := len(tl.at); n > 0 && c.ChangedAtUs <= tl.at[n-1] {
				t.Fatalf("changes of %s out of order: %d after %d", c.UserId, c.ChangedAtUs, tl.at[n-1])
			}
			tl.at = append(tl.at, c.ChangedAtUs)
			tl.st = append(tl.st, presence.StatusFromPB(c.Current))
			sp, ok := span[p]
			if !ok {
				sp = [2]int64{c.ChangedAtUs, c.ChangedAtUs}
			}
			span[p] = [2]int64{min(sp[0], c.ChangedAtUs), max(sp[1], c.ChangedAtUs)}
		}
	}
	return users, span, timeouts
}

// rollupWant is every row the tables must hold, rendered as text, keyed by table and key.
// Times are compared to the millisecond, Cassandra's precision for timestamps (the
// totals, in microseconds, are exact).
func rollupWant(users map[string]*rollupTimeline, span map[int32][2]int64, final int64) map[string]string {
	want := map[string]string{}
	ts := func(us int64) string { return time.UnixMicro(us).UTC().Format("2006-01-02T15:04:05.000") }
	for _, tl := range users {
		for _, s := range tl.sessions() {
			want[fmt.Sprintf("user_sessions %s %d", tl.user, s.start)] = fmt.Sprintf("end=%s open=false spent=%v through=%s status=offline",
				ts(s.end), s.spent, ts(s.end))
		}
		for d, r := range tl.days() {
			through := "*" // the day is not final: Through is how far the fold had got
			status := "offline"
			if (d+1)*usDay <= final {
				through, status = ts((d+1)*usDay), r.status.String()
			}
			row := fmt.Sprintf("spent=%v sessions=%d first=%s last=%s through=%s status=%s", r.spent, r.sessions, ts(r.first), ts(r.last), through, status)
			want[fmt.Sprintf("user_daily %s %s", tl.user, ts(d*usDay))] = row
			want[fmt.Sprintf("daily_users %d %s %s", tl.shard, ts(d*usDay), tl.user)] = row
		}
	}
	byShard := map[int32][]*rollupTimeline{}
	for _, tl := range users {
		byShard[tl.shard] = append(byShard[tl.shard], tl)
	}
	const usMin, usHour, usSec = int64(time.Minute / time.Microsecond), int64(time.Hour / time.Microsecond), int64(time.Second / time.Microsecond)
	for shard, sp := range span {
		for m := sp[0] / usMin * usMin; m <= sp[1]; m += usMin {
			var counts [3][60]int
			for s := range int64(60) {
				at := m + s*usSec + usSec - 1
				for _, tl := range byShard[shard] {
					if i := slotOf(tl.statusAt(at)); i >= 0 {
						counts[i][s]++
					}
				}
			}
			want[fmt.Sprintf("concurrency %d %s", shard, ts(m))] = fmt.Sprintf("online=%v idle=%v invisible=%v close=%d/%d/%d peak=%d",
				counts[0], counts[1], counts[2], counts[0][59], counts[1][59], counts[2][59], slices.Max(counts[0][:]))
		}
		shown := func(s presence.Status) bool { return s == presence.Online || s == presence.Idle }
		for h := sp[0] / usHour * usHour; h <= sp[1]; h += usHour {
			// Present, and shown to readers (online or idle), at some instant of the hour.
			in := func(tl *rollupTimeline, counts func(presence.Status) bool) bool {
				yes := counts(tl.statusAt(h))
				for i, at := range tl.at {
					yes = yes || (at >= h && at < h+usHour && counts(tl.st[i]))
				}
				return yes
			}
			var idx, seen []uint32
			for _, tl := range byShard[shard] {
				if in(tl, present) {
					idx = append(idx, tl.index)
				}
				if in(tl, shown) {
					seen = append(seen, tl.index)
				}
			}
			slices.Sort(idx)
			slices.Sort(seen)
			want[fmt.Sprintf("uniques %d %s", shard, ts(h))] = fmt.Sprintf("users=%v cardinality=%d shown=%v", idx, len(idx), seen)
		}
	}
	return want
}

// rollupRead reads the rows of the given users and days, rendered as rollupWant does.
// A day that is not final (it ends after final) has a Through that depends on how far
// the fold had got when it last wrote the row; it must be at or after the user's last
// change.
func rollupRead(t *testing.T, s *gocql.Session, ks string, users map[string]*rollupTimeline, days []time.Time, shards int, final int64) (map[string]string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ts := func(v time.Time) string { return v.UTC().Format("2006-01-02T15:04:05.000") }
	got := map[string]string{}
	dayRow := func(spent [3]int64, sessions int, first, last, through time.Time, status string, user string, day time.Time) (string, string) {
		th := ts(through)
		if day.AddDate(0, 0, 1).UnixMicro() > final {
			if tl := users[user]; tl == nil || through.UnixMilli() < tl.at[len(tl.at)-1]/1000 {
				var tlines []string
				for i := range tl.at {
					tlines = append(tlines, ts(time.UnixMicro(tl.at[i]))+" "+tl.st[i].String())
				}
				return "", fmt.Sprintf("%s %s: through %s before the user's last change (row %v %d %s %s %s); changes:\n%s", user, day, th, spent, sessions, ts(first), ts(last), status, strings.Join(tlines, "\n"))
			}
			th = "*"
		}
		return fmt.Sprintf("spent=%v sessions=%d first=%s last=%s through=%s status=%s", spent, sessions, ts(first), ts(last), th, status), ""
	}
	months, years := map[time.Time]bool{}, map[int]bool{}
	for _, d := range days {
		months[time.Date(d.Year(), d.Month(), 1, 0, 0, 0, 0, time.UTC)] = true
		years[d.Year()] = true
	}
	// The users' rows, read by several readers at once: one query at a time, the 2000
	// users' partitions take seconds to read, each time the caller asks.
	var (
		mu      sync.Mutex
		badUser string
		wg      sync.WaitGroup
	)
	todo := make(chan string)
	for range rollupReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for user := range todo {
				rows, bad := rollupReadUser(ctx, s, ks, user, months, years, dayRow, ts)
				mu.Lock()
				if bad != "" && badUser == "" {
					badUser = bad
				}
				for k, v := range rows {
					got[k] = v
				}
				mu.Unlock()
			}
		}()
	}
	for user := range users {
		todo <- user
	}
	close(todo)
	wg.Wait()
	if badUser != "" {
		return nil, badUser
	}
	for _, day := range days {
		for shard := range shards {
			iter := s.Query(`SELECT user_id, online_us, idle_us, invisible_us, sessions, first_seen, last_seen, through, status FROM `+ks+`.daily_users WHERE day = ? AND bucket = ?`, day, shard).IterContext(ctx)
			var user, status string
			var first, last, through time.Time
			var spent [3]int64
			var sessions int
			for iter.Scan(&user, &spent[0], &spent[1], &spent[2], &sessions, &first, &last, &through, &status) {
				row, bad := dayRow(spent, sessions, first, last, through, status, user, day)
				if bad != "" {
					return nil, bad
				}
				got[fmt.Sprintf("daily_users %d %s %s", shard, ts(day), user)] = row
			}
			if err := iter.Close(); err != nil {
				return nil, "daily_users: " + err.Error()
			}
		}
		iter := s.Query(`SELECT minute, shard, online, idle, invisible, close_online, close_idle, close_invisible, peak_online FROM `+ks+`.concurrency WHERE day = ?`, day).IterContext(ctx)
		var minute time.Time
		var shard, co, ci, cv, peak int
		var on, idle, inv []int
		for iter.Scan(&minute, &shard, &on, &idle, &inv, &co, &ci, &cv, &peak) {
			got[fmt.Sprintf("concurrency %d %s", shard, ts(minute))] = fmt.Sprintf("online=%v idle=%v invisible=%v close=%d/%d/%d peak=%d", on, idle, inv, co, ci, cv, peak)
		}
		if err := iter.Close(); err != nil {
			return nil, "concurrency: " + err.Error()
		}
		iter = s.Query(`SELECT hour, shard, users, cardinality, shown FROM `+ks+`.uniques WHERE day = ?`, day).IterContext(ctx)
		var hour time.Time
		var blob, shownBlob []byte
		var card int64
		for iter.Scan(&hour, &shard, &blob, &card, &shownBlob) {
			bm, shown := roaring.New(), roaring.New()
			if err := bm.UnmarshalBinary(blob); err != nil {
				return nil, fmt.Sprintf("uniques %d %s: %v", shard, ts(hour), err)
			}
			if err := shown.UnmarshalBinary(shownBlob); err != nil {
				return nil, fmt.Sprintf("uniques %d %s shown: %v", shard, ts(hour), err)
			}
			got[fmt.Sprintf("uniques %d %s", shard, ts(hour))] = fmt.Sprintf("users=%v cardinality=%d shown=%v", bm.ToArray(), card, shown.ToArray())
		}
		if err := iter.Close(); err != nil {
			return nil, "uniques: " + err.Error()
		}
	}
	return got, ""
}

// rollupReaders is how many of the users' partitions rollupRead reads at once.
const rollupReaders = 8

// rollupReadUser reads one user's user_sessions and user_daily rows, as rollupRead
// renders them.
func rollupReadUser(ctx context.Context, s *gocql.Session, ks, user string, months map[time.Time]bool, years map[int]bool,
	dayRow func(spent [3]int64, sessions int, first, last, through time.Time, status string, user string, day time.Time) (string, string),
	ts func(time.Time) string) (map[string]string, string) {
	got := map[string]string{}
	for month := range months {
		iter := s.Query(`SELECT start_us, session_end, open, online_us, idle_us, invisible_us, through, status FROM `+ks+`.user_sessions WHERE user_id = ? AND month = ?`, user, month).IterContext(ctx)
		var end, through time.Time
		var start int64
		var open bool
		var spent [3]int64
		var status string
		for iter.Scan(&start, &end, &open, &spent[0], &spent[1], &spent[2], &through, &status) {
			got[fmt.Sprintf("user_sessions %s %d", user, start)] = fmt.Sprintf("end=%s open=%v spent=%v through=%s status=%s", ts(end), open, spent, ts(through), status)
		}
		if err := iter.Close(); err != nil {
			return nil, "user_sessions: " + err.Error()
		}
	}
	for year := range years {
		iter := s.Query(`SELECT day, online_us, idle_us, invisible_us, sessions, first_seen, last_seen, through, status FROM `+ks+`.user_daily WHERE user_id = ? AND year = ?`, user, year).IterContext(ctx)
		var day, first, last, through time.Time
		var spent [3]int64
		var sessions int
		var status string
		for iter.Scan(&day, &spent[0], &spent[1], &spent[2], &sessions, &first, &last, &through, &status) {
			row, bad := dayRow(spent, sessions, first, last, through, status, user, day)
			if bad != "" {
				return nil, bad
			}
			got[fmt.Sprintf("user_daily %s %s", user, ts(day))] = row
		}
		if err := iter.Close(); err != nil {
			return nil, "user_daily: " + err.Error()
		}
	}
	return got, ""
}

func rollupDiff(got, want map[string]string) string {
	var diffs []string
	for k, w := range want {
		if g, ok := got[k]; !ok {
			diffs = append(diffs, "missing "+k+": "+w)
		} else if g != w {
			diffs = append(diffs, k+":\n   got "+g+"\n  want "+w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, "extra "+k+": "+g)
		}
	}
	if len(diffs) == 0 {
		return ""
	}
	sort.Strings(diffs)
	return fmt.Sprintf("%d of %d rows differ:\n%s", len(diffs), len(want), harness.FirstLines(diffs, 12))
}

// rollupExplain logs every record of presence.changes about the users a failed
// comparison names, duplicates included, to tell a wrong row from a wrong model.
func rollupExplain(t *testing.T, topic, diff string) {
	named := map[string]bool{}
	for _, line := range strings.Split(diff, "\n") {
		if f := strings.Fields(line); len(f) > 1 && (f[0] == "user_sessions" || f[0] == "user_daily") {
			named[f[1]] = true
		} else if len(f) > 3 && f[0] == "daily_users" {
			named[strings.TrimSuffix(f[3], ":")] = true
		}
	}
	if len(named) == 0 {
		return
	}
	for p, recs := range harness.ReadTopic(t, topic) {
		for _, r := range recs {
			var c pulsev1.Change
			if proto.Unmarshal(r.Value, &c) != nil || !named[c.UserId] {
				continue
			}
			t.Logf("changes %d/%d: %s %s %s→%s at %s cause=%s device=%s source=%d/%d",
				p, r.Offset, c.UserId, c.EventId, c.Previous, c.Current,
				time.UnixMicro(c.ChangedAtUs).UTC().Format("15:04:05.000000"), c.Cause, c.DeviceId, c.SourcePartition, c.SourceOffset)
		}
	}
}

// rollupQuiet waits until neither topic grows for two seconds: the aggregator has
// folded every event and decided every timeout that was due.
func rollupQuiet(t *testing.T, topics ...string) {
	t.Helper()
	adm := harness.KafkaAdmin(t)
	last, stable := "", 0
	harness.Eventually(t, 60*time.Second, func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ends, err := adm.ListEndOffsets(ctx, topics...)
		if err != nil {
			return err.Error()
		}
		var parts []string
		ends.Each(func(o kadm.ListedOffset) {
			parts = append(parts, fmt.Sprintf("%s/%d=%d", o.Topic, o.Partition, o.Offset))
		})
		sort.Strings(parts)
		if now := strings.Join(parts, " "); now != last {
			last, stable = now, 0
			return "topics still growing"
		}
		if stable++; stable < 20 {
			return "waiting for the topics to stay still"
		}
		return ""
	})
}

// A few hundred users with several devices each, online, idle, invisible and offline
// across a midnight, with client retries, stale events and devices that fall silent
// (offline timeouts), go through the aggregator; history is killed with SIGKILL half
// way and restarted, and the aggregator is killed and restarted three quarters of the
// way. Every rollup row equals the model's: nothing lost, nothing counted twice across
// either crash.
func TestHistoryRollupsMatchModel(t *testing.T) {
	p := harness.NewTopics(t, 2)
	// A keyspace of its own: rows keyed by shard (snapshots, index names) would otherwise
	// meet those of other runs, whose partitions have the same numbers.
	session, ks := migratedKeyspace(t)
	p.Env["PULSE_CASSANDRA_KEYSPACE"] = ks
	p.Env["PULSE_OFFLINE_AFTER"] = "60s"
	// Timeouts are decided by the wall clock, long past these events' times: every
	// deadline is due as soon as it is set, and its change is dated at the deadline. An
	// idle timeout of the pipeline's default 24h would date changes a day after the
	// workload, far beyond the fold's lateness; 45 s keeps them within it.
	p.Env["PULSE_IDLE_AFTER"] = "45s"
	// Checkpoints less often than commits: the restarted history re-reads the changes
	// committed after the last checkpoint.
	p.Env["PULSE_HISTORY_CHECKPOINT_INTERVAL"] = "4s"
	p.Env["PULSE_HISTORY_MAX_POLL_RECORDS"] = "100"
	p.Env["PULSE_HISTORY_COMMIT_INTERVAL"] = "0s"
	// The workload is decades old: a quiet partition moved to the clock would make the
	// rest of it late.
	p.Env["PULSE_HISTORY_QUIET_AFTER"] = "0s"
	p.Start(t, "aggregator")
	p.Start(t, "history")

	// A day of the past chosen per run, 1971 to 1988: the query service's tests take
	// theirs from 1990 on, so the day-partitioned tables never mix the two.
	rnd := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 11))
	midnight := time.Date(1971, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, rnd.IntN(6500))
	t.Logf("workload around %s", midnight.Format(time.DateOnly))
	// Every change falls within 9 minutes (events over 8, timeouts a minute after the
	// last), less than the fold's lateness: none arrives later than it allows.
	from := midnight.Add(-4 * time.Minute)

	prod, err := kgo.NewClient(kgo.SeedBrokers(harness.KafkaBrokers()...), kgo.DefaultProduceTopic(p.Events))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produce := func(events []presence.Event) {
		t.Helper()
		recs := make([]*kgo.Record, len(events))
		for i, e := range events {
			b, err := proto.Marshal(e.ToPB())
			if err != nil {
				t.Fatal(err)
			}
			recs[i] = &kgo.Record{Key: []byte(e.UserID), Value: b,
				Headers: []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaEvent)}}}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("producing: %v", err)
		}
	}

	const nUsers = 2000
	var events []presence.Event
	devices := []string{"phone", "laptop", "tablet"}
	for u := range nUsers {
		user := fmt.Sprintf("ru-%s-%03d", p.Run, u)
		nDev := 1 + rnd.IntN(3)
		newest := map[string]time.Time{}
		for k := range 3 + rnd.IntN(8) {
			dev := devices[rnd.IntN(nDev)]
			at := from.Add(time.Duration(rnd.Int64N(int64(8 * time.Minute))))
			e := presence.Event{ID: fmt.Sprintf("%s-%02d", user, k), UserID: user, DeviceID: dev, Source: presence.SourceAPI,
				OccurredAt: at, ReceivedAt: at.Add(40 * time.Millisecond)}
			switch roll := rnd.IntN(100); {
			case roll < 40:
				e.Kind, e.Status = presence.KindStatus, presence.Online
			case roll < 55:
				e.Kind, e.Status = presence.KindStatus, presence.Idle
			case roll < 65:
				e.Kind, e.Status = presence.KindStatus, presence.Invisible
			case roll < 80:
				e.Kind, e.Status = presence.KindStatus, presence.Offline
			case roll < 90:
				e.Kind = presence.KindActivity
			default:
				e.Kind = presence.KindHeartbeat
			}
			events = append(events, e)
			if at.After(newest[dev]) {
				newest[dev] = at
			}
		}
	}
	sort.Slice(events, func(i, j int) bool { return events[i].OccurredAt.Before(events[j].OccurredAt) })
	// Client retries (the same event again) and stale events (older than what their
	// device sent already), placed after the events they repeat or precede.
	var workload []presence.Event
	for i, e := range events {
		workload = append(workload, e)
		if i%17 == 5 {
			workload = append(workload, events[i-3])
		}
		if i%19 == 7 {
			s := e
			s.ID, s.Kind, s.Status = e.ID+"-stale", presence.KindActivity, presence.StatusUnknown
			s.OccurredAt = e.OccurredAt.Add(-20 * time.Second)
			workload = append(workload, s)
		}
	}

	quarter := len(workload) / 4
	produce(workload[:quarter])
	// Kill history once it has folded and checkpointed part of the changes, and
	// committed more since.
	hist := p.Svc["history"]
	harness.Eventually(t, 60*time.Second, func() string {
		if code, body := harness.Get(t, hist.URL+"/metrics"); code != 200 || !strings.Contains(body, "pulse_history_rollup_checkpoints_total ") ||
			strings.Contains(body, "pulse_history_rollup_checkpoints_total 0\n") {
			return "no rollup checkpoint yet; history's output ends:\n" + harness.LastLines(hist.Out.String(), 15)
		}
		return ""
	})
	produce(workload[quarter : 2*quarter])
	time.Sleep(1500 * time.Millisecond)
	if err := hist.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-hist.Done
	produce(workload[2*quarter : 3*quarter])
	// Kill the aggregator too, mid-stream: it restarts from Redis and its committed
	// offset, finishes the window its crash left open and decides the timeouts it
	// missed; changes it emits twice are dropped by their source position.
	time.Sleep(300 * time.Millisecond)
	agg := p.Svc["aggregator"]
	if err := agg.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-agg.Done
	produce(workload[3*quarter:])
	p.Start(t, "aggregator")
	// Its partitions come back once the killed member's session times out.
	harness.Eventually(t, 60*time.Second, func() string {
		out := p.Svc["aggregator"].Out.String()
		if n := strings.Count(out, `msg="partition assigned"`); n < p.Partitions {
			return fmt.Sprintf("the restarted aggregator owns %d of %d partitions; its output ends:\n%s", n, p.Partitions, harness.LastLines(out, 10))
		}
		return ""
	})
	rollupQuiet(t, p.Events, p.Changes)

	// One user per shard far later: their changes move the frontier past midnight, so
	// the day before it is final.
	part := kgo.StickyKeyPartitioner(nil).ForTopic(p.Events)
	late := midnight.Add(20 * time.Minute)
	var closers []presence.Event
	covered := map[int]bool{}
	for i := 0; len(covered) < p.Partitions; i++ {
		user := fmt.Sprintf("ru-%s-late-%d", p.Run, i)
		if n := part.Partition(&kgo.Record{Key: []byte(user)}, p.Partitions); !covered[n] {
			covered[n] = true
			for k, st := range []presence.Status{presence.Online, presence.Offline} {
				at := late.Add(time.Duration(k) * time.Second)
				closers = append(closers, presence.Event{ID: fmt.Sprintf("%s-%d", user, k), UserID: user, DeviceID: "phone",
					Source: presence.SourceAPI, Kind: presence.KindStatus, Status: st, OccurredAt: at, ReceivedAt: at})
			}
		}
	}
	produce(closers)
	rollupQuiet(t, p.Events, p.Changes)

	// The restarted history writes the rows of what it folds within a second, rather
	// than after the default 30 s of PULSE_HISTORY_ROLLUP_INTERVAL, which the test
	// would only wait out: the first history, killed above after a few seconds, kept
	// the default, so the crash and the re-read from its checkpoint are as before.
	p.Env["PULSE_HISTORY_ROLLUP_INTERVAL"] = "1s"
	p.Start(t, "history")
	// The restarted history resumes every changes partition from a checkpoint.
	harness.Eventually(t, 30*time.Second, func() string {
		out := p.Svc["history"].Out.String()
		n := 0
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "rollup fold restored from its checkpoint") ||
				strings.Contains(line, `msg="rollup fold ready"`) && strings.Contains(line, "checkpoint=true") {
				n++
			}
		}
		if n < p.Partitions {
			return fmt.Sprintf("%d changes partitions resumed from a checkpoint; history's output ends:\n%s", n, harness.LastLines(out, 10))
		}
		if strings.Contains(out, "rollup fold restored from its checkpoint") {
			t.Logf("history re-read changes committed after its last checkpoint")
		}
		return ""
	})
	users, span, timeouts := rollupChanges(t, p.Changes)
	acrossMidnight, invisible := 0, 0
	for _, tl := range users {
		for _, s := range tl.sessions() {
			if s.start < midnight.UnixMicro() && s.end > midnight.UnixMicro() {
				acrossMidnight++
			}
			if s.spent[2] > 0 {
				invisible++
			}
		}
	}
	if len(users) < nUsers/2 || timeouts < 50 || acrossMidnight < 20 || invisible < 20 {
		t.Fatalf("workload too tame: %d users changed status, %d offline timeouts, %d sessions across midnight, %d with invisible time",
			len(users), timeouts, acrossMidnight, invisible)
	}
	var final int64 // the frontier: days ending before it are final
	for _, sp := range span {
		if final == 0 || sp[1] < final {
			final = sp[1]
		}
	}
	final -= rollupLateness.Microseconds()
	want := rollupWant(users, span, final)
	days := []time.Time{midnight.AddDate(0, 0, -1), midnight}
	var diff string
	t.Cleanup(func() {
		if t.Failed() {
			rollupExplain(t, p.Changes, diff)
			if code, body := harness.Get(t, p.Svc["history"].URL+"/metrics"); code == 200 {
				for _, line := range strings.Split(body, "\n") {
					if strings.HasPrefix(line, "pulse_history_rollup") {
						t.Log(line)
					}
				}
			}
			t.Logf("history's output ends:\n%s", harness.LastLines(p.Svc["history"].Out.String(), 40))
		}
	})
	harness.Eventually(t, 60*time.Second, func() string {
		got, bad := rollupRead(t, session, ks, users, days, p.Partitions, final)
		if bad != "" {
			return bad
		}
		diff = rollupDiff(got, want)
		return diff
	})
	changes := 0
	for _, tl := range users {
		changes += len(tl.at)
	}
	t.Logf("%d users, %d changes (%d timeouts), %d sessions across midnight, %d rows equal the model",
		len(users), changes, timeouts, acrossMidnight, len(want))

	// The workload is decades old: let at= reach it.
	p.Env["PULSE_QUERY_AT_RETENTION"] = "500000h"
	p.Start(t, "query")
	pitCheck(t, ks, p.Svc["query"].URL, users, span, final, rnd)
}

// pitCheck reads the shards' states at 200 random instants of the run, at every minute
// boundary (where snapshots are taken) and a microsecond either side, and right at
// changes and a microsecond either side (between two changes of the same second), and
// compares each with the model: the counts per status, the users in each status by id,
// and single users' statuses. Only instants before final are asked: snapshots exist
// once the frontier passed them.
func pitCheck(t *testing.T, ks, queryURL string, users map[string]*rollupTimeline, span map[int32][2]int64, final int64, rnd *mrand.Rand) {
	// Every shard's changes are written up to its last: the provisional mark.
	written := final + rollupLateness.Microseconds()
	t.Helper()
	port, _ := strconv.Atoi(harness.CassandraPort())
	session, err := cassx.NewSession(cassx.Config{Hosts: strings.Split(harness.CassandraHost(), ","), Port: port,
		Keyspace: ks, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	r := historystore.New(session)
	var first, last int64
	var all []*rollupTimeline
	var changeTimes []int64
	for _, tl := range users {
		all = append(all, tl)
		changeTimes = append(changeTimes, tl.at...)
		if first == 0 || tl.at[0] < first {
			first = tl.at[0]
		}
	}
	for _, sp := range span {
		last = max(last, min(sp[1], final))
	}
	sort.Slice(all, func(i, j int) bool { return all[i].user < all[j].user })
	var instants []int64
	for range 200 {
		instants = append(instants, first+rnd.Int64N(last-first))
	}
	const usMin = int64(time.Minute / time.Microsecond)
	for m := (first/usMin + 1) * usMin; m < last; m += usMin {
		instants = append(instants, m-1, m, m+1)
	}
	for range 60 {
		c := changeTimes[rnd.IntN(len(changeTimes))]
		if c+1 < last {
			instants = append(instants, c-1, c, c+1)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	shards := len(span)
	// Each instant is checked against Cassandra on its own, several at once (one
	// query at a time, the instants' reads take seconds); the API's answers every
	// 10th instant are asked here, in order, once those reads pass. The single users
	// of each instant are drawn here, in order, as the checks need them.
	singles := make([][3]*rollupTimeline, len(instants))
	for i := range instants {
		for k := range singles[i] {
			singles[i][k] = all[rnd.IntN(len(all))]
		}
	}
	failed := make([]string, len(instants))
	var wg sync.WaitGroup
	next := make(chan int)
	for range rollupReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				failed[i] = pitInstantCheck(ctx, r, shards, instants[i], all, singles[i])
			}
		}()
	}
	for i := range instants {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, x := range instants {
		if failed[i] != "" {
			t.Fatal(failed[i])
		}
		if i%10 == 0 {
			want, wantCount := pitWant(all, x)
			pitAPICheck(t, queryURL, time.UnixMicro(x).UTC(), all, want, wantCount)
		}
	}
	t.Logf("point in time: %d instants over %s, each equal to the model (counts, users by status, 3 single users); every 10th through the API too",
		len(instants), time.Duration(last-first)*time.Microsecond)
	pitInvisibleCheck(t, queryURL, all, instants, first)

	// Instants at= refuses, each with a clear answer and nothing read.
	for _, c := range []struct {
		at   string
		code int
		want string
	}{
		{"", 400, "must not be empty"},
		{"yesterday", 400, "RFC 3339"},
		{time.Now().Add(time.Hour).UTC().Format(time.RFC3339), 400, "in the future"},
		{"1960-01-01T00:00:00Z", 400, "older than"},
		{time.UnixMicro(written + int64(time.Minute/time.Microsecond)).UTC().Format(time.RFC3339Nano), 503, "not written yet"},
	} {
		code, body := harness.Get(t, queryURL+"/v1/online/count?at="+url.QueryEscape(c.at))
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("count at %q = %d %s, want %d saying %q", c.at, code, body, c.code, c.want)
		}
	}
	if code, body := harness.Get(t, queryURL+"/v1/online?activeWithin=5m&at="+url.QueryEscape(time.UnixMicro(first).UTC().Format(time.RFC3339Nano))); code != 400 || !strings.Contains(body, "activeWithin") {
		t.Errorf("listing at T with activeWithin = %d %s, want 400 naming activeWithin", code, body)
	}

	// pulsectl online -at, at the last instant checked.
	x := time.UnixMicro(instants[len(instants)-1]).UTC()
	cmd := exec.Command(harness.Binary("pulsectl"), "online", "-at", x.Format(time.RFC3339Nano), "-csv")
	cmd.Env = append(cmd.Environ(), "PULSE_QUERY_URL="+queryURL, "PULSE_OPERATOR_KEY="+harness.TestKeys.Operator)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pulsectl online -at: %v\n%s", err, out)
	}
	var wantCSV []string
	for _, tl := range all {
		if st := tl.statusAt(x.UnixMicro()); st != presence.Offline {
			wantCSV = append(wantCSV, tl.user+","+st.String())
		}
	}
	gotCSV := strings.Split(strings.TrimSpace(string(out)), "\n")[1:]
	sort.Strings(gotCSV)
	sort.Strings(wantCSV)
	if !slices.Equal(gotCSV, wantCSV) {
		t.Fatalf("pulsectl online -at %s: %d rows, model %d; first: %v", x.Format(time.RFC3339Nano), len(gotCSV), len(wantCSV), harness.FirstLines(gotCSV, 3))
	}
}

// pitWant is the model's users who are not offline at instant x (µs), and their
// counts by status.
func pitWant(all []*rollupTimeline, x int64) (map[string]presence.Status, [5]int) {
	want := map[string]presence.Status{}
	var wantCount [5]int
	for _, tl := range all {
		if st := tl.statusAt(x); st != presence.Offline {
			want[tl.user] = st
			wantCount[st]++
		}
	}
	return want, wantCount
}

// pitInstantCheck compares the shards' states at instant x (µs), as r reads them from
// Cassandra, with the model: the counts per status, the users in each status by id,
// and the statuses of singles, located through user_indexes as a status read would.
// It returns what differs, empty when nothing does.
func pitInstantCheck(ctx context.Context, r *historystore.Store, shards int, x int64, all []*rollupTimeline, singles [3]*rollupTimeline) string {
	at := time.UnixMicro(x).UTC()
	want, wantCount := pitWant(all, x)
	got := map[string]presence.Status{}
	var gotCount [5]int
	states := map[int32]*historystore.ShardState{}
	for shard := range int32(shards) {
		st, err := r.StateAt(ctx, shard, at)
		if err != nil {
			return fmt.Sprintf("at %s: %v", at.Format(time.RFC3339Nano), err)
		}
		states[shard] = st
		gotCount[presence.Online] += int(st.Online.GetCardinality())
		gotCount[presence.Idle] += int(st.Idle.GetCardinality())
		gotCount[presence.Invisible] += int(st.Invisible.GetCardinality())
		for status, bm := range map[presence.Status]*roaring.Bitmap{presence.Online: st.Online, presence.Idle: st.Idle, presence.Invisible: st.Invisible} {
			names, err := r.UserNames(ctx, shard, bm.ToArray())
			if err != nil {
				return err.Error()
			}
			if len(names) != int(bm.GetCardinality()) {
				return fmt.Sprintf("at %s: shard %d names %d of its %d %s users", at.Format(time.RFC3339Nano), shard, len(names), bm.GetCardinality(), status)
			}
			for _, id := range names {
				got[id] = status
			}
		}
	}
	if gotCount != wantCount {
		return fmt.Sprintf("at %s: counts online/idle/invisible %v, model %v", at.Format(time.RFC3339Nano), gotCount[1:], wantCount[1:])
	}
	if d := statusDiff(got, want); d != "" {
		return fmt.Sprintf("at %s: the users by status differ from the model: %s", at.Format(time.RFC3339Nano), d)
	}
	// Single users, located through user_indexes as a status read would.
	for _, tl := range singles {
		shard, index, found, err := r.Locate(ctx, tl.user)
		if err != nil || !found || shard != tl.shard || index != tl.index {
			return fmt.Sprintf("locating %s: shard %d index %d found %v err %v; want shard %d index %d", tl.user, shard, index, found, err, tl.shard, tl.index)
		}
		if g, w := states[shard].Status(index), tl.statusAt(x); g != w {
			return fmt.Sprintf("%s at %s: %s, model %s", tl.user, at.Format(time.RFC3339Nano), g, w)
		}
	}
	return ""
}

// pitInvisibleCheck: at= tells a reader nothing a user history never saw would not.
// At every 10th instant, each of up to two users invisible then reads, byte for byte but
// the id, as a user of no event at all; so do both before history began, where the
// answer is that history holds no state of the instant.
func pitInvisibleCheck(t *testing.T, queryURL string, all []*rollupTimeline, instants []int64, first int64) {
	t.Helper()
	ghost := "ghost-" + harness.RandomID(t)
	reads := func(id string, at time.Time) []string {
		ts := url.QueryEscape(at.Format(time.RFC3339Nano))
		code1, b1 := harness.Get(t, queryURL+"/status/"+id+"?at="+ts)
		code2, b2 := harness.Get(t, queryURL+"/v1/users/"+id+"/status?at="+ts)
		code3, b3 := harness.PostJSON(t, queryURL+"/statuses?at="+ts, map[string]any{"userIds": []string{id}})
		return []string{fmt.Sprint(code1, " ", b1), fmt.Sprint(code2, " ", b2), fmt.Sprint(code3, " ", string(b3))}
	}
	same := func(at time.Time, id string) {
		t.Helper()
		got, want := reads(id, at), reads(ghost, at)
		for k := range got {
			if strings.ReplaceAll(got[k], id, "ID") != strings.ReplaceAll(want[k], ghost, "ID") {
				t.Fatalf("at %s a reader tells %s from a user history never saw:\n  %s\n  %s", at.Format(time.RFC3339Nano), id, got[k], want[k])
			}
		}
	}
	compared := 0
	for i := 0; i < len(instants); i += 10 {
		x := instants[i]
		n := 0
		for _, tl := range all {
			if n < 2 && tl.statusAt(x) == presence.Invisible {
				same(time.UnixMicro(x).UTC(), tl.user)
				n++
			}
		}
		compared += n
	}
	if compared == 0 {
		t.Fatal("no user was invisible at any instant compared")
	}
	before := time.UnixMicro(first).UTC().Add(-2 * time.Hour)
	if code, body := harness.Get(t, queryURL+"/status/"+all[0].user+"?at="+url.QueryEscape(before.Format(time.RFC3339Nano))); code != http.StatusNotFound {
		t.Fatalf("at %s, before history began: %d %s, want 404", before.Format(time.RFC3339Nano), code, body)
	}
	same(before, all[0].user)
	t.Logf("at=: %d invisible users read as a user history never saw, and so does one before history began", compared)
}

// pitAPICheck asks query for the counts (operator and public view), the whole
// listing (operator view, pages of 500) and five users' statuses at at, and compares
// them with the model.
func pitAPICheck(t *testing.T, queryURL string, at time.Time, all []*rollupTimeline, want map[string]presence.Status, wantCount [5]int) {
	t.Helper()
	ts := url.QueryEscape(at.Format(time.RFC3339Nano))
	op := http.Header{"Authorization": {"Bearer " + harness.TestKeys.Operator}}
	call := func(method, target string, h http.Header, body string, out any) {
		t.Helper()
		req, err := http.NewRequest(method, queryURL+target, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			req.Header[k] = v
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := harness.KeyedClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s %s = %d %s", method, target, res.StatusCode, b)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, target, err, b)
		}
	}
	var count struct {
		Total    int            `json:"total"`
		ByStatus map[string]int `json:"byStatus"`
		At       time.Time      `json:"at"`
	}
	call("GET", "/v1/online/count?view=operator&at="+ts, op, "", &count)
	if count.ByStatus["online"] != wantCount[presence.Online] || count.ByStatus["idle"] != wantCount[presence.Idle] ||
		count.ByStatus["invisible"] != wantCount[presence.Invisible] || !count.At.Equal(at) {
		t.Fatalf("count at %s (operator) = %+v, model online %d idle %d invisible %d", at.Format(time.RFC3339Nano), count,
			wantCount[presence.Online], wantCount[presence.Idle], wantCount[presence.Invisible])
	}
	count.ByStatus = nil
	call("GET", "/v1/online/count?at="+ts, nil, "", &count)
	if _, seen := count.ByStatus["invisible"]; seen || count.Total != wantCount[presence.Online]+wantCount[presence.Idle] {
		t.Fatalf("count at %s (public) = %+v, want total %d and no invisible", at.Format(time.RFC3339Nano), count, wantCount[presence.Online]+wantCount[presence.Idle])
	}
	got := map[string]presence.Status{}
	cursor := ""
	for pages := 0; ; pages++ {
		var page struct {
			Users []struct {
				UserID string `json:"userId"`
				Status string `json:"status"`
			} `json:"users"`
			NextCursor *string `json:"nextCursor"`
		}
		target := "/v1/online?view=operator&limit=500&at=" + ts
		if cursor != "" {
			target += "&cursor=" + url.QueryEscape(cursor)
		}
		call("GET", target, op, "", &page)
		for _, u := range page.Users {
			st, err := presence.ParseStatus(u.Status)
			if _, dup := got[u.UserID]; err != nil || dup {
				t.Fatalf("listing at %s: %s listed twice or with status %q", at.Format(time.RFC3339Nano), u.UserID, u.Status)
			}
			got[u.UserID] = st
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	if d := statusDiff(got, want); d != "" {
		t.Fatalf("listing at %s differs from the model: %s", at.Format(time.RFC3339Nano), d)
	}
	ids := []string{all[0].user, all[len(all)/3].user, all[len(all)/2].user, all[len(all)-1].user, "never-seen-user"}
	var batch struct {
		Statuses []struct {
			UserID string `json:"userId"`
			Status string `json:"status"`
		} `json:"statuses"`
	}
	b, _ := json.Marshal(map[string]any{"userIds": ids})
	call("POST", "/statuses?view=operator&at="+ts, op, string(b), &batch)
	for i, s := range batch.Statuses {
		w := want[ids[i]]
		if w == presence.StatusUnknown {
			w = presence.Offline
		}
		if s.UserID != ids[i] || s.Status != w.String() {
			t.Fatalf("POST /statuses at %s: %s is %s, model %s", at.Format(time.RFC3339Nano), s.UserID, s.Status, w)
		}
	}
}

func statusDiff(got, want map[string]presence.Status) string {
	var diffs []string
	for id, w := range want {
		if g := got[id]; g != w {
			diffs = append(diffs, fmt.Sprintf("%s: %v, want %v", id, g, w))
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: %v, want offline", id, g))
		}
	}
	sort.Strings(diffs)
	if len(diffs) == 0 {
		return ""
	}
	return fmt.Sprintf("%d users: %s", len(diffs), harness.FirstLines(diffs, 10))
}
