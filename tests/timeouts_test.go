package tests

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/tests/harness"
)

const (
	testOfflineAfter = 4 * time.Second
	testIdleAfter    = 8 * time.Second
)

func newTimeoutPipeline(t *testing.T) *harness.Pipeline {
	t.Helper()
	return harness.NewPipeline(t, 4, map[string]string{
		"PULSE_OFFLINE_AFTER": testOfflineAfter.String(),
		"PULSE_IDLE_AFTER":    testIdleAfter.String(),
	})
}

// A user who stops heartbeating is offline within offline_after plus one window (and
// the time to write the decision through the log), never before offline_after, in
// Redis, in the online count, in presence.changes and in Cassandra.
func TestSilentUserGoesOfflineOnTime(t *testing.T) {
	p := newTimeoutPipeline(t)
	user := "silent-" + p.Run
	stop := make(chan struct{})
	sent, acked := p.SendTimed(t, user, "heartbeat", "", "phone")
	p.WaitStatus(t, user, "online")
	if c := p.Count(t); c.Total != 1 || c.ByStatus["online"] != 1 {
		t.Fatalf("online count while the user heartbeats = %+v, want 1 online", c)
	}
	seen := p.WatchStatus(t, user, stop)
	harness.Eventually(t, 10*time.Second, func() string {
		if s := p.Status(t, user); s != "offline" {
			return "status " + s + ", want offline"
		}
		return ""
	})
	close(stop)
	trace := seen()
	if len(trace) != 2 || trace[0].Status != "online" || trace[1].Status != "offline" {
		t.Fatalf("statuses seen = %+v, want online then offline", trace)
	}
	// The deadline is the heartbeat's received-at + offline_after, and received-at lies
	// between the request's start and its 2xx: "never early" is measured from the start,
	// "on time" from the 2xx, with a generous bound that absorbs a busy machine.
	if early := trace[1].At.Sub(sent); early < testOfflineAfter {
		t.Errorf("offline %v after the heartbeat was sent: earlier than offline_after %v", early, testOfflineAfter)
	}
	wentOffline := trace[1].At.Sub(acked)
	if wentOffline > testOfflineAfter+time.Second {
		t.Errorf("offline %v after the heartbeat's 2xx, want within offline_after (%v) + one window + log round trip", wentOffline, testOfflineAfter)
	}
	t.Logf("offline %v after the last heartbeat's 2xx (offline_after %v)", wentOffline.Round(time.Millisecond), testOfflineAfter)

	if c := p.Count(t); c.Total != 0 || c.ByStatus["offline"] != 1 {
		t.Errorf("online count after the timeout = %+v, want 0 online, 1 offline", c)
	}
	changes := p.ChangesOf(t, user)
	if len(changes) != 2 || changes[1].Cause != pulsev1.Cause_CAUSE_TIMEOUT || changes[1].Current != pulsev1.Status_STATUS_OFFLINE ||
		changes[1].DeviceId != "phone" {
		t.Fatalf("changes = %v, want online by event then offline by timeout", changes)
	}
	session := cassandraSession(t)
	harness.Eventually(t, 30*time.Second, func() string {
		var status string
		var rows []string
		if err := session.Query(`SELECT status FROM user_status WHERE user_id = ?`, user).Scan(&status); err != nil {
			return err.Error()
		}
		iter := session.Query(`SELECT cause FROM user_activity WHERE user_id = ? AND bucket IN ? AND entry_type = 'change' ALLOW FILTERING`,
			user, dayBuckets()).Iter()
		var cause string
		for iter.Scan(&cause) {
			rows = append(rows, cause)
		}
		if err := iter.Close(); err != nil {
			return err.Error()
		}
		if status != "offline" || len(rows) != 2 || rows[0] != "timeout" {
			return "user_status " + status + ", change causes " + jsonList(rows)
		}
		return ""
	})
}

func jsonList(s []string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// A user who keeps sending activity never flaps; one who only heartbeats goes idle
// after idle_after but never offline; a user online on two devices stays online when
// one of them goes silent, and that device reads offline.
func TestLiveUsersNeverFlap(t *testing.T) {
	p := newTimeoutPipeline(t)
	active, beating, twoDevices := "active-"+p.Run, "beating-"+p.Run, "two-"+p.Run
	stop := make(chan struct{})
	p.Send(t, twoDevices, "heartbeat", "", "laptop") // the laptop then goes silent
	traces := map[string]func() []harness.StatusAt{}
	// Each user sends every 500ms from its own goroutine, so one slow request on a busy
	// machine cannot open a gap anywhere near offline_after.
	deadline := time.Now().Add(testIdleAfter + 3*time.Second)
	var wg sync.WaitGroup
	for _, s := range []struct{ user, kind string }{{active, "activity"}, {beating, "heartbeat"}, {twoDevices, "activity"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := time.Now()
			for time.Now().Before(deadline) {
				acked := p.Send(t, s.user, s.kind, "", "phone")
				if gap := acked.Sub(last); gap > testOfflineAfter/2 {
					t.Errorf("%s: %v between two acknowledged events: the machine is too slow for this test's timing", s.user, gap)
				}
				last = acked
				time.Sleep(500 * time.Millisecond)
			}
		}()
	}
	for _, u := range []string{active, beating, twoDevices} {
		p.WaitStatus(t, u, "online")
		traces[u] = p.WatchStatus(t, u, stop)
	}
	wg.Wait()
	close(stop)
	for _, u := range []string{active, twoDevices} {
		if tr := traces[u](); len(tr) != 1 || tr[0].Status != "online" {
			t.Errorf("%s: statuses seen = %+v, want online throughout", u, tr)
		}
		if ch := p.ChangesOf(t, u); len(ch) != 1 {
			t.Errorf("%s: %d changes, want 1 (offline -> online)", u, len(ch))
		}
	}
	if tr := traces[beating](); len(tr) != 2 || tr[0].Status != "online" || tr[1].Status != "idle" {
		t.Errorf("heartbeats only: statuses seen = %+v, want online then idle, never offline", tr)
	}
	ch := p.ChangesOf(t, beating)
	if len(ch) != 2 || ch[1].Current != pulsev1.Status_STATUS_IDLE || ch[1].Cause != pulsev1.Cause_CAUSE_TIMEOUT {
		t.Errorf("heartbeats only: changes = %v, want online, then idle by timeout", ch)
	}

	code, body := harness.Get(t, p.Svc["query"].URL+"/v1/users/"+twoDevices+"/status")
	var v struct {
		Status  string `json:"status"`
		Devices []struct {
			DeviceID string `json:"deviceId"`
			Status   string `json:"status"`
		} `json:"devices"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil || v.Status != "online" || len(v.Devices) != 2 ||
		v.Devices[0].DeviceID != "laptop" || v.Devices[0].Status != "offline" || v.Devices[1].Status != "online" {
		t.Errorf("two devices: GET /v1/users/{id}/status = %d %s, want online with the laptop offline", code, body)
	}
}

// Users who go silent while no aggregator runs still time out once one starts again:
// the new owner rebuilds its deadlines from Redis before applying new events.
func TestTimeoutsSurviveAnAggregatorOutage(t *testing.T) {
	p := newTimeoutPipeline(t)
	users := []string{"outage-a-" + p.Run, "outage-b-" + p.Run}
	var lastAck time.Time
	for _, u := range users {
		lastAck = p.Send(t, u, "heartbeat", "", "phone")
	}
	for _, u := range users {
		p.WaitStatus(t, u, "online")
	}
	p.Svc["aggregator"].Stop(t)
	// Nobody decides while no aggregator runs — checked only when the stop was quick
	// enough that the deadline had not passed before it.
	if stopped := time.Since(lastAck); stopped < testOfflineAfter-500*time.Millisecond {
		time.Sleep(testOfflineAfter + time.Second - stopped)
		for _, u := range users {
			if s := p.Status(t, u); s != "online" {
				t.Fatalf("%s is %s with no aggregator running, want still online (nobody decides)", u, s)
			}
		}
	} else {
		t.Logf("the aggregator took %v to stop; not checking the outage itself", stopped)
	}
	p.Start(t, "aggregator")
	harness.Eventually(t, 15*time.Second, func() string {
		for _, u := range users {
			if s := p.Status(t, u); s != "offline" {
				return u + " is " + s + " after the aggregator restarted, want offline"
			}
		}
		return ""
	})
}

// An invisible user is offline to readers and in counts, while connected.
func TestInvisibleUserReadsOffline(t *testing.T) {
	// No timeouts here: on a slow machine one could end the invisible session mid-test.
	p := harness.NewPipeline(t, 4, nil)
	ghost, visible := "ghost-"+p.Run, "visible-"+p.Run
	p.Send(t, ghost, "status", "invisible", "phone")
	p.Send(t, visible, "status", "online", "phone")
	harness.Eventually(t, 10*time.Second, func() string {
		if s := p.Status(t, visible); s != "online" {
			return "visible user is " + s
		}
		return ""
	})
	// The two users may sit in different partitions: wait until the ghost's event is
	// applied too (both registered), else "reads offline" would hold for a user the
	// aggregator has not seen yet.
	var (
		code int
		body []byte
		c    struct {
			Total      uint64            `json:"total"`
			ByStatus   map[string]uint64 `json:"byStatus"`
			Registered uint64            `json:"registered"`
		}
	)
	harness.Eventually(t, 10*time.Second, func() string {
		code, body = harness.FreshCount(t, p.Svc["query"].URL+"/v1/online/count", "")
		if code != http.StatusOK || json.Unmarshal(body, &c) != nil || c.Registered < 2 {
			return "count before both users are applied: " + string(body)
		}
		return ""
	})
	if s := p.Status(t, ghost); s != "offline" {
		t.Errorf("invisible user reads %s, want offline", s)
	}
	if c.Total != 1 || c.ByStatus["online"] != 1 || c.ByStatus["offline"] != 1 {
		t.Errorf("GET /v1/online/count = %s, want 1 online and the invisible user counted offline", body)
	}
	// Back to online: to others the change is offline -> online.
	p.Send(t, ghost, "status", "online", "phone")
	harness.Eventually(t, 10*time.Second, func() string {
		if s := p.Status(t, ghost); s != "online" {
			return "after going visible the user reads " + s
		}
		return ""
	})
	ch := p.ChangesOf(t, ghost)
	if len(ch) != 2 || ch[0].Current != pulsev1.Status_STATUS_INVISIBLE || ch[1].Previous != pulsev1.Status_STATUS_INVISIBLE ||
		ch[1].Current != pulsev1.Status_STATUS_ONLINE {
		t.Errorf("changes = %v, want offline->invisible, invisible->online", ch)
	}
}
