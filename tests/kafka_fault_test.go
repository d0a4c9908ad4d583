package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

// Kafka killed with SIGKILL under a steady stream of batches, then started again:
// while it is down ingest answers 503 with Retry-After and acknowledges nothing; every
// event ingest acknowledged, before and after, is in presence.events exactly as sent,
// and the statuses read back equal the last acknowledged event of each user. The
// stream is this test's own (two concurrent posters of 50-event batches), not
// cmd/loadgen.
func TestKafkaKilledLosesNothingAcknowledged(t *testing.T) {
	pids := stackPIDs(t, "kafka")
	p := newTopics(t, 2)
	p.env["PULSE_INGEST_ACK_TIMEOUT"] = "2s"
	p.start(t, "ingest")
	p.start(t, "aggregator")
	p.start(t, "query")
	url := p.svc["ingest"].url

	type acked struct{ id, user, status string }
	var (
		mu        sync.Mutex
		ack       []acked
		offered   int
		refused   int
		noRetry   int
		stopped   = make(chan struct{})
		wg        sync.WaitGroup
		statusSeq = []string{"online", "idle", "offline", "online", "invisible"}
	)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stopped:
					return
				default:
				}
				batch := make([]wireEvent, 50)
				for i := range batch {
					user := fmt.Sprintf("kf-%s-%d-%02d", p.run, w, i)
					batch[i] = wireEvent{EventID: fmt.Sprintf("%s-%d", user, n), UserID: user, Kind: "status",
						Status: statusSeq[(n+i)%len(statusSeq)], DeviceID: "phone"}
				}
				b, _ := json.Marshal(map[string]any{"events": batch})
				req, _ := http.NewRequest(http.MethodPost, url+"/v1/events", strings.NewReader(string(b)))
				req.Header.Set("Content-Type", "application/json")
				res, err := http.DefaultClient.Do(req)
				mu.Lock()
				offered += len(batch)
				switch {
				case err != nil:
					refused += len(batch)
				case res.StatusCode == http.StatusAccepted:
					for _, e := range batch {
						ack = append(ack, acked{e.EventID, e.UserID, e.Status})
					}
				default:
					refused += len(batch)
					if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
						noRetry++
					}
				}
				mu.Unlock()
				if res != nil {
					res.Body.Close()
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	count := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return len(ack), refused
	}
	eventually(t, 20*time.Second, func() string {
		if a, _ := count(); a < 2000 {
			return fmt.Sprintf("%d events acknowledged before the fault", a)
		}
		return ""
	})

	killed := time.Now()
	signalAll(t, "killing Kafka", pids, syscall.SIGKILL)
	restart := stackRestarter(t)
	_, refusedBefore := count()
	eventually(t, 30*time.Second, func() string {
		if _, r := count(); r < refusedBefore+200 {
			return "ingest has not refused a batch since Kafka died"
		}
		return ""
	})
	downAcked, _ := count()
	time.Sleep(3 * time.Second)
	if a, _ := count(); a != downAcked {
		t.Errorf("%d events acknowledged while Kafka was down", a-downAcked)
	}
	restart()
	back := time.Now()
	eventually(t, 90*time.Second, func() string {
		if a, _ := count(); a < downAcked+2000 {
			return fmt.Sprintf("%d events acknowledged since Kafka came back", a-downAcked)
		}
		return ""
	})
	close(stopped)
	wg.Wait()
	recovered := time.Since(back)

	mu.Lock()
	defer mu.Unlock()
	if noRetry > 0 {
		t.Errorf("%d refused batches had no 503 with Retry-After", noRetry)
	}
	// Every acknowledged event is in the log, as sent.
	inLog := map[string]string{}
	for _, recs := range readTopic(t, p.events) {
		for _, r := range recs {
			var e pulsev1.Event
			if err := proto.Unmarshal(r.Value, &e); err != nil {
				t.Fatalf("an event record does not decode: %v", err)
			}
			inLog[e.EventId] = e.UserId
		}
	}
	lost := 0
	last := map[string]string{}
	for _, a := range ack {
		if inLog[a.id] != a.user {
			lost++
		}
		last[a.user] = a.status
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged events are not in presence.events", lost, len(ack))
	}
	// And applied: each user's status is that of their last acknowledged event.
	ids := make([]string, 0, len(last))
	for id := range last {
		ids = append(ids, id)
	}
	eventually(t, 60*time.Second, func() string {
		code, body := postJSON(t, p.svc["query"].url+"/statuses", map[string]any{"userIds": ids})
		if code != http.StatusOK {
			return fmt.Sprintf("statuses: %d", code)
		}
		var res struct {
			Statuses []struct{ UserID, Status string } `json:"statuses"`
		}
		if err := json.Unmarshal(body, &res); err != nil {
			t.Fatal(err)
		}
		for _, s := range res.Statuses {
			want := last[s.UserID]
			if want == "invisible" {
				want = "offline" // the public view
			}
			if s.Status != want {
				return fmt.Sprintf("%s is %s, its last acknowledged event says %s", s.UserID, s.Status, want)
			}
		}
		return ""
	})
	t.Logf("Kafka SIGKILL: %d events offered, %d acknowledged, %d refused with 503, 0 lost; Kafka down %v (kill to restarted), %d acknowledged within %v after",
		offered, len(ack), refused, back.Sub(killed).Round(time.Second), len(ack)-downAcked, recovered.Round(time.Second))
}
