package tests

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestAggregatorCommitsAQuietPartition: two statuses posted back to back right after
// the aggregator starts are folded in windows written well within
// PULSE_AGGREGATOR_COMMIT_INTERVAL of the partition's start, so no window commits them;
// with nothing more arriving, the group must still commit both within the interval and
// one state check, or the partition's consumer lag would stay at 2 for good (and every
// alert and bench wait on lag with it).
func TestAggregatorCommitsAQuietPartition(t *testing.T) {
	p := newTopics(t, 1)
	p.env["PULSE_AGGREGATOR_COMMIT_INTERVAL"] = "4s"
	p.env["PULSE_AGGREGATOR_STATE_CHECK_INTERVAL"] = "1s"
	p.start(t, "aggregator")
	p.start(t, "ingest")
	for _, status := range []string{"online", "idle"} {
		code, body := postJSON(t, p.svc["ingest"].url+"/status", map[string]string{"userId": p.run + "-quiet", "status": status})
		if code != http.StatusOK {
			t.Fatalf("POST /status %s = %d %s", status, code, body)
		}
	}
	adm := kafkaAdmin(t)
	group := p.env["PULSE_AGGREGATOR_GROUP"]
	start := time.Now()
	eventually(t, 20*time.Second, func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		committed, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return err.Error()
		}
		c, ok := committed.Lookup(p.events, 0)
		if !ok || c.At != 2 {
			return fmt.Sprintf("the group has committed %d of the partition's 2 records (found: %v)", c.At, ok)
		}
		return ""
	})
	t.Logf("both records committed %v after they were acknowledged, with nothing more arriving", time.Since(start).Round(100*time.Millisecond))
}
