package groups

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pulse-presence/pulse/cmd/bench/internal/probe"
	"github.com/pulse-presence/pulse/cmd/bench/internal/rebuild"
	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
	"github.com/pulse-presence/pulse/cmd/bench/internal/scale"
	"github.com/pulse-presence/pulse/cmd/internal/eventgen"
)

// pageLimit is the listing's page size the phase times: the "page of 100".
const pageLimit = 100

// write is one membership write.
type write struct {
	method, group string
	ids           []string
}

// warmUp writes a group of one member in every shard and waits for its count: once
// it shows, every shard's worker has loaded its shard and folds what comes next.
func (p *phase) warmUp(ctx context.Context) error {
	nums := warmMembers(p.cfg.Users, p.shards)
	if _, err := p.api.writeMembers(ctx, http.MethodPatch, warmGroup, ids(nums)); err != nil {
		return err
	}
	return p.awaitCount(ctx, warmGroup, int64(len(nums)), onlineOf(nums, p.fraction))
}

// awaitCount polls group's count every 20 ms until it shows members members, for at
// most -groups-limit, and then checks that online of them are online.
func (p *phase) awaitCount(ctx context.Context, group string, members, online int64) error {
	deadline := time.Now().Add(p.cfg.Limit)
	for {
		c, _, err := p.api.count(ctx, group)
		switch {
		case err != nil:
			return err
		case c.Members == uint64(members):
			return c.check(members, online)
		case p.svc.aggregator.exited():
			return fmt.Errorf("the aggregator exited: see %s", p.svc.aggregator.log)
		case time.Now().After(deadline):
			return fmt.Errorf("group %s shows %d of its %d members after %v", group, c.Members, members, p.cfg.Limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// large writes the large group through PATCHes of -groups-batch ids, then times its
// count and its listing.
func (p *phase) large(ctx context.Context) (report.GroupCase, error) {
	cfg := p.cfg
	c := report.GroupCase{Groups: 1, MembersPerGroup: cfg.Members, Members: int64(cfg.Members), OnlineMembers: int64(cfg.Online),
		Write: "PATCH /v1/groups/{id}/members {\"add\": […]}", IDsPerRequest: cfg.Batch, Writers: cfg.Writers}
	members, err := pickMembers(cfg.Users, p.fraction, cfg.Members, cfg.Online)
	if err != nil {
		return c, err
	}
	var writes []write
	for _, b := range chunks(ids(members), cfg.Batch) {
		writes = append(writes, write{http.MethodPatch, largeGroup, b})
	}
	c.Requests = len(writes)
	fmt.Fprintf(p.env.Out, "    large group: %s members (%s online); PATCH requests: %d of ≤ %s ids, %d in flight\n",
		report.Num(float64(c.Members)), report.Num(float64(c.OnlineMembers)), c.Requests, report.Num(float64(cfg.Batch)), cfg.Writers)
	err = p.writeAndMeasure(ctx, writes, []string{largeGroup}, &c, func(ctx context.Context) error {
		return p.awaitCount(ctx, largeGroup, c.Members, c.OnlineMembers)
	})
	if err != nil {
		return c, err
	}
	p.printWrites(c)

	count := func(int) (time.Duration, error) {
		n, took, err := p.api.count(ctx, largeGroup)
		if err == nil {
			err = n.check(c.Members, c.OnlineMembers)
		}
		return took, err
	}
	cpu0, t0 := p.cpu(), time.Now()
	if err := p.reads(ctx, &c, func(int) string { return largeGroup }, count); err != nil {
		return c, err
	}
	c.PageLimit = pageLimit
	if c.PageMs, c.PageUsers, c.Walks, err = p.walk(ctx, largeGroup, cfg.Calls, c.OnlineMembers); err != nil {
		return c, err
	}
	c.ReadsMachine = probe.MachineOver(probe.Delta(cpu0, p.cpu()), time.Since(t0).Seconds())
	p.noteContention("the large group's", c.ReadsMachine)
	fmt.Fprintf(p.env.Out, "      count p50 %s p99 %s (%d readers: %s/s, p99 %s; Redis read p50 %s); page of %d p50 %s p99 %s (%d whole walks); machine %.2f cores busy\n",
		fmtMs(c.CountMs.P50), fmtMs(c.CountMs.P99), c.CountConcurrent.Readers, report.Num(c.CountConcurrent.CallsPerSec),
		fmtMs(c.CountConcurrent.Ms.P99), fmtMs(c.StoreCountMs.P50), pageLimit, fmtMs(c.PageMs.P50), fmtMs(c.PageMs.P99), c.Walks, c.ReadsMachine.BusyCores)
	return c, nil
}

// small writes -groups-rooms rooms of -groups-room-size members, one PUT each, then
// checks every room's count and times counts of random rooms.
func (p *phase) small(ctx context.Context) (report.GroupCase, error) {
	cfg := p.cfg
	c := report.GroupCase{Groups: cfg.Rooms, MembersPerGroup: cfg.RoomSize, Members: int64(cfg.Rooms) * int64(cfg.RoomSize),
		Write: "PUT /v1/groups/{id}/members {\"userIds\": […]}", Requests: cfg.Rooms, IDsPerRequest: cfg.RoomSize, Writers: cfg.Writers}
	writes := make([]write, cfg.Rooms)
	rooms := make([]string, cfg.Rooms)
	online := make([]int64, cfg.Rooms)
	for r := range cfg.Rooms {
		nums := roomMembers(r, cfg.RoomSize, cfg.Users)
		rooms[r] = roomID(r)
		writes[r] = write{http.MethodPut, rooms[r], ids(nums)}
		online[r] = onlineOf(nums, p.fraction)
		c.OnlineMembers += online[r]
	}
	fmt.Fprintf(p.env.Out, "    small rooms: %s rooms of %d members (%s memberships, %s online), one PUT each, %d in flight\n",
		report.Num(float64(cfg.Rooms)), cfg.RoomSize, report.Num(float64(c.Members)), report.Num(float64(c.OnlineMembers)), cfg.Writers)
	err := p.writeAndMeasure(ctx, writes, rooms, &c, p.awaitFolded)
	if err != nil {
		return c, err
	}
	p.printWrites(c)
	if err := p.checkRooms(ctx, rooms, online); err != nil {
		return c, err
	}
	// Random rooms, the same for every pass.
	pick := func(i int) int { return int(eventgen.Splitmix(uint64(i)) % uint64(cfg.Rooms)) }
	count := func(i int) (time.Duration, error) {
		r := pick(i)
		n, took, err := p.api.count(ctx, rooms[r])
		if err == nil {
			err = n.check(int64(cfg.RoomSize), online[r])
		}
		return took, err
	}
	cpu0, t0 := p.cpu(), time.Now()
	if err := p.reads(ctx, &c, func(i int) string { return rooms[pick(i)] }, count); err != nil {
		return c, err
	}
	c.ReadsMachine = probe.MachineOver(probe.Delta(cpu0, p.cpu()), time.Since(t0).Seconds())
	p.noteContention("the small rooms'", c.ReadsMachine)
	fmt.Fprintf(p.env.Out, "      count p50 %s p99 %s over random rooms (%d readers: %s/s, p99 %s; Redis read p50 %s); machine %.2f cores busy\n",
		fmtMs(c.CountMs.P50), fmtMs(c.CountMs.P99), c.CountConcurrent.Readers, report.Num(c.CountConcurrent.CallsPerSec),
		fmtMs(c.CountConcurrent.Ms.P99), fmtMs(c.StoreCountMs.P50), c.ReadsMachine.BusyCores)
	return c, nil
}

// awaitFolded waits, for at most -groups-limit, until the aggregator has folded every
// record of the phase's topic written so far.
func (p *phase) awaitFolded(ctx context.Context) error {
	ends, err := p.adm.ListEndOffsets(ctx, p.topics.events)
	if err != nil {
		return err
	}
	end := make([]int64, p.shards)
	for sh := range end {
		o, _ := ends.Lookup(p.topics.events, int32(sh))
		end[sh] = o.Offset
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Limit)
	defer cancel()
	err = rebuild.AwaitFolded(ctx, p.store, end, func(int64) error {
		if p.svc.aggregator.exited() {
			return fmt.Errorf("the aggregator exited: see %s", p.svc.aggregator.log)
		}
		return nil
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("the memberships were not folded after %v: %w", p.cfg.Limit, err)
	}
	return err
}

// checkRooms checks every room's count in Redis: its members, and those online.
func (p *phase) checkRooms(ctx context.Context, rooms []string, online []int64) error {
	for r, g := range rooms {
		counts, err := p.store.GroupCounts(ctx, p.shards, g)
		if err != nil {
			return err
		}
		var m, on uint64
		for _, sc := range counts {
			m, on = m+sc.Registered, on+sc.Online
		}
		if m != uint64(p.cfg.RoomSize) || on != uint64(online[r]) {
			return fmt.Errorf("room %s holds %d members, %d online; written %d, %d online", g, m, on, p.cfg.RoomSize, online[r])
		}
	}
	return nil
}

// writeAndMeasure makes the writes from -groups-writers writers, waits for folded, and
// records in c the writes' latency and rates, the services' CPU per member event, and
// what the groups take in Redis and in the aggregator's heap.
func (p *phase) writeAndMeasure(ctx context.Context, writes []write, groups []string, c *report.GroupCase, folded func(context.Context) error) error {
	before, err := p.memory(ctx)
	if err != nil {
		return err
	}
	q0, _ := probe.ProcessCPU(p.svc.query.pid())
	a0, _ := probe.ProcessCPU(p.svc.aggregator.pid())
	start := time.Now()
	took, _, err := concurrently(ctx, c.Writers, len(writes), func(i int) (time.Duration, error) {
		w := writes[i]
		return p.api.writeMembers(ctx, w.method, w.group, w.ids)
	})
	if err != nil {
		return fmt.Errorf("membership writes: %w", err)
	}
	acked := time.Since(start)
	if err := folded(ctx); err != nil {
		return err
	}
	done := time.Since(start)
	q1, _ := probe.ProcessCPU(p.svc.query.pid())
	a1, _ := probe.ProcessCPU(p.svc.aggregator.pid())
	events := float64(c.Members)
	c.WriteMs = report.QuantilesOf(took)
	c.AckedSeconds, c.FoldedSeconds = acked.Seconds(), done.Seconds()
	c.AckedEventsPerSec, c.FoldedEventsPerSec = events/acked.Seconds(), events/done.Seconds()
	c.QueryCPUMicrosPerEvent, c.AggregatorCPUMicrosPerEvent = (q1-q0)/events*1e6, (a1-a0)/events*1e6

	after, err := p.memory(ctx)
	if err != nil {
		return err
	}
	keys := p.store.Keys()
	var bitmaps []string
	for _, g := range groups {
		for sh := range p.shards {
			bitmaps = append(bitmaps, keys.GroupBitmap(sh, g))
		}
	}
	if c.BitmapBytes, err = scale.MemoryOf(ctx, p.rdb, bitmaps); err != nil {
		return err
	}
	c.CountHashBytes = after.hashes - before.hashes
	c.BytesPerMember = float64(c.BitmapBytes+c.CountHashBytes) / events
	c.UsedMemoryBytes = after.used - before.used
	c.UsedBytesPerMember = float64(c.UsedMemoryBytes) / events
	c.AggregatorHeapBytesPerMember = (after.heap - before.heap) / events
	return nil
}

// snapshot is what the groups take, read before and after writing them.
type snapshot struct {
	used   int64   // Redis's used_memory, less its clients' buffers
	hashes int64   // MEMORY USAGE of the shards' group count hashes
	heap   float64 // the aggregator's live Go heap
}

func (p *phase) memory(ctx context.Context) (snapshot, error) {
	var s snapshot
	var err error
	if s.used, err = usedMemory(ctx, p.rdb); err != nil {
		return s, err
	}
	keys := p.store.Keys()
	hashes := make([]string, p.shards)
	for sh := range hashes {
		hashes[sh] = keys.GroupIndex(sh)
	}
	if s.hashes, err = scale.MemoryOf(ctx, p.rdb, hashes); err != nil {
		return s, err
	}
	s.heap, err = liveHeap(ctx, p.env.HTTP, "http://"+p.svc.aggregator.addr)
	return s, err
}

// usedMemory is Redis's used_memory once quiet (scale.QuietMemory), less the clients'
// buffers and the AOF buffer: the aggregator's script calls carry whole bitmaps, and
// the query buffers they leave would count as the groups' memory.
func usedMemory(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	used, err := scale.QuietMemory(ctx, rdb)
	if err != nil {
		return 0, err
	}
	info, err := rdb.InfoMap(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO memory: %w", err)
	}
	for _, f := range []string{"mem_clients_normal", "mem_aof_buffer"} {
		n, err := strconv.ParseInt(info["Memory"][f], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO memory: %s %q: %w", f, info["Memory"][f], err)
		}
		used -= n
	}
	return used, nil
}

// liveHeap is a service's live Go heap: a collection forced through
// /debug/pprof/heap?gc=1, then go_memstats_heap_alloc_bytes from /metrics.
func liveHeap(ctx context.Context, c *http.Client, base string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("forcing a collection: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("forcing a collection: %s/debug/pprof/heap answered HTTP %d", base, resp.StatusCode)
	}
	m, err := probe.Scrape(ctx, c, base)
	if err != nil {
		return 0, fmt.Errorf("the metrics of %s: %w", base, err)
	}
	return m.Sum("go_memstats_heap_alloc_bytes"), nil
}

func (p *phase) printWrites(c report.GroupCase) {
	fmt.Fprintf(p.env.Out, "      %s member events/s acknowledged (%.2f s), %s/s folded (%.2f s); write p50 %s p99 %s; %.1f B per member in Redis (used_memory: %.1f B)\n",
		report.Num(c.AckedEventsPerSec), c.AckedSeconds, report.Num(c.FoldedEventsPerSec), c.FoldedSeconds,
		fmtMs(c.WriteMs.P50), fmtMs(c.WriteMs.P99), c.BytesPerMember, c.UsedBytesPerMember)
}

// reads times the case's count three ways: over HTTP one call at a time, over HTTP
// from -groups-readers readers, and the Redis read behind it in bench's process;
// group names the group of call i.
func (p *phase) reads(ctx context.Context, c *report.GroupCase, group func(i int) string, count call) error {
	n := p.cfg.Calls
	var err error
	if c.CountMs, err = sequential(ctx, min(50, n), n, count); err != nil {
		return fmt.Errorf("counts: %w", err)
	}
	if c.CountConcurrent, err = concurrentRead(ctx, p.cfg.Readers, n, count); err != nil {
		return fmt.Errorf("counts: %w", err)
	}
	c.StoreCountMs, err = sequential(ctx, min(50, n), n, func(i int) (time.Duration, error) {
		t := time.Now()
		_, err := p.store.GroupCounts(ctx, p.shards, group(i))
		return time.Since(t), err
	})
	return err
}

// walk times n pages of group's online members, following the cursors and starting
// again at the end; each whole walk must list online distinct users, all online.
func (p *phase) walk(ctx context.Context, group string, n int, online int64) (report.Quantiles, int64, int, error) {
	for range min(20, n) {
		if _, _, err := p.api.online(ctx, group, pageLimit, ""); err != nil {
			return report.Quantiles{}, 0, 0, err
		}
	}
	took := make([]time.Duration, 0, n)
	var users int64
	walks := 0
	cursor := ""
	seen := map[string]bool{}
	for len(took) < n {
		if err := ctx.Err(); err != nil {
			return report.Quantiles{}, 0, 0, err
		}
		pg, d, err := p.api.online(ctx, group, pageLimit, cursor)
		if err != nil {
			return report.Quantiles{}, 0, 0, err
		}
		took = append(took, d)
		users += int64(len(pg.Users))
		if len(pg.Users) > pageLimit {
			return report.Quantiles{}, 0, 0, fmt.Errorf("a page of %d listed %d users", pageLimit, len(pg.Users))
		}
		for _, u := range pg.Users {
			if seen[u.UserID] || u.Status != "online" {
				return report.Quantiles{}, 0, 0, fmt.Errorf("the walk listed %s (%s) twice, or not online", u.UserID, u.Status)
			}
			seen[u.UserID] = true
		}
		if pg.NextCursor != nil {
			cursor = *pg.NextCursor
			continue
		}
		if int64(len(seen)) != online {
			return report.Quantiles{}, 0, 0, fmt.Errorf("a whole walk listed %d users; %d members are online", len(seen), online)
		}
		walks++
		cursor, seen = "", map[string]bool{}
	}
	return report.QuantilesOf(took), users, walks, nil
}

func fmtMs(v float64) string { return report.FmtMs(v, 1) }

// noteContention notes when work outside Pulse, the stack and bench took more than a
// quarter of a core while whose reads were timed: their tails then show that work.
func (p *phase) noteContention(whose string, m report.MachineCPU) {
	if m.Known && (m.OtherCores > 0.25 || m.StolenCores > 0.25) {
		p.env.Note("groups: while %s reads were timed, %.2f cores went to processes outside the stack, the phase's services and bench, and %.2f were stolen (the machine: %.2f of %d cores busy): their tails show that work as well as Pulse's",
			whose, m.OtherCores, m.StolenCores, m.BusyCores, p.env.Res.Machine.CPUs)
	}
}

// cpu is the CPU seconds of the stack's servers, bench, the phase's services and the
// machine.
func (p *phase) cpu() probe.CPU {
	c := p.env.CPU()
	for name, pr := range map[string]*proc{"groups-query": p.svc.query, "groups-aggregator": p.svc.aggregator} {
		if s, ok := probe.ProcessCPU(pr.pid()); ok {
			c[name] = s
		}
	}
	return c
}
