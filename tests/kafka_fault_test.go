package tests

import (
	"syscall"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/tests/harness"
)

// Kafka, every broker of it, killed with SIGKILL under a steady stream of batches, then
// started again: while it is down ingest answers 503 with Retry-After and acknowledges
// nothing; every event ingest acknowledged, before and after, is in presence.events
// exactly as sent, and the statuses read back equal the last acknowledged event of each
// user. The stream is this test's own (two concurrent posters of 50-event batches,
// ackedLoad), not cmd/loadgen.
func TestKafkaKilledLosesNothingAcknowledged(t *testing.T) {
	// Every broker: the one of the single stack, all three of the cluster topology.
	pids := stackPIDs(t, "kafka")
	p := harness.NewTopics(t, 2)
	p.Env["PULSE_INGEST_ACK_TIMEOUT"] = "2s"
	p.Start(t, "ingest")
	p.Start(t, "aggregator")
	p.Start(t, "query")

	load := startAckedLoad(p.Svc["ingest"].URL, "kf-"+p.Run, 2)
	defer load.finish()
	load.waitMore(t, 2000, 20*time.Second, "before the fault")

	killed := time.Now()
	signalAll(t, "killing Kafka", pids, syscall.SIGKILL)
	restart := stackRestarter(t)
	_, refusedBefore := load.counts()
	harness.Eventually(t, 30*time.Second, func() string {
		if _, r := load.counts(); r < refusedBefore+200 {
			return "ingest has not refused a batch since Kafka died"
		}
		return ""
	})
	downAcked := load.ackedCount()
	time.Sleep(3 * time.Second)
	if a := load.ackedCount(); a != downAcked {
		t.Errorf("%d events acknowledged while Kafka was down", a-downAcked)
	}
	restart()
	back := time.Now()
	load.waitMore(t, 2000, 90*time.Second, "since Kafka came back")
	load.finish()
	recovered := time.Since(back)

	// Every acknowledged event is in the log, as sent, and applied: each user's status
	// is that of their last acknowledged event.
	if lost := load.checkApplied(t, p, p.Svc["query"].URL, 60*time.Second); lost > 0 {
		t.FailNow()
	}
	acked, _ := load.counts()
	t.Logf("Kafka SIGKILL: %s with 503, 0 lost; Kafka down %v (kill to restarted), %d acknowledged within %v after",
		load.report(), back.Sub(killed).Round(time.Second), acked-downAcked, recovered.Round(time.Second))
}
