package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// coalescer gathers concurrent single-user reads into shared round trips to Redis.
// A few loops each take the reads waiting in one queue, as many as there are up to a
// limit, and read them in one guarded pipeline (statestore.GetMany): while a pipeline
// is in flight the next reads queue, so under load a read costs a share of one round
// trip, and each shard's bookkeeping is read once per pipeline instead of once per
// read; a lone read still costs one round trip (docs/design.md, Reads).
type coalescer struct {
	many    func(ctx context.Context, ids []string) ([]*presence.User, error)
	one     func(ctx context.Context, id string) (*presence.User, error)
	timeout time.Duration
	loops   int
	most    int
	queue   chan *readReq
}

type readReq struct {
	id    string
	reply chan readResult // buffered: a loop never waits for a reader that gave up
}

type readResult struct {
	u   *presence.User
	err error
}

// newCoalescer reads through store with loops pipelines in flight at most, each of at
// most most users and bounded by timeout.
func newCoalescer(store *statestore.Store, timeout time.Duration, loops, most int) *coalescer {
	return &coalescer{many: store.GetMany, one: store.Get, timeout: timeout, loops: loops, most: most,
		queue: make(chan *readReq, loops*most)}
}

// Get reads one user's state (nil for a user never seen) in the next shared pipeline.
func (c *coalescer) Get(ctx context.Context, id string) (*presence.User, error) {
	req := &readReq{id: id, reply: make(chan readResult, 1)}
	select {
	case c.queue <- req:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case res := <-req.reply:
		return res.u, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Run serves the queue until ctx ends.
func (c *coalescer) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range c.loops {
		wg.Go(func() { c.loop(ctx) })
	}
	wg.Wait()
	return nil
}

func (c *coalescer) loop(ctx context.Context) {
	batch := make([]*readReq, 0, c.most)
	ids := make([]string, 0, c.most)
	for {
		select {
		case req := <-c.queue:
			batch = append(batch[:0], req)
		case <-ctx.Done():
			return
		}
	gather:
		for len(batch) < c.most {
			select {
			case req := <-c.queue:
				batch = append(batch, req)
			default:
				break gather
			}
		}
		ids = ids[:0]
		for _, r := range batch {
			ids = append(ids, r.id)
		}
		c.read(ctx, batch, ids)
	}
}

// read answers every read of batch from one pipeline. A shard being rebuilt fails the
// whole pipeline, so then each read is tried alone: the users of whole shards are
// still answered, as they would be without coalescing.
func (c *coalescer) read(ctx context.Context, batch []*readReq, ids []string) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	users, err := c.many(rctx, ids)
	if err != nil && len(batch) > 1 && errors.Is(err, statestore.ErrRebuilding) {
		for _, r := range batch {
			u, err := c.one(rctx, r.id)
			r.reply <- readResult{u, err}
		}
		return
	}
	for i, r := range batch {
		res := readResult{err: err}
		if err == nil {
			res.u = users[i]
		}
		r.reply <- res
	}
}
