package tests

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/tests/harness"
)

// Cassandra stopped for a minute under a stream of events and changes, then started
// again: history reports Cassandra down on /readyz and retries, commits nothing it has
// not written, and once Cassandra is back it catches up to exactly the model's rows —
// none missing, none extra.
func TestHistoryCatchesUpAfterCassandraOutage(t *testing.T) {
	pids := stackPIDs(t, "cassandra")
	h := histSetup(t)
	g := newHistGen(h.run, 24, 2)
	var m histModel
	h.histCleanup(t, &m, g.users)
	var events []histEvent
	var changes []histChange
	produce := func(nEvents, nChanges int) {
		evs, chs := h.produceGenerated(t, g, nEvents, nChanges)
		events, changes = append(events, evs...), append(changes, chs...)
	}
	produce(300, 30)
	s := harness.StartService(t, "history", h.env)
	harness.Eventually(t, 60*time.Second, func() string {
		if h.histCommitted(t) == 0 {
			return "history has committed nothing yet"
		}
		return ""
	})

	stopped := time.Now()
	signalAll(t, "stopping Cassandra", pids, syscall.SIGTERM)
	restart := stackRestarter(t)
	harness.Eventually(t, 60*time.Second, func() string {
		if code, rep := readyz(t, s); code != 503 || !strings.Contains(fmt.Sprint(rep), "cassandra") {
			return fmt.Sprintf("history /readyz = %d %+v while Cassandra is down", code, rep)
		}
		return ""
	})
	// A minute of traffic with Cassandra down.
	for time.Since(stopped) < 60*time.Second {
		produce(20, 2)
		time.Sleep(500 * time.Millisecond)
	}
	committedDown := h.histCommitted(t)
	restart()
	back := time.Now()
	produce(100, 10)
	m = histBuildModel(events, changes)
	harness.Eventually(t, 180*time.Second, func() string { return h.histDiff(t, m, g.users) })
	t.Logf("Cassandra down %v; history had committed %d of %d event records when it came back, and wrote all %d rows %v after",
		back.Sub(stopped).Round(time.Second), committedDown, len(events), len(m.rows), time.Since(back).Round(time.Second))
}
