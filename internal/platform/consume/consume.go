// Package consume runs a Kafka consumer group with one goroutine per assigned partition,
// the shape every Pulse consumer shares: each partition is processed in log order by one
// worker, which commits only what it has written (docs/design.md guarantees 1 and 6).
//
// The group hands partitions out; for each one the Consumer starts a Worker and feeds it
// the partition's record batches, in offset order, through a bounded channel. Polling
// uses kgo.BlockRebalanceOnPoll, so a rebalance can only happen between two polls, never
// while a batch is being handed over. Offsets are never committed automatically: a
// Worker commits what it has written to its sink, and only that. When a partition is
// revoked (or the Consumer stops), its channel is closed and the revoke waits for the
// Worker to flush and commit before the group may give the partition to another member,
// which then resumes exactly after the last commit. When a partition is lost (the group
// decided without us), the Worker's context is cancelled and it must not commit.
package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/platform/kafkax"
)

// Worker processes one partition. Run receives record batches in offset order on recs
// and returns when recs is closed (partition revoked or client closing) after flushing
// and committing what it has, or when ctx is cancelled (partition lost: must not
// commit). An error from Run stops the whole Consumer: the process exits and its
// successor resumes from the last commit, so nothing is lost.
type Worker interface {
	Run(ctx context.Context, recs <-chan []*kgo.Record) error
}

// NewWorker is called on assignment.
type NewWorker func(topic string, partition int32) Worker

// Config is a Consumer's settings.
type Config struct {
	// Group is the consumer group's name.
	Group string
	// Topics are consumed together; each assigned partition of each gets its Worker.
	Topics []string
	// MaxPollRecords bounds the records one poll returns across partitions (0: no bound).
	MaxPollRecords int
	// QueueBatches is the capacity, in batches, of each partition's channel: how far
	// polling may run ahead of a slow Worker before it waits.
	QueueBatches int
	// RevokeTimeout bounds how long a revoke or a shutdown waits for Workers to flush and
	// commit; past it their contexts are cancelled. Keep it below the group's rebalance
	// timeout (kgo default 60s), or the group evicts this member first.
	RevokeTimeout time.Duration
}

// Validate names every setting that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.Group == "" {
		errs = append(errs, errors.New("consumer group: must not be empty"))
	}
	if len(c.Topics) == 0 {
		errs = append(errs, errors.New("consumer topics: at least one is needed"))
	}
	if c.MaxPollRecords < 0 {
		errs = append(errs, fmt.Errorf("consumer max poll records %d: must not be negative", c.MaxPollRecords))
	}
	if c.QueueBatches < 1 {
		errs = append(errs, fmt.Errorf("consumer queue batches %d: must be at least 1", c.QueueBatches))
	}
	if c.RevokeTimeout <= 0 {
		errs = append(errs, fmt.Errorf("consumer revoke timeout %v: must be positive", c.RevokeTimeout))
	}
	return errors.Join(errs...)
}

type topicPartition struct {
	topic     string
	partition int32
}

// running is one Worker and what the Consumer needs to stop it.
type running struct {
	tp     topicPartition
	recs   chan []*kgo.Record
	cancel context.CancelFunc
	done   chan struct{}
	// closed is set before recs is closed, so a Worker returning nil can be told apart
	// from one that returned on its own.
	closed atomic.Bool
}

// Consumer is a group member with one Worker per assigned partition.
type Consumer struct {
	cfg       Config
	cl        *kgo.Client
	newWorker NewWorker
	logger    *slog.Logger
	m         *metrics

	// started is closed when Run begins: the group may assign partitions as soon as
	// the client exists, but Workers start only once Run owns the Consumer.
	started chan struct{}
	ran     atomic.Bool
	// base parents every Worker's context; cancelled when Run returns.
	base       context.Context
	cancelBase context.CancelFunc

	mu      sync.Mutex
	workers map[topicPartition]*running
	lag     map[topicPartition]int64
	closing bool
	err     error         // the first Worker failure
	failed  chan struct{} // closed on the first Worker failure
	wg      sync.WaitGroup
}

// New creates the group member and its Kafka client (logging through logger, metrics on
// reg). The group may start assigning partitions at once; Workers start when Run is
// called, and Run must be called. extra client options come last and win.
func New(kcfg kafkax.Config, cfg Config, newWorker NewWorker, logger *slog.Logger, reg prometheus.Registerer, extra ...kgo.Opt) (*Consumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger = logger.With("group", cfg.Group)
	var mreg prometheus.Registerer
	if reg != nil {
		mreg = prometheus.WrapRegistererWith(prometheus.Labels{"group": cfg.Group}, reg)
	}
	m, err := newMetrics(mreg)
	if err != nil {
		return nil, err
	}
	base, cancel := context.WithCancel(context.Background())
	c := &Consumer{
		cfg:        cfg,
		newWorker:  newWorker,
		logger:     logger,
		m:          m,
		started:    make(chan struct{}),
		base:       base,
		cancelBase: cancel,
		workers:    make(map[topicPartition]*running),
		lag:        make(map[topicPartition]int64),
		failed:     make(chan struct{}),
	}
	opts := []kgo.Opt{
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		// A new group reads the whole log: history and state are rebuilt from it.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(c.assigned),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
	}
	cl, err := kafkax.NewClient(kcfg, logger, reg, append(opts, extra...)...)
	if err != nil {
		cancel()
		return nil, err
	}
	c.cl = cl
	return c, nil
}

// Client is the group's client. Workers commit with c.Client().CommitRecords(ctx, last)
// or CommitOffsetsSync; both are safe from any Worker at any time.
func (c *Consumer) Client() *kgo.Client { return c.cl }

// Run polls until ctx ends or a Worker fails. Then it closes every Worker's channel and
// waits for them to flush and commit (bounded by RevokeTimeout, after which their
// contexts are cancelled), leaves the group and closes the client. It returns nil after
// a clean shutdown, else the first Worker's error. Run may be called once.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.ran.CompareAndSwap(false, true) {
		return errors.New("consume: Run called twice")
	}
	defer c.cancelBase()
	close(c.started)

	pollCtx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
	watch := make(chan struct{})
	go func() {
		defer close(watch)
		select {
		case <-c.failed:
			stopPolling()
		case <-pollCtx.Done():
		}
	}()

	c.poll(pollCtx)
	stopPolling()
	<-watch
	c.shutdown()

	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// poll hands each polled batch to its partition's Worker until ctx ends.
func (c *Consumer) poll(ctx context.Context) {
	for {
		fetches := c.cl.PollRecords(ctx, c.cfg.MaxPollRecords)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			// Whatever this poll returned is dropped uncommitted; the next owner reads it.
			c.cl.AllowRebalance()
			return
		}
		fetches.EachError(func(topic string, p int32, err error) {
			c.logger.Warn("fetch error", "topic", topic, "partition", p, "err", err)
		})
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			tp := topicPartition{p.Topic, p.Partition}
			last := p.Records[len(p.Records)-1].Offset
			c.mu.Lock()
			w := c.workers[tp]
			if w != nil {
				c.lag[tp] = max(p.HighWatermark-last-1, 0)
			}
			c.mu.Unlock()
			if w == nil {
				// Not ours (a callback could not start its Worker); the group's next owner reads it.
				c.logger.Warn("records for a partition without a worker", "topic", p.Topic, "partition", p.Partition)
				return
			}
			c.m.records.WithLabelValues(p.Topic).Add(float64(len(p.Records)))
			c.m.batches.WithLabelValues(p.Topic).Inc()
			// Revoke callbacks cannot run before AllowRebalance below, so recs is open.
			select {
			case w.recs <- p.Records:
			case <-w.done: // the Worker failed; Run is stopping
			case <-ctx.Done():
			}
		})
		c.updateLag()
		c.cl.AllowRebalance()
	}
}

// shutdown stops every Worker, leaves the group and closes the client.
func (c *Consumer) shutdown() {
	c.mu.Lock()
	c.closing = true
	all := make([]*running, 0, len(c.workers))
	for tp, w := range c.workers {
		all = append(all, w)
		delete(c.workers, tp)
	}
	c.mu.Unlock()
	c.logger.Info("stopping consumer", "partitions", len(all))
	c.stopWorkers(all, false)

	// Leaving revokes whatever is still assigned; there are no Workers left to stop.
	c.cl.AllowRebalance()
	lctx, cancel := context.WithTimeout(context.Background(), c.cfg.RevokeTimeout)
	if err := c.cl.LeaveGroupContext(lctx); err != nil {
		c.logger.Warn("leaving the group", "err", err)
	}
	cancel()
	c.cl.Close()
	c.wg.Wait()
	c.logger.Info("consumer stopped")
}

func (c *Consumer) assigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	select {
	case <-c.started:
	case <-c.base.Done():
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return // leaving: nothing new starts; the partitions go back to the group
	}
	for topic, parts := range assigned {
		for _, p := range parts {
			tp := topicPartition{topic, p}
			if _, ok := c.workers[tp]; ok {
				c.logger.Warn("partition assigned twice", "topic", topic, "partition", p)
				continue
			}
			c.start(tp)
		}
	}
	c.updatePartitionsLocked()
}

// start runs a new Worker for tp; c.mu is held.
func (c *Consumer) start(tp topicPartition) {
	ctx, cancel := context.WithCancel(c.base)
	w := &running{
		tp:     tp,
		recs:   make(chan []*kgo.Record, c.cfg.QueueBatches),
		cancel: cancel,
		done:   make(chan struct{}),
	}
	c.workers[tp] = w
	worker := c.newWorker(tp.topic, tp.partition)
	c.logger.Info("partition assigned", "topic", tp.topic, "partition", tp.partition)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(w.done)
		defer cancel()
		err := worker.Run(ctx, w.recs)
		if ctx.Err() != nil {
			// Lost, or too slow to stop: whatever it returned was expected.
			if err != nil && !errors.Is(err, context.Canceled) {
				c.logger.Info("worker stopped on cancellation", "topic", tp.topic, "partition", tp.partition, "err", err)
			}
			return
		}
		if err == nil && !w.closed.Load() {
			err = errors.New("returned before its partition was revoked")
		}
		if err != nil {
			c.fail(fmt.Errorf("worker for %s/%d: %w", tp.topic, tp.partition, err))
		}
	}()
}

func (c *Consumer) fail(err error) {
	c.m.failures.Inc()
	c.logger.Error("worker failed; stopping the consumer", "err", err)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		close(c.failed)
	}
}

func (c *Consumer) revoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	c.stopPartitions(revoked, false)
}

func (c *Consumer) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	c.stopPartitions(lost, true)
}

func (c *Consumer) stopPartitions(parts map[string][]int32, lost bool) {
	var ws []*running
	c.mu.Lock()
	for topic, ps := range parts {
		for _, p := range ps {
			tp := topicPartition{topic, p}
			if w, ok := c.workers[tp]; ok {
				ws = append(ws, w)
				delete(c.workers, tp)
			}
			delete(c.lag, tp)
		}
	}
	c.updatePartitionsLocked()
	c.mu.Unlock()
	c.updateLag()
	c.stopWorkers(ws, lost)
}

// stopWorkers closes the Workers' channels (or, for lost partitions, cancels them) and
// waits until every one has returned. Revoked Workers get RevokeTimeout to flush and
// commit; then they are cancelled, and their uncommitted records go to the next owner.
func (c *Consumer) stopWorkers(ws []*running, lost bool) {
	if len(ws) == 0 {
		return
	}
	for _, w := range ws {
		if lost {
			c.logger.Warn("partition lost", "topic", w.tp.topic, "partition", w.tp.partition)
			w.cancel()
			continue
		}
		w.closed.Store(true)
		close(w.recs)
	}
	timeout := time.NewTimer(c.cfg.RevokeTimeout)
	defer timeout.Stop()
	timedOut := false
	for _, w := range ws {
		if !timedOut {
			select {
			case <-w.done:
			case <-timeout.C:
				timedOut = true
				c.m.revokeTimeouts.Inc()
				c.logger.Warn("workers did not finish within the revoke timeout; cancelling them",
					"timeout", c.cfg.RevokeTimeout)
				for _, w := range ws {
					w.cancel()
				}
			}
		}
		<-w.done
		if !lost {
			c.logger.Info("partition revoked", "topic", w.tp.topic, "partition", w.tp.partition)
		}
	}
}

func (c *Consumer) updatePartitionsLocked() {
	n := make(map[string]int, len(c.cfg.Topics))
	for tp := range c.workers {
		n[tp.topic]++
	}
	for _, t := range c.cfg.Topics {
		c.m.partitions.WithLabelValues(t).Set(float64(n[t]))
	}
}

func (c *Consumer) updateLag() {
	c.mu.Lock()
	defer c.mu.Unlock()
	sum := make(map[string]int64, len(c.cfg.Topics))
	for tp, l := range c.lag {
		sum[tp.topic] += l
	}
	for _, t := range c.cfg.Topics {
		c.m.lag.WithLabelValues(t).Set(float64(sum[t]))
	}
}

type metrics struct {
	records        *prometheus.CounterVec
	batches        *prometheus.CounterVec
	partitions     *prometheus.GaugeVec
	lag            *prometheus.GaugeVec
	failures       prometheus.Counter
	revokeTimeouts prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_consume_records_total",
			Help: "Records handed to partition workers, by topic.",
		}, []string{"topic"}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_consume_batches_total",
			Help: "Record batches handed to partition workers, by topic.",
		}, []string{"topic"}),
		partitions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pulse_consume_partitions",
			Help: "Partitions assigned to this member (one worker each), by topic.",
		}, []string{"topic"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pulse_consume_lag_records",
			Help: "Records behind the high watermark at the last poll, summed over this member's partitions, by topic.",
		}, []string{"topic"}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_consume_worker_failures_total",
			Help: "Partition workers that returned an error (each stops the consumer).",
		}),
		revokeTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pulse_consume_revoke_timeouts_total",
			Help: "Revokes or shutdowns that cancelled workers still flushing after the revoke timeout.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, col := range []prometheus.Collector{m.records, m.batches, m.partitions, m.lag, m.failures, m.revokeTimeouts} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("registering consumer metrics: %w", err)
		}
	}
	return m, nil
}
