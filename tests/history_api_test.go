package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os/exec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/pulse-presence/pulse/internal/stores/statestore"
	"github.com/pulse-presence/pulse/tests/harness"
)

// The analysts' read API against the real Cassandra: known rows are written straight
// into user_activity and the tables of migrations/0005 (under a user id of the test's
// own and a random day decades ago, so nothing else writes or reads them), then read
// back through query's history routes and pulsectl, and compared with answers the
// test computes from the rows itself.

// hapiEntry is a timeline entry as the API answers it.
type hapiEntry struct {
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
}

type hapiSession struct {
	Start            time.Time  `json:"start"`
	End              *time.Time `json:"end"`
	Open             bool       `json:"open"`
	OnlineSeconds    float64    `json:"onlineSeconds"`
	IdleSeconds      float64    `json:"idleSeconds"`
	InvisibleSeconds float64    `json:"invisibleSeconds"`
	Through          time.Time  `json:"through"`
	Status           string     `json:"status"`
}

type hapiDay struct {
	Day              string     `json:"day,omitempty"`
	UserID           string     `json:"userId,omitempty"`
	OnlineSeconds    float64    `json:"onlineSeconds"`
	IdleSeconds      float64    `json:"idleSeconds"`
	InvisibleSeconds float64    `json:"invisibleSeconds"`
	Sessions         int        `json:"sessions"`
	FirstSeen        *time.Time `json:"firstSeen"`
	LastSeen         *time.Time `json:"lastSeen"`
	Through          time.Time  `json:"through"`
	Status           string     `json:"status"`
}

type hapiPoint struct {
	At             time.Time `json:"at"`
	CloseOnline    int64     `json:"closeOnline"`
	CloseIdle      int64     `json:"closeIdle"`
	CloseInvisible int64     `json:"closeInvisible"`
	PeakOnline     int64     `json:"peakOnline"`
	Minutes        int       `json:"minutes"`
}

type hapiUniques struct {
	Start            time.Time `json:"start"`
	End              time.Time `json:"end"`
	Users            uint64    `json:"users"`
	Shards           int       `json:"shards"`
	BitmapBytes      uint64    `json:"bitmapBytes"`
	HyperLogLogBytes uint64    `json:"hyperLogLogBytes"`
}

// hapiMinute is one concurrency row.
type hapiMinute struct {
	minute                  time.Time
	shard                   int
	online, idle, invisible []int
}

// hapiHour is one uniques row.
type hapiHour struct {
	hour  time.Time
	shard int
	users []uint32
	// shown: those of users online or idle in the hour, what a reader counts; nil
	// writes a row as before migration 0009, without the column, counted as users.
	shown []uint32
}

func hapiExec(t *testing.T, s *gocql.Session, stmt string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Query(stmt, args...).ExecContext(ctx); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

func tp(t time.Time) *time.Time { return &t }

// hapiGet GETs a query URL and decodes a 200's JSON into out.
// hapiToken is the operator key of the history API tests: a user's history answers
// only in the operator view.
var hapiToken = harness.TestKeys.Operator

// hapiOperator is target in the operator view, with the token, for the routes that
// show single users and for a target that asks for it (the aggregates are open to
// readers too).
func hapiOperator(target string) (string, http.Header) {
	if strings.Contains(target, "view=operator") {
		return target, http.Header{"Authorization": {"Bearer " + hapiToken}}
	}
	if !strings.Contains(target, "/v1/users/") && !strings.Contains(target, "/v1/stats/daily") {
		return target, nil
	}
	sep := "?"
	if strings.Contains(target, "?") {
		sep = "&"
	}
	return target + sep + "view=operator", http.Header{"Authorization": {"Bearer " + hapiToken}}
}

// hapiGetRaw is GET target as an operator (see hapiOperator).
func hapiGetRaw(t *testing.T, target string) (int, string) {
	t.Helper()
	target, header := hapiOperator(target)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := harness.KeyedClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

func hapiGet(t *testing.T, target string, out any) {
	t.Helper()
	code, body := hapiGetRaw(t, target)
	if code != http.StatusOK {
		t.Fatalf("GET %s = %d %s", target, code, body)
	}
	if err := json.Unmarshal([]byte(body), out); err != nil {
		t.Fatalf("GET %s: %v in %s", target, err, body)
	}
}

func hapiCLI(t *testing.T, base string, args ...string) string {
	t.Helper()
	cmd := exec.Command(harness.Binary("pulsectl"), args...)
	cmd.Env = append(cmd.Environ(), "PULSE_QUERY_URL="+base, "PULSE_OPERATOR_KEY="+hapiToken)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("pulsectl %v: %v\n%s", args, err, errOut.String())
	}
	return out.String()
}

func csvTime(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func csvNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func TestHistoryAPIAnswersFromTheTables(t *testing.T) {
	session := migCassandra(t)
	ks := harness.EnvOr("PULSE_CASSANDRA_KEYSPACE", "pulse")
	run := harness.RandomID(t)
	user := "hapi-" + run
	// A day between 1990 and 2009, at least 40 days after the start so a session
	// 40 days earlier stays in range.
	d0 := time.Date(1990, 3, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, rand.IntN(7000))
	dayAt := func(days int, hms string) time.Time {
		c, err := time.Parse("15:04:05.000", hms)
		if err != nil {
			t.Fatal(err)
		}
		return d0.AddDate(0, 0, days).Add(time.Duration(c.Hour())*time.Hour + time.Duration(c.Minute())*time.Minute +
			time.Duration(c.Second())*time.Second + time.Duration(c.Nanosecond()))
	}
	date := func(tm time.Time) string { return tm.Format(time.DateOnly) }
	t.Logf("user %s, day %s", user, date(d0))

	// Q1: user_activity. Two entries share a millisecond; entry_id orders them.
	entries := []hapiEntry{
		{OccurredAt: dayAt(0, "08:00:00.000"), EntryID: "e:a1", EntryType: "event", Kind: "status", Status: "online", DeviceID: "phone", Source: "api", ReceivedAt: tp(dayAt(0, "08:00:00.005")), LogPartition: 3, LogOffset: 100},
		{OccurredAt: dayAt(0, "08:00:00.000"), EntryID: "c:a1", EntryType: "change", Status: "online", PreviousStatus: "offline", Cause: "event", LogPartition: 3, LogOffset: 50},
		{OccurredAt: dayAt(0, "13:30:00.250"), EntryID: "e:a2", EntryType: "event", Kind: "activity", DeviceID: "laptop", Source: "api", ReceivedAt: tp(dayAt(0, "13:30:00.300")), LogPartition: 3, LogOffset: 101},
		{OccurredAt: dayAt(1, "09:00:00.000"), EntryID: "e:a3", EntryType: "event", Kind: "status", Status: "idle", DeviceID: "phone", Source: "api", ReceivedAt: tp(dayAt(1, "09:00:01.000")), Stale: true, LogPartition: 3, LogOffset: 102},
		{OccurredAt: dayAt(1, "23:59:59.999"), EntryID: "e:a4", EntryType: "event", Kind: "heartbeat", DeviceID: "phone", Source: "api", ReceivedAt: tp(dayAt(2, "00:00:00.001")), LogPartition: 3, LogOffset: 103},
		{OccurredAt: dayAt(2, "00:10:00.000"), EntryID: "e:a5", EntryType: "event", Kind: "status", Status: "offline", DeviceID: "phone", Source: "timeout", ReceivedAt: tp(dayAt(2, "00:10:00.000")), LogPartition: 3, LogOffset: 104},
		{OccurredAt: dayAt(2, "00:10:00.000"), EntryID: "c:a5", EntryType: "change", Status: "offline", PreviousStatus: "online", Cause: "timeout", LogPartition: 3, LogOffset: 51},
	}
	for _, e := range entries {
		var recv any
		if e.ReceivedAt != nil {
			recv = *e.ReceivedAt
		}
		hapiExec(t, session, `INSERT INTO `+ks+`.user_activity (user_id, bucket, occurred_at, entry_id, entry_type, kind, status,
			previous_status, device_id, source, cause, received_at, stale, log_partition, log_offset) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			user, hapiDayOf(e.OccurredAt), e.OccurredAt, e.EntryID, e.EntryType, hapiNull(e.Kind), hapiNull(e.Status), hapiNull(e.PreviousStatus),
			hapiNull(e.DeviceID), hapiNull(e.Source), hapiNull(e.Cause), recv, e.Stale, e.LogPartition, e.LogOffset)
	}
	newestFirst := func(in []hapiEntry) []hapiEntry {
		out := slices.Clone(in)
		slices.SortFunc(out, func(a, b hapiEntry) int {
			if c := b.OccurredAt.Compare(a.OccurredAt); c != 0 {
				return c
			}
			return strings.Compare(b.EntryID, a.EntryID)
		})
		return out
	}

	// Q2: user_sessions, in two months.
	sessions := []hapiSession{
		{Start: dayAt(-40, "10:00:00.000"), End: tp(dayAt(-40, "11:00:00.000")), OnlineSeconds: 3000, IdleSeconds: 600, Through: dayAt(-40, "11:00:00.000"), Status: "offline"},
		{Start: dayAt(0, "08:00:00.000"), End: tp(dayAt(2, "00:10:00.000")), OnlineSeconds: 100000.5, IdleSeconds: 44399.5, InvisibleSeconds: 0, Through: dayAt(2, "00:10:00.000"), Status: "offline"},
		{Start: dayAt(2, "05:00:00.000"), Open: true, OnlineSeconds: 120.5, Through: dayAt(2, "05:02:00.500"), Status: "online"},
	}
	for _, s := range sessions {
		var end any
		if s.End != nil {
			end = *s.End
		}
		hapiExec(t, session, `INSERT INTO `+ks+`.user_sessions (user_id, month, session_start, start_us, session_end, open, online_us, idle_us,
			invisible_us, through, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			user, time.Date(s.Start.Year(), s.Start.Month(), 1, 0, 0, 0, 0, time.UTC), s.Start, s.Start.UnixMicro(), end, s.Open,
			int64(s.OnlineSeconds*1e6), int64(s.IdleSeconds*1e6), int64(s.InvisibleSeconds*1e6), s.Through, s.Status)
	}

	// Q3: user_daily for the user, daily_users for four users of the day in three buckets.
	days := []hapiDay{
		{Day: date(d0), OnlineSeconds: 50400, IdleSeconds: 7199.75, Sessions: 1, FirstSeen: tp(dayAt(0, "08:00:00.000")), LastSeen: tp(dayAt(0, "23:59:59.999")), Through: d0.AddDate(0, 0, 1), Status: "online"},
		{Day: date(d0.AddDate(0, 0, 1)), OnlineSeconds: 32400, IdleSeconds: 54000, Sessions: 1, FirstSeen: tp(dayAt(1, "00:00:00.000")), LastSeen: tp(dayAt(1, "23:59:59.999")), Through: d0.AddDate(0, 0, 2), Status: "idle"},
	}
	for _, d := range days {
		day, _ := time.Parse(time.DateOnly, d.Day)
		hapiExec(t, session, `INSERT INTO `+ks+`.user_daily (user_id, year, day, online_us, idle_us, invisible_us, sessions,
			first_seen, last_seen, through, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			user, day.Year(), day, int64(d.OnlineSeconds*1e6), int64(d.IdleSeconds*1e6), int64(d.InvisibleSeconds*1e6),
			d.Sessions, *d.FirstSeen, *d.LastSeen, d.Through, d.Status)
	}
	dayUsers := []struct {
		bucket int
		row    hapiDay
	}{
		{0, hapiDay{UserID: user + "-a", OnlineSeconds: 60, Sessions: 1, FirstSeen: tp(dayAt(0, "01:00:00.000")), LastSeen: tp(dayAt(0, "01:00:59.999")), Through: d0.AddDate(0, 0, 1), Status: "offline"}},
		{0, hapiDay{UserID: user + "-b", OnlineSeconds: 86400, Sessions: 2, FirstSeen: tp(d0), LastSeen: tp(dayAt(0, "23:59:59.999")), Through: d0.AddDate(0, 0, 1), Status: "online"}},
		{5, hapiDay{UserID: user + "-c", IdleSeconds: 30, InvisibleSeconds: 12.5, Sessions: 1, FirstSeen: tp(dayAt(0, "12:00:00.000")), LastSeen: tp(dayAt(0, "12:00:42.499")), Through: d0.AddDate(0, 0, 1), Status: "offline"}},
		{15, hapiDay{UserID: user + "-d", OnlineSeconds: 1, Sessions: 1, FirstSeen: tp(dayAt(0, "23:59:59.000")), LastSeen: tp(dayAt(0, "23:59:59.999")), Through: d0.AddDate(0, 0, 1), Status: "online"}},
	}
	for _, u := range dayUsers {
		d := u.row
		hapiExec(t, session, `INSERT INTO `+ks+`.daily_users (day, bucket, user_id, online_us, idle_us, invisible_us, sessions,
			first_seen, last_seen, through, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			d0, u.bucket, d.UserID, int64(d.OnlineSeconds*1e6), int64(d.IdleSeconds*1e6), int64(d.InvisibleSeconds*1e6),
			d.Sessions, *d.FirstSeen, *d.LastSeen, d.Through, d.Status)
	}

	// Q4: concurrency of three shards, whose peaks fall on different seconds; the
	// last minute has one shard only, and a minute of the next day lies past `to`.
	rng := rand.New(rand.NewPCG(1, 2))
	series := func(base int) []int {
		s := make([]int, 60)
		for i := range s {
			s[i] = base + rng.IntN(50)
		}
		return s
	}
	var minutes []hapiMinute
	for _, m := range []time.Time{dayAt(0, "10:00:00.000"), dayAt(0, "10:01:00.000"), dayAt(0, "11:30:00.000"), dayAt(1, "00:00:00.000")} {
		for _, sh := range []int{0, 7, 15} {
			if m.Hour() == 11 && sh != 7 {
				continue
			}
			minutes = append(minutes, hapiMinute{minute: m, shard: sh, online: series(100 * (sh + 1)), idle: series(10), invisible: series(1)})
		}
	}
	for _, m := range minutes {
		peak := slices.Max(m.online)
		hapiExec(t, session, `INSERT INTO `+ks+`.concurrency (day, minute, shard, online, idle, invisible, close_online, close_idle,
			close_invisible, peak_online) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			hapiDayOf(m.minute), m.minute, m.shard, m.online, m.idle, m.invisible, m.online[59], m.idle[59], m.invisible[59], peak)
	}

	// Q6: uniques of two shards; the same index in two shards is two users.
	span := func(from, to uint32) []uint32 {
		var s []uint32
		for i := from; i <= to; i++ {
			s = append(s, i)
		}
		return s
	}
	hours := []hapiHour{
		{dayAt(0, "10:00:00.000"), 0, span(1, 100), span(1, 90)},
		{dayAt(0, "10:00:00.000"), 3, []uint32{1, 2, 3}, []uint32{}}, // only invisible users
		{dayAt(0, "11:00:00.000"), 0, span(50, 150), span(60, 150)},
		{dayAt(0, "11:00:00.000"), 3, nil, []uint32{}},
		{dayAt(1, "00:00:00.000"), 0, []uint32{1, 70000}, nil},
	}
	portable := func(ids []uint32) []byte {
		var buf bytes.Buffer
		if _, err := roaring.BitmapOf(ids...).WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	for _, h := range hours {
		if h.shown == nil {
			hapiExec(t, session, `INSERT INTO `+ks+`.uniques (day, hour, shard, users, cardinality) VALUES (?, ?, ?, ?, ?)`,
				hapiDayOf(h.hour), h.hour, h.shard, portable(h.users), int64(len(h.users)))
			continue
		}
		hapiExec(t, session, `INSERT INTO `+ks+`.uniques (day, hour, shard, users, cardinality, shown) VALUES (?, ?, ?, ?, ?, ?)`,
			hapiDayOf(h.hour), h.hour, h.shard, portable(h.users), int64(len(h.users)), portable(h.shown))
	}
	t.Cleanup(func() {
		for i := range 3 {
			hapiExec(t, session, `DELETE FROM `+ks+`.user_activity WHERE user_id = ? AND bucket = ?`, user, d0.AddDate(0, 0, i))
		}
		for _, s := range sessions {
			hapiExec(t, session, `DELETE FROM `+ks+`.user_sessions WHERE user_id = ? AND month = ?`, user, time.Date(s.Start.Year(), s.Start.Month(), 1, 0, 0, 0, 0, time.UTC))
		}
		for _, d := range days {
			day, _ := time.Parse(time.DateOnly, d.Day)
			hapiExec(t, session, `DELETE FROM `+ks+`.user_daily WHERE user_id = ? AND year = ?`, user, day.Year())
		}
		for _, b := range []int{0, 5, 15} {
			hapiExec(t, session, `DELETE FROM `+ks+`.daily_users WHERE day = ? AND bucket = ?`, d0, b)
		}
		for i := range 2 {
			hapiExec(t, session, `DELETE FROM `+ks+`.concurrency WHERE day = ?`, d0.AddDate(0, 0, i))
			hapiExec(t, session, `DELETE FROM `+ks+`.uniques WHERE day = ?`, d0.AddDate(0, 0, i))
		}
	})

	// Query, with a state of 16 shards of its own (the buckets of daily_users).
	rdb := stateRDB(t, harness.RedisAddr())
	prefix := "it-hapi-" + run
	t.Cleanup(func() { deleteRedisPrefix(rdb, prefix) })
	if err := statestore.New(rdb, prefix).RegisterShards(context.Background(), 16, statestore.DefaultBuckets); err != nil {
		t.Fatal(err)
	}
	if err := statestore.New(rdb, prefix).MarkWhole(context.Background(), 16); err != nil {
		t.Fatal(err)
	}
	env := harness.StackEnv()
	env["PULSE_REDIS_PREFIX"] = prefix
	env["PULSE_CASSANDRA_KEYSPACE"] = ks
	q := harness.StartService(t, "query", env)
	rfc := func(tm time.Time) string { return url.QueryEscape(tm.Format(time.RFC3339Nano)) }
	// Cassandra is connected in the background: wait for the first answer.
	harness.Eventually(t, 30*time.Second, func() string {
		if code, body := hapiGetRaw(t, q.URL+"/v1/users/"+user+"/daily?from="+date(d0)+"&to="+date(d0)); code != http.StatusOK {
			return fmt.Sprintf("daily = %d %s", code, body)
		}
		return ""
	})

	if _, body := harness.Get(t, q.URL+"/metrics"); !strings.Contains(body, "\npulse_query_history_connected 1\n") {
		t.Errorf("/metrics lacks pulse_query_history_connected 1")
	}

	t.Run("timeline", func(t *testing.T) {
		var got []hapiEntry
		pages := 0
		next := ""
		for {
			var page struct {
				Entries    []hapiEntry `json:"entries"`
				NextCursor *string     `json:"nextCursor"`
			}
			hapiGet(t, q.URL+"/v1/users/"+user+"/timeline?from="+date(d0)+"&to="+date(d0.AddDate(0, 0, 3))+"&limit=2"+next, &page)
			got = append(got, page.Entries...)
			if pages++; page.NextCursor == nil || pages > 10 {
				break
			}
			next = "&cursor=" + url.QueryEscape(*page.NextCursor)
		}
		assertEqualJSON(t, "timeline", got, newestFirst(entries))
		if pages != 4 {
			t.Errorf("%d pages of 2 for 7 entries, want 4", pages)
		}
		// A range inside the days: from 12:00 on day 0 to the end of day 1.
		var page struct {
			Entries []hapiEntry `json:"entries"`
		}
		hapiGet(t, q.URL+"/v1/users/"+user+"/timeline?from="+rfc(dayAt(0, "12:00:00.000"))+"&to="+date(d0.AddDate(0, 0, 2)), &page)
		assertEqualJSON(t, "timeline 12:00 to day 2", page.Entries, newestFirst(entries[2:5]))

		var csv strings.Builder
		csv.WriteString("OCCURRED_AT,TYPE,KIND,STATUS,PREVIOUS,DEVICE,SOURCE,CAUSE,STALE,RECEIVED_AT,ENTRY_ID,CUSTOM\n")
		for _, e := range newestFirst(entries) { // none of them carries a custom status
			fmt.Fprintf(&csv, "%s,%s,%s,%s,%s,%s,%s,%s,%t,%s,%s,\n", csvTime(&e.OccurredAt), e.EntryType, e.Kind, e.Status, e.PreviousStatus,
				e.DeviceID, e.Source, e.Cause, e.Stale, csvTime(e.ReceivedAt), e.EntryID)
		}
		if out := hapiCLI(t, q.URL, "history", "user", user, "-from", date(d0), "-to", date(d0.AddDate(0, 0, 3)), "-limit", "3", "-csv"); out != csv.String() {
			t.Errorf("pulsectl history user =\n%s\nwant\n%s", out, csv.String())
		}
	})

	t.Run("sessions", func(t *testing.T) {
		var ans struct {
			Sessions  []hapiSession `json:"sessions"`
			Truncated bool          `json:"truncated"`
		}
		hapiGet(t, q.URL+"/v1/users/"+user+"/sessions?from="+date(d0.AddDate(0, 0, -45))+"&to="+date(d0.AddDate(0, 0, 3)), &ans)
		want := []hapiSession{sessions[2], sessions[1], sessions[0]}
		assertEqualJSON(t, "sessions", ans.Sessions, want)
		hapiGet(t, q.URL+"/v1/users/"+user+"/sessions?from="+date(d0)+"&to="+date(d0.AddDate(0, 0, 3)), &ans)
		assertEqualJSON(t, "sessions from day 0", ans.Sessions, want[:2])

		var csv strings.Builder
		csv.WriteString("START,END,OPEN,DURATION,ONLINE,IDLE,INVISIBLE,THROUGH,STATUS\n")
		for _, s := range want {
			end := s.Through
			if s.End != nil {
				end = *s.End
			}
			fmt.Fprintf(&csv, "%s,%s,%t,%s,%s,%s,%s,%s,%s\n", csvTime(&s.Start), csvTime(s.End), s.Open, csvNum(end.Sub(s.Start).Seconds()),
				csvNum(s.OnlineSeconds), csvNum(s.IdleSeconds), csvNum(s.InvisibleSeconds), csvTime(&s.Through), s.Status)
		}
		if out := hapiCLI(t, q.URL, "sessions", user, "-from", date(d0.AddDate(0, 0, -45)), "-to", date(d0.AddDate(0, 0, 3)), "-csv"); out != csv.String() {
			t.Errorf("pulsectl sessions =\n%s\nwant\n%s", out, csv.String())
		}
	})

	t.Run("daily", func(t *testing.T) {
		var ans struct {
			Days []hapiDay `json:"days"`
		}
		hapiGet(t, q.URL+"/v1/users/"+user+"/daily?from="+date(d0.AddDate(0, 0, -3))+"&to="+date(d0.AddDate(0, 0, 1)), &ans)
		assertEqualJSON(t, "user daily", ans.Days, []hapiDay{days[1], days[0]})

		var got []hapiDay
		next, pages := "", 0
		for {
			var page struct {
				Users      []hapiDay `json:"users"`
				NextCursor *string   `json:"nextCursor"`
			}
			hapiGet(t, q.URL+"/v1/stats/daily?day="+date(d0)+"&limit=2"+next, &page)
			got = append(got, page.Users...)
			if pages++; page.NextCursor == nil || pages > 20 {
				break
			}
			next = "&cursor=" + url.QueryEscape(*page.NextCursor)
		}
		var want []hapiDay
		var csv strings.Builder
		csv.WriteString("DAY,USER,ONLINE,IDLE,INVISIBLE,SESSIONS,FIRST_SEEN,LAST_SEEN,THROUGH,STATUS\n")
		for _, u := range dayUsers {
			want = append(want, u.row)
			d := u.row
			fmt.Fprintf(&csv, "%s,%s,%s,%s,%s,%d,%s,%s,%s,%s\n", date(d0), d.UserID, csvNum(d.OnlineSeconds), csvNum(d.IdleSeconds),
				csvNum(d.InvisibleSeconds), d.Sessions, csvTime(d.FirstSeen), csvTime(d.LastSeen), csvTime(&d.Through), d.Status)
		}
		assertEqualJSON(t, "stats daily", got, want)
		if pages != 2 {
			t.Errorf("%d pages of 2 for 4 users, want 2", pages)
		}
		if out := hapiCLI(t, q.URL, "stats", "daily", "-from", date(d0), "-to", date(d0), "-csv"); out != csv.String() {
			t.Errorf("pulsectl stats daily =\n%s\nwant\n%s", out, csv.String())
		}
	})

	t.Run("concurrency", func(t *testing.T) {
		// The model: per minute, the sum over shards at each second; the peak is the
		// largest sum, the close the sum at second 59.
		type sums struct {
			online, idle, invisible [60]int64
		}
		perMinute := map[time.Time]*sums{}
		var order []time.Time
		for _, m := range minutes {
			if !m.minute.Before(d0.AddDate(0, 0, 1)) {
				continue // past `to`
			}
			s := perMinute[m.minute]
			if s == nil {
				s = &sums{}
				perMinute[m.minute] = s
				order = append(order, m.minute)
			}
			for i := range 60 {
				s.online[i] += int64(m.online[i])
				s.idle[i] += int64(m.idle[i])
				s.invisible[i] += int64(m.invisible[i])
			}
		}
		want := map[string][]hapiPoint{}
		for _, st := range []string{"minute", "hour", "day"} {
			var pts []hapiPoint
			for _, m := range order {
				s := perMinute[m]
				at := m
				switch st {
				case "hour":
					at = m.Truncate(time.Hour)
				case "day":
					at = hapiDayOf(m)
				}
				if len(pts) == 0 || !pts[len(pts)-1].At.Equal(at) {
					pts = append(pts, hapiPoint{At: at})
				}
				p := &pts[len(pts)-1]
				p.CloseOnline, p.CloseIdle, p.CloseInvisible = s.online[59], s.idle[59], s.invisible[59]
				p.PeakOnline = max(p.PeakOnline, slices.Max(s.online[:]))
				p.Minutes++
			}
			want[st] = pts
			var ans struct {
				Points []hapiPoint `json:"points"`
			}
			target := q.URL + "/v1/stats/concurrency?from=" + date(d0) + "&to=" + date(d0.AddDate(0, 0, 1)) + "&step=" + st
			hapiGet(t, target+"&view=operator", &ans)
			assertEqualJSON(t, "concurrency by "+st, ans.Points, pts)
			// A reader is not told how many users were invisible: to a reader they
			// were offline. The rest of the answer is the operator's.
			code, raw := hapiGetRaw(t, target)
			var pub struct {
				Points []hapiPoint `json:"points"`
			}
			if code != http.StatusOK || strings.Contains(raw, "closeInvisible") || json.Unmarshal([]byte(raw), &pub) != nil {
				t.Fatalf("concurrency by %s, reader view: %d %s, want 200 without closeInvisible", st, code, raw)
			}
			hidden := slices.Clone(pts)
			for i := range hidden {
				hidden[i].CloseInvisible = 0
			}
			assertEqualJSON(t, "concurrency by "+st+", reader view", pub.Points, hidden)
		}
		if len(want["minute"]) != 3 || len(want["hour"]) != 2 || want["day"][0].Minutes != 3 {
			t.Fatalf("model: %+v", want)
		}
		var csv strings.Builder
		csv.WriteString("AT,CLOSE_ONLINE,CLOSE_IDLE,CLOSE_INVISIBLE,PEAK_ONLINE,MINUTES\n")
		for _, p := range want["minute"] {
			fmt.Fprintf(&csv, "%s,%d,%d,%d,%d,%d\n", csvTime(&p.At), p.CloseOnline, p.CloseIdle, p.CloseInvisible, p.PeakOnline, p.Minutes)
		}
		if out := hapiCLI(t, q.URL, "stats", "concurrency", "-from", date(d0), "-to", date(d0.AddDate(0, 0, 1)), "-step", "minute", "-csv"); out != csv.String() {
			t.Errorf("pulsectl stats concurrency =\n%s\nwant\n%s", out, csv.String())
		}
	})

	t.Run("uniques", func(t *testing.T) {
		// The model: per period and shard a set of indexes; the count sums the shards.
		// Operators count everyone present, readers those shown (or, in a row without
		// shown users, everyone).
		model := func(period string, operator bool) []hapiUniques {
			type key struct {
				start time.Time
				shard int
			}
			sets := map[key]map[uint32]bool{}
			var starts []time.Time
			for _, h := range hours {
				start, end := h.hour, h.hour.Add(time.Hour)
				if period == "day" {
					start, end = hapiDayOf(h.hour), hapiDayOf(h.hour).AddDate(0, 0, 1)
				}
				_ = end
				if !slices.ContainsFunc(starts, start.Equal) {
					starts = append(starts, start)
				}
				k := key{start, h.shard}
				if sets[k] == nil {
					sets[k] = map[uint32]bool{}
				}
				users := h.users
				if !operator && h.shown != nil {
					users = h.shown
				}
				for _, u := range users {
					sets[k][u] = true
				}
			}
			var out []hapiUniques
			for _, s := range starts {
				p := hapiUniques{Start: s, End: s.Add(time.Hour)}
				if period == "day" {
					p.End = s.AddDate(0, 0, 1)
				}
				for k, set := range sets {
					if !k.start.Equal(s) {
						continue
					}
					p.Users += uint64(len(set))
					p.Shards++
					bm := roaring.New()
					for u := range set {
						bm.Add(u)
					}
					p.BitmapBytes += bm.GetSerializedSizeInBytes()
				}
				p.HyperLogLogBytes = uint64(p.Shards) * 12288
				out = append(out, p)
			}
			return out
		}
		for _, period := range []string{"hour", "day"} {
			var ans struct {
				Points []hapiUniques `json:"points"`
			}
			target := q.URL + "/v1/stats/uniques?from=" + date(d0) + "&to=" + date(d0.AddDate(0, 0, 2)) + "&period=" + period
			hapiGet(t, target, &ans)
			assertEqualJSON(t, "uniques by "+period, ans.Points, model(period, false))
			hapiGet(t, target+"&view=operator", &ans)
			assertEqualJSON(t, "uniques by "+period+" (operator)", ans.Points, model(period, true))
		}
		if m := model("day", true); m[0].Users != 153 || m[1].Users != 2 {
			t.Fatalf("model: %+v", m)
		}
		if m := model("day", false); m[0].Users != 150 || m[1].Users != 2 {
			t.Fatalf("reader's model: %+v", m)
		}
		var csv strings.Builder
		csv.WriteString("START,END,USERS,SHARDS,BITMAP_BYTES,HLL_BYTES\n")
		for _, p := range model("day", true) { // pulsectl with the operator key asks for the operator view
			fmt.Fprintf(&csv, "%s,%s,%d,%d,%d,%d\n", csvTime(&p.Start), csvTime(&p.End), p.Users, p.Shards, p.BitmapBytes, p.HyperLogLogBytes)
		}
		if out := hapiCLI(t, q.URL, "stats", "uniques", "-from", date(d0), "-to", date(d0.AddDate(0, 0, 2)), "-period", "day", "-csv"); out != csv.String() {
			t.Errorf("pulsectl stats uniques =\n%s\nwant\n%s", out, csv.String())
		}
	})

	t.Run("bounds", func(t *testing.T) {
		for target, field := range map[string]string{
			"/v1/users/" + user + "/timeline?from=" + date(d0) + "&to=" + date(d0.AddDate(0, 0, 32)): "from",
			"/v1/stats/concurrency?from=" + date(d0) + "&to=" + date(d0.AddDate(0, 0, 32)):           "from",
			"/v1/stats/uniques?from=" + date(d0) + "&to=" + date(d0.AddDate(0, 0, 401)):              "from",
			"/v1/users/" + user + "/sessions?from=" + date(d0) + "&to=" + date(d0.AddDate(0, 0, -1)): "from",
			"/v1/users/" + user + "/daily?from=yesterday":                                            "from",
		} {
			code, body := hapiGetRaw(t, q.URL+target)
			if code != http.StatusBadRequest || !strings.Contains(body, `"field":"`+field+`"`) {
				t.Errorf("GET %s = %d %s, want a 400 naming %s", target, code, body, field)
			}
		}
	})

	// A user's history shows the time spent invisible: outside the operator view it is
	// refused, and so is every user's day; the aggregates stay open.
	t.Run("operator view", func(t *testing.T) {
		for _, target := range []string{
			"/v1/users/" + user + "/timeline", "/v1/users/" + user + "/sessions",
			"/v1/users/" + user + "/daily", "/v1/stats/daily?day=" + date(d0),
		} {
			if code, body := harness.Get(t, q.URL+target); code != http.StatusForbidden || !strings.Contains(body, `"code":"forbidden"`) {
				t.Errorf("GET %s without the operator view = %d %s, want 403 forbidden", target, code, body)
			}
		}
		if code, body := harness.Get(t, q.URL+"/v1/stats/uniques?from="+date(d0)+"&to="+date(d0.AddDate(0, 0, 1))+"&period=day"); code != http.StatusOK {
			t.Errorf("uniques without the operator view = %d %s, want 200", code, body)
		}
	})
}

// assertEqualJSON compares got and want as the API writes them.
func assertEqualJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if !bytes.Equal(g, w) {
		var gv, wv any
		_ = json.Unmarshal(g, &gv)
		_ = json.Unmarshal(w, &wv)
		if !reflect.DeepEqual(gv, wv) {
			t.Errorf("%s:\n got %s\nwant %s", what, g, w)
		}
	}
}

func hapiDayOf(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

// nullable binds "" as null, as history leaves unset columns.
func hapiNull(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// While Cassandra cannot be reached query starts anyway: the history routes answer
// 503 with Retry-After, and the live routes and readiness carry on.
func TestHistoryAPIWithoutCassandra(t *testing.T) {
	env := harness.StackEnv()
	env["PULSE_REDIS_PREFIX"] = "it-hapi-" + harness.RandomID(t)
	env["PULSE_CASSANDRA_PORT"] = strconv.Itoa(harness.FreePort(t)) // nothing listens there
	env["PULSE_CASSANDRA_CONNECT_TIMEOUT"] = "500ms"
	q := harness.StartService(t, "query", env)
	for _, target := range []string{
		"/v1/users/alice/timeline", "/v1/users/alice/sessions", "/v1/users/alice/daily",
		"/v1/stats/concurrency", "/v1/stats/uniques", "/v1/stats/daily",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		u, header := hapiOperator(q.URL + target)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		for k, v := range header {
			req.Header[k] = v
		}
		res, err := harness.KeyedClient.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("GET %s: %v", target, err)
		}
		var body struct {
			Error struct{ Code string } `json:"error"`
		}
		_ = json.NewDecoder(res.Body).Decode(&body)
		res.Body.Close()
		cancel()
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" || body.Error.Code != "unavailable" {
			t.Errorf("GET %s = %d, Retry-After %q, code %q; want 503 unavailable with Retry-After", target, res.StatusCode, res.Header.Get("Retry-After"), body.Error.Code)
		}
	}
	for _, target := range []string{"/v1/online/count", "/readyz", "/v1/users/alice/status"} {
		if code, body := harness.Get(t, q.URL+target); code != http.StatusOK {
			t.Errorf("GET %s = %d %s, want 200 without Cassandra", target, code, body)
		}
	}
	if _, body := harness.Get(t, q.URL+"/metrics"); !strings.Contains(body, "\npulse_query_history_connected 0\n") {
		t.Errorf("/metrics lacks pulse_query_history_connected 0")
	}
	cmd := exec.Command(harness.Binary("pulsectl"), "stats", "concurrency", "-url", q.URL)
	cmd.Env = append(cmd.Environ(), "PULSE_READER_KEY="+harness.TestKeys.Reader)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "503") {
		t.Errorf("pulsectl stats concurrency without Cassandra: %v\n%s", err, out)
	}
}
