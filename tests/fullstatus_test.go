package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/tests/harness"
)

// fullStatus is one entry of POST /v1/statuses and of a feed snapshot.
type fullStatus struct {
	UserID      string     `json:"userId"`
	Status      string     `json:"status"`
	LastUpdated *time.Time `json:"lastUpdated"`
	LastActive  *time.Time `json:"lastActive"`
	LastSeen    *time.Time `json:"lastSeen"`
}

// TestFullStatusesOfAContactList: POST /v1/statuses answers, in request order, every
// user's status and times exactly as GET /v1/users/{id}/status answers them one by one
// (public view: an invisible user is offline with frozen times; operator view: as
// is), a feed snapshot carries the same, and a user token reads its own user and its
// pulse_watch users only.
func TestFullStatusesOfAContactList(t *testing.T) {
	p := harness.NewPipeline(t, 2, nil)
	alice, bob, carol := p.Run+"-alice", p.Run+"-bob", p.Run+"-carol"
	p.Send(t, alice, "status", "online", "laptop")
	p.Send(t, bob, "status", "online", "phone")
	p.Send(t, bob, "heartbeat", "", "phone")
	p.Send(t, bob, "status", "invisible", "phone")
	p.Send(t, bob, "heartbeat", "", "phone") // moves bob's own last-seen, not the public one
	q := p.Svc["query"].URL
	// alice and bob may be in different partitions: wait for both to be folded.
	harness.Eventually(t, 20*time.Second, func() string {
		for user, want := range map[string]string{bob: `"invisible"`, alice: `"online"`} {
			code, body := harness.OnlineDo(t, http.MethodGet, q+"/v1/users/"+user+"/status?view=operator", harness.TestKeys.Operator, nil)
			if code != http.StatusOK || !strings.Contains(string(body), want) {
				return fmt.Sprintf("%s: %d %s, want %s", user, code, body, want)
			}
		}
		return ""
	})
	ids := []string{carol, bob, alice, bob}

	// The model: one GET per id, devices left out.
	single := func(id, view, cred string) fullStatus {
		t.Helper()
		code, body := harness.OnlineDo(t, http.MethodGet, q+"/v1/users/"+id+"/status"+view, cred, nil)
		var v fullStatus
		if code != http.StatusOK || json.Unmarshal(body, &v) != nil {
			t.Fatalf("GET status of %s: %d %s", id, code, body)
		}
		return v
	}
	batch := func(view, cred string, ids []string) (int, []fullStatus, string) {
		t.Helper()
		code, body := harness.OnlineDo(t, http.MethodPost, q+"/v1/statuses"+view, cred, map[string]any{"userIds": ids})
		var v struct {
			Statuses []fullStatus `json:"statuses"`
		}
		if code == http.StatusOK {
			if err := json.Unmarshal(body, &v); err != nil {
				t.Fatalf("POST /v1/statuses: %s: %v", body, err)
			}
		}
		return code, v.Statuses, string(body)
	}
	same := func(a, b fullStatus) bool {
		eq := func(x, y *time.Time) bool { return (x == nil) == (y == nil) && (x == nil || x.Equal(*y)) }
		return a.UserID == b.UserID && a.Status == b.Status && eq(a.LastUpdated, b.LastUpdated) &&
			eq(a.LastActive, b.LastActive) && eq(a.LastSeen, b.LastSeen)
	}
	for _, c := range []struct{ view, cred string }{{"", harness.TestKeys.Reader}, {"?view=operator", harness.TestKeys.Operator}} {
		code, got, body := batch(c.view, c.cred, ids)
		if code != http.StatusOK || len(got) != len(ids) {
			t.Fatalf("POST /v1/statuses%s: %d %s", c.view, code, body)
		}
		for i, id := range ids {
			if want := single(id, c.view, c.cred); !same(got[i], want) {
				t.Errorf("POST /v1/statuses%s [%d] = %+v, GET says %+v", c.view, i, got[i], want)
			}
		}
	}
	code, got, body := batch("", harness.TestKeys.Reader, ids)
	if code != http.StatusOK || got[0].Status != "offline" || got[0].LastSeen != nil || got[1].Status != "offline" ||
		got[1].LastSeen == nil || got[2].Status != "online" {
		t.Fatalf("public answer %s: want carol never seen, bob offline with his public times, alice online", body)
	}

	// A user token: itself and its pulse_watch users.
	tok, err := auth.MintUserToken(harness.TestKeys.Hs256, auth.UserToken{User: alice, Watch: []string{bob}, TTL: time.Hour, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if code, got, body := batch("", tok, []string{bob, alice}); code != http.StatusOK || len(got) != 2 || got[0].Status != "offline" || got[1].Status != "online" {
		t.Fatalf("alice's token reading bob and alice: %d %s", code, body)
	}
	if code, _, body := batch("", tok, []string{bob, carol}); code != http.StatusForbidden || !strings.Contains(body, carol) {
		t.Fatalf("alice's token reading carol: %d %s, want 403 naming carol", code, body)
	}
	if code, _, body := batch("", harness.TestKeys.Reader, make([]string, 1001)); code != http.StatusBadRequest || !strings.Contains(body, "PULSE_QUERY_MAX_BATCH") {
		t.Fatalf("1,001 ids: %d %.200s, want 400 naming PULSE_QUERY_MAX_BATCH", code, body)
	}

	// A feed snapshot carries the same full statuses.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := dialFeed(t, ctx, q, harness.TestKeys.Reader, url.Values{"userIds": {strings.Join([]string{carol, bob, alice}, ",")}})
	_, raw := f.mustRead()
	var snap struct {
		Type     string       `json:"type"`
		Statuses []fullStatus `json:"statuses"`
	}
	if err := json.Unmarshal([]byte(raw), &snap); err != nil || snap.Type != "snapshot" || len(snap.Statuses) != 3 {
		t.Fatalf("snapshot %s", raw)
	}
	_, want, _ := batch("", harness.TestKeys.Reader, []string{carol, bob, alice})
	for i := range want {
		if !same(snap.Statuses[i], want[i]) {
			t.Errorf("snapshot [%d] = %+v, POST /v1/statuses says %+v", i, snap.Statuses[i], want[i])
		}
	}
}
