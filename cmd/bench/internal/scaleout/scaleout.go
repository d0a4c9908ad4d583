// Package scaleout is the scaleout phase: the same records folded by one aggregator,
// then by two in one group, on the single topology and on the cluster one.
package scaleout

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/cmd/bench/internal/harness"
	"github.com/pulse-presence/pulse/cmd/bench/internal/probe"
	"github.com/pulse-presence/pulse/cmd/bench/internal/rebuild"
	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
	"github.com/pulse-presence/pulse/cmd/bench/internal/scale"
	"github.com/pulse-presence/pulse/cmd/internal/eventgen"
	"github.com/pulse-presence/pulse/internal/domain/records"
	"github.com/pulse-presence/pulse/internal/platform/redisx"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// target is where one topology's servers are.
type target struct {
	name        string
	brokers     []string
	redis       []string
	replication int
	started     bool // bench started it and stops it afterwards
}

// Phase measures, on each topology of -scaleout-topologies, how fast one aggregator
// and then two fold the same records: a topic of the phase's own is filled straight
// from bench (no ingest, no load generator taking cores while the aggregators run),
// and each run's group starts at its beginning with an empty Redis prefix, timed by the
// shards' bookkeeping (each shard's last folded offset, in Redis with every window).
var Phase = harness.Phase{Name: "scaleout", Before: "the scale-out runs", Title: "scale-out: the same records folded by one aggregator, then two",
	Run: func(ctx context.Context, env *harness.Env) (err error) {
		env.Res.ScaleOut, err = run(ctx, env)
		return err
	}}

func run(ctx context.Context, env *harness.Env) (*report.ScaleOutResult, error) {
	res := &report.ScaleOutResult{Events: env.Cfg.ScaleOutEvents, Users: env.Cfg.ScaleOutUsers}
	bin := filepath.Join(env.Cfg.Home, "bin", "bench-aggregator")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./services/aggregator")
	build.Dir, build.Stdout, build.Stderr = env.Cfg.Root, env.Out, env.Out
	if err := build.Run(); err != nil {
		return res, fmt.Errorf("building the aggregator: %w", err)
	}
	stamp := time.Now().UTC().Format("20060102t150405")
	for _, topo := range env.Cfg.ScaleOutTopologies {
		t, err := findTarget(ctx, env, topo)
		if err != nil {
			return res, err
		}
		r, err := scaleOutOn(ctx, env, t, bin, stamp)
		if t.started {
			fmt.Fprintf(env.Out, "    stopping the %s topology bench started\n", topo)
			if err := env.Stack.ClusterScript(ctx, "down").Run(); err != nil {
				env.Note("stopping the cluster topology after the scale-out runs: %v", err)
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

// findTarget finds topo's servers, starting the cluster topology when it is not up.
func findTarget(ctx context.Context, env *harness.Env, topo string) (target, error) {
	if topo == "single" {
		return target{name: topo, replication: 1,
			brokers: []string{fmt.Sprintf("127.0.0.1:%d", env.Cfg.Ports.Kafka)},
			redis:   []string{fmt.Sprintf("127.0.0.1:%d", env.Cfg.Ports.Redis)}}, nil
	}
	t := target{name: topo, replication: 3}
	pids, err := env.Stack.ClusterPids(ctx)
	if err != nil {
		return t, fmt.Errorf("cluster: %w", err)
	}
	// Eleven servers: six Redis nodes, three brokers, two Cassandra nodes.
	servers := 0
	for name := range pids {
		if strings.HasPrefix(name, "redis-") || strings.HasPrefix(name, "kafka-") || strings.HasPrefix(name, "cassandra-") {
			servers++
		}
	}
	if servers < 11 {
		fmt.Fprintln(env.Out, "    starting the cluster topology (make up TOPOLOGY=cluster)")
		if err := env.Stack.ClusterScript(ctx, "up").Run(); err != nil {
			return t, fmt.Errorf("starting the cluster topology: %w", err)
		}
		t.started = true
	}
	var vars bytes.Buffer
	cmd := env.Stack.ClusterScript(ctx, "env")
	cmd.Stdout = &vars
	if err := cmd.Run(); err != nil {
		return t, fmt.Errorf("stack.sh env (cluster): %w", err)
	}
	for line := range strings.Lines(vars.String()) {
		k, v, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "export "), "=")
		switch k {
		case "PULSE_KAFKA_BROKERS":
			t.brokers = strings.Split(v, ",")
		case "PULSE_REDIS_ADDR":
			t.redis = strings.Split(v, ",")
		}
	}
	if len(t.brokers) == 0 || len(t.redis) == 0 {
		return t, fmt.Errorf("stack.sh env (cluster) named no brokers or no Redis nodes:\n%s", vars.String())
	}
	return t, nil
}

// scaleOutOn fills a topic on t and folds it with one aggregator, then with two.
func scaleOutOn(ctx context.Context, env *harness.Env, t target, bin, stamp string) (*report.ScaleOutTopology, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(t.brokers...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	rdb := redisx.NewClient(redisx.Config{Addrs: t.redis})
	defer rdb.Close()

	topics, err := adm.ListTopics(ctx, env.Cfg.Events)
	if err != nil {
		return nil, err
	}
	partitions := len(topics[env.Cfg.Events].Partitions)
	if partitions == 0 {
		return nil, fmt.Errorf("%s has no partitions on the %s topology", env.Cfg.Events, t.name)
	}
	res := &report.ScaleOutTopology{Topology: t.name, Partitions: partitions, Replication: t.replication,
		RedisNodes: len(t.redis), StartedByBench: t.started}
	events := "bench.scaleout." + stamp + ".events"
	changes := "bench.scaleout." + stamp + ".changes"
	var configs map[string]*string
	if t.replication > 1 {
		two := "2"
		configs = map[string]*string{"min.insync.replicas": &two}
	}
	r, err := adm.CreateTopics(ctx, int32(partitions), int16(t.replication), configs, events, changes)
	if err == nil {
		err = r.Error()
	}
	if err != nil {
		return res, fmt.Errorf("creating %s and %s: %w", events, changes, err)
	}
	defer env.Cleanup(ctx, 30*time.Second, "deleting the scale-out topics on the "+t.name+" topology", func(ctx context.Context) error {
		_, err := adm.DeleteTopics(ctx, events, changes)
		return err
	})

	fmt.Fprintf(env.Out, "    %s topology: %d partitions, replication %d, %d Redis node(s); producing %s events of %s users\n",
		t.name, partitions, t.replication, len(t.redis), report.Num(float64(env.Cfg.ScaleOutEvents)), report.Num(float64(env.Cfg.ScaleOutUsers)))
	start := time.Now()
	if err := produceScaleOut(ctx, cl, events, env.Cfg.ScaleOutEvents, env.Cfg.ScaleOutUsers); err != nil {
		return res, err
	}
	fmt.Fprintf(env.Out, "    produced in %.1f s\n", time.Since(start).Seconds())
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
	for i := range 2 * env.Cfg.ScaleOutRounds {
		members := 1 + i%2
		id := fmt.Sprintf("bench-scaleout-%s-%s-%d", stamp, t.name, i+1)
		// Short enough to stay apart from deployments, as long as none needs to be.
		prefix := fmt.Sprintf("bso%d", members)
		cleanup, err := scale.ClearPrefixes(ctx, env, rdb, 5*time.Minute, prefix)
		if err != nil {
			return res, err
		}
		run, err := scaleOutRun(ctx, env, t, bin, members, id, prefix, events, changes, end, rdb)
		cleanup()
		env.Cleanup(ctx, 30*time.Second, "deleting the scale-out group "+id, func(ctx context.Context) error {
			dr, err := adm.DeleteGroup(ctx, id)
			return cmp.Or(err, dr.Err)
		})
		if err != nil {
			return res, fmt.Errorf("%d aggregator(s): %w", members, err)
		}
		res.Runs = append(res.Runs, run)
		fmt.Fprintf(env.Out, "    %d aggregator(s): %s events/s (first window after %.1f s, all in %.1f s; aggregators %.2f cores, machine %.2f)\n",
			members, report.Num(run.EventsPerSec), run.FirstWriteSeconds, run.Seconds, run.AggregatorCores, run.MachineBusyCores)
	}
	res.Speedup = scaleOutSpeedup(res.Runs)
	return res, nil
}

// scaleOutSpeedup is the mean events/s of the runs with two aggregators ÷ that of the
// runs with one (0 when either is missing).
func scaleOutSpeedup(runs []report.ScaleOutRun) float64 {
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
// acks from all in-sync replicas), in the mix loadgen's batches send.
func produceScaleOut(ctx context.Context, cl *kgo.Client, topic string, n, users int) error {
	rng := rand.New(rand.NewPCG(1, 2))
	g := eventgen.Gen{Prefix: "so", Users: users, Devices: 3, Kinds: eventgen.MustParseMix(eventgen.DefaultKinds)}
	const chunk = 10_000
	for i := 0; i < n; {
		batch := make([]*kgo.Record, 0, min(chunk, n-i))
		now := time.Now()
		for ; len(batch) < cap(batch); i++ {
			e := g.Event(rng).Presence(now)
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
// up to end, polling the shards' bookkeeping every 50 ms (rebuild.AwaitFolded).
func scaleOutRun(ctx context.Context, env *harness.Env, t target, bin string, members int, id, prefix, events, changes string,
	end []int64, rdb redis.UniversalClient) (report.ScaleOutRun, error) {
	run := report.ScaleOutRun{Aggregators: members}
	var total int64
	for _, e := range end {
		total += e
	}
	vars := []string{
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
	vars = append(vars, harness.EnvironWithoutPulse()...)
	busy0 := probe.Snapshot(nil)[probe.Machine]
	started := time.Now()
	// The aggregators get SIGTERM when the run ends, and SIGKILL 30 s later. Each has a
	// goroutine waiting for it, which says when one exits: only Wait fills ProcessState.
	procCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	var procs []*exec.Cmd
	var waits sync.WaitGroup
	exited := make(chan string, members)
	defer func() {
		stop()
		waits.Wait()
	}()
	for i := range members {
		logf, err := os.Create(filepath.Join(env.RawDir, fmt.Sprintf("scaleout-%s-%d-of-%d.log", t.name, i+1, members)))
		if err != nil {
			return run, err
		}
		defer logf.Close()
		cmd := exec.CommandContext(procCtx, bin)
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
		cmd.WaitDelay = 30 * time.Second
		cmd.Env = append(vars, "PULSE_KAFKA_CLIENT_ID=bench-scaleout-"+strconv.Itoa(i+1))
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			return run, fmt.Errorf("starting an aggregator: %w", err)
		}
		procs = append(procs, cmd)
		waits.Go(func() {
			_ = cmd.Wait()
			exited <- cmd.ProcessState.String()
		})
	}

	store := statestore.New(rdb, prefix)
	ctx, cancel := context.WithTimeout(ctx, env.Cfg.ScaleOutLimit)
	defer cancel()
	err := rebuild.AwaitFolded(ctx, store, end, func(folded int64) error {
		select {
		case state := <-exited:
			return fmt.Errorf("an aggregator exited: %s", state)
		default:
		}
		if folded > 0 && run.FirstWriteSeconds == 0 {
			run.FirstWriteSeconds = time.Since(started).Seconds()
		}
		return nil
	})
	run.Seconds = time.Since(started).Seconds()
	switch {
	case err != nil && ctx.Err() != nil:
		return run, fmt.Errorf("the fold had not finished after %s: %w", env.Cfg.ScaleOutLimit, err)
	case err != nil:
		return run, err
	}
	run.EventsPerSec = float64(total) / run.Seconds
	var cpu float64
	for _, p := range procs {
		c, _ := probe.ProcessCPU(p.Process.Pid)
		cpu += c
	}
	run.AggregatorCores = cpu / run.Seconds
	if busy1, ok := probe.Snapshot(nil)[probe.Machine]; ok {
		run.MachineBusyCores = (busy1 - busy0) / run.Seconds
	}
	return run, nil
}
