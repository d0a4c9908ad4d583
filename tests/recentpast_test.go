package tests

import (
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/tests/harness"
)

// recentPast is what one at= answer of POST /statuses said: each user's status, and
// whether it was final.
type recentPast struct {
	at       time.Time
	final    bool
	statuses map[string]string
}

// recentModel is every status posted, per user, in time order: a user's status at T is
// the last one posted at or before T (one device each, no timeouts).
type recentModel map[string][]recentEvent

type recentEvent struct {
	at     time.Time
	status string
}

func (m recentModel) at(t time.Time) map[string]string {
	out := map[string]string{}
	for u, evs := range m {
		out[u] = "offline"
		for _, e := range evs {
			if !e.at.After(t) {
				out[u] = e.status
			}
		}
	}
	return out
}

// The recent past is answered at once, provisionally, and the provisional answer is the
// final one unless a late event arrives:
//   - before any event, every shard is quiet: an instant 2 s old is answered (nobody
//     online, not final), and once final by the clock, final;
//   - while statuses are posted, 90 instants 2–10 s old are answered at once, not
//     final, each equal to the model of what was posted;
//   - a status dated 4 s back (within ingest's skew) arrives after later ones: the
//     answers of instants after it, asked again, change for that user alone;
//   - once final, each of the 100 instants answers final, equal to the model with the
//     late event: the same as its provisional answer wherever the late event does not
//     reach, different for its user alone where it does.
//
// The blind spot (how far the provisional mark trails the clock) is sampled from
// shard_progress while the statuses are posted and logged.
func TestRecentPastIsAnsweredAtOnce(t *testing.T) {
	p := harness.NewTopics(t, 4)
	session, ks := migratedKeyspace(t)
	p.Env["PULSE_CASSANDRA_KEYSPACE"] = ks
	// A short lateness so that the instants become final within the test: it must be at
	// least ingest's skew.
	p.Env["PULSE_INGEST_MAX_SKEW"] = "10s"
	p.Env["PULSE_HISTORY_HORIZON"] = "20s"
	p.Env["PULSE_HISTORY_STATUS_INTERVAL"] = "5s"
	p.Env["PULSE_HISTORY_LATENESS"] = "12s"
	p.Env["PULSE_HISTORY_ROLLUP_INTERVAL"] = "3s"
	// Snapshots every 10 s: the first falls within 10 s of history's first frontier.
	p.Env["PULSE_HISTORY_SNAPSHOT_INTERVAL"] = "10s"
	for _, name := range []string{"aggregator", "history", "ingest", "query"} {
		p.Start(t, name)
	}
	q := p.Svc["query"].URL
	op := harness.TestKeys.Operator
	rnd := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 30))
	users := make([]string, 24)
	for i := range users {
		users[i] = fmt.Sprintf("rp-%s-%02d", p.Run, i)
	}

	ask := func(at time.Time) (recentPast, int, string) {
		target := q + "/statuses?view=operator&at=" + url.QueryEscape(at.UTC().Format(time.RFC3339Nano))
		code, body := harness.OnlineDo(t, http.MethodPost, target, op, map[string]any{"userIds": users})
		if code != http.StatusOK {
			return recentPast{}, code, string(body)
		}
		var v struct {
			Final    bool `json:"final"`
			Statuses []struct {
				UserID string `json:"userId"`
				Status string `json:"status"`
				Final  bool   `json:"final"`
			} `json:"statuses"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("POST /statuses?at=: %v: %s", err, body)
		}
		out := recentPast{at: at, final: v.Final, statuses: map[string]string{}}
		for _, s := range v.Statuses {
			if s.Final != v.Final {
				t.Fatalf("POST /statuses?at=: one status says final=%v, the answer %v: %s", s.Final, v.Final, body)
			}
			out.statuses[s.UserID] = s.Status
		}
		return out, code, ""
	}
	count := func(at time.Time) (total uint64, final bool, code int, body string) {
		c, b := harness.OnlineDo(t, http.MethodGet, q+"/v1/online/count?view=operator&at="+url.QueryEscape(at.UTC().Format(time.RFC3339Nano)), op, nil)
		var v struct {
			Total uint64 `json:"total"`
			Final bool   `json:"final"`
		}
		if c == http.StatusOK {
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatalf("count: %v: %s", err, b)
			}
		}
		return v.Total, v.Final, c, string(b)
	}

	// Quiet shards: no event yet. History moves every partition to the clock within
	// its quiet interval (PULSE_HISTORY_QUIET_AFTER, 1 s) of taking it.
	var quietAt time.Time
	harness.Eventually(t, 30*time.Second, func() string {
		quietAt = time.Now().Add(-2 * time.Second)
		total, final, code, body := count(quietAt)
		if code != http.StatusOK {
			return fmt.Sprintf("count 2 s ago, before any event = %d %s", code, body)
		}
		if total != 0 || final {
			t.Fatalf("count 2 s ago, before any event: total %d, final %v; want 0, not final", total, final)
		}
		return ""
	})

	// Statuses, one at a time, each dated as it is sent; 90 instants of the last 2–10 s
	// asked in between.
	model := recentModel{}
	var (
		probes []recentPast
		took   []time.Duration
		lagMu  sync.Mutex
		lags   []time.Duration
	)
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(200 * time.Millisecond):
			}
			it := session.Query("SELECT provisional_through FROM " + ks + ".shard_progress").Iter()
			var (
				at       time.Time
				earliest time.Time
				n        int
			)
			for it.Scan(&at) {
				if n == 0 || at.Before(earliest) {
					earliest = at
				}
				n++
			}
			if it.Close() == nil && n == p.Partitions {
				lagMu.Lock()
				lags = append(lags, time.Since(earliest))
				lagMu.Unlock()
			}
		}
	}()
	statuses := []string{"online", "idle", "invisible", "offline"}
	loadStart := time.Now()
	for i := 0; len(probes) < 90; i++ {
		u := users[rnd.IntN(len(users))]
		st := statuses[rnd.IntN(len(statuses))]
		at := time.Now().UTC().Truncate(time.Millisecond)
		code, body := harness.PostJSON(t, p.Svc["ingest"].URL+"/v1/events", map[string]any{"events": []harness.WireEvent{
			{UserID: u, Kind: "status", Status: st, DeviceID: "phone", OccurredAt: &at}}})
		if code != http.StatusAccepted {
			t.Fatalf("POST /v1/events = %d %s", code, body)
		}
		model[u] = append(model[u], recentEvent{at, st})
		if since := time.Since(loadStart); since > 4*time.Second {
			// An instant 2–10 s old, within the load.
			x := time.Now().Add(-2*time.Second - time.Duration(rnd.Int64N(int64(min(8*time.Second, since-2*time.Second)))))
			start := time.Now()
			got, code, body := ask(x)
			took = append(took, time.Since(start))
			if code != http.StatusOK {
				t.Fatalf("statuses at %s, %v ago = %d %s", x.Format(time.RFC3339Nano), time.Since(x), code, body)
			}
			if got.final {
				t.Fatalf("statuses at %s, %v ago: final, want provisional", x.Format(time.RFC3339Nano), time.Since(x))
			}
			if diff := pastDiff(got.statuses, model.at(x)); diff != "" {
				t.Fatalf("provisional statuses at %s differ from what was posted: %s", x.Format(time.RFC3339Nano), diff)
			}
			probes = append(probes, got)
		}
		time.Sleep(time.Duration(30+rnd.IntN(90)) * time.Millisecond)
	}
	close(stopSampling)
	<-sampled
	loadEnd := time.Now()

	// A late status: dated 4 s back, for a user with nothing posted since, of a status
	// that user did not have then.
	lateAt := loadEnd.Add(-4 * time.Second).UTC().Truncate(time.Millisecond)
	var late string
	for _, u := range users {
		if evs := model[u]; len(evs) == 0 || evs[len(evs)-1].at.Before(lateAt.Add(-100*time.Millisecond)) {
			late = u
			break
		}
	}
	if late == "" {
		t.Fatal("every user had a status in the last 4 s: no user can take a late one")
	}
	before := model.at(lateAt)[late]
	lateStatus := map[string]string{"online": "idle", "idle": "invisible", "invisible": "online", "offline": "online"}[before]
	// Ten instants after the late status, answered before it is sent.
	for len(probes) < 100 {
		x := lateAt.Add(time.Duration(1 + rnd.Int64N(int64(time.Since(lateAt)-2*time.Second))))
		got, code, body := ask(x)
		if code != http.StatusOK || got.final {
			t.Fatalf("statuses at %s, after the load = %d %s (final %v)", x.Format(time.RFC3339Nano), code, body, got.final)
		}
		if diff := pastDiff(got.statuses, model.at(x)); diff != "" {
			t.Fatalf("provisional statuses at %s differ from what was posted: %s", x.Format(time.RFC3339Nano), diff)
		}
		probes = append(probes, got)
	}
	code, body := harness.PostJSON(t, p.Svc["ingest"].URL+"/v1/events", map[string]any{"events": []harness.WireEvent{
		{UserID: late, Kind: "status", Status: lateStatus, DeviceID: "phone", OccurredAt: &lateAt}}})
	if code != http.StatusAccepted {
		t.Fatalf("POST /v1/events (late) = %d %s", code, body)
	}
	withLate := recentModel{}
	for u, evs := range model {
		withLate[u] = evs
	}
	withLate[late] = append(slices.Clone(model[late]), recentEvent{lateAt, lateStatus})
	sort.SliceStable(withLate[late], func(i, j int) bool { return withLate[late][i].at.Before(withLate[late][j].at) })
	// The provisional answer after it takes it in as soon as history has it.
	probe := probes[len(probes)-1].at
	harness.Eventually(t, 15*time.Second, func() string {
		got, code, body := ask(probe)
		if code != http.StatusOK {
			return fmt.Sprintf("statuses at %s = %d %s", probe.Format(time.RFC3339Nano), code, body)
		}
		return pastDiff(got.statuses, withLate.at(probe))
	})

	// Every instant final: each answer equals the model with the late event, and
	// differs from its provisional answer exactly where the late event reaches. The
	// instants asked during the load reach up to 2 s before their asking, so the latest
	// of all of them is waited for, not the last asked.
	latest := probe
	for _, pr := range probes {
		if pr.at.After(latest) {
			latest = pr.at
		}
	}
	harness.Eventually(t, 60*time.Second, func() string {
		if _, final, code, body := count(latest); code != http.StatusOK || !final {
			return fmt.Sprintf("count at %s: %d %s", latest.Format(time.RFC3339Nano), code, body)
		}
		return ""
	})
	same, changed := 0, 0
	for _, pr := range probes {
		got, code, body := ask(pr.at)
		if code != http.StatusOK || !got.final {
			_, cf, _, cb := count(pr.at)
			var rows []string
			it := session.Query("SELECT shard, final_through, provisional_through, writetime(final_through) FROM " + ks + ".shard_progress").Iter()
			var (
				sh    int
				f, pv time.Time
				wt    int64
			)
			for it.Scan(&sh, &f, &pv, &wt) {
				rows = append(rows, fmt.Sprintf("%d %s %s %d", sh, f.Format(time.RFC3339Nano), pv.Format(time.RFC3339Nano), wt))
			}
			_ = it.Close()
			t.Fatalf("statuses at %s, once final = %d %s (final %v); count final %v %s; latest instant %s; shard_progress %v", pr.at.Format(time.RFC3339Nano), code, body, got.final, cf, cb, latest.Format(time.RFC3339Nano), rows)
		}
		if diff := pastDiff(got.statuses, withLate.at(pr.at)); diff != "" {
			t.Fatalf("final statuses at %s differ from what was posted: %s", pr.at.Format(time.RFC3339Nano), diff)
		}
		for _, u := range users {
			moved := got.statuses[u] != pr.statuses[u]
			if want := u == late && model.at(pr.at)[u] != withLate.at(pr.at)[u]; moved != want {
				t.Fatalf("at %s, %s: provisional %s, final %s; the late event reaches it: %v",
					pr.at.Format(time.RFC3339Nano), u, pr.statuses[u], got.statuses[u], want)
			}
		}
		if got.statuses[late] == pr.statuses[late] {
			same++
		} else {
			changed++
		}
	}
	if changed == 0 {
		t.Fatal("no final answer differs from its provisional one: the late event reached none")
	}
	// The quiet minutes before the first event are final by the clock.
	if total, final, code, body := count(quietAt); code != http.StatusOK || !final || total != 0 {
		t.Fatalf("count at %s, before any event, once final = %d %s", quietAt.Format(time.RFC3339Nano), code, body)
	}

	slices.Sort(took)
	slices.Sort(lags)
	pct := func(d []time.Duration, q float64) time.Duration { return d[int(q*float64(len(d)-1))] }
	posted := 0
	for _, evs := range model {
		posted += len(evs)
	}
	t.Logf("%d statuses of %d users over %v; %d instants 2–10 s old answered provisionally in p50 %v, p90 %v, max %v",
		posted, len(users), loadEnd.Sub(loadStart).Round(time.Millisecond), len(took), pct(took, .5), pct(took, .9), took[len(took)-1])
	t.Logf("blind spot (clock minus the earliest shard's provisional mark, %d samples every 200 ms): p50 %v, p90 %v, p99 %v, max %v",
		len(lags), pct(lags, .5).Round(time.Millisecond), pct(lags, .9).Round(time.Millisecond), pct(lags, .99).Round(time.Millisecond), lags[len(lags)-1].Round(time.Millisecond))
	t.Logf("once final: %d of 100 instants as provisional, %d changed by the late status of %s (%s → %s at %s), for that user alone",
		same, changed, late, before, lateStatus, lateAt.Format(time.RFC3339Nano))
}

// pastDiff lists the users whose status differs between got and want.
func pastDiff(got, want map[string]string) string {
	var out []string
	for u, w := range want {
		if got[u] != w {
			out = append(out, fmt.Sprintf("%s: %q, want %q", u, got[u], w))
		}
	}
	slices.Sort(out)
	if len(out) == 0 {
		return ""
	}
	return fmt.Sprint(out)
}
