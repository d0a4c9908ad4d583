package groups

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
	"github.com/pulse-presence/pulse/cmd/bench/internal/scale"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// seed bulk-loads the registered users as the scale phase does — through
// statestore.WriteWindow, one window of -scale-window users of a shard at a time, the
// aggregator's own write — and then puts on each partition of the phase's topic as
// many filler records as the shard's windows, so that the aggregator, which resumes a
// shard after the offset Redis holds, folds every membership written afterwards.
// Folding millions of users' status events through Kafka would take the 2 cores
// longer than the rest of the phase; memberships, the phase's subject, go through
// query and the aggregator.
func (p *phase) seed(ctx context.Context, cl *kgo.Client, res *report.GroupsResult) error {
	env := p.env
	for i := range p.cfg.Users {
		if scale.Online(i, p.fraction) {
			res.OnlineUsers++
		}
	}
	res.Seeding = fmt.Sprintf("bulk-loaded through statestore.WriteWindow (the scale phase's loader: windows of %d users, %d writers, minimal states)",
		env.Cfg.ScaleWindow, env.Cfg.ScaleWorkers)
	fmt.Fprintf(env.Out, "    bulk-loading %s registered users (%s online) in %d shards under %s:\n",
		report.Num(float64(p.cfg.Users)), report.Num(float64(res.OnlineUsers)), p.shards, prefix)
	start := time.Now()
	if err := p.store.RegisterShards(ctx, p.shards, statestore.DefaultBuckets); err != nil {
		return err
	}
	if err := p.store.MarkWhole(ctx, p.shards); err != nil {
		return err
	}
	_, _, err := scale.WriteWindows(ctx, p.cfg.Users, p.shards, env.Cfg.ScaleWindow, env.Cfg.ScaleWorkers, p.fraction, time.Time{},
		func(ctx context.Context, w *statestore.Window) error {
			_, err := p.store.WriteWindow(ctx, w)
			return err
		})
	if err != nil {
		return fmt.Errorf("bulk-loading the registered users: %w", err)
	}
	res.LoadSeconds = time.Since(start).Seconds()
	c, err := p.store.Counts(ctx)
	if err != nil {
		return err
	}
	if c.Registered != uint64(p.cfg.Users) || c.Online != uint64(res.OnlineUsers) {
		return fmt.Errorf("counts after the bulk load: %d registered, %d online; loaded %d and %d", c.Registered, c.Online, p.cfg.Users, res.OnlineUsers)
	}
	fmt.Fprintf(env.Out, "      loaded in %.1f s\n", res.LoadSeconds)
	return p.fill(ctx, cl)
}

// fill produces each shard's filler records (fillers).
func (p *phase) fill(ctx context.Context, cl *kgo.Client) error {
	var total int64
	for sh := range p.shards {
		bk, err := p.store.ShardBookkeeping(ctx, sh)
		if err != nil {
			return err
		}
		n := bk.Offset + 1
		if !bk.Exists || n <= 0 {
			continue
		}
		recs, err := fillers(p.topics.events, int32(sh), n, time.Now())
		if err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = cl.ProduceSync(pctx, recs...).FirstErr()
		cancel()
		if err != nil {
			return fmt.Errorf("producing shard %d's filler records: %w", sh, err)
		}
		total += n
	}
	ends, err := p.adm.ListEndOffsets(ctx, p.topics.events)
	if err != nil {
		return err
	}
	// Each partition must end where its shard's bookkeeping says it folded.
	for sh := range p.shards {
		bk, err := p.store.ShardBookkeeping(ctx, sh)
		if err != nil {
			return err
		}
		if o, _ := ends.Lookup(p.topics.events, int32(sh)); o.Offset != bk.Offset+1 {
			return fmt.Errorf("partition %d ends at %d, its shard holds offset %d", sh, o.Offset, bk.Offset)
		}
	}
	fmt.Fprintf(p.env.Out, "      %s filler records put where the bulk load's windows stand\n", report.Num(float64(total)))
	return nil
}
