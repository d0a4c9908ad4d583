package harness

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pulsev1 "github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

// Send posts one event now and returns when ingest acknowledged it.
func (p *Pipeline) Send(t *testing.T, user, kind, status, device string) time.Time {
	t.Helper()
	_, acked := p.SendTimed(t, user, kind, status, device)
	return acked
}

// SendTimed is send, also returning when the request started: the event's received-at,
// which its deadlines count from, lies between the two.
func (p *Pipeline) SendTimed(t *testing.T, user, kind, status, device string) (started, acked time.Time) {
	t.Helper()
	started = time.Now()
	e := WireEvent{UserID: user, Kind: kind, Status: status, DeviceID: device}
	code, body := PostJSON(t, p.Svc["ingest"].URL+"/v1/events", map[string]any{"events": []WireEvent{e}})
	if code != http.StatusAccepted {
		t.Fatalf("POST /v1/events = %d %s", code, body)
	}
	return started, time.Now()
}

func (p *Pipeline) Status(t *testing.T, user string) string {
	t.Helper()
	code, body := Get(t, p.Svc["query"].URL+"/status/"+user)
	var v struct {
		Status string `json:"status"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil {
		t.Fatalf("GET /status/%s = %d %s", user, code, body)
	}
	return v.Status
}

// CountView is the answer of GET /v1/online/count.
type CountView struct {
	Total    uint64            `json:"total"`
	ByStatus map[string]uint64 `json:"byStatus"`
}

// Count reads GET /v1/online/count.
func (p *Pipeline) Count(t *testing.T) CountView {
	t.Helper()
	code, body := FreshCount(t, p.Svc["query"].URL+"/v1/online/count", "")
	var c CountView
	if code != http.StatusOK || json.Unmarshal(body, &c) != nil {
		t.Fatalf("GET /v1/online/count = %d %s", code, body)
	}
	return c
}

// WaitStatus waits until the user reads status.
func (p *Pipeline) WaitStatus(t *testing.T, user, status string) {
	t.Helper()
	Eventually(t, 10*time.Second, func() string {
		if s := p.Status(t, user); s != status {
			return user + " reads " + s + ", want " + status + "; aggregator output:\n" + p.Svc["aggregator"].Out.String()
		}
		return ""
	})
}

// WatchStatus polls a user's public status every 20ms until stop is closed and
// returns each distinct status seen with the time it was first seen.
func (p *Pipeline) WatchStatus(t *testing.T, user string, stop <-chan struct{}) func() []StatusAt {
	var mu sync.Mutex
	var seen []StatusAt
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			s := p.Status(t, user)
			mu.Lock()
			if len(seen) == 0 || seen[len(seen)-1].Status != s {
				seen = append(seen, StatusAt{s, time.Now()})
			}
			mu.Unlock()
			select {
			case <-stop:
				// One last read: the caller stopped after seeing a status this
				// watcher may not have polled yet.
				if s := p.Status(t, user); s != seen[len(seen)-1].Status {
					mu.Lock()
					seen = append(seen, StatusAt{s, time.Now()})
					mu.Unlock()
				}
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() []StatusAt {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

// StatusAt is a status and when a watcher first saw it.
type StatusAt struct {
	Status string
	At     time.Time
}

// ChangesOf reads the user's effective changes from presence.changes, deduplicated.
func (p *Pipeline) ChangesOf(t *testing.T, user string) []*pulsev1.Change {
	t.Helper()
	var out []*pulsev1.Change
	seen := map[int64]bool{}
	for _, recs := range ReadTopic(t, p.Changes) {
		for _, r := range recs {
			var c pulsev1.Change
			if err := proto.Unmarshal(r.Value, &c); err != nil {
				t.Fatal(err)
			}
			if c.UserId == user && !seen[c.SourceOffset] {
				seen[c.SourceOffset] = true
				out = append(out, &c)
			}
		}
	}
	return out
}
