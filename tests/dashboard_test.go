package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/tests/harness"
)

// The dashboard page (services/query/dashboard) in headless Chromium, against the real
// stack: a pipeline of its own with history on a keyspace of its own, a user whose
// day the test knows (the model), background users over the last hour and live users
// posted through ingest. The page must show what the API answers, live changes within
// a second, the model's sessions and its status at instants picked on the slider, and
// — with a query service whose Cassandra is a closed port — say that history is
// unavailable while the live part keeps updating. Screenshots are saved with
// t.ArtifactDir (go test -artifacts keeps them); PULSE_DASHBOARD_SCREENSHOT=path also
// writes the "now" view there (docs/dashboard.md's picture).
func TestDashboard(t *testing.T) {
	browser := newBrowser(t)

	session := migCassandra(t)
	ks := dashKeyspace(t, session)
	m, _ := migNew(t, session, ks, migFiles(t))
	// Schema changes are slow on a busy machine; applying again resumes where a
	// timed-out attempt stopped.
	for attempt := 1; ; attempt++ {
		_, err := m.Apply(migCtx(t))
		if err == nil {
			break
		}
		if attempt == 5 {
			t.Fatalf("migrating %s: %v", ks, err)
		}
		t.Logf("migrating %s, attempt %d: %v", ks, attempt, err)
	}
	p := harness.NewTopics(t, 2)
	p.Env["PULSE_CASSANDRA_KEYSPACE"] = ks
	// History writes the sessions and the day's rollups within a second of folding the
	// changes, rather than once PULSE_HISTORY_ROLLUP_INTERVAL's default 30 s have
	// passed, which the test would only wait out before it opens the page.
	p.Env["PULSE_HISTORY_ROLLUP_INTERVAL"] = "1s"
	for _, name := range []string{"aggregator", "history", "ingest"} {
		p.Start(t, name)
	}
	// A notifier with an endpoint that takes everything and one that takes nothing,
	// whose health the pipeline view shows.
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(good.Close)
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	t.Cleanup(bad.Close)
	endpoints := filepath.Join(t.TempDir(), "endpoints.json")
	writeEndpoints(t, endpoints, []map[string]any{
		{"id": "good", "url": good.URL, "secret": "0123456789abcdef", "batch": map[string]any{"maxWait": "100ms"}},
		{"id": "bad", "url": bad.URL, "secret": "0123456789abcdef", "batch": map[string]any{"maxWait": "100ms"},
			"retry": map[string]any{"attempts": 1}},
	})
	p.Env["PULSE_NOTIFIER_ENDPOINTS_FILE"] = endpoints
	p.Start(t, "notifier")
	p.Env["PULSE_QUERY_PEER_METRICS"] = fmt.Sprintf("ingest=%s/metrics,aggregator=%s/metrics,history=%s/metrics,notifier=%s/metrics",
		p.Svc["ingest"].URL, p.Svc["aggregator"].URL, p.Svc["history"].URL, p.Svc["notifier"].URL)
	p.Start(t, "query")
	query, ingest := p.Svc["query"].URL, p.Svc["ingest"].URL

	// The model: one user's day, 50 to 35 minutes ago — two sessions, the second
	// online then idle.
	base := time.Now().UTC().Truncate(time.Minute).Add(-50 * time.Minute)
	if base.Day() != base.Add(20*time.Minute).Day() {
		base = base.Add(-20 * time.Minute) // keep the model within one UTC day
	}
	day := base.Format(time.DateOnly)
	model := p.Run + "-model"
	at := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }
	events := []presence.Event{
		dashEvent(model, "phone", presence.Online, at(0)),
		dashEvent(model, "phone", presence.Offline, at(5)),
		dashEvent(model, "laptop", presence.Online, at(10)),
		dashEvent(model, "laptop", presence.Idle, at(12)),
		dashEvent(model, "laptop", presence.Offline, at(15)),
	}
	wantSessions := [][2]time.Time{{at(0), at(5)}, {at(10), at(15)}}
	wantAt := map[time.Time]string{at(3): "online", at(7): "offline", at(11): "online", at(13): "idle", at(16): "offline"}
	// Background users over the same hour, so the charts have something to draw.
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 16))
	statuses := []presence.Status{presence.Online, presence.Online, presence.Idle, presence.Invisible, presence.Offline}
	for i := range 40 {
		user := fmt.Sprintf("%s-bg-%02d", p.Run, i)
		t0 := base.Add(time.Duration(rnd.Int64N(int64(35 * time.Minute))))
		events = append(events, dashEvent(user, "phone", presence.Online, t0))
		for k := range rnd.IntN(3) {
			t0 = t0.Add(time.Duration(1+rnd.IntN(5)) * time.Minute)
			e := dashEvent(user, "phone", statuses[rnd.IntN(len(statuses))], t0)
			e.ID += strconv.Itoa(k)
			events = append(events, e)
		}
	}
	// One user per partition two minutes ago moves every shard's history forward, so
	// the model's minutes are final (history waits 10 minutes for late changes).
	part := kgo.StickyKeyPartitioner(nil).ForTopic(p.Events)
	covered := map[int]bool{}
	for i := 0; len(covered) < p.Partitions; i++ {
		user := fmt.Sprintf("%s-closer-%d", p.Run, i)
		if n := part.Partition(&kgo.Record{Key: []byte(user)}, p.Partitions); !covered[n] {
			covered[n] = true
			events = append(events, dashEvent(user, "phone", presence.Online, time.Now().Add(-2*time.Minute)),
				dashEvent(user, "phone", presence.Offline, time.Now().Add(-2*time.Minute+time.Second)))
		}
	}
	dashProduce(t, p.Events, events)
	// Live users, through ingest.
	var live []harness.WireEvent
	for i, st := range []string{"online", "online", "online", "idle", "idle", "invisible"} {
		live = append(live, harness.WireEvent{UserID: fmt.Sprintf("%s-live-%d", p.Run, i), Kind: "status", Status: st, DeviceID: "web"})
	}
	if err := onlinePost(ingest, live); err != nil {
		t.Fatal(err)
	}

	// The API first: history has written the model's day.
	op := func(target string, out any) int {
		code, body := harness.OnlineDo(t, http.MethodGet, target, harness.TestKeys.Operator, nil)
		if code == http.StatusOK && out != nil {
			if err := json.Unmarshal(body, out); err != nil {
				t.Fatalf("GET %s: %v in %s", target, err, body)
			}
		}
		return code
	}
	var sessions struct {
		Sessions []struct {
			Start time.Time  `json:"start"`
			End   *time.Time `json:"end"`
		} `json:"sessions"`
	}
	harness.Eventually(t, 120*time.Second, func() string {
		target := fmt.Sprintf("%s/v1/users/%s/sessions?from=%s&to=%s&view=operator", query, model, day, base.AddDate(0, 0, 1).Format(time.DateOnly))
		if code := op(target, &sessions); code != http.StatusOK || len(sessions.Sessions) != 2 {
			return fmt.Sprintf("sessions of the model = %d %+v; history's output ends:\n%s", code, sessions, harness.LastLines(p.Svc["history"].Out.String(), 10))
		}
		var st struct{ Status string }
		if code := op(fmt.Sprintf("%s/v1/users/%s/status?view=operator&at=%s", query, model, url.QueryEscape(at(13).Format(time.RFC3339))), &st); code != http.StatusOK {
			return fmt.Sprintf("status of the model at %s = %d", at(13), code)
		}
		return ""
	})

	now := browser.open(t, query, harness.TestKeys.Operator, "#now")
	fp := now.eval(t, `(performance.getEntriesByName('first-contentful-paint')[0] || {startTime: -1}).startTime`)
	t.Logf("first contentful paint of the page: %v ms", fp)

	t.Run("counts equal the API's", func(t *testing.T) {
		dashCountsEqual(t, now, query)
	})

	t.Run("a reader key sees the public counts", func(t *testing.T) {
		reader := browser.open(t, query, harness.TestKeys.Reader, "#now")
		dashCountsEqualAs(t, reader, query, harness.TestKeys.Reader)
		reader.wait(t, `document.getElementById('feed-state').textContent === 'needs an operator key'`, 5*time.Second)
	})

	t.Run("the now view scoped to a group", func(t *testing.T) {
		dashGroup(t, browser, query, p.Run, model)
	})

	t.Run("a status posted through ingest appears within a second", func(t *testing.T) {
		now.wait(t, `document.getElementById('feed-state').textContent === 'live'`, 10*time.Second)
		now.feedURLsCarryNoCredential(t, harness.TestKeys.Operator)
		user := p.Run + "-arrives"
		start := time.Now()
		if err := onlinePost(ingest, []harness.WireEvent{{UserID: user, Kind: "status", Status: "online", DeviceID: "web"}}); err != nil {
			t.Fatal(err)
		}
		sel := fmt.Sprintf(`document.querySelector('#changes li[data-user=%q][data-status="online"]') !== null`, user)
		for !now.truthy(t, sel) {
			if time.Since(start) > time.Second {
				t.Fatalf("%s's change is not on the page 1s after it was posted; the list holds: %v", user,
					now.eval(t, `document.getElementById('changes').textContent`))
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("posted to on the page: %v", time.Since(start).Round(time.Millisecond))
		dashCountsEqual(t, now, query)
		now.screenshot(t, "now")
		if path := os.Getenv("PULSE_DASHBOARD_SCREENSHOT"); path != "" {
			// A few more changes, so the picture shows the list moving.
			for i, st := range []string{"idle", "online", "invisible", "online", "idle", "offline", "online"} {
				ev := harness.WireEvent{UserID: fmt.Sprintf("%s-live-%d", p.Run, i%6), Kind: "status", Status: st, DeviceID: "web"}
				if err := onlinePost(ingest, []harness.WireEvent{ev}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(300 * time.Millisecond)
			}
			time.Sleep(time.Second)
			now.screenshotTo(t, path)
		}
	})

	t.Run("the user view shows the model's sessions and status at instants", func(t *testing.T) {
		now.eval(t, fmt.Sprintf(`location.hash = %q`, "#user/"+model+"?day="+day+"&at="+at(13).Format(time.RFC3339)))
		now.wait(t, `document.querySelectorAll('#user-sessions tr[data-start]').length === 2`, 15*time.Second)
		var got []time.Time
		for _, s := range now.strings(t, `[...document.querySelectorAll('#user-sessions tr[data-start]')].map(r => r.dataset.start)`) {
			ts, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ts)
		}
		slices.SortFunc(got, func(a, b time.Time) int { return a.Compare(b) })
		for i, w := range wantSessions {
			if !got[i].Equal(w[0]) {
				t.Errorf("session %d starts at %v on the page, the model's at %v", i, got[i], w[0])
			}
			if api := sessions.Sessions; api[len(api)-1-i].End == nil || !api[len(api)-1-i].End.Equal(w[1]) {
				t.Errorf("the API's session %d: %+v, the model's ends at %v", i, api[len(api)-1-i], w[1])
			}
		}
		ends := now.strings(t, `[...document.querySelectorAll('#user-sessions tr[data-start]')].map(r => r.dataset.start + ' ' + r.cells[1].textContent)`)
		for _, w := range wantSessions {
			start, end := w[0].Format(time.RFC3339), w[1].Format("15:04:05")+" UTC"
			if !slices.ContainsFunc(ends, func(e string) bool { return strings.HasPrefix(e, start+" ") && strings.HasSuffix(e, end) }) {
				t.Errorf("no session on the page starts at %s and ends at %s; the page has %q", start, end, ends)
			}
		}
		now.wait(t, `document.getElementById('user-status').textContent === 'offline'`, 10*time.Second)

		// The slider: the status the page shows at each instant is the model's.
		dayStart := time.Date(base.Year(), base.Month(), base.Day(), 0, 0, 0, 0, time.UTC)
		checked := 0
		for _, m := range []int{13, 11, 7, 3, 16} {
			inst := at(m)
			if checked > 0 { // the first instant came in the URL
				sec := int(inst.Sub(dayStart) / time.Second)
				now.eval(t, fmt.Sprintf(`(() => { const s = document.getElementById('pit-slider'); s.value = %d; s.dispatchEvent(new Event('input')); return s.value })()`, sec))
			}
			checked++
			want := wantAt[inst]
			now.wait(t, fmt.Sprintf(`(() => { const s = document.getElementById('pit-status'); return s.textContent === %q && s.dataset.at && Date.parse(s.dataset.at) === %d })()`,
				want, inst.UnixMilli()), 15*time.Second)
		}
		now.screenshot(t, "user")

		// The user's own token: their status now and at an instant, and no history.
		own := browser.open(t, query, userToken(t, model, time.Now().Add(time.Hour), harness.TestKeys.Hs256), "#user/"+model+"?day="+day+"&at="+at(13).Format(time.RFC3339))
		own.wait(t, `document.getElementById('who').textContent === 'user token: `+model+`'`, 5*time.Second)
		own.wait(t, `document.getElementById('user-status').textContent === 'offline' && document.getElementById('user-feed-state').textContent === 'live'`, 10*time.Second)
		own.feedURLsCarryNoCredential(t, own.cred)
		own.wait(t, `document.getElementById('pit-status').textContent === 'idle'`, 15*time.Second)
		own.wait(t, `document.getElementById('user-history-state').textContent.includes('operator scope')`, 5*time.Second)
	})

	t.Run("the user view shows the custom status live", func(t *testing.T) {
		user := p.Run + "-custom"
		post := func(data string) {
			t.Helper()
			if err := onlinePost(ingest, []harness.WireEvent{{UserID: user, Kind: "status", Status: "online", DeviceID: "web", Data: json.RawMessage(data)}}); err != nil {
				t.Fatal(err)
			}
		}
		custom := `document.getElementById('user-custom').textContent`
		post(`{"text":"In a meeting","emoji":"📅"}`)
		now.eval(t, fmt.Sprintf(`location.hash = %q`, "#user/"+user))
		now.wait(t, custom+` === '📅 In a meeting' && document.getElementById('user-feed-state').textContent === 'live'`, 15*time.Second)
		// Changed and cleared while the page is open: the feed's changes carry it.
		post(`{"text":"Lunch"}`)
		now.wait(t, custom+` === 'Lunch'`, 10*time.Second)
		post(`{}`)
		now.wait(t, custom+` === '\u2014'`, 10*time.Second)

		// The day's timeline shows what each event did to it, once history wrote them.
		today := time.Now().UTC().Format(time.DateOnly)
		harness.Eventually(t, 30*time.Second, func() string {
			var tl struct {
				Entries []struct {
					Data json.RawMessage `json:"data"`
				} `json:"entries"`
			}
			if code := op(fmt.Sprintf("%s/v1/users/%s/timeline?from=%s&to=%s&view=operator", query, user, today, time.Now().UTC().AddDate(0, 0, 1).Format(time.DateOnly)), &tl); code != http.StatusOK {
				return fmt.Sprintf("timeline: %d", code)
			}
			n := 0
			for _, e := range tl.Entries {
				if e.Data != nil {
					n++
				}
			}
			if n != 3 {
				return fmt.Sprintf("the timeline holds %d entries with data, want 3", n)
			}
			return ""
		})
		now.eval(t, fmt.Sprintf(`location.hash = %q`, "#user/"+user+"?day="+today))
		now.wait(t, `[...document.querySelectorAll('#user-timeline tr')].map(r => r.cells[6].textContent).filter(Boolean).join('|') === 'cleared|Lunch|📅 In a meeting'`, 15*time.Second)
	})

	t.Run("history view: the day's peak and CSV", func(t *testing.T) {
		now.eval(t, `location.hash = '#history?day=`+day+`'`)
		now.wait(t, `document.getElementById('conc-peak').textContent !== '' && !document.getElementById('conc-csv').hidden`, 20*time.Second)
		var conc struct {
			Points []struct {
				At         time.Time `json:"at"`
				PeakOnline int64     `json:"peakOnline"`
			} `json:"points"`
		}
		if code := op(fmt.Sprintf("%s/v1/stats/concurrency?from=%s&to=%s&step=minute", query, day, base.AddDate(0, 0, 1).Format(time.DateOnly)), &conc); code != http.StatusOK {
			t.Fatalf("concurrency = %d", code)
		}
		var peakAt time.Time
		peak := int64(-1)
		for _, pt := range conc.Points {
			if pt.PeakOnline > peak {
				peak, peakAt = pt.PeakOnline, pt.At
			}
		}
		want := fmt.Sprintf("peak %d at %s UTC", peak, peakAt.Format("15:04"))
		if got := now.eval(t, `document.getElementById('conc-peak').textContent`); got != want {
			t.Errorf("the page marks %q, the API's peak is %q", got, want)
		}
		now.screenshot(t, "history")
	})

	t.Run("pipeline view reads every service", func(t *testing.T) {
		now.eval(t, `location.hash = '#pipeline'`)
		now.wait(t, `(() => { const rows = [...document.querySelectorAll('#pipe-services tr[data-service]')];
			return rows.length === 5 && rows.every(r => r.cells[1].textContent === 'up') })()`, 15*time.Second)
		// The endpoint that takes everything is ok; the one whose batches are all
		// dead-lettered is failing.
		now.wait(t, `(() => { const st = id => document.querySelector('#pipe-endpoints tr[data-endpoint="' + id + '"]')?.dataset.state;
			return !document.getElementById('pipe-webhooks').hidden && st('good') === 'ok' && st('bad') === 'failing' })()`, 15*time.Second)
		if got := now.eval(t, `document.getElementById('pipe-rebuild').textContent`); got != "whole" {
			t.Errorf("presence state shown as %q, want whole", got)
		}
		now.screenshot(t, "pipeline")
	})

	t.Run("with Cassandra unreachable history is unavailable and the live part updates", func(t *testing.T) {
		env := map[string]string{}
		for k, v := range p.Env {
			env[k] = v
		}
		env["PULSE_CASSANDRA_PORT"] = strconv.Itoa(harness.FreePort(t)) // nothing listens there
		env["PULSE_CASSANDRA_CONNECT_TIMEOUT"] = "500ms"
		q2 := harness.StartService(t, "query", env)
		harness.Eventually(t, 30*time.Second, func() string {
			if code, body := harness.Get(t, q2.URL+"/readyz"); code != http.StatusOK {
				return fmt.Sprintf("/readyz = %d %s", code, body)
			}
			return ""
		})
		tab := browser.open(t, q2.URL, harness.TestKeys.Operator, "#now")
		tab.wait(t, `document.getElementById('hour-state').textContent.startsWith('history unavailable')`, 15*time.Second)
		tab.wait(t, `document.getElementById('feed-state').textContent === 'live'`, 15*time.Second)
		dashCountsEqual(t, tab, q2.URL)
		user := p.Run + "-while-down"
		if err := onlinePost(ingest, []harness.WireEvent{{UserID: user, Kind: "status", Status: "idle", DeviceID: "web"}}); err != nil {
			t.Fatal(err)
		}
		tab.wait(t, fmt.Sprintf(`document.querySelector('#changes li[data-user=%q][data-status="idle"]') !== null`, user), 5*time.Second)
		dashCountsEqual(t, tab, q2.URL)
		tab.screenshot(t, "cassandra-unreachable-now")
		tab.eval(t, `location.hash = '#history?day=`+day+`'`)
		tab.wait(t, `document.getElementById('conc-state').textContent.startsWith('history unavailable')`, 15*time.Second)
		tab.wait(t, `document.getElementById('uniq-state').textContent.startsWith('history unavailable')`, 15*time.Second)
		if got := tab.eval(t, `document.getElementById('conc-chart').textContent + document.getElementById('conc-peak').textContent`); got != "" {
			t.Errorf("the history view draws %q while history is unavailable", got)
		}
		tab.screenshot(t, "cassandra-unreachable-history")

		// The query service goes away: the feed says it is reconnecting and the counts
		// say they are unavailable, rather than showing zeros.
		tab.eval(t, `location.hash = '#now'`)
		tab.wait(t, `document.getElementById('feed-state').textContent === 'live'`, 15*time.Second)
		q2.Stop(t)
		tab.wait(t, `document.getElementById('feed-state').textContent === 'reconnecting'`, 10*time.Second)
		tab.wait(t, `document.getElementById('counts-state').textContent.startsWith('counts unavailable') &&
			document.getElementById('count-online').textContent === '—'`, 10*time.Second)
		tab.screenshot(t, "query-gone")
	})
}

// dashGroup makes a group through the API of live users (online, idle, invisible),
// the model (offline by now) and a user never seen, and checks the "now" view scoped
// to it: its exact counts and present members for an operator key, a reader key and
// a member's user token; an unknown group as no members; a bad group id with query's
// message.
func dashGroup(t *testing.T, browser *dashBrowser, query, run, model string) {
	live := func(i int) string { return fmt.Sprintf("%s-live-%d", run, i) }
	g := "dash-" + run
	members := []string{live(0), live(3), live(5), model, run + "-never-seen"}
	if code, body := harness.OnlineDo(t, http.MethodPut, query+"/v1/groups/"+g+"/members", harness.TestKeys.Producer,
		map[string]any{"userIds": members}); code != http.StatusAccepted {
		t.Fatalf("PUT the group's members = %d %s", code, body)
	}
	want := `{"groupId":"` + g + `","total":3,"byStatus":{"idle":1,"invisible":1,"offline":2,"online":1},"members":5,`
	harness.Eventually(t, 15*time.Second, func() string {
		code, body := harness.OnlineDo(t, http.MethodGet, query+"/v1/groups/"+g+"/online/count?view=operator", harness.TestKeys.Operator, nil)
		if code != http.StatusOK || !strings.HasPrefix(string(body), want) {
			return fmt.Sprintf("the group's count = %d %s, want %s…", code, body, want)
		}
		return ""
	})

	// shows waits until the page shows counts (the cards' "label number" in order)
	// and the listed users ("user status", sorted), and nothing said below them.
	shows := func(tab *dashTab, counts string, users ...string) {
		t.Helper()
		slices.Sort(users)
		js, _ := json.Marshal(strings.Join(users, "|"))
		tab.wait(t, `(() => {
			const cards = [...document.querySelectorAll('#view-now .card:not([hidden])')].map(c => c.querySelector('.label').textContent + ' ' + c.querySelector('.num').textContent).join(', ');
			const users = [...document.querySelectorAll('#group-users tr')].map(r => r.dataset.user + ' ' + r.dataset.status).sort().join('|');
			return cards === `+fmt.Sprintf("%q", counts)+` && users === `+string(js)+` && document.getElementById('group-state').textContent === '' &&
				!document.getElementById('group-panel').hidden && document.getElementById('now-all').hidden;
		})()`, 10*time.Second)
	}
	op := browser.open(t, query, harness.TestKeys.Operator, "#now?group="+g)
	shows(op, "online 1, idle 1, invisible 1, present 3, members 5", live(0)+" online", live(3)+" idle", live(5)+" invisible")
	if got := op.eval(t, `document.getElementById('group-id').value + ' | ' + document.getElementById('counts-state').textContent`); got != g+" | " {
		t.Errorf("the group box and the counts' state say %q", got)
	}
	op.screenshot(t, "now-group")

	reader := browser.open(t, query, harness.TestKeys.Reader, "#now?group="+g)
	shows(reader, "online 1, idle 1, present 2, members 5", live(0)+" online", live(3)+" idle")
	member := browser.open(t, query, userToken(t, live(3), time.Now().Add(time.Hour), harness.TestKeys.Hs256), "#now?group="+g)
	shows(member, "online 1, idle 1, present 2, members 5", live(0)+" online", live(3)+" idle")

	// A group nobody joined has no members; typed into the box as a person would.
	nobody := "nobody-" + run
	op.eval(t, fmt.Sprintf(`(() => { document.getElementById('group-id').value = %q; document.getElementById('group-form').requestSubmit(); })()`, nobody))
	shows(op, "online 0, idle 0, invisible 0, present 0, members 0")
	if got := op.eval(t, `location.hash + ' | ' + document.getElementById('counts-state').textContent`); got != "#now?group="+nobody+" | "+nobody+" has no members" {
		t.Errorf("an unknown group: %q", got)
	}

	// A bad id: query's message, and no numbers.
	code, body := harness.OnlineDo(t, http.MethodGet, query+"/v1/groups/team%20a/online/count", harness.TestKeys.Reader, nil)
	var e struct {
		Error struct{ Message, Field string }
	}
	if err := json.Unmarshal(body, &e); err != nil || code != http.StatusBadRequest || e.Error.Field != "groupId" {
		t.Fatalf("GET the count of %q = %d %s", "team a", code, body)
	}
	op.eval(t, `(() => { document.getElementById('group-id').value = 'team a'; document.getElementById('group-form').requestSubmit(); })()`)
	op.wait(t, fmt.Sprintf(`document.getElementById('counts-state').textContent === %q && document.getElementById('counts-state').classList.contains('bad')`,
		"bad group id: "+e.Error.Message), 10*time.Second)
	if got := op.eval(t, `document.getElementById('count-online').textContent + ' ' + document.getElementById('count-registered').textContent + ' ' +
		document.querySelectorAll('#group-users tr').length + ' [' + document.getElementById('group-state').textContent + ']'`); got != "— — 0 []" {
		t.Errorf("a bad group id shows %q, want no numbers, no users and the message once", got)
	}
	op.screenshot(t, "now-group-bad-id")

	// Every user again.
	op.eval(t, `document.getElementById('group-all').click()`)
	op.wait(t, `location.hash === '#now' && document.getElementById('group-panel').hidden && !document.getElementById('now-all').hidden &&
		document.getElementById('label-registered').textContent === 'registered' && document.getElementById('group-id').value === ''`, 10*time.Second)
	dashCountsEqual(t, op, query)
}

// dashKeyspace is a keyspace of the test's own, dropped at its end; the drop is tried
// again when a busy Cassandra does not answer it in time.
func dashKeyspace(t *testing.T, session *gocql.Session) string {
	t.Helper()
	ks := "pulse_it_dash_" + harness.RandomID(t)
	t.Cleanup(func() {
		var err error
		for range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err = session.Query("DROP KEYSPACE IF EXISTS " + ks).ExecContext(ctx)
			if err != nil {
				// The drop may have been applied though its answer came late.
				var name string
				if session.Query(`SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = ?`, ks).
					ScanContext(ctx, &name) == gocql.ErrNotFound {
					err = nil
				}
			}
			cancel()
			if err == nil {
				return
			}
		}
		t.Errorf("dropping keyspace %s: %v", ks, err)
	})
	return ks
}

func dashEvent(user, device string, st presence.Status, at time.Time) presence.Event {
	return presence.Event{ID: fmt.Sprintf("%s-%s-%d-%s", user, device, at.UnixMicro(), st), UserID: user, DeviceID: device,
		Source: presence.SourceAPI, Kind: presence.KindStatus, Status: st, OccurredAt: at, ReceivedAt: at}
}

// dashProduce writes events straight to the events topic: ingest refuses times this
// far in the past.
func dashProduce(t *testing.T, topic string, events []presence.Event) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(harness.KafkaBrokers()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, len(events))
	for i := range events {
		b, err := proto.Marshal(events[i].ToPB())
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = &kgo.Record{Key: []byte(events[i].UserID), Value: b,
			Headers: []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaEvent)}}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing: %v", err)
	}
}

// dashCountsEqual waits until the counts on the page are the operator view's counts
// the API answers.
func dashCountsEqual(t *testing.T, tab *dashTab, query string) {
	t.Helper()
	dashCountsEqualAs(t, tab, query, harness.TestKeys.Operator)
}

// dashCountsEqualAs compares the counts on the page with the API's in the view key
// may read: the operator view for an operator key, else the public one, in which
// invisible users are offline and the page shows no invisible count.
func dashCountsEqualAs(t *testing.T, tab *dashTab, query, key string) {
	t.Helper()
	target, fields := query+"/v1/online/count", []string{"online", "idle", "total"}
	if key == harness.TestKeys.Operator {
		target, fields = target+"?view=operator", []string{"online", "idle", "invisible", "total"}
	} else if !tab.truthy(t, `document.getElementById('card-invisible').hidden`) {
		t.Errorf("the page shows an invisible count to a key without the operator scope")
	}
	js, _ := json.Marshal(fields)
	var last string
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		code, body := harness.FreshCount(t, target, key)
		if code != http.StatusOK {
			t.Fatalf("count = %d %s", code, body)
		}
		var api struct {
			Total    uint64            `json:"total"`
			ByStatus map[string]uint64 `json:"byStatus"`
		}
		if err := json.Unmarshal(body, &api); err != nil {
			t.Fatal(err)
		}
		var parts []string
		for _, f := range fields {
			n := api.ByStatus[f]
			if f == "total" {
				n = api.Total
			}
			parts = append(parts, fmt.Sprintf("%s %d", f, n))
		}
		want := strings.Join(parts, " ")
		got := tab.eval(t, string(js)+`.map(k => k + ' ' + document.getElementById('count-' + k).textContent.replace(/,/g, '')).join(' ')`)
		if got == want {
			t.Logf("counts on the page equal the API's: %s", got)
			return
		}
		last = fmt.Sprintf("the page shows %q, the API answers %q", got, want)
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal(last)
}

// dashBrowser is one headless Chromium; each dashTab is a tab of it.
type dashBrowser struct{ ctx context.Context }

type dashTab struct {
	ctx  context.Context
	name string
	cred string
	urls *urlLog
}

// urlLog is every URL a tab requested, WebSocket handshakes included, as the browser
// sent them.
type urlLog struct {
	mu   sync.Mutex
	urls []string
}

func (l *urlLog) add(u string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.urls = append(l.urls, u)
}

func (l *urlLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.urls)
}

// feedURLsCarryNoCredential: the tab opened the change feed, every time with a
// ticket, and no URL it requested holds cred or an access_token (docs/design.md,
// Security: browsers never put a long-lived key in a URL).
func (tab *dashTab) feedURLsCarryNoCredential(t *testing.T, cred string) {
	t.Helper()
	feeds := 0
	for _, u := range tab.urls.all() {
		if strings.Contains(u, cred) || strings.Contains(u, url.QueryEscape(cred)) || strings.Contains(u, "access_token") {
			t.Errorf("the page requested a URL holding its credential: %s", strings.ReplaceAll(u, cred, "<credential>"))
		}
		if pu, err := url.Parse(u); err == nil && strings.HasPrefix(pu.Path, "/v1/watch") && pu.Path != "/v1/watch/tickets" {
			feeds++
			if !strings.HasPrefix(pu.Query().Get("ticket"), "pwt_") {
				t.Errorf("the page opened the feed without a ticket: %s", strings.ReplaceAll(u, cred, "<credential>"))
			}
		}
	}
	if feeds == 0 {
		t.Errorf("the page opened no feed; it requested %v", tab.urls.all())
	}
}

// newBrowser starts Debian's chromium (apt-get install chromium), headless.
func newBrowser(t *testing.T) *dashBrowser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (apt-get install chromium): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-gpu", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return &dashBrowser{ctx: ctx}
}

// open loads the dashboard of base in a new tab, pastes cred into it as a person
// would, and waits until the page knows the key's scope.
func (b *dashBrowser) open(t *testing.T, base, cred, hash string) *dashTab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	t.Cleanup(cancel)
	tab := &dashTab{ctx: ctx, name: base, cred: cred, urls: &urlLog{}}
	// The first run makes the tab, which lives as long as that run's context.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("opening a tab: %v", err)
	}
	if err := chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			tab.urls.add(ev.Request.URL)
		case *network.EventWebSocketCreated:
			tab.urls.add(ev.URL)
		}
	}); err != nil {
		t.Fatalf("listening to the tab's requests: %v", err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
	defer tcancel()
	if err := chromedp.Do(tctx,
		chromedp.Navigate(base+"/"), // redirected to /dashboard/
		chromedp.WaitVisible(chromedp.ID("cred")),
		chromedp.SendKeys(chromedp.ID("cred"), cred),
		chromedp.Click(chromedp.CSS(`#cred-form button[type=submit]`)),
	); err != nil {
		t.Fatalf("opening the dashboard of %s: %v", base, err)
	}
	who := "operator key"
	switch {
	case cred == harness.TestKeys.Reader:
		who = "reader key"
	case strings.Count(cred, ".") == 2:
		who = "user token: "
	}
	tab.wait(t, fmt.Sprintf(`document.getElementById('who').textContent.startsWith(%q)`, who), 10*time.Second)
	if got := tab.eval(t, `location.pathname`); got != "/dashboard/" {
		t.Errorf("/ led to %s, want /dashboard/", got)
	}
	if strings.Contains(tab.eval(t, `document.documentElement.outerHTML`), cred) {
		t.Errorf("the page's HTML holds the credential")
	}
	tab.eval(t, `location.hash = '`+hash+`'`)
	return tab
}

// eval runs a JavaScript expression in the tab; its value, printed.
func (tab *dashTab) eval(t *testing.T, expr string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[any](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

func (tab *dashTab) strings(t *testing.T, expr string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

func (tab *dashTab) truthy(t *testing.T, expr string) bool {
	t.Helper()
	return tab.eval(t, "!!("+expr+")") == "true"
}

// wait polls expr until it is true, failing with what the page says when it never is.
func (tab *dashTab) wait(t *testing.T, expr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !tab.truthy(t, expr) {
		if time.Now().After(deadline) {
			tab.screenshot(t, "failed")
			t.Fatalf("after %v the page still does not satisfy %s; it says:\n%s", timeout, expr,
				tab.eval(t, `document.querySelector('main').innerText.slice(0, 3000)`))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// screenshot saves the whole page as a PNG among the test's artifacts.
func (tab *dashTab) screenshot(t *testing.T, name string) {
	t.Helper()
	tab.screenshotTo(t, filepath.Join(t.ArtifactDir(), "dashboard-"+name+".png"))
}

func (tab *dashTab) screenshotTo(t *testing.T, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot %s: %v", path, err)
		return
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Errorf("screenshot %s: %v", path, err)
		return
	}
	t.Logf("screenshot: %s", path)
}
