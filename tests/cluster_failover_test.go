package tests

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/pulse-presence/pulse/internal/platform/redisx"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
	"github.com/pulse-presence/pulse/tests/harness"
)

// The failover tests of the cluster topology (make test TOPOLOGY=cluster): one node of
// a replicated server dies under a steady stream of events, and every event ingest
// acknowledged is still in the log and applied. Elsewhere they skip; on the cluster
// topology a node that is not there fails them.

// clusterOnly skips the test unless the tests run against the cluster topology.
func clusterOnly(t *testing.T) {
	t.Helper()
	if os.Getenv("PULSE_TOPOLOGY") != "cluster" {
		t.Skip("needs the cluster topology: make test TOPOLOGY=cluster")
	}
}

// The broker leading the partition of presence.events that holds the most records is
// killed with SIGKILL under load. Another in-sync replica takes the partition over (a
// write is acknowledged once two of three replicas hold it), ingest goes on
// acknowledging, and every acknowledged event is in the log and applied; then the
// broker is started again.
func TestClusterFailoverKafkaLeaderKilled(t *testing.T) {
	clusterOnly(t)
	stackPIDs(t, "kafka") // every node runs
	p := harness.NewTopics(t, 4)
	p.Start(t, "ingest")
	p.Start(t, "aggregator")
	p.Start(t, "query")
	load := startAckedLoad(p.Svc["ingest"].URL, "kl-"+p.Run, 2)
	defer load.finish()
	load.waitMore(t, 2000, 30*time.Second, "before the fault")

	adm := harness.KafkaAdmin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, p.Events)
	if err != nil {
		t.Fatal(err)
	}
	busiest, most := int32(-1), int64(-1)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > most {
			busiest, most = o.Partition, o.Offset
		}
	})
	topics, err := adm.ListTopics(ctx, p.Events)
	if err != nil {
		t.Fatal(err)
	}
	leader := topics[p.Events].Partitions[busiest].Leader
	node := fmt.Sprintf("kafka-%d", leader)
	killed := time.Now()
	signalAll(t, "killing "+node, []int{stackPID(t, node)}, syscall.SIGKILL)
	restart := stackRestarter(t)

	// The partition gets a new leader once the controller fences the dead broker.
	harness.Eventually(t, 60*time.Second, func() string {
		td, err := adm.ListTopics(ctx, p.Events)
		if err != nil {
			return err.Error()
		}
		if l := td[p.Events].Partitions[busiest].Leader; l == leader || l < 0 {
			return fmt.Sprintf("partition %d still led by %d", busiest, l)
		}
		return ""
	})
	failedOver := time.Since(killed)
	load.waitMore(t, 2000, 60*time.Second, "after the leader died")
	restart()
	load.waitMore(t, 1000, 60*time.Second, "after the broker came back")
	load.finish()
	lost := load.checkApplied(t, p, p.Svc["query"].URL, 120*time.Second)
	t.Logf("%s (leader of %s/%d) killed: new leader within %v; %s; %d lost",
		node, p.Events, busiest, failedOver.Round(100*time.Millisecond), load.report(), lost)
}

// redisMasterOf is the address of the Redis Cluster master serving key's slot, as the
// first node of PULSE_REDIS_ADDR that answers sees it.
func redisMasterOf(t *testing.T, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, addr := range strings.Split(harness.RedisAddr(), ",") {
		c := redisx.NewClient(redisx.Config{Addrs: []string{addr}, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
		slot, err := c.ClusterKeySlot(ctx, key).Result()
		var slots []redis.ClusterSlot
		if err == nil {
			slots, err = c.ClusterSlots(ctx).Result()
		}
		c.Close()
		if err != nil {
			continue
		}
		for _, r := range slots {
			if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
				return r.Nodes[0].Addr
			}
		}
		return ""
	}
	t.Fatalf("no Redis Cluster node of %s answers", harness.RedisAddr())
	return ""
}

// The Redis master that holds the pipeline's first shard is killed with SIGKILL under
// load. Its replica takes over; the aggregators write on to it, rebuilding from the log
// whatever the replica had not received, and every acknowledged event is applied.
func TestClusterFailoverRedisMasterKilled(t *testing.T) {
	clusterOnly(t)
	stackPIDs(t, "redis")
	p := harness.NewTopics(t, 4)
	p.Start(t, "ingest")
	p.Start(t, "aggregator")
	p.Start(t, "query")
	load := startAckedLoad(p.Svc["ingest"].URL, "rm-"+p.Run, 2)
	defer load.finish()
	load.waitMore(t, 2000, 30*time.Second, "before the fault")

	key := statestore.Keys{Prefix: p.Env["PULSE_REDIS_PREFIX"]}.Meta(0)
	master := redisMasterOf(t, key)
	port, _ := strconv.Atoi(master[strings.LastIndex(master, ":")+1:])
	first, _ := strconv.Atoi(strings.Split(strings.Split(harness.RedisAddr(), ",")[0], ":")[1])
	node := fmt.Sprintf("redis-%d", port-first+1)
	killed := time.Now()
	signalAll(t, "killing "+node+" ("+master+")", []int{stackPID(t, node)}, syscall.SIGKILL)
	restart := stackRestarter(t)

	// A replica is promoted once the other masters agree the master failed.
	harness.Eventually(t, 60*time.Second, func() string {
		if m := redisMasterOf(t, key); m == master {
			return "shard 0 is still served by the dead master " + master
		}
		return ""
	})
	failedOver := time.Since(killed)
	load.waitMore(t, 2000, 60*time.Second, "after the master died")
	restart()
	load.finish()
	lost := load.checkApplied(t, p, p.Svc["query"].URL, 120*time.Second)
	t.Logf("%s (%s) killed: replica promoted within %v; %s; %d lost",
		node, master, failedOver.Round(100*time.Millisecond), load.report(), lost)
}

// One of two aggregators sharing a topic is killed with SIGKILL while windows are
// open. The other takes its partitions once its session times out, and every
// acknowledged event is applied.
func TestClusterFailoverAggregatorKilled(t *testing.T) {
	clusterOnly(t)
	p := harness.NewTopics(t, 8)
	p.Start(t, "ingest")
	p.Start(t, "query")
	a1 := harness.StartService(t, "aggregator", p.Env)
	a2 := harness.StartService(t, "aggregator", p.Env)
	for _, a := range []*harness.Service{a1, a2} {
		harness.Eventually(t, 30*time.Second, func() string {
			if code, body := harness.Get(t, a.URL+"/readyz"); code != http.StatusOK {
				return fmt.Sprintf("aggregator /readyz = %d %s", code, body)
			}
			return ""
		})
	}
	load := startAckedLoad(p.Svc["ingest"].URL, "ak-"+p.Run, 2)
	defer load.finish()
	load.waitMore(t, 3000, 30*time.Second, "before the fault")
	_ = a1.Cmd.Process.Signal(syscall.SIGKILL)
	<-a1.Done
	load.waitMore(t, 3000, 60*time.Second, "after an aggregator died")
	load.finish()
	lost := load.checkApplied(t, p, p.Svc["query"].URL, 120*time.Second)
	t.Logf("one of two aggregators killed: %s; %d lost", load.report(), lost)
}

// One of the two Cassandra nodes is stopped under a stream of events and changes for
// half a minute, then started again. History writes at LOCAL_QUORUM, which on a ring of
// two with replication 2 needs both nodes: it waits, commits nothing it has not written,
// and once the node is back it catches up to exactly the model's rows.
func TestClusterFailoverCassandraNodeStopped(t *testing.T) {
	clusterOnly(t)
	pids := stackPIDs(t, "cassandra")
	if len(pids) < 2 {
		t.Fatalf("%d Cassandra nodes, want the cluster topology's 2", len(pids))
	}
	h := histSetup(t)
	g := newHistGen(h.run, 24, 3)
	var m histModel
	h.histCleanup(t, &m, g.users)
	var events []histEvent
	var changes []histChange
	produce := func(nEvents, nChanges int) {
		evs, chs := h.produceGenerated(t, g, nEvents, nChanges)
		events, changes = append(events, evs...), append(changes, chs...)
	}
	produce(300, 30)
	harness.StartService(t, "history", h.env)
	harness.Eventually(t, 60*time.Second, func() string {
		if h.histCommitted(t) == 0 {
			return "history has committed nothing yet"
		}
		return ""
	})
	stopped := time.Now()
	signalAll(t, "stopping cassandra-2", pids[1:2], syscall.SIGTERM)
	restart := stackRestarter(t)
	for time.Since(stopped) < 30*time.Second {
		produce(20, 2)
		time.Sleep(500 * time.Millisecond)
	}
	committedDown := h.histCommitted(t)
	restart()
	back := time.Now()
	produce(100, 10)
	m = histBuildModel(events, changes)
	harness.Eventually(t, 180*time.Second, func() string { return h.histDiff(t, m, g.users) })
	t.Logf("cassandra-2 down %v; history had committed %d of %d event records when it came back, and wrote all %d rows %v after",
		back.Sub(stopped).Round(time.Second), committedDown, len(events), len(m.rows), time.Since(back).Round(time.Second))
}
