package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/tests/harness"
)

type ackedEvent struct{ id, user, status string }

// ackedLoad is a stream of 50-event batches posted to ingest by a few posters, each
// batch's events recorded as acknowledged only on a 202.
type ackedLoad struct {
	mu      sync.Mutex
	acked   []ackedEvent
	offered int
	refused int
	noRetry int
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

func startAckedLoad(ingestURL, userPrefix string, posters int) *ackedLoad {
	l := &ackedLoad{stop: make(chan struct{})}
	statuses := []string{"online", "idle", "offline", "online", "invisible"}
	// The suite's key transport sends the producer key.
	client := &http.Client{Timeout: 30 * time.Second, Transport: harness.KeyedClient.Transport}
	for w := range posters {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				default:
				}
				batch := make([]harness.WireEvent, 50)
				for i := range batch {
					user := fmt.Sprintf("%s-%d-%02d", userPrefix, w, i)
					batch[i] = harness.WireEvent{EventID: fmt.Sprintf("%s-%d", user, n), UserID: user, Kind: "status",
						Status: statuses[(n+i)%len(statuses)], DeviceID: "phone"}
				}
				b, _ := json.Marshal(map[string]any{"events": batch})
				res, err := client.Post(ingestURL+"/v1/events", "application/json", strings.NewReader(string(b)))
				l.mu.Lock()
				l.offered += len(batch)
				switch {
				case err != nil:
					l.refused += len(batch)
				case res.StatusCode == http.StatusAccepted:
					for _, e := range batch {
						l.acked = append(l.acked, ackedEvent{e.EventID, e.UserID, e.Status})
					}
				default:
					l.refused += len(batch)
					if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
						l.noRetry++
					}
				}
				l.mu.Unlock()
				if res != nil {
					res.Body.Close()
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	return l
}

func (l *ackedLoad) ackedCount() int {
	a, _ := l.counts()
	return a
}

// counts is how many events were acknowledged and how many refused so far.
func (l *ackedLoad) counts() (acked, refused int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked), l.refused
}

// waitMore waits until n more events than now are acknowledged.
func (l *ackedLoad) waitMore(t *testing.T, n int, within time.Duration, when string) {
	t.Helper()
	from := l.ackedCount()
	harness.Eventually(t, within, func() string {
		if a := l.ackedCount(); a < from+n {
			return fmt.Sprintf("%d events acknowledged %s, want %d", a-from, when, n)
		}
		return ""
	})
}

// finish stops the posters and waits for them; a second call does nothing.
func (l *ackedLoad) finish() {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// checkApplied checks that every acknowledged event is in the pipeline's events topic
// as sent, and that each user's status read from query is that of their last
// acknowledged event. It returns how many acknowledged events the log lacks (the test
// has failed when there are any).
func (l *ackedLoad) checkApplied(t *testing.T, p *harness.Pipeline, queryURL string, within time.Duration) (lost int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.noRetry > 0 {
		t.Errorf("%d refused batches had no 503 with Retry-After", l.noRetry)
	}
	inLog := map[string]string{}
	for _, recs := range harness.ReadTopic(t, p.Events) {
		for _, r := range recs {
			var e pulsev1.Event
			if err := proto.Unmarshal(r.Value, &e); err != nil {
				t.Fatalf("an event record does not decode: %v", err)
			}
			inLog[e.EventId] = e.UserId
		}
	}
	last := map[string]presence.Status{}
	for _, a := range l.acked {
		if inLog[a.id] != a.user {
			lost++
		}
		st, err := presence.ParseStatus(a.status)
		if err != nil {
			t.Fatalf("acknowledged event %s: %v", a.id, err)
		}
		last[a.user] = st
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged events are not in %s", lost, len(l.acked), p.Events)
	}
	// Each user's public status is that of their last acknowledged event.
	harness.Eventually(t, within, func() string { return publicStatusesDiffer(t, queryURL, last) })
	return lost
}

func (l *ackedLoad) report() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%d events offered, %d acknowledged, %d refused", l.offered, len(l.acked), l.refused)
}
