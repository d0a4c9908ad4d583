package tests

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/tests/harness"
)

// TestAggregatorCommitsAQuietPartition: two statuses posted back to back right after
// the aggregator starts are folded in windows written well within
// PULSE_AGGREGATOR_COMMIT_INTERVAL of the partition's start, so no window commits them;
// with nothing more arriving, the group must still commit both within the interval and
// one state check, or the partition's consumer lag would stay at 2 for good (and every
// alert and bench wait on lag with it).
func TestAggregatorCommitsAQuietPartition(t *testing.T) {
	p := harness.NewTopics(t, 1)
	p.Env["PULSE_AGGREGATOR_COMMIT_INTERVAL"] = "4s"
	p.Env["PULSE_AGGREGATOR_STATE_CHECK_INTERVAL"] = "1s"
	p.Start(t, "aggregator")
	p.Start(t, "ingest")
	for _, status := range []string{"online", "idle"} {
		code, body := harness.PostJSON(t, p.Svc["ingest"].URL+"/status", map[string]string{"userId": p.Run + "-quiet", "status": status})
		if code != http.StatusOK {
			t.Fatalf("POST /status %s = %d %s", status, code, body)
		}
	}
	adm := harness.KafkaAdmin(t)
	group := p.Env["PULSE_AGGREGATOR_GROUP"]
	start := time.Now()
	harness.Eventually(t, 20*time.Second, func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		committed, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return err.Error()
		}
		c, ok := committed.Lookup(p.Events, 0)
		if !ok || c.At != 2 {
			return fmt.Sprintf("the group has committed %d of the partition's 2 records (found: %v)", c.At, ok)
		}
		return ""
	})
	t.Logf("both records committed %v after they were acknowledged, with nothing more arriving", time.Since(start).Round(100*time.Millisecond))
}
