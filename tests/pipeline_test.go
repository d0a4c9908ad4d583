package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/tests/harness"
)

// workload is a generated stream of events for users with several devices, with
// repeated event ids and events that arrive out of order per device.
type workload struct {
	users  []string
	events []harness.WireEvent // for POST /v1/events, in generation order
	seed   []seedPost          // for POST /status, sent after the events
}

type seedPost struct {
	UserID string `json:"userId"`
	Status string `json:"status"`
}

// generate makes about perUser events for each of n users. The user ids mix the
// forms platforms use: numeric, UUID-like and names.
func generate(run string, n, perUser int, seed uint64) *workload {
	rng := rand.New(rand.NewPCG(seed, 1))
	w := &workload{}
	runNum, _ := strconv.ParseUint(run, 16, 64)
	base := time.Now().Add(-3 * time.Minute).UTC().Truncate(time.Microsecond)
	statuses := []string{"online", "online", "online", "idle", "idle", "offline", "invisible"}
	var sent []harness.WireEvent
	for i := range n {
		var id string
		switch i % 3 {
		case 0:
			id = strconv.FormatUint(runNum*1_000_000+uint64(i), 10)
		case 1:
			id = fmt.Sprintf("%s-%04x-4%03x-a%03x-%012x", run, i, i%4096, i%4096, i)
		default:
			id = fmt.Sprintf("user-%s-%d", run, i)
		}
		w.users = append(w.users, id)
		devices := []string{"default", "phone", "laptop"}[:1+rng.IntN(3)]
		clock := base.Add(time.Duration(rng.IntN(10_000)) * time.Millisecond)
		last := map[string]time.Time{}
		for j := range perUser {
			dev := devices[rng.IntN(len(devices))]
			clock = clock.Add(time.Duration(1+rng.IntN(800)) * time.Millisecond)
			at := clock
			if prev, ok := last[dev]; ok && rng.IntN(20) == 0 {
				at = prev.Add(-time.Duration(1+rng.IntN(5000)) * time.Millisecond) // out of order
			}
			if at.After(last[dev]) {
				last[dev] = at
			}
			e := harness.WireEvent{EventID: fmt.Sprintf("%s-e-%d-%d", run, i, j), UserID: id, DeviceID: dev, OccurredAt: &at}
			switch k := rng.IntN(10); {
			case k < 5:
				e.Kind, e.Status = "status", statuses[rng.IntN(len(statuses))]
			case k < 8:
				e.Kind = "heartbeat"
			default:
				e.Kind = "activity"
			}
			if dev == "default" && rng.IntN(2) == 0 {
				e.DeviceID = "" // the server fills in "default"
			}
			w.events = append(w.events, e)
			sent = append(sent, e)
			if rng.IntN(20) == 0 && len(sent) > 1 {
				w.events = append(w.events, sent[rng.IntN(len(sent))]) // a retry: same id
			}
		}
		if i%10 == 0 {
			w.seed = append(w.seed, seedPost{UserID: id, Status: statuses[rng.IntN(len(statuses))]})
		}
	}
	// Interleave users as real traffic does, keeping each user's own order.
	byUser := map[string][]harness.WireEvent{}
	for _, e := range w.events {
		byUser[e.UserID] = append(byUser[e.UserID], e)
	}
	w.events = w.events[:0]
	left := slices.Clone(w.users)
	for len(left) > 0 {
		i := rng.IntN(len(left))
		id := left[i]
		w.events = append(w.events, byUser[id][0])
		if byUser[id] = byUser[id][1:]; len(byUser[id]) == 0 {
			left[i] = left[len(left)-1]
			left = left[:len(left)-1]
		}
	}
	return w
}

// post sends the workload: events in batches by several concurrent producers, then the
// seed endpoint's single statuses.
func post(p *harness.Pipeline, t *testing.T, w *workload, events []harness.WireEvent, batch, workers int) {
	t.Helper()
	url := p.Svc["ingest"].URL
	batches := make(chan []harness.WireEvent)
	var wg sync.WaitGroup
	errs := make(chan string, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				code, body := harness.PostJSON(t, url+"/v1/events", map[string]any{"events": b})
				var res struct {
					Accepted int      `json:"accepted"`
					EventIDs []string `json:"eventIds"`
				}
				if code != http.StatusAccepted || json.Unmarshal(body, &res) != nil || res.Accepted != len(b) || len(res.EventIDs) != len(b) {
					select {
					case errs <- fmt.Sprintf("POST /v1/events = %d %s", code, body):
					default:
					}
					continue
				}
				for i, e := range b {
					if e.EventID != res.EventIDs[i] {
						errs <- fmt.Sprintf("eventIds[%d] = %q, want %q", i, res.EventIDs[i], e.EventID)
						break
					}
				}
			}
		}()
	}
	for i := 0; i < len(events); i += batch {
		batches <- events[i:min(i+batch, len(events))]
	}
	close(batches)
	wg.Wait()
	select {
	case e := <-errs:
		t.Fatal(e)
	default:
	}
}

func postSeed(p *harness.Pipeline, t *testing.T, w *workload) {
	t.Helper()
	for _, s := range w.seed {
		code, body := harness.PostJSON(t, p.Svc["ingest"].URL+"/status", s)
		if code != http.StatusOK || string(body) != `{"success":true,"message":"Status updated successfully."}`+"\n" {
			t.Fatalf("POST /status = %d %q", code, body)
		}
	}
}

// TestPipelineEndToEnd: 20,000 events for 2,000 users through both ingest endpoints;
// every read path, the online count, the change log and Cassandra equal the model.
func TestPipelineEndToEnd(t *testing.T) {
	// History writes user_status's last-seen and last-active at most once per
	// PULSE_HISTORY_STATUS_INTERVAL: 2 s rather than the default 30 s, which the
	// comparison with Cassandra would only wait out.
	p := harness.NewPipeline(t, 8, map[string]string{"PULSE_HISTORY_STATUS_INTERVAL": "2s"})
	w := generate(p.Run, 2000, 10, 1)
	start := time.Now()
	post(p, t, w, w.events, 250, 4)
	postSeed(p, t, w)
	t.Logf("posted %d events and %d seed statuses in %v", len(w.events), len(w.seed), time.Since(start).Round(time.Millisecond))

	m := harness.BuildModel(t, p.Events)
	if len(m.Users) != len(w.users) {
		t.Fatalf("the log holds events of %d users, want %d", len(m.Users), len(w.users))
	}
	if m.Duplicates == 0 || m.Stale == 0 {
		t.Fatalf("workload has %d duplicates and %d stale events: the test needs both", m.Duplicates, m.Stale)
	}
	t.Logf("model: %d users, %d duplicates, %d stale", len(m.Users), m.Duplicates, m.Stale)
	verify(p, t, m)
}

// TestPipelineSurvivesCrashes kills the aggregator and the history writer with SIGKILL
// while events flow; afterwards state, changes and rows still equal the model.
func TestPipelineSurvivesCrashes(t *testing.T) {
	p := harness.NewPipeline(t, 4, nil)
	w := generate(p.Run, 600, 10, 2)
	half := len(w.events) / 2
	done := make(chan struct{})
	go func() {
		defer close(done)
		post(p, t, w, w.events[:half], 50, 2)
	}()
	time.Sleep(700 * time.Millisecond)
	p.Crash(t, "aggregator")
	<-done
	done = make(chan struct{})
	go func() {
		defer close(done)
		post(p, t, w, w.events[half:], 50, 2)
	}()
	time.Sleep(700 * time.Millisecond)
	p.Crash(t, "history")
	time.Sleep(300 * time.Millisecond)
	p.Crash(t, "aggregator")
	<-done
	postSeed(p, t, w)

	m := harness.BuildModel(t, p.Events)
	verify(p, t, m)
}

// verify waits for the pipeline to catch up with the log, then compares everything.
func verify(p *harness.Pipeline, t *testing.T, m *harness.Model) {
	t.Helper()
	users := m.SortedUsers()
	harness.Eventually(t, 90*time.Second, func() string {
		if d := diffStatuses(p, t, m, users); len(d) > 0 {
			return harness.FirstLines(d, 5) + "\nquery output:\n" + harness.LastLines(p.Svc["query"].Out.String(), 5) + "\naggregator output:\n" + harness.LastLines(p.Svc["aggregator"].Out.String(), 15)
		}
		return ""
	})
	if d := diffSingle(p, t, m, users); len(d) > 0 {
		t.Errorf("GET /status/{id} differs from the model:\n%s", harness.FirstLines(d, 10))
	}
	if d := diffUserStatus(p, t, m, users); len(d) > 0 {
		t.Errorf("GET /v1/users/{id}/status differs from the model:\n%s", harness.FirstLines(d, 10))
	}
	code, body := harness.FreshCount(t, p.Svc["query"].URL+"/v1/online/count", "")
	var got struct {
		Total      uint64            `json:"total"`
		ByStatus   map[string]uint64 `json:"byStatus"`
		Registered uint64            `json:"registered"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &got) != nil {
		t.Fatalf("GET /v1/online/count = %d %s", code, body)
	}
	want := m.Counts()
	if got.Total != want["total"] || got.Registered != want["registered"] || got.ByStatus["online"] != want["online"] ||
		got.ByStatus["idle"] != want["idle"] || got.ByStatus["offline"] != want["offline"] {
		t.Errorf("GET /v1/online/count = %s, want %v", body, want)
	}
	if d := diffChanges(p, t, m); len(d) > 0 {
		t.Errorf("presence.changes differs from the model:\n%s", harness.FirstLines(d, 10))
	}
	session := cassandraSession(t)
	harness.Eventually(t, 90*time.Second, func() string { return harness.FirstLines(diffCassandra(t, session, m, users), 5) })
}

type seedView struct {
	UserID      string     `json:"userId"`
	Status      string     `json:"status"`
	LastUpdated *time.Time `json:"lastUpdated"`
}

func diffSeed(m *harness.Model, v seedView, id string) string {
	u := m.Users[id]
	if v.UserID != id || v.Status != harness.Public(u.Status) {
		return fmt.Sprintf("%s: got %+v, want status %s", id, v, harness.Public(u.Status))
	}
	// A reader sees the public last-updated: it moves only when the public status does.
	if !u.PublicChanged && v.LastUpdated != nil || u.PublicChanged && (v.LastUpdated == nil || !v.LastUpdated.Equal(u.PublicLastUpdated)) {
		return fmt.Sprintf("%s: lastUpdated %v, want %v", id, v.LastUpdated, u.PublicLastUpdated)
	}
	return ""
}

// diffStatuses compares POST /statuses, 500 users per request.
func diffStatuses(p *harness.Pipeline, t *testing.T, m *harness.Model, users []string) []string {
	var diffs []string
	for i := 0; i < len(users); i += 500 {
		ids := users[i:min(i+500, len(users))]
		code, body := harness.PostJSON(t, p.Svc["query"].URL+"/statuses", map[string]any{"userIds": ids})
		var res struct {
			Statuses []seedView `json:"statuses"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &res) != nil || len(res.Statuses) != len(ids) {
			return []string{fmt.Sprintf("POST /statuses = %d %.200s", code, body)}
		}
		for j, v := range res.Statuses {
			if d := diffSeed(m, v, ids[j]); d != "" {
				diffs = append(diffs, d)
			}
		}
	}
	return diffs
}

// forEachUser runs f for every user on 8 goroutines and collects its complaints.
func forEachUser(users []string, f func(id string) string) []string {
	var mu sync.Mutex
	var diffs []string
	ch := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ch {
				if d := f(id); d != "" {
					mu.Lock()
					diffs = append(diffs, d)
					mu.Unlock()
				}
			}
		}()
	}
	for _, id := range users {
		ch <- id
	}
	close(ch)
	wg.Wait()
	return diffs
}

func diffSingle(p *harness.Pipeline, t *testing.T, m *harness.Model, users []string) []string {
	return forEachUser(users, func(id string) string {
		code, body := harness.Get(t, p.Svc["query"].URL+"/status/"+id)
		var v seedView
		if code != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil {
			return fmt.Sprintf("GET /status/%s = %d %s", id, code, body)
		}
		return diffSeed(m, v, id)
	})
}

// diffUserStatus compares the operator's view of GET /v1/users/{id}/status, which
// shows the whole state, invisible users included; what readers see of invisible users
// is TestInvisibleLooksExactlyLikeOffline's.
func diffUserStatus(p *harness.Pipeline, t *testing.T, m *harness.Model, users []string) []string {
	return forEachUser(users, func(id string) string {
		code, raw := harness.OnlineDo(t, http.MethodGet, p.Svc["query"].URL+"/v1/users/"+id+"/status?view=operator", harness.TestKeys.Operator, nil)
		body := string(raw)
		var v struct {
			seedView
			LastActive *time.Time `json:"lastActive"`
			LastSeen   *time.Time `json:"lastSeen"`
			Devices    []struct {
				DeviceID string    `json:"deviceId"`
				Status   string    `json:"status"`
				LastSeen time.Time `json:"lastSeen"`
			} `json:"devices"`
		}
		if code != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil {
			return fmt.Sprintf("GET /v1/users/%s/status = %d %s", id, code, body)
		}
		u := m.Users[id]
		if v.UserID != id || v.Status != u.Status {
			return fmt.Sprintf("%s: got %+v, want status %s", id, v.seedView, u.Status)
		}
		if !u.Changed && v.LastUpdated != nil || u.Changed && (v.LastUpdated == nil || !v.LastUpdated.Equal(u.LastUpdated)) {
			return fmt.Sprintf("%s: lastUpdated %v, want %v (operator view)", id, v.LastUpdated, u.LastUpdated)
		}
		if v.LastSeen == nil || !v.LastSeen.Equal(u.LastSeen) || (v.LastActive == nil) != u.LastActive.IsZero() ||
			v.LastActive != nil && !v.LastActive.Equal(u.LastActive) {
			return fmt.Sprintf("%s: lastActive %v lastSeen %v, want %v %v", id, v.LastActive, v.LastSeen, u.LastActive, u.LastSeen)
		}
		ids := u.DeviceIDs()
		if len(v.Devices) != len(ids) {
			return fmt.Sprintf("%s: %d devices, want %d: %s", id, len(v.Devices), len(ids), body)
		}
		for i, d := range v.Devices {
			md := u.Devices[ids[i]]
			if d.DeviceID != ids[i] || d.Status != md.Status || !d.LastSeen.Equal(md.Last) {
				return fmt.Sprintf("%s device %d = %+v, want %s %s %v", id, i, d, ids[i], md.Status, md.Last)
			}
		}
		return ""
	})
}

// diffChanges compares presence.changes with the model's changes per user, in order.
// Changes are delivered at least once: a crash after they were produced and before the
// offset commit produces them again, so they are deduplicated by source offset first.
func diffChanges(p *harness.Pipeline, t *testing.T, m *harness.Model) []string {
	got := map[string][]*pulsev1.Change{}
	seen := map[[2]int64]bool{}
	for _, recs := range harness.ReadTopic(t, p.Changes) {
		for _, r := range recs {
			var c pulsev1.Change
			if err := proto.Unmarshal(r.Value, &c); err != nil {
				return []string{fmt.Sprintf("change at %d/%d: %v", r.Partition, r.Offset, err)}
			}
			k := [2]int64{int64(c.SourcePartition), c.SourceOffset}
			if seen[k] {
				continue
			}
			seen[k] = true
			got[c.UserId] = append(got[c.UserId], &c)
		}
	}
	name := func(s pulsev1.Status) string {
		return map[pulsev1.Status]string{pulsev1.Status_STATUS_ONLINE: "online", pulsev1.Status_STATUS_IDLE: "idle",
			pulsev1.Status_STATUS_OFFLINE: "offline", pulsev1.Status_STATUS_INVISIBLE: "invisible"}[s]
	}
	var diffs []string
	for id, u := range m.Users {
		g := got[id]
		if len(g) != len(u.Changes) {
			diffs = append(diffs, fmt.Sprintf("%s: %d changes, want %d", id, len(g), len(u.Changes)))
			continue
		}
		for i, c := range u.Changes {
			if g[i].EventId != c.EventID || name(g[i].Previous) != c.Previous || name(g[i].Current) != c.Current ||
				g[i].ChangedAtUs != c.At.UnixMicro() {
				diffs = append(diffs, fmt.Sprintf("%s change %d = %v, want %+v", id, i, g[i], c))
				break
			}
		}
	}
	return diffs
}

func cassandraSession(t *testing.T) *gocql.Session {
	t.Helper()
	port, _ := strconv.Atoi(harness.CassandraPort())
	c := gocql.NewCluster(strings.Split(harness.CassandraHost(), ",")...)
	c.Port = port
	c.Keyspace = "pulse"
	c.Consistency = gocql.One
	c.Timeout = 10 * time.Second
	c.ConnectTimeout = 10 * time.Second
	s, err := c.CreateSession()
	if err != nil {
		t.Fatalf("connecting to Cassandra at %s:%d (is the stack up? run 'make up'): %v", harness.CassandraHost(), port, err)
	}
	t.Cleanup(s.Close)
	return s
}

// diffCassandra compares user_status and the number of user_activity rows per user.
func diffCassandra(t *testing.T, s *gocql.Session, m *harness.Model, users []string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return forEachUser(users, func(id string) string {
		u := m.Users[id]
		var status *string
		var updated, active, seenAt time.Time
		err := s.Query(`SELECT status, last_updated, last_active, last_seen FROM user_status WHERE user_id = ?`, id).
			ScanContext(ctx, &status, &updated, &active, &seenAt)
		if err != nil {
			return fmt.Sprintf("user_status %s: %v", id, err)
		}
		ms := func(t time.Time) time.Time { return t.Truncate(time.Millisecond) }
		wantStatus := ""
		if u.Changed {
			wantStatus = u.Status
		}
		gotStatus := ""
		if status != nil {
			gotStatus = *status
		}
		if gotStatus != wantStatus || !updated.Equal(ms(u.LastUpdated)) || !active.Equal(ms(u.LastActive)) || !seenAt.Equal(ms(u.LastSeen)) {
			return fmt.Sprintf("user_status %s = (%q %v %v %v), want (%q %v %v %v)", id, gotStatus, updated, active, seenAt,
				wantStatus, ms(u.LastUpdated), ms(u.LastActive), ms(u.LastSeen))
		}
		var rows int
		iter := s.Query(`SELECT entry_id FROM user_activity WHERE user_id = ? AND bucket IN ?`, id, dayBuckets()).
			IterContext(ctx)
		var entry string
		for iter.Scan(&entry) {
			rows++
		}
		if err := iter.Close(); err != nil {
			return fmt.Sprintf("user_activity %s: %v", id, err)
		}
		if rows != u.Rows {
			return fmt.Sprintf("user_activity %s: %d rows, want %d", id, rows, u.Rows)
		}
		return ""
	})
}

// dayBuckets are the UTC days a test's events can fall in: theirs start minutes ago.
func dayBuckets() []time.Time {
	now := time.Now().UTC()
	today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	return []time.Time{today.AddDate(0, 0, -1), today}
}
