// Package scale is the scale phase, counts and memory with millions of registered users
// bulk-loaded into Redis in Pulse's layout and in the seed's; it also holds the
// bulk loader and the Redis helpers the limits and scaleout phases share.
package scale

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/pulse-presence/pulse/cmd/bench/internal/harness"
	"github.com/pulse-presence/pulse/cmd/bench/internal/probe"
	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
	"github.com/pulse-presence/pulse/cmd/internal/eventgen"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/shard"
	"github.com/pulse-presence/pulse/internal/platform/redisx"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
	"github.com/pulse-presence/pulse/services/query/countcache"
)

// Prefixes of the bulk-loaded layouts: apart from any deployment's, and fixed, so a
// run that died before cleaning up is cleaned up by the next. Both are as long as
// Pulse's default prefix "pulse", since key lengths weigh in the memory per user.
const (
	scalePulsePrefix    = "bpuls"
	scaleBaselinePrefix = "bseed"
)

// UserID is the id of bulk-loaded user i, the same in both layouts.
func UserID(i int) string { return "u" + strconv.Itoa(i) }

// Online says whether bulk-loaded user i is online: a hash of i, so the online
// users are spread over the index space as real ones are (not one dense run, which
// roaring would store as a handful of bytes).
func Online(i int, fraction float64) bool {
	return float64(eventgen.Splitmix(uint64(i))%1_000_000) < fraction*1_000_000
}

// seen is when bulk-loaded user i was last seen: within the last 30 s when online,
// the last day otherwise. Both layouts store the same times.
func seen(i int, online bool, now time.Time) time.Time {
	if online {
		return now.Add(-time.Duration(eventgen.Splitmix(uint64(i))%30_000) * time.Millisecond)
	}
	return now.Add(-time.Duration(eventgen.Splitmix(uint64(i))%86_400) * time.Second)
}

// Phase measures counts and memory with -scale-users users in Pulse's layout, then in
// the baseline's, one after the other on the same Redis, deleting each afterwards.
// The bulk load does not go through the consumers, but its counts are timed on the
// same cores a catching-up history would load: it waits for them too.
var Phase = harness.Phase{Name: "scale", Before: "the scale phase", Title: "counts and memory at scale",
	Run: func(ctx context.Context, env *harness.Env) error {
		s, err := run(ctx, env)
		if err == nil {
			env.Res.Scale = s
		}
		return err
	}}

// Client is a client of the stack's Redis for bulk writes.
func Client(env *harness.Env) redis.UniversalClient {
	return redisx.NewClient(redisx.Config{Addrs: []string{fmt.Sprintf("127.0.0.1:%d", env.Cfg.Ports.Redis)},
		PoolSize: 2 * env.Cfg.ScaleWorkers, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
}

func run(ctx context.Context, env *harness.Env) (*report.ScaleResult, error) {
	rdb := Client(env)
	defer rdb.Close()
	shards := env.Cfg.ScaleShards
	if shards == 0 {
		n, _, err := env.Lag.Partitions(ctx)
		if err != nil {
			return nil, err
		}
		shards = n
	}
	res := &report.ScaleResult{Users: env.Cfg.ScaleUsers, OnlineFraction: env.Cfg.ScaleOnline, Shards: shards}
	for i := range env.Cfg.ScaleUsers {
		if Online(i, env.Cfg.ScaleOnline) {
			res.Online++
		}
	}
	// Whatever happens, the bulk-loaded keys go: they are gigabytes of a shared Redis.
	cleanup, err := ClearPrefixes(ctx, env, rdb, 10*time.Minute, scalePulsePrefix, scaleBaselinePrefix)
	if err != nil {
		return nil, err
	}
	defer cleanup()

	fmt.Fprintf(env.Out, "    Pulse's layout: %d users (%d online) in %d shards under %s:\n", res.Users, res.Online, shards, scalePulsePrefix)
	if res.Pulse, err = scalePulse(ctx, env, rdb, shards, res.Online); err != nil {
		return res, err
	}
	fmt.Fprintf(env.Out, "      loaded in %.1fs; %.1f B/registered user, %.3f B/online user (bitmaps); counts p50 %s p99 %s\n",
		res.Pulse.LoadSeconds, res.Pulse.BytesPerRegisteredUser, res.Pulse.BytesPerOnlineUser,
		report.FmtMs(res.Pulse.CountsMs.P50, 1), report.FmtMs(res.Pulse.CountsMs.P99, 1))
	if _, err := redisx.DeletePrefix(ctx, rdb, scalePulsePrefix); err != nil {
		return res, err
	}
	fmt.Fprintf(env.Out, "    baseline (seed) layout under %s:\n", scaleBaselinePrefix)
	if res.Baseline, err = scaleBaseline(ctx, env, rdb, res.Online); err != nil {
		return res, err
	}
	fmt.Fprintf(env.Out, "      loaded in %.1fs; %.1f B/registered user, %.1f B/online user (sorted set); counts p50 %s p99 %s\n",
		res.Baseline.LoadSeconds, res.Baseline.BytesPerRegisteredUser, res.Baseline.BytesPerOnlineUser,
		report.FmtMs(res.Baseline.CountsMs.P50, 1), report.FmtMs(res.Baseline.CountsMs.P99, 1))

	res.CountsP50Speedup = report.Ratio(res.Baseline.CountsMs.P50, res.Pulse.CountsMs.P50)
	res.CountsP99Speedup = report.Ratio(res.Baseline.CountsMs.P99, res.Pulse.CountsMs.P99)
	res.OnlineMemoryRatio = report.Ratio(res.Baseline.BytesPerOnlineUser, res.Pulse.BytesPerOnlineUser)
	res.RegisteredMemoryRatio = report.Ratio(res.Baseline.BytesPerRegisteredUser, res.Pulse.BytesPerRegisteredUser)
	return res, nil
}

// scalePulse bulk-loads Pulse's layout through statestore, as the aggregator writes
// it (one WriteWindow per shard and window), then measures memory and Counts.
func scalePulse(ctx context.Context, env *harness.Env, rdb redis.UniversalClient, shards, online int) (report.Layout, error) {
	l := report.Layout{Prefix: scalePulsePrefix, Parts: map[string]int64{},
		CountsCall:      fmt.Sprintf("countcache.Cache.Get as GET /v1/online/count uses it: the counts held in memory, re-read from Redis every %v in the background (query's default)", report.CountsInterval),
		RedisCountsCall: fmt.Sprintf("statestore.Store.Counts, the cache's re-read: one pipeline of HMGET cnt + HGET meta next per shard (%d shards)", shards)}
	store := statestore.New(rdb, scalePulsePrefix)
	err := loadAndMeasure(ctx, env, rdb, &l, func(ctx context.Context) error {
		if err := store.RegisterShards(ctx, shards, statestore.DefaultBuckets); err != nil {
			return err
		}
		// The bulk load writes whole shards itself.
		if err := store.MarkWhole(ctx, shards); err != nil {
			return err
		}
		_, _, err := WriteWindows(ctx, env.Cfg.ScaleUsers, shards, env.Cfg.ScaleWindow, env.Cfg.ScaleWorkers, env.Cfg.ScaleOnline, time.Time{},
			func(ctx context.Context, w *statestore.Window) error { _, err := store.WriteWindow(ctx, w); return err })
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("bulk-loading Pulse's layout: %w", err)
		}
		return err
	})
	if err != nil {
		return l, err
	}
	if err := pulseParts(ctx, rdb, store, shards, &l); err != nil {
		return l, err
	}
	l.OnlineStructureBytes = l.Parts["onlineBitmaps"]
	l.BytesPerOnlineUser = float64(l.OnlineStructureBytes) / float64(online)
	err = pulseCounts(ctx, env, store, online, &l)
	return l, err
}

// loadAndMeasure runs load and records in l how long it took and how much Redis's
// memory grew.
func loadAndMeasure(ctx context.Context, env *harness.Env, rdb redis.UniversalClient, l *report.Layout, load func(context.Context) error) error {
	mem0, err := QuietMemory(ctx, rdb)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := load(ctx); err != nil {
		return err
	}
	l.LoadSeconds = time.Since(start).Seconds()
	mem1, err := QuietMemory(ctx, rdb)
	if err != nil {
		return err
	}
	l.UsedMemoryBytes = mem1 - mem0
	l.BytesPerRegisteredUser = float64(l.UsedMemoryBytes) / float64(env.Cfg.ScaleUsers)
	return nil
}

// pulseParts breaks the memory of Pulse's layout down by key family into l.Parts.
func pulseParts(ctx context.Context, rdb redis.UniversalClient, store *statestore.Store, shards int, l *report.Layout) error {
	keys := store.Keys()
	var bitmapKeys []string
	for sh := range shards {
		bitmapKeys = append(bitmapKeys, keys.Bitmap(sh, presence.Online))
	}
	var err error
	if l.Parts["onlineBitmaps"], err = MemoryOf(ctx, rdb, bitmapKeys); err != nil {
		return err
	}
	// The bucketed families are named from the layout (buckets per shard, and one rev
	// bucket per 128 registered users) rather than found by SCAN, which would walk every
	// key of the shared Redis. Every key is measured, pipelined 1,000 at a time: MEMORY
	// USAGE of a listpack-encoded hash is O(1), so 10M users (about 210,000 keys) take
	// seconds. It counts the listpack's bytes, not the allocator's rounding of them,
	// which stays in the rest.
	perShard, err := store.Buckets(ctx)
	if err != nil {
		return err
	}
	counts, err := store.ShardCounts(ctx, shards)
	if err != nil {
		return err
	}
	var stateKeys, revKeys []string
	for sh := range shards {
		for bk := range perShard {
			stateKeys = append(stateKeys, keys.State(sh, bk))
		}
		for i := uint64(0); i < counts[sh].Registered; i += 128 {
			revKeys = append(revKeys, keys.RevBucket(sh, uint32(i)))
		}
	}
	if l.Parts["stateBuckets"], err = MemoryOf(ctx, rdb, stateKeys); err != nil {
		return err
	}
	if l.Parts["revBuckets"], err = MemoryOf(ctx, rdb, revKeys); err != nil {
		return err
	}
	var strlen int64
	for sh := range shards {
		n, err := rdb.StrLen(ctx, keys.Bitmap(sh, presence.Online)).Result()
		if err != nil {
			return err
		}
		strlen += n
	}
	l.Parts["onlineBitmapsPayload"] = strlen
	l.Parts["rest"] = l.UsedMemoryBytes - l.Parts["onlineBitmaps"] - l.Parts["stateBuckets"] - l.Parts["revBuckets"]
	return nil
}

// pulseCounts checks the loaded counts and times them twice: the Redis read, and a
// count as a request pays it.
func pulseCounts(ctx context.Context, env *harness.Env, store *statestore.Store, online int, l *report.Layout) error {
	c, err := store.Counts(ctx)
	if err != nil {
		return err
	}
	if c.Registered != uint64(env.Cfg.ScaleUsers) || c.Online != uint64(online) {
		return fmt.Errorf("counts after the bulk load: %d registered, %d online; loaded %d and %d", c.Registered, c.Online, env.Cfg.ScaleUsers, online)
	}
	l.CountsOnline = c.Online
	if l.RedisCountsMs, _, err = timeCounts(ctx, env, func() error { _, err := store.Counts(ctx); return err }); err != nil {
		return err
	}
	// What a count request costs: the query service answers from a cache the background
	// loop refreshes, so the Redis read above happens once per interval, not per request.
	cache := countcache.New(store.Counts, countcache.Config{Interval: report.CountsInterval, MaxAge: time.Second, Timeout: 5 * time.Second}, slog.New(slog.DiscardHandler))
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = cache.Run(cctx) }()
	l.CountsMs, l.CountsMachine, err = timeCounts(ctx, env, func() error {
		s, err := cache.Get(ctx)
		if err == nil && s.Counts.Online != uint64(online) {
			err = fmt.Errorf("cached count %d online, loaded %d", s.Counts.Online, online)
		}
		return err
	})
	return err
}

// MemoryOf sums MEMORY USAGE (every element: SAMPLES 0) of keys, in pipelines of 1,000.
func MemoryOf(ctx context.Context, rdb redis.UniversalClient, keys []string) (int64, error) {
	var sum int64
	for lo := 0; lo < len(keys); lo += 1000 {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.IntCmd, 0, 1000)
		for _, k := range keys[lo:min(lo+1000, len(keys))] {
			cmds = append(cmds, pipe.MemoryUsage(ctx, k, 0))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return 0, fmt.Errorf("MEMORY USAGE of %d keys: %w", len(cmds), err)
		}
		for _, c := range cmds {
			sum += c.Val()
		}
	}
	return sum, nil
}

// WriteWindows deals users u0 … u(n-1) to their shards (the partition Kafka would give
// them) and has workers writers write each shard's windows of size users in order,
// with the shard's cumulative online bitmap, as the aggregator does; states are
// minimal (index, status, times, offset). With a deadline it stops there, leaving the
// shards' last, partial windows unwritten; it answers the users and windows written.
func WriteWindows(ctx context.Context, n, shards, size, workers int, online float64, deadline time.Time,
	write func(context.Context, *statestore.Window) error) (users, windows int64, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	workers = min(workers, shards)
	type job struct {
		shard int
		users []int
	}
	jobs := make([]chan job, workers)
	for i := range jobs {
		jobs[i] = make(chan job, 4)
	}
	var written, wins atomic.Int64
	now := time.Now()
	over := func() bool { return ctx.Err() != nil || !deadline.IsZero() && time.Now().After(deadline) }
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			states := map[int]*scaleShard{}
			for j := range jobs[w] {
				if over() {
					continue
				}
				s := states[j.shard]
				if s == nil {
					s = &scaleShard{online: roaring.New()}
					states[j.shard] = s
				}
				if err := write(ctx, s.window(j.shard, j.users, online, now)); err != nil {
					cancel(err)
					continue
				}
				written.Add(int64(len(j.users)))
				wins.Add(1)
			}
		})
	}
	pending := make([][]int, shards)
	send := func(sh int) {
		select {
		case jobs[sh%workers] <- job{sh, pending[sh]}:
		case <-ctx.Done():
		}
		pending[sh] = nil
	}
	for i := 0; i < n && !over(); i++ {
		sh := shard.For(UserID(i), shards)
		if pending[sh] = append(pending[sh], i); len(pending[sh]) >= size {
			send(sh)
		}
	}
	for sh := range pending {
		if len(pending[sh]) > 0 && deadline.IsZero() {
			send(sh)
		}
	}
	for _, ch := range jobs {
		close(ch)
	}
	wg.Wait()
	return written.Load(), wins.Load(), context.Cause(ctx)
}

// scaleShard is what the aggregator keeps of a shard between its windows.
type scaleShard struct {
	next   uint32 // the next user's index
	offset int64  // stands for the window's last Kafka offset
	online *roaring.Bitmap
}

// window is the shard's next window, registering users with minimal states.
func (s *scaleShard) window(shard int, users []int, fraction float64, now time.Time) *statestore.Window {
	win := &statestore.Window{Shard: shard, LastOffset: s.offset, Users: make(map[string]*presence.User, len(users))}
	win.Bitmaps = [3]*roaring.Bitmap{s.online, roaring.New(), roaring.New()}
	win.Dirty[0] = true
	for _, i := range users {
		id := UserID(i)
		online := Online(i, fraction)
		seen := seen(i, online, now)
		u := &presence.User{Index: s.next, Status: presence.Offline, Offset: s.offset, LastSeen: seen, LastUpdated: seen, LastActive: seen}
		u.ResetPublic()
		if online {
			u.Status = presence.Online
			s.online.Add(s.next)
		}
		win.NewIDs = append(win.NewIDs, statestore.NewID{UserID: id, Index: s.next})
		win.Users[id] = u
		s.next++
	}
	win.Next = s.next
	s.offset++
	return win
}

// scaleBaseline bulk-loads the seed's direct layout — per user HSET <p>:user:<id>
// status … lastUpdated …, and for online users ZADD <p>:online <lastSeen ms> <id> —
// then measures memory and its online count, one ZCOUNT of the last minute.
func scaleBaseline(ctx context.Context, env *harness.Env, rdb redis.UniversalClient, online int) (report.Layout, error) {
	zkey := scaleBaselinePrefix + ":online"
	l := report.Layout{Prefix: scaleBaselinePrefix, Parts: map[string]int64{},
		CountsCall: "ZCOUNT " + zkey + " <T−60 s> +inf: users seen within the offline timeout before T, the load's instant"}
	// The layout's last-seen times are taken at one instant, asOf, and the count asks
	// for the minute before it, not before the wall clock: loading 10M users takes
	// longer than a minute, and a window sliding with the wall clock would count none
	// of them. ZCOUNT costs the same whatever its bounds.
	asOf := time.Now()
	if err := loadAndMeasure(ctx, env, rdb, &l, func(ctx context.Context) error { return loadBaseline(ctx, env, rdb, zkey, asOf) }); err != nil {
		return l, err
	}
	z, err := rdb.MemoryUsage(ctx, zkey, 0).Result()
	if err != nil {
		return l, fmt.Errorf("MEMORY USAGE %s: %w", zkey, err)
	}
	l.Parts["onlineSortedSet"] = z
	l.Parts["userHashesAndRest"] = l.UsedMemoryBytes - z
	l.OnlineStructureBytes = z
	l.BytesPerOnlineUser = float64(z) / float64(online)

	count := func() (int64, error) {
		return rdb.ZCount(ctx, zkey, strconv.FormatInt(asOf.Add(-time.Minute).UnixMilli(), 10), "+inf").Result()
	}
	n, err := count()
	if err != nil {
		return l, err
	}
	if n != int64(online) {
		return l, fmt.Errorf("baseline ZCOUNT after the bulk load: %d online, loaded %d", n, online)
	}
	l.CountsOnline = uint64(n)
	l.CountsMs, l.CountsMachine, err = timeCounts(ctx, env, func() error { _, err := count(); return err })
	return l, err
}

// loadBaseline writes every user in the seed's layout as of the instant now, a
// pipeline per -scale-window users, from -scale-workers writers.
func loadBaseline(ctx context.Context, env *harness.Env, rdb redis.UniversalClient, zkey string, now time.Time) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(env.Cfg.ScaleWorkers)
	for lo := 0; lo < env.Cfg.ScaleUsers && gctx.Err() == nil; lo += env.Cfg.ScaleWindow {
		g.Go(func() error {
			pipe := rdb.Pipeline()
			for i := lo; i < min(lo+env.Cfg.ScaleWindow, env.Cfg.ScaleUsers); i++ {
				id := UserID(i)
				online := Online(i, env.Cfg.ScaleOnline)
				seen := seen(i, online, now)
				status := "offline"
				if online {
					status = "online"
				}
				pipe.HSet(gctx, scaleBaselinePrefix+":user:"+id, "status", status, "lastUpdated", seen.UTC().Format(seedTime))
				if online {
					pipe.ZAdd(gctx, zkey, redis.Z{Score: float64(seen.UnixMilli()), Member: id})
				}
			}
			if _, err := pipe.Exec(gctx); err != nil {
				return fmt.Errorf("bulk-loading the baseline: %w", err)
			}
			return nil
		})
	}
	return cmp.Or(g.Wait(), ctx.Err())
}

// seedTime is how the seed API writes lastUpdated.
const seedTime = "2006-01-02T15:04:05.000000Z"

// timeCounts times -scale-calls counts reads and what the machine did meanwhile.
func timeCounts(ctx context.Context, env *harness.Env, fn func() error) (report.Quantiles, report.MachineCPU, error) {
	before := env.CPU()
	start := time.Now()
	q, err := timeCalls(ctx, env.Cfg.ScaleCalls, fn)
	elapsed := time.Since(start)
	// /proc counts CPU in ticks of 10 ms: over less than a second the machine's share
	// would be mostly rounding, so it is left unknown.
	if elapsed < time.Second {
		return q, report.MachineCPU{}, err
	}
	return q, probe.MachineOver(probe.Delta(before, env.CPU()), elapsed.Seconds()), err
}

// timeCalls times n sequential calls of fn after a short warm-up.
func timeCalls(ctx context.Context, n int, fn func() error) (report.Quantiles, error) {
	for range min(50, n) {
		if err := fn(); err != nil {
			return report.Quantiles{}, err
		}
	}
	d := make([]time.Duration, 0, n)
	for range n {
		if ctx.Err() != nil {
			return report.Quantiles{}, ctx.Err()
		}
		t := time.Now()
		if err := fn(); err != nil {
			return report.Quantiles{}, err
		}
		d = append(d, time.Since(t))
	}
	return report.QuantilesOf(d), nil
}

// ClearPrefixes deletes the keys an earlier run left under prefixes, and answers the
// function that deletes the keys under them once more, within limit even after ctx
// ended: the keys are a shared Redis's, so a failure there is noted, not fatal.
func ClearPrefixes(ctx context.Context, env *harness.Env, rdb redis.UniversalClient, limit time.Duration, prefixes ...string) (cleanup func(), err error) {
	for _, p := range prefixes {
		if n, err := redisx.DeletePrefix(ctx, rdb, p); err != nil {
			return nil, err
		} else if n > 0 {
			fmt.Fprintf(env.Out, "    deleted %d keys left under %s: by an earlier run\n", n, p)
		}
	}
	return func() {
		for _, p := range prefixes {
			what := fmt.Sprintf("deleting the keys under %s: (delete them with redis-cli --scan --pattern '%s:*' | xargs redis-cli unlink)", p, p)
			env.Cleanup(ctx, limit, what, func(ctx context.Context) error {
				n, err := redisx.DeletePrefix(ctx, rdb, p)
				if n > 0 {
					fmt.Fprintf(env.Out, "    deleted %d keys under %s:\n", n, p)
				}
				return err
			})
		}
	}, nil
}

// QuietMemory waits until Redis has freed what UNLINK handed to its background
// thread and no AOF rewrite or snapshot is forking, then reads used_memory.
func QuietMemory(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		info, err := rdb.InfoMap(ctx, "memory", "persistence").Result()
		if err != nil {
			return 0, fmt.Errorf("INFO memory: %w", err)
		}
		mem, pers := info["Memory"], info["Persistence"]
		busy := mem["lazyfree_pending_objects"] != "0" || pers["aof_rewrite_in_progress"] == "1" ||
			pers["aof_rewrite_scheduled"] == "1" || pers["rdb_bgsave_in_progress"] == "1"
		if !busy || time.Now().After(deadline) {
			n, err := strconv.ParseInt(mem["used_memory"], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO memory: used_memory %q: %w", mem["used_memory"], err)
			}
			return n, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
