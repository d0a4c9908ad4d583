package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/records"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// ScaleOutResult is the scaleout phase: the events/s one aggregator folds, and two
// sharing the consumer group, on each topology asked for.
type ScaleOutResult struct {
	// Events were produced once per topology, straight into a topic of the phase's
	// own, spread over Users users; each run folds all of them with a group and a
	// Redis prefix of its own.
	Events     int                `json:"events"`
	Users      int                `json:"users"`
	Topologies []ScaleOutTopology `json:"topologies"`
}

// ScaleOutTopology is one topology's runs.
type ScaleOutTopology struct {
	Topology   string `json:"topology"` // single or cluster
	Partitions int    `json:"partitions"`
	// Replication is the topic's replication factor (min.insync.replicas 2 when 3).
	Replication int `json:"replication"`
	RedisNodes  int `json:"redisNodes"`
	// StartedByBench: bench started the topology's servers for the phase and stopped
	// them after it.
	StartedByBench bool          `json:"startedByBench"`
	Runs           []ScaleOutRun `json:"runs"`
	// Speedup is the mean events/s of the runs with two aggregators ÷ that with one.
	Speedup float64 `json:"speedup"`
}

// ScaleOutRun is one fold of the whole topic by Aggregators members of one group.
type ScaleOutRun struct {
	Aggregators int `json:"aggregators"`
	// EventsPerSec is the records ÷ Seconds: a backlog's fold, start-up and the group's
	// join included. (A steady rate from the shards' progress would flatter two
	// members: while their group forms, each has already fetched and decoded much of
	// its partitions, and then writes them out in a burst.)
	EventsPerSec float64 `json:"eventsPerSec"`
	// FirstWriteSeconds is from the processes' start to the first window in Redis
	// (start-up and the group's join); Seconds to the last record folded.
	FirstWriteSeconds float64 `json:"firstWriteSeconds"`
	Seconds           float64 `json:"seconds"`
	// AggregatorCores is the CPU the aggregators used over Seconds, in cores;
	// MachineBusyCores the whole machine's.
	AggregatorCores  float64 `json:"aggregatorCores"`
	MachineBusyCores float64 `json:"machineBusyCores"`
}

// scaleOutTarget is where one topology's servers are.
type scaleOutTarget struct {
	name        string
	brokers     []string
	redis       []string
	replication int
	started     bool // bench started it and stops it afterwards
}

// scaleOut measures, on each topology of -scaleout-topologies, how fast one aggregator
// and then two fold the same records: a topic of the phase's own is filled straight
// from bench (no ingest, no load generator taking cores while the aggregators run),
// and each run's group starts at its beginning with an empty Redis prefix, timed by the
// shards' bookkeeping (each shard's last folded offset, in Redis with every window).
func (b *bench) scaleOut(ctx context.Context) (*ScaleOutResult, error) {
	res := &ScaleOutResult{Events: b.cfg.scaleOutEvents, Users: b.cfg.scaleOutUsers}
	bin := filepath.Join(b.cfg.home, "bin", "bench-aggregator")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./services/aggregator")
	build.Dir, build.Stdout, build.Stderr = b.cfg.root, b.out, b.out
	if err := build.Run(); err != nil {
		return res, fmt.Errorf("building the aggregator: %w", err)
	}
	stamp := time.Now().UTC().Format("20060102t150405")
	for _, topo := range b.cfg.scaleOutTopologies {
		t, err := b.scaleOutTarget(ctx, topo)
		if err != nil {
			return res, err
		}
		r, err := b.scaleOutOn(ctx, t, bin, stamp)
		if t.started {
			fmt.Fprintf(b.out, "    stopping the %s topology bench started\n", topo)
			if err := b.clusterScript(ctx, "down").Run(); err != nil {
				b.note("stopping the cluster topology after the scale-out runs: %v", err)
			}
		}
		if r != nil {
			res.Topologies = append(res.Topologies, *r)
		}
		if err != nil {
			return res, fmt.Errorf("%s topology: %w", topo, err)
		}
	}
	return res, nil
}

// clusterScript is stack.sh on the cluster topology, in its own home.
func (b *bench) clusterScript(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(b.cfg.root, "deploy", "local", "stack.sh"), args...)
	cmd.Dir = b.cfg.root
	// bench's own stack settings name the single topology's folder and ports.
	cmd.Env = append(environWithoutPulse(), "PULSE_TOPOLOGY=cluster")
	cmd.Stdout, cmd.Stderr = b.out, b.out
	return cmd
}

// environWithoutPulse is bench's environment without Pulse's variables, for processes
// bench configures itself.
func environWithoutPulse() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PULSE_") {
			env = append(env, kv)
		}
	}
	return env
}

// scaleOutTarget finds topo's servers, starting the cluster topology when it is not up.
func (b *bench) scaleOutTarget(ctx context.Context, topo string) (scaleOutTarget, error) {
	if topo == "single" {
		return scaleOutTarget{name: topo, replication: 1,
			brokers: []string{fmt.Sprintf("127.0.0.1:%d", b.cfg.ports.kafka)},
			redis:   []string{fmt.Sprintf("127.0.0.1:%d", b.cfg.ports.redis)}}, nil
	}
	t := scaleOutTarget{name: topo, replication: 3}
	var pids bytes.Buffer
	cmd := b.clusterScript(ctx, "pids")
	cmd.Stdout = &pids
	if err := cmd.Run(); err != nil {
		return t, fmt.Errorf("stack.sh pids (cluster): %w", err)
	}
	// Eleven servers: six Redis nodes, three brokers, two Cassandra nodes.
	servers := 0
	for line := range strings.SplitSeq(pids.String(), "\n") {
		if name, _, _ := strings.Cut(line, " "); strings.HasPrefix(name, "redis-") || strings.HasPrefix(name, "kafka-") || strings.HasPrefix(name, "cassandra-") {
			servers++
		}
	}
	if servers < 11 {
		fmt.Fprintln(b.out, "    starting the cluster topology (make up TOPOLOGY=cluster)")
		if err := b.clusterScript(ctx, "up").Run(); err != nil {
			return t, fmt.Errorf("starting the cluster topology: %w", err)
		}
		t.started = true
	}
	var env bytes.Buffer
	cmd = b.clusterScript(ctx, "env")
	cmd.Stdout = &env
	if err := cmd.Run(); err != nil {
		return t, fmt.Errorf("stack.sh env (cluster): %w", err)
	}
	sc := bufio.NewScanner(&env)
	for sc.Scan() {
		k, v, _ := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		switch k {
		case "PULSE_KAFKA_BROKERS":
			t.brokers = strings.Split(v, ",")
		case "PULSE_REDIS_ADDR":
			t.redis = strings.Split(v, ",")
		}
	}
	if len(t.brokers) == 0 || len(t.redis) == 0 {
		return t, fmt.Errorf("stack.sh env (cluster) named no brokers or no Redis nodes:\n%s", env.String())
	}
	return t, nil
}

// scaleOutOn fills a topic on t and folds it with one aggregator, then with two.
func (b *bench) scaleOutOn(ctx context.Context, t scaleOutTarget, bin, stamp string) (*ScaleOutTopology, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(t.brokers...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: t.redis})
	defer rdb.Close()

	topics, err := adm.ListTopics(ctx, b.cfg.events)
	if err != nil {
		return nil, err
	}
	partitions := len(topics[b.cfg.events].Partitions)
	if partitions == 0 {
		return nil, fmt.Errorf("%s has no partitions on the %s topology", b.cfg.events, t.name)
	}
	res := &ScaleOutTopology{Topology: t.name, Partitions: partitions, Replication: t.replication,
		RedisNodes: len(t.redis), StartedByBench: t.started}
	events := "bench.scaleout." + stamp + ".events"
	changes := "bench.scaleout." + stamp + ".changes"
	var configs map[string]*string
	if t.replication > 1 {
		two := "2"
		configs = map[string]*string{"min.insync.replicas": &two}
	}
	for _, topic := range []string{events, changes} {
		r, err := adm.CreateTopic(ctx, int32(partitions), int16(t.replication), configs, topic)
		if err == nil {
			err = r.Err
		}
		if err != nil {
			return res, fmt.Errorf("creating %s: %w", topic, err)
		}
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, err := adm.DeleteTopics(dctx, events, changes); err != nil {
			b.note("deleting the scale-out topics on the %s topology: %v", t.name, err)
		}
	}()

	fmt.Fprintf(b.out, "    %s topology: %d partitions, replication %d, %d Redis node(s); producing %s events of %s users\n",
		t.name, partitions, t.replication, len(t.redis), num(float64(b.cfg.scaleOutEvents)), num(float64(b.cfg.scaleOutUsers)))
	start := time.Now()
	if err := produceScaleOut(ctx, cl, events, b.cfg.scaleOutEvents, b.cfg.scaleOutUsers); err != nil {
		return res, err
	}
	fmt.Fprintf(b.out, "    produced in %.1f s\n", time.Since(start).Seconds())
	ends, err := adm.ListEndOffsets(ctx, events)
	if err != nil {
		return res, err
	}
	end := make([]int64, partitions)
	for p := range partitions {
		o, _ := ends.Lookup(events, int32(p))
		end[p] = o.Offset
	}

	// One aggregator, then two, for -scaleout-rounds rounds: alternating, so neither
	// count gets only the first (or only the warmer) turn.
	var order []int
	for range b.cfg.scaleOutRounds {
		order = append(order, 1, 2)
	}
	for i, members := range order {
		id := fmt.Sprintf("bench-scaleout-%s-%s-%d", stamp, t.name, i+1)
		// Short enough to stay apart from deployments, as long as none needs to be.
		prefix := fmt.Sprintf("bso%d", members)
		if _, err := deletePrefix(ctx, rdb, prefix); err != nil {
			return res, err
		}
		run, err := b.scaleOutRun(ctx, t, bin, members, id, prefix, events, changes, end, rdb)
		if _, derr := deletePrefix(context.WithoutCancel(ctx), rdb, prefix); derr != nil {
			b.note("deleting the scale-out state under %s: %v", prefix, derr)
		}
		dr, derr := adm.DeleteGroup(context.WithoutCancel(ctx), id)
		if derr == nil {
			derr = dr.Err
		}
		if derr != nil {
			b.note("deleting the scale-out group %s: %v", id, derr)
		}
		if err != nil {
			return res, fmt.Errorf("%d aggregator(s): %w", members, err)
		}
		res.Runs = append(res.Runs, run)
		fmt.Fprintf(b.out, "    %d aggregator(s): %s events/s (first window after %.1f s, all in %.1f s; aggregators %.2f cores, machine %.2f)\n",
			members, num(run.EventsPerSec), run.FirstWriteSeconds, run.Seconds, run.AggregatorCores, run.MachineBusyCores)
	}
	res.Speedup = scaleOutSpeedup(res.Runs)
	return res, nil
}

// scaleOutSpeedup is the mean events/s of the runs with two aggregators ÷ that of the
// runs with one (0 when either is missing).
func scaleOutSpeedup(runs []ScaleOutRun) float64 {
	var sum [3]float64
	var n [3]int
	for _, r := range runs {
		if r.Aggregators == 1 || r.Aggregators == 2 {
			sum[r.Aggregators] += r.EventsPerSec
			n[r.Aggregators]++
		}
	}
	if n[1] == 0 || n[2] == 0 || sum[1] == 0 {
		return 0
	}
	return (sum[2] / float64(n[2])) / (sum[1] / float64(n[1]))
}

// produceScaleOut writes n events of users users to topic as ingest would (records.Event,
// acks from all in-sync replicas), in the mix loadgen's batches send: status 1, heartbeat
// 3, activity 1, statuses online 5, idle 2, offline 2, invisible 1.
func produceScaleOut(ctx context.Context, cl *kgo.Client, topic string, n, users int) error {
	rng := rand.New(rand.NewPCG(1, 2))
	statuses := []presence.Status{presence.Online, presence.Online, presence.Online, presence.Online, presence.Online,
		presence.Idle, presence.Idle, presence.Offline, presence.Offline, presence.Invisible}
	devices := []string{"web", "phone", "tablet"}
	const chunk = 10_000
	for i := 0; i < n; {
		batch := make([]*kgo.Record, 0, min(chunk, n-i))
		now := time.Now()
		for ; len(batch) < cap(batch); i++ {
			e := presence.Event{ID: "so" + strconv.Itoa(i), UserID: "so" + strconv.Itoa(rng.IntN(users)),
				DeviceID: devices[rng.IntN(len(devices))], OccurredAt: now, ReceivedAt: now, Source: presence.SourceAPI}
			switch k := rng.IntN(5); {
			case k == 0:
				e.Kind, e.Status = presence.KindStatus, statuses[rng.IntN(len(statuses))]
			case k == 4:
				e.Kind = presence.KindActivity
			default:
				e.Kind = presence.KindHeartbeat
			}
			r, err := records.Event(topic, &e)
			if err != nil {
				return err
			}
			batch = append(batch, r)
		}
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := cl.ProduceSync(pctx, batch...).FirstErr()
		cancel()
		if err != nil {
			return fmt.Errorf("producing the scale-out events: %w", err)
		}
	}
	return nil
}

// scaleOutRun starts members aggregators in group id and times their fold of events
// up to end, polling the shards' bookkeeping every 50 ms.
func (b *bench) scaleOutRun(ctx context.Context, t scaleOutTarget, bin string, members int, id, prefix, events, changes string,
	end []int64, rdb redis.UniversalClient) (ScaleOutRun, error) {
	run := ScaleOutRun{Aggregators: members}
	var total int64
	for _, e := range end {
		total += e
	}
	env := []string{
		"PULSE_HTTP_ADDR=127.0.0.1:0",
		"PULSE_KAFKA_BROKERS=" + strings.Join(t.brokers, ","),
		"PULSE_REDIS_ADDR=" + strings.Join(t.redis, ","),
		"PULSE_REDIS_PREFIX=" + prefix,
		"PULSE_AGGREGATOR_GROUP=" + id,
		"PULSE_TOPIC_EVENTS=" + events,
		"PULSE_TOPIC_CHANGES=" + changes,
		// The records are all there is: nothing older to restore from history.
		"PULSE_AGGREGATOR_REBUILD_FROM_HISTORY=false",
		// No device may time out during the runs: the second run would fold timeouts
		// the first never saw.
		"PULSE_OFFLINE_AFTER=1h",
		"PULSE_IDLE_AFTER=1h",
	}
	env = append(env, environWithoutPulse()...)
	busy0, _, _ := machineCPU(b.ticks)
	started := time.Now()
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			done := make(chan struct{})
			go func() { _ = p.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = p.Process.Kill()
				<-done
			}
		}
	}()
	for i := range members {
		logf, err := os.Create(filepath.Join(b.rawDir, fmt.Sprintf("scaleout-%s-%d-of-%d.log", t.name, i+1, members)))
		if err != nil {
			return run, err
		}
		defer logf.Close()
		cmd := exec.Command(bin)
		cmd.Env = append(env, "PULSE_KAFKA_CLIENT_ID=bench-scaleout-"+strconv.Itoa(i+1))
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			return run, fmt.Errorf("starting an aggregator: %w", err)
		}
		procs = append(procs, cmd)
	}

	store := statestore.New(rdb, prefix)
	ctx, cancel := context.WithTimeout(ctx, b.cfg.scaleOutLimit)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return run, fmt.Errorf("the fold had not finished after %s: %w", b.cfg.scaleOutLimit, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
		for _, p := range procs {
			if p.ProcessState != nil {
				return run, fmt.Errorf("an aggregator exited: %s", p.ProcessState)
			}
		}
		folded, all, err := foldedSoFar(ctx, store, end)
		if err != nil {
			return run, err
		}
		at := time.Since(started).Seconds()
		if folded > 0 && run.FirstWriteSeconds == 0 {
			run.FirstWriteSeconds = at
		}
		if all {
			run.Seconds = at
			break
		}
	}
	run.EventsPerSec = float64(total) / run.Seconds
	var cpu float64
	for _, p := range procs {
		if pt, err := readProc(strconv.Itoa(p.Process.Pid)); err == nil {
			cpu += float64(pt.UserTicks+pt.SysTicks) / b.ticks
		}
	}
	run.AggregatorCores = cpu / run.Seconds
	if busy1, _, ok := machineCPU(b.ticks); ok {
		run.MachineBusyCores = (busy1 - busy0) / run.Seconds
	}
	return run, nil
}

// foldedSoFar is how many of the records below end the shards' bookkeeping says were
// folded, and whether all were.
func foldedSoFar(ctx context.Context, store *statestore.Store, end []int64) (int64, bool, error) {
	var folded int64
	all := true
	for s, e := range end {
		bk, err := store.ShardBookkeeping(ctx, s)
		if err != nil {
			return 0, false, err
		}
		if !bk.Exists || bk.Rebuilding {
			all = all && e == 0
			continue
		}
		folded += min(bk.Offset+1, e)
		all = all && bk.Offset >= e-1
	}
	return folded, all, nil
}

func (m *markdown) scaleOut(r *ScaleOutResult) {
	m.p("## Scale-out: one aggregator, then two\n\n")
	m.p("%s events of %s users (loadgen's mix) produced straight into a topic of the phase's own, then folded from its start by one aggregator and by two sharing a consumer group, alternately, each run with a group and an empty Redis prefix of its own; events/s is the events ÷ the time from the aggregators' start to the last record folded (the shards' bookkeeping in Redis, polled every 50 ms), start-up and the group's join included. Everything shares this machine's cores, aggregators and servers alike.\n\n",
		num(float64(r.Events)), num(float64(r.Users)))
	m.p("| topology | partitions × replicas | Redis nodes | aggregators | events/s | first window | all folded | aggregator cores | machine cores busy | two ÷ one |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, t := range r.Topologies {
		for i, run := range t.Runs {
			speedup := ""
			if i == len(t.Runs)-1 && t.Speedup > 0 {
				speedup = fmt.Sprintf("%.2f× (means)", t.Speedup)
			}
			m.p("| %s | %d × %d | %d | %d | %s | %.1f s | %.1f s | %.2f | %.2f | %s |\n", t.Topology, t.Partitions, t.Replication,
				t.RedisNodes, run.Aggregators, num(run.EventsPerSec), run.FirstWriteSeconds, run.Seconds, run.AggregatorCores, run.MachineBusyCores, speedup)
		}
	}
	m.p("\n")
}
