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
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/tests/harness"
)

// onlineToken is the operator key of the online tests.
var onlineToken = harness.TestKeys.Operator

// onlineEntry is one user of GET /v1/online and POST /v1/online/filter.
type onlineEntry struct {
	UserID string `json:"userId"`
	Status string `json:"status"`
}

// onlineWalk lists every page of GET /v1/online?query; between runs after each page
// but the last. It fails the test on any error answer.
func onlineWalk(t *testing.T, base, query, token string, between func()) (users []onlineEntry, pages int) {
	t.Helper()
	cursor := ""
	for {
		q, err := url.ParseQuery(query)
		if err != nil {
			t.Fatal(err)
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		target := base + "/v1/online?" + q.Encode()
		code, body := harness.OnlineDo(t, http.MethodGet, target, token, nil)
		var res struct {
			Users      []onlineEntry `json:"users"`
			NextCursor *string       `json:"nextCursor"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &res) != nil || res.Users == nil {
			t.Fatalf("GET %s = %d %.300s", target, code, body)
		}
		users = append(users, res.Users...)
		pages++
		if res.NextCursor == nil {
			return users, pages
		}
		cursor = *res.NextCursor
		if between != nil {
			between()
		}
	}
}

// onlinePost posts one batch to ingest; unlike p.post it may run off the test's
// goroutine, and reports instead of failing.
func onlinePost(ingest string, events []harness.WireEvent) error {
	b, err := json.Marshal(map[string]any{"events": events})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ingest+"/v1/events", bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := harness.KeyedClient.Do(req)
	if err != nil {
		return fmt.Errorf("POST /v1/events: %w", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusAccepted {
		return fmt.Errorf("POST /v1/events = %d %.200s", res.StatusCode, body)
	}
	return nil
}

func onlineFilter(t *testing.T, base string, ids []string, query, token string) ([]onlineEntry, string) {
	t.Helper()
	code, body := harness.OnlineDo(t, http.MethodPost, base+"/v1/online/filter"+query, token, map[string]any{"userIds": ids})
	var res struct {
		Online []onlineEntry `json:"online"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &res) != nil || res.Online == nil {
		return nil, fmt.Sprintf("POST /v1/online/filter = %d %.300s", code, body)
	}
	return res.Online, ""
}

// onlineDiff compares a listing with the model's users in the given statuses
// (operator view: the model's own statuses; public: public(status)).
func onlineDiff(got []onlineEntry, m *harness.Model, operator bool) string {
	want := map[string]string{}
	for id, u := range m.Users {
		st := u.Status
		if !operator {
			st = harness.Public(st)
		}
		if st != "offline" {
			want[id] = st
		}
	}
	seen := map[string]bool{}
	var diffs []string
	for _, e := range got {
		if seen[e.UserID] {
			diffs = append(diffs, e.UserID+" listed twice")
		}
		seen[e.UserID] = true
		if want[e.UserID] != e.Status {
			diffs = append(diffs, fmt.Sprintf("%s listed %s, model says %q", e.UserID, e.Status, want[e.UserID]))
		}
	}
	for id, st := range want {
		if !seen[id] {
			diffs = append(diffs, fmt.Sprintf("%s (%s) not listed", id, st))
		}
	}
	slices.Sort(diffs)
	return harness.FirstLines(diffs, 5)
}

// TestOnlineListingAndFilterAgainstTheModel runs the whole pipeline: the walk of GET
// /v1/online while events flow lists every user who stays online exactly once; once
// the pipeline settled, listings and POST /v1/online/filter (10,000 ids) equal the
// model folded from the log; operators, and only they, see invisible users.
func TestOnlineListingAndFilterAgainstTheModel(t *testing.T) {
	p := harness.NewPipeline(t, 8, nil)
	query := p.Svc["query"].URL

	// Background users with several devices, duplicates and stale events; half of
	// their events before the walk, half during it.
	w := generate(p.Run, 1500, 6, 21)
	half := len(w.events) / 2
	// Stable users: one status each before the walk, nothing during it.
	rng := rand.New(rand.NewPCG(22, 23))
	var stable []harness.WireEvent
	stableStatus := map[string]string{}
	for i := range 2000 {
		st := []string{"online", "online", "idle"}[rng.IntN(3)]
		id := fmt.Sprintf("stable-%s-%d", p.Run, i)
		if i%2 == 0 {
			id = fmt.Sprintf("%s-5ab1e-4000-8000-%012d", p.Run, i)
		}
		stable = append(stable, harness.WireEvent{EventID: fmt.Sprintf("%s-st-%d", p.Run, i), UserID: id, Kind: "status", Status: st, DeviceID: "phone"})
		stableStatus[id] = st
	}
	post(p, t, w, stable, 500, 2)
	post(p, t, w, w.events[:half], 250, 4)

	stableIDs := make([]string, 0, len(stable))
	for _, e := range stable {
		stableIDs = append(stableIDs, e.UserID)
	}
	harness.Eventually(t, 60*time.Second, func() string {
		got, msg := onlineFilter(t, query, stableIDs, "", "")
		if msg != "" {
			return msg
		}
		if len(got) != len(stableIDs) {
			return fmt.Sprintf("filter lists %d of the %d stable users", len(got), len(stableIDs))
		}
		for i, e := range got {
			if e.UserID != stableIDs[i] || e.Status != stableStatus[e.UserID] {
				return fmt.Sprintf("filter[%d] = %+v, want %s %s", i, e, stableIDs[i], stableStatus[stableIDs[i]])
			}
		}
		return ""
	})

	// The walk, while the second half of the background events flows, and users
	// keep appearing and changing.
	stop := make(chan struct{})
	var posted atomic.Int64
	postErr := make(chan error, 1)
	go func() {
		postErr <- func() error {
			ingest := p.Svc["ingest"].URL
			for i := half; i < len(w.events); i += 50 {
				batch := w.events[i:min(i+50, len(w.events))]
				if err := onlinePost(ingest, batch); err != nil {
					return err
				}
				posted.Add(int64(len(batch)))
			}
			crng := rand.New(rand.NewPCG(24, 25))
			for k := 0; ; k++ {
				select {
				case <-stop:
					return nil
				default:
				}
				var batch []harness.WireEvent
				for j := range 20 {
					id := w.users[crng.IntN(len(w.users))]
					if j%4 == 0 {
						id = fmt.Sprintf("late-%s-%d-%d", p.Run, k, j)
					}
					batch = append(batch, harness.WireEvent{EventID: fmt.Sprintf("%s-churn-%d-%d", p.Run, k, j), UserID: id, Kind: "status",
						Status: []string{"online", "idle", "offline", "invisible"}[crng.IntN(4)], DeviceID: "tablet"})
				}
				if err := onlinePost(ingest, batch); err != nil {
					return err
				}
				posted.Add(int64(len(batch)))
			}
		}()
	}()
	before := posted.Load()
	listed, pages := onlineWalk(t, query, "limit=37", "", func() { time.Sleep(15 * time.Millisecond) })
	during := posted.Load() - before
	close(stop)
	if err := <-postErr; err != nil {
		t.Fatal(err)
	}
	if during == 0 || pages < 20 {
		t.Fatalf("the walk took %d pages while %d events were acknowledged: it did not overlap the flow", pages, during)
	}
	t.Logf("walked %d pages (%d users) while %d events were acknowledged", pages, len(listed), during)
	count := map[string]int{}
	for _, e := range listed {
		count[e.UserID]++
		if count[e.UserID] == 2 {
			t.Errorf("%s listed twice", e.UserID)
		}
		if e.Status != "online" && e.Status != "idle" {
			t.Errorf("public listing shows %+v", e)
		}
	}
	for _, id := range stableIDs {
		if count[id] != 1 {
			t.Errorf("%s stayed %s through the walk but was listed %d times", id, stableStatus[id], count[id])
		}
	}

	// Settled: listings in both views equal the model.
	m := harness.BuildModel(t, p.Events)
	invisible := 0
	for _, u := range m.Users {
		if u.Status == "invisible" {
			invisible++
		}
	}
	if invisible == 0 {
		t.Fatal("the model has no invisible user: the operator checks need some")
	}
	harness.Eventually(t, 60*time.Second, func() string {
		got, _ := onlineWalk(t, query, "limit=1000", "", nil)
		return onlineDiff(got, m, false)
	})
	got, _ := onlineWalk(t, query, "limit=500&view=operator", onlineToken, nil)
	if d := onlineDiff(got, m, true); d != "" {
		t.Errorf("operator listing differs from the model:\n%s", d)
	}
	got, _ = onlineWalk(t, query, "status=invisible&view=operator", onlineToken, nil)
	if len(got) != invisible {
		t.Errorf("operator listing of invisible users has %d, the model %d", len(got), invisible)
	}

	t.Run("filter of 10,000 ids", func(t *testing.T) {
		ids := m.SortedUsers()
		for i := 0; len(ids) < 10_000; i++ {
			ids = append(ids, fmt.Sprintf("unknown-%s-%d", p.Run, i))
		}
		ids = ids[:10_000]
		rand.New(rand.NewPCG(26, 27)).Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		for _, view := range []struct {
			query, token string
			operator     bool
		}{{"", "", false}, {"?view=operator", onlineToken, true}} {
			var want []onlineEntry
			for _, id := range ids {
				u := m.Users[id]
				if u == nil {
					continue
				}
				st := u.Status
				if !view.operator {
					st = harness.Public(st)
				}
				if st != "offline" {
					want = append(want, onlineEntry{UserID: id, Status: st})
				}
			}
			got, msg := onlineFilter(t, query, ids, view.query, view.token)
			if msg != "" {
				t.Fatal(msg)
			}
			if !slices.Equal(got, want) {
				t.Errorf("filter%s lists %d users, the model %d", view.query, len(got), len(want))
				for i := range min(len(got), len(want)) {
					if got[i] != want[i] {
						t.Errorf("first difference at %d: %+v, model %+v", i, got[i], want[i])
						break
					}
				}
			}
		}
		ids = append(ids, "one-too-many")
		code, body := harness.OnlineDo(t, http.MethodPost, query+"/v1/online/filter", "", map[string]any{"userIds": ids})
		if code != http.StatusBadRequest || !bytes.Contains(body, []byte(`"field":"userIds"`)) {
			t.Errorf("10,001 ids = %d %.200s, want 400 naming userIds", code, body)
		}
	})

	t.Run("operator view", func(t *testing.T) {
		var ghosts []string
		for _, id := range m.SortedUsers() {
			if m.Users[id].Status == "invisible" && len(ghosts) < 20 {
				ghosts = append(ghosts, id)
			}
		}
		type device struct {
			DeviceID string    `json:"deviceId"`
			Status   string    `json:"status"`
			LastSeen time.Time `json:"lastSeen"`
		}
		type view struct {
			UserID     string     `json:"userId"`
			Status     string     `json:"status"`
			LastActive *time.Time `json:"lastActive"`
			LastSeen   *time.Time `json:"lastSeen"`
			Devices    []device   `json:"devices"`
		}
		for _, id := range ghosts {
			u := m.Users[id]
			var pub, op view
			code, body := harness.OnlineDo(t, http.MethodGet, query+"/v1/users/"+id+"/status", "", nil)
			// A reader sees an offline user: every device it knew of offline, and times
			// no later than the user's own (their exact values are
			// TestInvisibleLooksExactlyLikeOffline's).
			if code != http.StatusOK || json.Unmarshal(body, &pub) != nil || pub.Status != "offline" || pub.LastSeen != nil && pub.LastSeen.After(u.LastSeen) {
				t.Errorf("public read of invisible %s = %d %s, want offline", id, code, body)
			}
			for _, d := range pub.Devices {
				if d.Status != "offline" || d.LastSeen.After(u.LastSeen) {
					t.Errorf("public read of invisible %s shows device %+v, want offline and seen no later than %v", id, d, u.LastSeen)
				}
			}
			code, body = harness.OnlineDo(t, http.MethodGet, query+"/v1/users/"+id+"/status?view=operator", onlineToken, nil)
			if code != http.StatusOK || json.Unmarshal(body, &op) != nil || op.Status != "invisible" || op.LastSeen == nil || !op.LastSeen.Equal(u.LastSeen) {
				t.Errorf("operator read of %s = %d %s, want invisible, last seen %v", id, code, body, u.LastSeen)
				continue
			}
			devs := u.DeviceIDs()
			if len(op.Devices) != len(devs) {
				t.Errorf("operator read of %s has %d devices, the model %d", id, len(op.Devices), len(devs))
				continue
			}
			for i, d := range op.Devices {
				md := u.Devices[devs[i]]
				if d.DeviceID != devs[i] || d.Status != md.Status || !d.LastSeen.Equal(md.Last) {
					t.Errorf("%s device %d = %+v, model %s %s %v", id, i, d, devs[i], md.Status, md.Last)
				}
			}
			code, body = harness.OnlineDo(t, http.MethodGet, query+"/status/"+id+"?view=operator", onlineToken, nil)
			if code != http.StatusOK || !bytes.Contains(body, []byte(`"status":"invisible"`)) {
				t.Errorf("GET /status/%s?view=operator = %d %s", id, code, body)
			}
		}
		if len(ghosts) == 0 {
			t.Fatal("no invisible user to read")
		}
		// The reader key may not see the operator view; an unknown key is no one.
		for _, tc := range []struct {
			target, token string
			code          int
		}{
			{"/v1/users/" + ghosts[0] + "/status?view=operator", "", http.StatusForbidden},
			{"/v1/users/" + ghosts[0] + "/status?view=operator", onlineToken + "x", http.StatusUnauthorized},
			{"/status/" + ghosts[0] + "?view=operator", "", http.StatusForbidden},
			{"/v1/online?view=operator", "", http.StatusForbidden},
			{"/v1/online/count?view=operator", "wrong-token-wrong-token", http.StatusUnauthorized},
		} {
			code, body := harness.OnlineDo(t, http.MethodGet, query+tc.target, tc.token, nil)
			want := map[int]string{http.StatusForbidden: `"code":"forbidden"`, http.StatusUnauthorized: `"code":"unauthorized"`}[tc.code]
			if code != tc.code || !bytes.Contains(body, []byte(want)) {
				t.Errorf("GET %s with token %q = %d %s, want %d %s", tc.target, tc.token, code, body, tc.code, want)
			}
		}
		code, body := harness.OnlineDo(t, http.MethodPost, query+"/v1/online/filter?view=operator", "", map[string]any{"userIds": ghosts})
		if code != http.StatusForbidden {
			t.Errorf("filter in the operator view without token = %d %s, want 403", code, body)
		}
		got, msg := onlineFilter(t, query, ghosts, "", "")
		if msg != "" || len(got) != 0 {
			t.Errorf("public filter of invisible users = %v %s, want none", got, msg)
		}
		code, body = harness.FreshCount(t, query+"/v1/online/count?view=operator", onlineToken)
		var c struct {
			ByStatus map[string]uint64 `json:"byStatus"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &c) != nil || c.ByStatus["invisible"] != uint64(invisible) {
			t.Errorf("operator count = %d %s, want %d invisible", code, body, invisible)
		}
	})
}
