// Package groups is the groups phase: a large group and many small rooms, their
// memberships written through query's API and folded by the aggregator as in
// production, over millions of registered users bulk-loaded into Redis. It measures a
// group's count and a page of its online members as a client pays them, Redis bytes
// per member and member events per second; and, when given a Centrifugo binary,
// Centrifugo's presence_stats on a channel of as many present users.
package groups

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/cmd/bench/internal/harness"
	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
	"github.com/pulse-presence/pulse/cmd/bench/internal/scale"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// Phase seeds -groups-users registered users, then writes and reads a large group and
// -groups-rooms small rooms, on an aggregator, a query instance, topics and a Redis
// prefix of its own, all removed afterwards.
var Phase = harness.Phase{Name: "groups", Before: "the groups phase", Title: "groups: a large group and small rooms",
	OwnProcesses: true,
	Run: func(ctx context.Context, env *harness.Env) (err error) {
		env.Res.Groups, err = run(ctx, env)
		return err
	}}

// topics are the phase's topics and the aggregator's consumer group.
type topics struct{ events, changes, group string }

// phase is what the steps of one run share.
type phase struct {
	env      *harness.Env
	cfg      harness.GroupsConfig
	fraction float64 // of the registered users online
	shards   int
	rdb      redis.UniversalClient
	store    *statestore.Store
	adm      *kadm.Client
	topics   topics
	svc      *services
	api      *api
}

func run(ctx context.Context, env *harness.Env) (*report.GroupsResult, error) {
	p := &phase{env: env, cfg: env.Cfg.Groups, fraction: env.Cfg.ScaleOnline}
	n, _, err := env.Lag.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	p.shards = n
	res := &report.GroupsResult{Users: p.cfg.Users, Shards: n}

	p.rdb = scale.Client(env)
	defer p.rdb.Close()
	// Whatever happens, the bulk-loaded keys go: they are gigabytes of a shared Redis.
	cleanup, err := scale.ClearPrefixes(ctx, env, p.rdb, 10*time.Minute, prefix)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	p.store = statestore.New(p.rdb, prefix)

	cl, err := kgo.NewClient(kgo.SeedBrokers(fmt.Sprintf("127.0.0.1:%d", env.Cfg.Ports.Kafka)),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	p.adm = kadm.NewClient(cl)
	stamp := time.Now().UTC().Format("20060102t150405")
	p.topics = topics{events: "bench.groups." + stamp + ".events", changes: "bench.groups." + stamp + ".changes", group: "bench-groups-" + stamp}
	if err := p.createTopics(ctx); err != nil {
		return nil, err
	}
	defer p.deleteTopics(ctx)

	bins, err := buildServices(ctx, env)
	if err != nil {
		return res, err
	}
	if err := p.seed(ctx, cl, res); err != nil {
		return res, err
	}
	started := time.Now()
	p.svc, err = startServices(ctx, env, bins, p.topics, p.cfg.Limit)
	if err != nil {
		return res, err
	}
	defer p.svc.stop()
	p.api = newAPI(p.svc.query.addr, p.svc.key, max(p.cfg.Readers, p.cfg.Writers)+2)
	if err := p.warmUp(ctx); err != nil {
		return res, fmt.Errorf("warm-up: %w", err)
	}
	res.AggregatorStartSeconds = time.Since(started).Seconds()
	fmt.Fprintf(env.Out, "    aggregator and query of the phase's own ready; every shard folding after %.1f s\n", res.AggregatorStartSeconds)

	if res.Large, err = p.large(ctx); err != nil {
		return res, fmt.Errorf("large group: %w", err)
	}
	if p.cfg.Rooms > 0 {
		small, err := p.small(ctx)
		if err != nil {
			return res, fmt.Errorf("small rooms: %w", err)
		}
		res.Small = &small
	}
	if p.cfg.Centrifugo == "" {
		env.Note("groups: Centrifugo's presence_stats not compared (-groups-centrifugo names no binary)")
		return res, nil
	}
	entries := cmp.Or(p.cfg.CentrifugoEntries, p.cfg.Members)
	c, err := centrifugo(ctx, env, p.cfg.Centrifugo, entries, p.cfg.CentrifugoCalls)
	if err != nil {
		// The comparison is optional: what failed is noted, Pulse's figures stand.
		env.Note("groups: Centrifugo's presence_stats not measured: %v", err)
		return res, nil
	}
	res.Centrifugo = c
	res.CentrifugoP50Speedup = report.Ratio(c.Ms.P50, res.Large.CountMs.P50)
	res.CentrifugoP99Speedup = report.Ratio(c.Ms.P99, res.Large.CountMs.P99)
	fmt.Fprintf(env.Out, "    Centrifugo presence_stats on %s entries: p50 %s, p99 %s: %s× the group's count at p50, %s× at p99\n",
		report.Num(float64(entries)), report.FmtMs(c.Ms.P50, c.Ms.Count), report.FmtMs(c.Ms.P99, c.Ms.Count),
		report.Sig(res.CentrifugoP50Speedup), report.Sig(res.CentrifugoP99Speedup))
	return res, nil
}

// createTopics makes the phase's topics with the events topic's partitions.
func (p *phase) createTopics(ctx context.Context) error {
	r, err := p.adm.CreateTopics(ctx, int32(p.shards), 1, nil, p.topics.events, p.topics.changes)
	if err == nil {
		err = r.Error()
	}
	if err != nil {
		return fmt.Errorf("creating %s and %s: %w", p.topics.events, p.topics.changes, err)
	}
	return nil
}

// deleteTopics removes the topics and the aggregator's consumer group, even after
// ctx ended.
func (p *phase) deleteTopics(ctx context.Context) {
	p.env.Cleanup(ctx, 30*time.Second, "deleting the groups phase's topics", func(ctx context.Context) error {
		dr, err := p.adm.DeleteGroup(ctx, p.topics.group)
		// A group that never committed does not exist.
		if err == nil && dr.Err != nil && !errors.Is(dr.Err, kerr.GroupIDNotFound) {
			err = dr.Err
		}
		_, terr := p.adm.DeleteTopics(ctx, p.topics.events, p.topics.changes)
		return errors.Join(err, terr)
	})
}
