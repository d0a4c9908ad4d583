package tests

import (
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/tests/harness"
)

// A group's past: two overlapping groups (and one of every user) are posted through
// query, statuses are dated on a past day across an hour boundary, and every group
// answer from history — ?at= counts and listings, unique users per hour and day,
// concurrency per minute and hour — equals a model the test computes from the groups it
// chose and the statuses presence.changes carries (timeouts included). The group of
// every user also reads the same concurrency as the whole service's table, which is
// computed another way (per-second counts written by history).
func TestGroupHistoryMatchesAModel(t *testing.T) {
	p := harness.NewTopics(t, 2)
	_, ks := migratedKeyspace(t)
	p.Env["PULSE_CASSANDRA_KEYSPACE"] = ks
	// Deadlines of past-dated events are due at once and dated at the deadline: short
	// ones keep every change within the fold's lateness of the workload.
	p.Env["PULSE_OFFLINE_AFTER"] = "60s"
	p.Env["PULSE_IDLE_AFTER"] = "45s"
	// Point-in-time rows become final at the next rollup write after the frontier.
	p.Env["PULSE_HISTORY_ROLLUP_INTERVAL"] = "1s"
	// The workload is of the past: a quiet partition moved to the clock would make the
	// rest of it late.
	p.Env["PULSE_HISTORY_QUIET_AFTER"] = "0s"
	p.Env["PULSE_QUERY_AT_RETENTION"] = "500000h" // the workload is decades old
	p.Start(t, "aggregator")
	p.Start(t, "history")
	p.Start(t, "query")
	q := p.Svc["query"].URL

	rnd := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 28))
	// Two minutes before an hour of a past day, so that hours and minutes both split.
	t0 := time.Date(1990, 1, 1, 10, 58, 0, 0, time.UTC).AddDate(0, 0, rnd.IntN(9000))
	t.Logf("workload from %s", t0.Format(time.RFC3339))

	users := make([]string, 40)
	for i := range users {
		users[i] = fmt.Sprintf("gh-%s-%02d", p.Run, i)
	}
	ghost := "gh-" + p.Run + "-ghost" // a member who never changes status
	groups := map[string][]string{"team-a": {ghost}, "team-b": {ghost}, "everyone": nil}
	for i, u := range users {
		if i < 25 || rnd.IntN(4) == 0 {
			groups["team-a"] = append(groups["team-a"], u)
		}
		if i >= 15 || rnd.IntN(4) == 0 {
			groups["team-b"] = append(groups["team-b"], u)
		}
	}
	// The closers move history's frontier past the workload; "everyone" holds them too,
	// so that its concurrency is the whole service's.
	part := kgo.StickyKeyPartitioner(nil).ForTopic(p.Events)
	var closers []string
	covered := map[int]bool{}
	for i := 0; len(covered) < p.Partitions; i++ {
		u := fmt.Sprintf("gh-%s-late-%d", p.Run, i)
		if n := part.Partition(&kgo.Record{Key: []byte(u)}, p.Partitions); !covered[n] {
			covered[n] = true
			closers = append(closers, u)
		}
	}
	groups["everyone"] = append(slices.Clone(users), closers...)
	for g, ids := range groups {
		if code, body := harness.OnlineDo(t, http.MethodPut, q+"/v1/groups/"+g+"/members", harness.TestKeys.Producer, map[string]any{"userIds": ids}); code != http.StatusAccepted {
			t.Fatalf("PUT %s: %d %s", g, code, body)
		}
	}
	harness.Eventually(t, 30*time.Second, func() string {
		for g, ids := range groups {
			got, bad := pages(t, q+"/v1/groups/"+g+"/members", harness.TestKeys.Reader, "userIds", func(raw json.RawMessage) string {
				var s string
				_ = json.Unmarshal(raw, &s)
				return s
			})
			if bad != "" {
				return bad
			}
			if sort.Strings(got); !slices.Equal(got, slices.Sorted(slices.Values(ids))) {
				return fmt.Sprintf("%s has %d members, want %d", g, len(got), len(ids))
			}
		}
		return ""
	})

	// Statuses over four minutes, some on second boundaries, then the closers twenty
	// minutes later: history's frontier (ten minutes behind) passes the workload.
	statuses := []presence.Status{presence.Online, presence.Idle, presence.Invisible, presence.Offline}
	var events []presence.Event
	for _, u := range users {
		for k := range 2 + rnd.IntN(5) {
			at := t0.Add(time.Duration(rnd.Int64N(int64(4 * time.Minute)))).Truncate(time.Microsecond)
			if k == 0 {
				at = at.Truncate(time.Second)
			}
			events = append(events, presence.Event{ID: fmt.Sprintf("%s-%d", u, k), UserID: u, DeviceID: "phone", Source: presence.SourceAPI,
				Kind: presence.KindStatus, Status: statuses[rnd.IntN(len(statuses))], OccurredAt: at, ReceivedAt: at})
		}
	}
	sort.Slice(events, func(i, j int) bool { return events[i].OccurredAt.Before(events[j].OccurredAt) })
	produceEvents(t, p.Events, events)
	// Every timeout of the workload is decided (its deadline long past, it is due at
	// once) before the closers move the frontier: a change arriving after that would
	// be late, moved up to the frontier by history, and so differ from the log.
	rollupQuiet(t, p.Events, p.Changes)
	events = nil
	for _, u := range closers {
		for k, st := range []presence.Status{presence.Online, presence.Offline} {
			at := t0.Add(20*time.Minute + time.Duration(k)*time.Second)
			events = append(events, presence.Event{ID: fmt.Sprintf("%s-%d", u, k), UserID: u, DeviceID: "phone", Source: presence.SourceAPI,
				Kind: presence.KindStatus, Status: st, OccurredAt: at, ReceivedAt: at})
		}
	}
	produceEvents(t, p.Events, events)
	rollupQuiet(t, p.Events, p.Changes)
	tls, _, _ := rollupChanges(t, p.Changes)
	model := groupHistoryModel{timelines: tls, groups: groups}

	// The last instant asked is final once every shard's rows up to it are written.
	last := t0.Add(6 * time.Minute)
	harness.Eventually(t, 60*time.Second, func() string {
		code, body := harness.Get(t, q+"/v1/groups/team-a/online/count?at="+url.QueryEscape(last.Format(time.RFC3339Nano)))
		if code != http.StatusOK {
			return fmt.Sprintf("count at %s: %d %s", last.Format(time.RFC3339), code, body)
		}
		return ""
	})

	checked := groupAtCheck(t, q, model, t0, last, rnd)
	groupUniquesCheck(t, q, model, t0)
	groupConcurrencyCheck(t, q, model, t0)
	groupHistoryRefusals(t, q, users[0], t0)
	t.Logf("%d users with changes; groups team-a %d, team-b %d members; %d instants compared", len(tls), len(groups["team-a"]), len(groups["team-b"]), checked)
}

// produceEvents writes events to topic, keyed by user, in order.
func produceEvents(t *testing.T, topic string, events []presence.Event) {
	t.Helper()
	prod, err := kgo.NewClient(kgo.SeedBrokers(harness.KafkaBrokers()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
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

// groupHistoryModel is the groups the test chose and every user's statuses as
// presence.changes says.
type groupHistoryModel struct {
	timelines map[string]*rollupTimeline
	groups    map[string][]string
}

// statusAt is user's status at instant us: offline for a user with no change.
func (m groupHistoryModel) statusAt(user string, us int64) presence.Status {
	if tl := m.timelines[user]; tl != nil {
		return tl.statusAt(us)
	}
	return presence.Offline
}

// shown says whether status counts in the view: readers see invisible as offline.
func shown(st presence.Status, operator bool) bool {
	return st == presence.Online || st == presence.Idle || operator && st == presence.Invisible
}

// count is the API's count of group g at us: total, members and byStatus in one map.
func (m groupHistoryModel) count(g string, us int64, operator bool) map[string]uint64 {
	c := map[string]uint64{"online": 0, "idle": 0, "offline": 0, "members": uint64(len(m.groups[g]))}
	if operator {
		c["invisible"] = 0
	}
	for _, u := range m.groups[g] {
		st := m.statusAt(u, us)
		if !shown(st, operator) {
			st = presence.Offline
		}
		c[st.String()]++
	}
	c["total"] = c["online"] + c["idle"] + c["invisible"]
	return c
}

// listing is group g's members shown at us, as "user status" lines, sorted.
func (m groupHistoryModel) listing(g string, us int64, operator bool) []string {
	var out []string
	for _, u := range m.groups[g] {
		if st := m.statusAt(u, us); shown(st, operator) {
			out = append(out, u+" "+st.String())
		}
	}
	sort.Strings(out)
	return out
}

// uniques is the number of group g's members shown at some instant of [from, to).
func (m groupHistoryModel) uniques(g string, from, to int64, operator bool) uint64 {
	var n uint64
	for _, u := range m.groups[g] {
		yes := shown(m.statusAt(u, from), operator)
		if tl := m.timelines[u]; tl != nil {
			for i, at := range tl.at {
				yes = yes || at >= from && at < to && shown(tl.st[i], operator)
			}
		}
		if yes {
			n++
		}
	}
	return n
}

// minutePoint is a concurrency point of one minute: the members in each status at
// the end of its last second and the most online at the end of a second.
type minutePoint struct{ closeOnline, closeIdle, closeInvisible, peakOnline int64 }

// minute is group g's concurrency point of the minute from us.
func (m groupHistoryModel) minute(g string, us int64) minutePoint {
	const sec = int64(time.Second / time.Microsecond)
	var p minutePoint
	for s := range int64(60) {
		end := us + s*sec + sec - 1
		var online int64
		for _, u := range m.groups[g] {
			st := m.statusAt(u, end)
			if st == presence.Online {
				online++
			}
			if s == 59 {
				switch st {
				case presence.Online:
					p.closeOnline++
				case presence.Idle:
					p.closeIdle++
				case presence.Invisible:
					p.closeInvisible++
				}
			}
		}
		p.peakOnline = max(p.peakOnline, online)
	}
	return p
}

func getJSON(t *testing.T, target, key string, out any) {
	t.Helper()
	code, body := harness.OnlineDo(t, http.MethodGet, target, key, nil)
	if code != http.StatusOK {
		t.Fatalf("GET %s = %d %s", target, code, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("GET %s: %v in %s", target, err, body)
	}
}

// groupAtCheck compares the groups' counts and listings at instants of the workload
// (random ones, minute boundaries, changes and a microsecond either side) with the
// model, in both views; it returns how many instants it compared.
func groupAtCheck(t *testing.T, q string, m groupHistoryModel, t0, last time.Time, rnd *mrand.Rand) int {
	t.Helper()
	lo, hi := t0.Add(-time.Minute).UnixMicro(), last.UnixMicro()
	instants := []int64{t0.UnixMicro() - 1, t0.UnixMicro(), t0.Add(2 * time.Minute).UnixMicro(), hi}
	for range 6 {
		instants = append(instants, lo+rnd.Int64N(hi-lo))
	}
	var changes []int64
	for _, tl := range m.timelines {
		for _, at := range tl.at {
			if at <= hi {
				changes = append(changes, at)
			}
		}
	}
	for range 4 {
		c := changes[rnd.IntN(len(changes))]
		instants = append(instants, c-1, c, min(c+1, hi))
	}
	for _, x := range instants {
		at := time.UnixMicro(x).UTC()
		ts := url.QueryEscape(at.Format(time.RFC3339Nano))
		for _, g := range []string{"team-a", "team-b"} {
			base := q + "/v1/groups/" + g
			for _, operator := range []bool{false, true} {
				key, view := harness.TestKeys.Reader, ""
				if operator {
					key, view = harness.TestKeys.Operator, "&view=operator"
				}
				var c struct {
					GroupID  string            `json:"groupId"`
					Total    uint64            `json:"total"`
					Members  uint64            `json:"members"`
					ByStatus map[string]uint64 `json:"byStatus"`
					At       time.Time         `json:"at"`
				}
				getJSON(t, base+"/online/count?at="+ts+view, key, &c)
				got := map[string]uint64{"total": c.Total, "members": c.Members}
				for k, v := range c.ByStatus {
					got[k] = v
				}
				if want := m.count(g, x, operator); !mapsEqual(got, want) || c.GroupID != g || !c.At.Equal(at) {
					t.Fatalf("count of %s at %s (operator %v) = %v (%s, %s), model %v", g, at.Format(time.RFC3339Nano), operator, got, c.GroupID, c.At, want)
				}
				listed, bad := pages(t, base+"/online?at="+ts+view, key, "users", func(raw json.RawMessage) string {
					var u struct{ UserID, Status string }
					_ = json.Unmarshal(raw, &u)
					return u.UserID + " " + u.Status
				})
				if bad != "" {
					t.Fatal(bad)
				}
				sort.Strings(listed)
				if want := m.listing(g, x, operator); !slices.Equal(listed, want) {
					t.Fatalf("online of %s at %s (operator %v) = %v, model %v", g, at.Format(time.RFC3339Nano), operator, listed, want)
				}
			}
		}
	}
	return len(instants)
}

// groupUniquesCheck compares the groups' unique users per hour and per day with the
// model, in both views.
func groupUniquesCheck(t *testing.T, q string, m groupHistoryModel, t0 time.Time) {
	t.Helper()
	h0 := t0.Truncate(time.Hour)
	day := time.Date(t0.Year(), t0.Month(), t0.Day(), 0, 0, 0, 0, time.UTC)
	for _, g := range []string{"team-a", "team-b"} {
		for _, operator := range []bool{false, true} {
			key, view := harness.TestKeys.Reader, ""
			if operator {
				key, view = harness.TestKeys.Operator, "&view=operator"
			}
			for _, c := range []struct {
				period   string
				from, to time.Time
				starts   []time.Time
				width    time.Duration
			}{
				{"hour", h0, h0.Add(2 * time.Hour), []time.Time{h0, h0.Add(time.Hour)}, time.Hour},
				{"day", day, day.Add(24 * time.Hour), []time.Time{day}, 24 * time.Hour},
			} {
				var ans struct {
					GroupID string `json:"groupId"`
					Members uint64 `json:"members"`
					Points  []struct {
						Start time.Time `json:"start"`
						Users uint64    `json:"users"`
					} `json:"points"`
				}
				target := fmt.Sprintf("%s/v1/stats/uniques?group=%s&period=%s&from=%s&to=%s%s", q, g, c.period,
					c.from.Format(time.RFC3339), c.to.Format(time.RFC3339), view)
				getJSON(t, target, key, &ans)
				var got, want []string
				for _, p := range ans.Points {
					got = append(got, fmt.Sprintf("%s %d", p.Start.Format(time.RFC3339), p.Users))
				}
				for _, s := range c.starts {
					want = append(want, fmt.Sprintf("%s %d", s.Format(time.RFC3339), m.uniques(g, s.UnixMicro(), s.Add(c.width).UnixMicro(), operator)))
				}
				if !slices.Equal(got, want) || ans.GroupID != g || ans.Members != uint64(len(m.groups[g])) {
					t.Fatalf("uniques of %s per %s (operator %v) = %v (%s, %d members), model %v", g, c.period, operator, got, ans.GroupID, ans.Members, want)
				}
			}
		}
	}
}

// concurrencyLines is a concurrency answer's points as text lines.
func concurrencyLines(t *testing.T, target, key string) []string {
	t.Helper()
	var ans struct {
		Points []struct {
			At             time.Time `json:"at"`
			CloseOnline    int64     `json:"closeOnline"`
			CloseIdle      int64     `json:"closeIdle"`
			CloseInvisible *int64    `json:"closeInvisible"`
			PeakOnline     int64     `json:"peakOnline"`
			Minutes        int       `json:"minutes"`
		} `json:"points"`
	}
	getJSON(t, target, key, &ans)
	var out []string
	for _, p := range ans.Points {
		inv := "-"
		if p.CloseInvisible != nil {
			inv = fmt.Sprint(*p.CloseInvisible)
		}
		out = append(out, fmt.Sprintf("%s close=%d/%d/%s peak=%d minutes=%d", p.At.Format(time.RFC3339), p.CloseOnline, p.CloseIdle, inv, p.PeakOnline, p.Minutes))
	}
	return out
}

// groupConcurrencyCheck compares the groups' concurrency per minute and per hour with
// the model, in both views, and the group of every user with the whole service's.
func groupConcurrencyCheck(t *testing.T, q string, m groupHistoryModel, t0 time.Time) {
	t.Helper()
	from, to := t0.Add(-2*time.Minute), t0.Add(7*time.Minute)
	rng := fmt.Sprintf("&from=%s&to=%s", from.Format(time.RFC3339), to.Format(time.RFC3339))
	for _, g := range []string{"team-a", "team-b", "everyone"} {
		for _, operator := range []bool{false, true} {
			key, view := harness.TestKeys.Reader, ""
			if operator {
				key, view = harness.TestKeys.Operator, "&view=operator"
			}
			var want []string
			hours := map[time.Time]*minutePoint{}
			var hourOrder []time.Time
			for mi := from; mi.Before(to); mi = mi.Add(time.Minute) {
				p := m.minute(g, mi.UnixMicro())
				inv := "-"
				if operator {
					inv = fmt.Sprint(p.closeInvisible)
				}
				want = append(want, fmt.Sprintf("%s close=%d/%d/%s peak=%d minutes=1", mi.Format(time.RFC3339), p.closeOnline, p.closeIdle, inv, p.peakOnline))
				h := mi.Truncate(time.Hour)
				if hours[h] == nil {
					hours[h] = &minutePoint{}
					hourOrder = append(hourOrder, h)
				}
				hp := hours[h]
				peak := max(hp.peakOnline, p.peakOnline)
				*hp = p
				hp.peakOnline = peak
			}
			got := concurrencyLines(t, q+"/v1/stats/concurrency?group="+g+"&step=minute"+rng+view, key)
			if !slices.Equal(got, want) {
				t.Fatalf("concurrency of %s per minute (operator %v):\n%s\nmodel:\n%s", g, operator, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			want = nil
			for _, h := range hourOrder {
				p := hours[h]
				inv := "-"
				if operator {
					inv = fmt.Sprint(p.closeInvisible)
				}
				n := 0
				for mi := from; mi.Before(to); mi = mi.Add(time.Minute) {
					if mi.Truncate(time.Hour).Equal(h) {
						n++
					}
				}
				want = append(want, fmt.Sprintf("%s close=%d/%d/%s peak=%d minutes=%d", h.Format(time.RFC3339), p.closeOnline, p.closeIdle, inv, p.peakOnline, n))
			}
			if got := concurrencyLines(t, q+"/v1/stats/concurrency?group="+g+"&step=hour"+rng+view, key); !slices.Equal(got, want) {
				t.Fatalf("concurrency of %s per hour (operator %v):\n%s\nmodel:\n%s", g, operator, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		}
	}
	// The whole service's table has rows from the first minute with a change on.
	whole := fmt.Sprintf("&from=%s&to=%s", t0.Format(time.RFC3339), to.Format(time.RFC3339))
	op := harness.TestKeys.Operator
	if all, grp := concurrencyLines(t, q+"/v1/stats/concurrency?step=minute&view=operator"+whole, op),
		concurrencyLines(t, q+"/v1/stats/concurrency?group=everyone&step=minute&view=operator"+whole, op); !slices.Equal(all, grp) {
		t.Fatalf("the group of every user differs from the whole service:\n%s\ngroup:\n%s", strings.Join(all, "\n"), strings.Join(grp, "\n"))
	}
}

// groupHistoryRefusals: the group routes' at= refuses as the global one does, the
// stats routes stay API-key only, and a user token reads its own group's past.
func groupHistoryRefusals(t *testing.T, q, member string, t0 time.Time) {
	t.Helper()
	ts := func(at time.Time) string { return url.QueryEscape(at.Format(time.RFC3339Nano)) }
	for _, c := range []struct {
		target string
		code   int
		want   string
	}{
		{"/v1/groups/team-a/online/count?at=" + ts(t0.Add(30*time.Minute)), 503, "not written yet"},
		{"/v1/groups/team-a/online?at=" + ts(t0.Add(30*time.Minute)), 503, "not written yet"},
		{"/v1/groups/team-a/online/count?at=" + ts(t0.Add(-2*time.Hour)), 404, "history holds no state"},
		{"/v1/groups/team-a/online/count?at=yesterday", 400, `"field":"at"`},
		{"/v1/groups/team-a/online?activeWithin=5m&at=" + ts(t0), 400, `"field":"activeWithin"`},
		{"/v1/groups/team-a/online/count?since=" + ts(t0), 400, `"field":"since"`},
		{"/v1/stats/concurrency?group=team-a&from=" + ts(t0) + "&to=" + ts(t0.Add(25*time.Hour)), 400, `"field":"from"`},
		{"/v1/stats/uniques?group=no%20such", 400, `"field":"group"`},
		{"/v1/stats/concurrency?group=team-a&from=" + ts(t0.Add(-2*time.Hour)) + "&to=" + ts(t0.Add(-time.Hour)), 404, "history holds no state"},
	} {
		code, body := harness.Get(t, q+c.target)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("GET %s = %d %s, want %d with %s", c.target, code, body, c.code, c.want)
		}
	}
	// A member's user token reads its group's past; an outsider's does not, and the
	// stats routes stay with API keys.
	exp := time.Now().Add(time.Hour)
	for _, c := range []struct {
		token, target string
		code          int
	}{
		{userToken(t, member, exp, harness.TestKeys.Hs256), "/v1/groups/team-a/online/count?at=" + ts(t0), 200},
		{userToken(t, member, exp, harness.TestKeys.Hs256), "/v1/groups/team-a/online?at=" + ts(t0), 200},
		{userToken(t, "gh-outsider", exp, harness.TestKeys.Hs256), "/v1/groups/team-a/online/count?at=" + ts(t0), 403},
		{userToken(t, member, exp, harness.TestKeys.Hs256), "/v1/stats/uniques?group=team-a", 403},
		{userToken(t, member, exp, harness.TestKeys.Hs256), "/v1/stats/concurrency?group=team-a", 403},
	} {
		if code, body := harness.OnlineDo(t, http.MethodGet, q+c.target, c.token, nil); code != c.code {
			t.Errorf("GET %s with a user token = %d %s, want %d", c.target, code, body, c.code)
		}
	}
}
