// Package feed is Pulse's live change feed: a Hub that tails presence.changes and
// fans each effective change out to the subscribers watching its user, and the
// Sessions through which one connection (WebSocket or SSE, see services/query) gets
// a snapshot of its users' statuses, then every change, each with a cursor to resume
// from.
//
// Every query instance runs one Hub. It reads all partitions of presence.changes
// without a consumer group, from the end of the log at start, and knows its exact
// position in each partition: the cursor after a change is that position vector.
// The Hub keeps the most recent changes in memory, so a client that reconnects with a
// recent cursor is served without touching Kafka; an older cursor is replayed from the
// log, and one older than the log's retention gets an explicit error and a fresh
// snapshot.
//
// The aggregator produces changes at least once: a crash between its Redis write and
// its offset commit produces a window's changes again, with the same source offsets.
// Within one partition of presence.changes the changes caused by one partition of
// presence.events arrive in increasing source offset, so anything at or below the
// highest source offset seen before it (per changes partition and source partition) is
// a replay and is dropped. That needs no per-user memory, and a replay computes the
// same answer as the live hub by reading a bounded stretch of the log before the
// cursor (Config.DedupeLookback records per partition).
package feed

// Locking. The fan-out shares no lock with the resume ring, and holds the index of
// subscriptions only read-locked while it delivers a batch:
//
//   - Hub.mu guards the hub's life: ready, closing, admin, open and the drain.
//   - Hub.logMu (read-write) guards the log side: pos, base, the resume ring, the
//     dedupe marks and progress. The tail write-locks it to move past a batch
//     (positions, dedupe, cursors, ring); resumes read-lock it (needsLog, check,
//     waitFor, attachAt), alongside each other and alongside a delivery.
//   - Hub.subMu (read-write) guards the fan-out index: byUser, firehose, each
//     subscriber's registered and users, and fanned, the position delivered so
//     far. The tail read-locks it to deliver a batch; subscribe, unsubscribe,
//     attachFresh, Close and kicks write-lock it, and wait only for the delivery
//     in hand, never for the ring or the cursors; attachAt write-locks it inside
//     logMu to register.
//   - Each subscriber's queue has its own mutex (queue.mu), held only to push or
//     pop an item: a push never blocks (a full queue drops the subscriber), and no
//     hub lock is held while a session reads its queue or writes to its connection.
//     subscriber.dropped is atomic.
//
// They nest only in this order: mu, then logMu, then subMu, then a queue's mu; mu
// and logMu are never held together. The tail read-locks subMu before it unlocks
// logMu, and attachAt holds logMu read-locked while it registers, so each change is
// either in the ring a resume copies or delivered to the resumed queue, never both
// or neither. A snapshot marker is queued under subMu with fanned, so that every
// change queued before it is before its cursor and every one after it after.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/cursor"
	"github.com/pulse-presence/pulse/internal/platform/kafkax"
	"github.com/pulse-presence/pulse/internal/platform/retry"
)

// Config is a Hub's settings.
type Config struct {
	// Kafka is how to reach the brokers; Kafka.ChangesTopic is the topic tailed.
	Kafka kafkax.Config
	// QueueSize bounds the changes waiting to be written to one connection; a
	// connection whose queue is full is closed as a slow consumer.
	QueueSize int
	// ReplayBuffer is how many recent changes the hub keeps in memory to serve resumes.
	ReplayBuffer int
	// DedupeLookback is how many records per partition before a position are read to
	// recognise duplicates after it, at start and when replaying from the log.
	DedupeLookback int
	// MaxUsers bounds the user ids one connection watches.
	MaxUsers int
	// SnapshotTimeout bounds a snapshot's state read.
	SnapshotTimeout time.Duration
	// CatchUpTimeout is how long a resume waits for this instance to reach a cursor
	// another, further instance issued.
	CatchUpTimeout time.Duration
	// MaxLogReplays bounds the resumes reading Kafka at once, MaxLogReplaysPerPrincipal
	// those of one principal (Options.Principal); others wait their turn, up to
	// ReplayWait, then fail with ErrReplaysBusy.
	MaxLogReplays             int
	MaxLogReplaysPerPrincipal int
	ReplayWait                time.Duration
	// CommandRate bounds the commands one connection may send per second, up to
	// CommandBurst at once (Session.AdmitCommand); 0: no bound.
	CommandRate  float64
	CommandBurst int
	// DrainTimeout bounds how long Run waits, at shutdown, for connections to close.
	DrainTimeout time.Duration
	// Cursors sign every cursor the hub hands out; the caller opens those handed back
	// before DecodeCursor. Nil: cursors go out unsigned.
	Cursors *cursor.Keys
}

// cursor is the cursor of the position offsets, signed.
func (h *Hub) cursor(offsets []int64) string {
	return h.cfg.Cursors.Sign(EncodeCursor(h.fingerprint, offsets))
}

// Validate names every setting that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.Kafka.ChangesTopic == "" {
		errs = append(errs, errors.New("feed: no changes topic"))
	}
	if c.QueueSize < 1 {
		errs = append(errs, fmt.Errorf("feed queue size %d: must be at least 1", c.QueueSize))
	}
	if c.ReplayBuffer < 0 {
		errs = append(errs, fmt.Errorf("feed replay buffer %d: must not be negative", c.ReplayBuffer))
	}
	if c.DedupeLookback < 0 {
		errs = append(errs, fmt.Errorf("feed dedupe lookback %d: must not be negative", c.DedupeLookback))
	}
	if c.MaxUsers < 1 {
		errs = append(errs, fmt.Errorf("feed max users %d: must be at least 1", c.MaxUsers))
	}
	if c.MaxLogReplays < 1 {
		errs = append(errs, fmt.Errorf("feed max log replays %d: must be at least 1", c.MaxLogReplays))
	}
	if c.MaxLogReplaysPerPrincipal < 1 {
		errs = append(errs, fmt.Errorf("feed max log replays per principal %d: must be at least 1", c.MaxLogReplaysPerPrincipal))
	}
	if c.CommandRate < 0 || c.CommandRate > 0 && c.CommandBurst < 1 {
		errs = append(errs, fmt.Errorf("feed command rate %v, burst %d: want a rate of 0 (no bound) or a positive rate and burst", c.CommandRate, c.CommandBurst))
	}
	if c.SnapshotTimeout <= 0 || c.CatchUpTimeout <= 0 || c.DrainTimeout <= 0 || c.ReplayWait <= 0 {
		errs = append(errs, errors.New("feed timeouts: must be positive"))
	}
	return errors.Join(errs...)
}

// StateReader reads users' current states, nil for users never seen, and a group's
// members (at most max of them, else ErrGroupTooLarge); the statestore in production,
// a map in tests.
type StateReader interface {
	GetMany(ctx context.Context, ids []string) ([]*presence.User, error)
	GroupMembers(ctx context.Context, group string, max int) ([]string, error)
}

// ErrGroupTooLarge: a group has more members than a connection may watch.
var ErrGroupTooLarge = errors.New("the group has more members than a connection watches")

// Errors a Session ends with, and Open refuses with.
var (
	// ErrNotReady: the hub has not reached the end of presence.changes yet (or
	// cannot reach Kafka); try again shortly.
	ErrNotReady = errors.New("change feed is not ready")
	// ErrGoingAway: the instance is shutting down; reconnect (elsewhere) with the cursor.
	ErrGoingAway = errors.New("going away")
	// ErrSlowConsumer: the connection did not keep up and its queue filled.
	ErrSlowConsumer = errors.New("slow consumer")
	// ErrUnavailable: state or log could not be read; reconnect with the cursor.
	ErrUnavailable = errors.New("unavailable")
	// ErrCommandBacklog: the client sent commands faster than they are answered.
	ErrCommandBacklog = errors.New("too many pending commands")
	// ErrInvalid: Options that cannot be served.
	ErrInvalid = errors.New("invalid subscription")
)

// Hub tails presence.changes and fans changes out to sessions.
type Hub struct {
	cfg         Config
	topic       string
	fingerprint uint32
	state       StateReader
	logger      *slog.Logger
	reg         prometheus.Registerer // for the tail client's metrics, once
	m           *metrics
	replays     *replaySlots

	// mu guards the hub's life (see Locking at the top of this file).
	mu      sync.Mutex
	ready   bool
	closing bool
	admin   *kgo.Client // the tail client, also for listing offsets
	open    map[*subscriber]struct{}
	drained chan struct{}
	isDrain bool

	// logMu guards where the hub stands in the log and the resume ring.
	logMu    sync.RWMutex
	pos      []int64 // next offset to read, by partition
	base     []int64 // the ring holds every change of [base, pos)
	ring     ring
	marks    marks
	progress chan struct{} // closed and replaced after every batch

	// subMu guards the fan-out index and the subscribers' registration; the helpers
	// named ...Locked expect the caller to hold it (write-locked unless they say so).
	subMu    sync.RWMutex
	byUser   map[string][]*subscriber
	firehose []*subscriber
	// byGroup are the subscribers watching a group (docs/design.md, "Groups"): each
	// watches one, so a change reaches each of them once.
	byGroup map[string][]*subscriber
	// fanned is the position after the last change delivered: every change queued
	// so far is before it, every one queued later after it. Stored by the tail
	// while it holds subMu read-locked, loaded under subMu write-locked; never
	// changed in place.
	fanned atomic.Pointer[[]int64]
}

// NewHub returns a hub for cfg; Run starts it.
func NewHub(cfg Config, state StateReader, logger *slog.Logger, reg prometheus.Registerer) (*Hub, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Hub{
		cfg:         cfg,
		topic:       cfg.Kafka.ChangesTopic,
		fingerprint: TopicFingerprint(cfg.Kafka.ChangesTopic),
		state:       state,
		logger:      logger.With("component", "feed"),
		reg:         reg,
		m:           newMetrics(reg),
		replays:     newReplaySlots(cfg.MaxLogReplays, cfg.MaxLogReplaysPerPrincipal),
		ring:        ring{buf: make([]*entry, cfg.ReplayBuffer)},
		byUser:      make(map[string][]*subscriber),
		byGroup:     make(map[string][]*subscriber),
		open:        make(map[*subscriber]struct{}),
		progress:    make(chan struct{}),
		drained:     make(chan struct{}),
	}, nil
}

// Ready reports whether the hub accepts subscribers.
func (h *Hub) Ready() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ready && !h.closing
}

// Run tails presence.changes until ctx ends, then closes every session with
// ErrGoingAway and waits (up to Config.DrainTimeout) for them to be closed. While
// Kafka cannot be reached it retries; sessions are refused with ErrNotReady meanwhile.
func (h *Hub) Run(ctx context.Context) error {
	cl, err := h.start(ctx)
	if err != nil {
		h.shutdown()
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil // ctx ended, or its deadline left no time for another try, while starting
		}
		return err
	}
	defer cl.Close()
	defer h.shutdown()
	for {
		fs := cl.PollRecords(ctx, 10_000)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(topic string, p int32, err error) {
			h.logger.Warn("reading presence.changes", "topic", topic, "partition", p, "err", err)
		})
		h.apply(fs)
	}
}

// start connects, retrying for as long as Kafka cannot be reached; its error wraps
// ctx's once ctx ends.
func (h *Hub) start(ctx context.Context) (*kgo.Client, error) {
	var cl *kgo.Client
	err := retry.Do(ctx, retry.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second}, h.logger,
		"starting the change feed", func(ctx context.Context) error {
			c, err := h.connect(ctx)
			if err != nil {
				return err
			}
			cl = c
			return nil
		})
	if err != nil {
		return nil, err
	}
	return cl, nil
}

// connect lists the log's bounds, reads the stretch before its end that duplicates
// could follow, and opens the tail at the end.
func (h *Hub) connect(ctx context.Context) (*kgo.Client, error) {
	adm, err := kafkax.NewClient(h.cfg.Kafka, h.logger, nil)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, h.cfg.Kafka.RequestTimeout)
	starts, ends, err := listBounds(lctx, adm, h.topic)
	cancel()
	adm.Close()
	if err != nil {
		return nil, err
	}
	if len(ends) > MaxPartitions {
		return nil, fmt.Errorf("%s has %d partitions; the feed supports at most %d", h.topic, len(ends), MaxPartitions)
	}
	mk := newMarks(len(ends))
	from := make([]int64, len(ends))
	for p := range ends {
		from[p] = max(starts[p], ends[p]-int64(h.cfg.DedupeLookback))
	}
	n := 0
	if err := h.readLog(ctx, from, ends, func(r *kgo.Record) {
		if e, err := decodeChange(r); err == nil {
			mk.duplicate(e)
			n++
		}
	}); err != nil {
		return nil, fmt.Errorf("reading the dedupe lookback: %w", err)
	}
	offsets := make(map[int32]kgo.Offset, len(ends))
	for p, o := range ends {
		offsets[int32(p)] = kgo.NewOffset().At(o)
	}
	reg := h.reg
	h.reg = nil // the client metrics can be registered once
	cl, err := kafkax.NewClient(h.cfg.Kafka, h.logger, reg,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{h.topic: offsets}))
	if err != nil {
		return nil, err
	}
	h.logMu.Lock()
	h.pos, h.base, h.marks = ends, slices.Clone(ends), mk
	h.logMu.Unlock()
	fanned := slices.Clone(ends)
	h.fanned.Store(&fanned)
	h.mu.Lock()
	h.admin, h.ready = cl, true
	h.mu.Unlock()
	h.m.ready.Set(1)
	h.logger.Info("change feed tailing", "topic", h.topic, "partitions", len(ends), "lookback_changes", n)
	return cl, nil
}

// listBounds lists the first and next offsets of every partition of topic.
func listBounds(ctx context.Context, cl *kgo.Client, topic string) (starts, ends []int64, err error) {
	adm := kadm.NewClient(cl)
	s, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, nil, fmt.Errorf("listing start offsets of %s: %w", topic, err)
	}
	e, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, nil, fmt.Errorf("listing end offsets of %s: %w", topic, err)
	}
	if starts, err = offsetsOf(s, topic); err != nil {
		return nil, nil, err
	}
	if ends, err = offsetsOf(e, topic); err != nil {
		return nil, nil, err
	}
	if len(starts) != len(ends) {
		return nil, nil, fmt.Errorf("%s: %d partitions have a start, %d an end", topic, len(starts), len(ends))
	}
	return starts, ends, nil
}

func offsetsOf(l kadm.ListedOffsets, topic string) ([]int64, error) {
	if err := l.Error(); err != nil {
		return nil, fmt.Errorf("listing offsets of %s: %w", topic, err)
	}
	ps := l[topic]
	if len(ps) == 0 {
		return nil, fmt.Errorf("topic %s has no partitions", topic)
	}
	out := make([]int64, len(ps))
	for p := range out {
		o, ok := ps[int32(p)]
		if !ok {
			return nil, fmt.Errorf("topic %s: partition %d missing from %d", topic, p, len(ps))
		}
		out[p] = o.Offset
	}
	return out, nil
}

// startOffsets lists the first offset still in the log, by partition.
func (h *Hub) startOffsets(ctx context.Context) ([]int64, error) {
	h.mu.Lock()
	cl := h.admin
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Kafka.RequestTimeout)
	defer cancel()
	l, err := kadm.NewClient(cl).ListStartOffsets(ctx, h.topic)
	if err != nil {
		return nil, fmt.Errorf("listing start offsets of %s: %w", h.topic, err)
	}
	return offsetsOf(l, h.topic)
}

// decoded is a record of presence.changes with its change; e is nil when the record
// cannot be decoded.
type decoded struct {
	r *kgo.Record
	e *entry
}

// apply folds one poll's records into the hub. Decoding happens before taking any
// lock; the ring and the positions move under logMu, and the changes are delivered
// under subMu read-locked, so that resumes wait only for the first and subscribes
// only for the second.
func (h *Hub) apply(fs kgo.Fetches) {
	var recs []decoded
	fs.EachRecord(func(r *kgo.Record) {
		e, _ := decodeChange(r) // counted by advanceLocked
		recs = append(recs, decoded{r, e})
	})
	if len(recs) == 0 {
		return
	}
	h.logMu.Lock()
	changes, reached := h.advanceLocked(recs)
	// subMu is taken before logMu is let go: a session attaching from the ring
	// (attachAt) holds logMu while it registers, so it either finds these changes in
	// the ring and registers after they are delivered, or registers before they are
	// in the ring and is delivered them.
	h.subMu.RLock()
	h.logMu.Unlock()
	var slow []*subscriber
	for _, e := range changes {
		if e.group != "" {
			// A membership change goes to the group's watchers alone.
			for _, s := range h.byGroup[e.group] {
				slow = offer(slow, s, item{e: e})
			}
			continue
		}
		for _, s := range h.byUser[e.userID] {
			slow = offer(slow, s, item{e: e})
		}
		for _, s := range h.firehose {
			slow = offer(slow, s, item{e: e})
		}
		for _, g := range e.groups {
			for _, s := range h.byGroup[g] {
				if _, ok := s.users[e.userID]; !ok { // else it had it by id
					slow = offer(slow, s, item{e: e})
				}
			}
		}
	}
	h.fanned.Store(&reached)
	h.subMu.RUnlock()
	if len(slow) > 0 {
		h.subMu.Lock()
		h.kickSlowLocked(slow)
		h.subMu.Unlock()
	}
}

// advanceLocked moves the positions past recs and passes their changes through the
// dedupe marks into the replay ring; it returns the changes to deliver, in order, and
// a copy of the position after them. The caller holds h.logMu: a session attaching
// meanwhile must see the ring and the positions agree.
func (h *Hub) advanceLocked(recs []decoded) ([]*entry, []int64) {
	var dups, bad int
	var out []*entry
	for _, d := range recs {
		p := d.r.Partition
		if int(p) >= len(h.pos) || d.r.Offset < h.pos[p] {
			continue // a partition added after start, or a position reset
		}
		h.pos[p] = d.r.Offset + 1
		if d.e == nil {
			bad++
			continue
		}
		if h.marks.duplicate(d.e) {
			dups++
			continue
		}
		d.e.cursor = h.cursor(h.pos)
		h.ring.push(d.e, h.base)
		out = append(out, d.e)
	}
	close(h.progress)
	h.progress = make(chan struct{})
	h.m.records.WithLabelValues("change").Add(float64(len(out)))
	h.m.records.WithLabelValues("duplicate").Add(float64(dups))
	h.m.records.WithLabelValues("undecodable").Add(float64(bad))
	return out, slices.Clone(h.pos)
}

// offer queues it for s without ever blocking, and returns slow with s added when
// s's queue just filled: s is then dropped, and nothing more is queued for it (a
// later success would leave a gap). The caller holds h.subMu, read-locked at least.
func offer(slow []*subscriber, s *subscriber, it item) []*subscriber {
	if s.dropped.Load() || it.e != nil && !s.operator && it.e.publicNoop() {
		return slow
	}
	if !s.q.push(it) {
		s.dropped.Store(true)
		slow = append(slow, s)
	}
	return slow
}

// kickSlowLocked ends the subscribers whose queue filled. The caller holds h.subMu.
func (h *Hub) kickSlowLocked(slow []*subscriber) {
	for _, s := range slow {
		h.kickLocked(s, ErrSlowConsumer)
		h.m.slow.Inc()
	}
}

// kickLocked ends s with err: it leaves the fan-out, and its session sees err. The
// caller holds h.subMu.
func (h *Hub) kickLocked(s *subscriber, err error) {
	s.dropped.Store(true)
	h.unregisterLocked(s)
	s.cancel(err)
}

func (h *Hub) shutdown() {
	h.mu.Lock()
	h.closing = true
	h.subMu.Lock()
	for s := range h.open {
		h.kickLocked(s, ErrGoingAway)
	}
	h.subMu.Unlock()
	h.checkDrainedLocked()
	h.mu.Unlock()
	h.m.ready.Set(0)
	t := time.NewTimer(h.cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-h.drained:
	case <-t.C:
		h.mu.Lock()
		n := len(h.open)
		h.mu.Unlock()
		h.logger.Warn("change feed connections still open after the drain timeout", "open", n)
	}
}

// checkDrainedLocked closes h.drained once the hub is closing and the last session
// has closed. The caller holds h.mu, which guards h.open and h.isDrain.
func (h *Hub) checkDrainedLocked() {
	if h.closing && len(h.open) == 0 && !h.isDrain {
		h.isDrain = true
		close(h.drained)
	}
}

// subscriber is one session as the hub sees it. registered and users are guarded by
// the hub's subMu; the other fields are set once, or safe to use concurrently.
type subscriber struct {
	q        *queue
	ctx      context.Context // cancelled, with the reason, when the hub drops it
	cancel   context.CancelCauseFunc
	operator bool
	firehose bool
	// group is the group watched, if any; set once.
	group string
	// dropped: the subscriber left for good (closed, kicked, or its queue filled);
	// nothing more is queued for it and it is not registered again. Set under subMu
	// (read-locked at least), so that a registration under subMu sees it.
	dropped atomic.Bool

	registered bool
	// users are the ids s is under in byUser while registered, each with s's index in
	// that id's slice, so that leaving costs O(1) per id however many others watch it.
	users map[string]int
}

// item is what a subscriber's queue holds: a change, or a snapshot to take here.
type item struct {
	e    *entry
	snap *snapMarker
}

// snapMarker asks the session for a snapshot of ids at the queue's position: every
// change queued before it is before the position at, every one after it after. The
// session signs its cursor, outside the hub's locks.
type snapMarker struct {
	ids      []string
	group    string // the members of group too
	firehose bool
	at       []int64 // shared, never changed
}

// registerLocked adds s to the fan-out: to the firehose, or under each of ids. The
// caller holds h.subMu, which guards the fan-out.
func (h *Hub) registerLocked(s *subscriber, ids []string) {
	s.registered = true
	if s.firehose {
		h.firehose = append(h.firehose, s)
		return
	}
	if s.group != "" {
		h.byGroup[s.group] = append(h.byGroup[s.group], s)
	}
	h.indexLocked(s, ids)
}

// indexLocked adds s under each of ids not yet watched. The caller holds h.subMu.
func (h *Hub) indexLocked(s *subscriber, ids []string) {
	for _, id := range ids {
		if _, ok := s.users[id]; ok {
			continue
		}
		s.users[id] = len(h.byUser[id])
		h.byUser[id] = append(h.byUser[id], s)
	}
}

// unindexLocked removes s from under each of ids it watches: O(1) per id, since s
// knows where it stands in each id's slice (the last subscriber takes its place). The
// caller holds h.subMu.
func (h *Hub) unindexLocked(s *subscriber, ids []string) {
	for _, id := range ids {
		if i, ok := s.users[id]; ok {
			delete(s.users, id)
			h.dropLocked(s, id, i)
		}
	}
}

// dropLocked removes s, at index i, from byUser[id]. The caller holds h.subMu.
func (h *Hub) dropLocked(s *subscriber, id string, i int) {
	subs := h.byUser[id]
	last := len(subs) - 1
	if i > last || subs[i] != s {
		// Never expected: the index is kept in step above. Find s the slow way
		// rather than take the instance down.
		if i = slices.Index(subs, s); i < 0 {
			return
		}
	}
	if i != last {
		moved := subs[last]
		subs[i] = moved
		moved.users[id] = i
	}
	subs[last] = nil
	if last == 0 {
		delete(h.byUser, id)
	} else {
		h.byUser[id] = subs[:last]
	}
}

// unregisterLocked takes s out of the fan-out; safe when it is not in it. The caller
// holds h.subMu.
func (h *Hub) unregisterLocked(s *subscriber) {
	if !s.registered {
		return
	}
	s.registered = false
	if s.firehose {
		if i := slices.Index(h.firehose, s); i >= 0 {
			h.firehose = slices.Delete(h.firehose, i, i+1)
		}
		return
	}
	if s.group != "" {
		subs := h.byGroup[s.group]
		if i := slices.Index(subs, s); i >= 0 {
			subs = slices.Delete(subs, i, i+1)
		}
		if len(subs) == 0 {
			delete(h.byGroup, s.group)
		} else {
			h.byGroup[s.group] = subs
		}
	}
	for id, i := range s.users {
		h.dropLocked(s, id, i)
	}
	clear(s.users)
}

// attachFresh registers s live at the position delivered so far and queues the
// snapshot of ids as its first item. It waits for no resume: the ring is not read.
func (h *Hub) attachFresh(s *subscriber, ids []string) error {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	if s.dropped.Load() {
		return context.Cause(s.ctx)
	}
	h.registerLocked(s, ids)
	h.kickSlowLocked(offer(nil, s, item{snap: &snapMarker{ids: ids, group: s.group, firehose: s.firehose, at: *h.fanned.Load()}}))
	return nil
}

type attachResult int

const (
	attached attachResult = iota
	behind                // the ring no longer holds the cursor: replay from the log
	ahead                 // the cursor is past the hub's position
)

// attachAt registers s live if the ring still holds every change after from. It
// returns the ring's changes from the first one at or after from, and the position
// just before that one (walk) to compute cursors from. When the ring does not reach
// back to from, it returns behind and the ring's base: the log must be read up to it.
func (h *Hub) attachAt(s *subscriber, ids []string, from []int64) ([]*entry, []int64, attachResult, error) {
	if s.dropped.Load() {
		return nil, nil, 0, context.Cause(s.ctx)
	}
	// logMu read-locked keeps the tail from moving the ring and the positions until
	// s is registered and the ring read (see apply); other resumes read alongside.
	h.logMu.RLock()
	defer h.logMu.RUnlock()
	for p, o := range from {
		if o > h.pos[p] {
			return nil, nil, ahead, nil
		}
	}
	for p, o := range from {
		if o < h.base[p] {
			return nil, slices.Clone(h.base), behind, nil
		}
	}
	h.subMu.Lock()
	if s.dropped.Load() { // dropped meanwhile
		h.subMu.Unlock()
		return nil, nil, 0, context.Cause(s.ctx)
	}
	h.registerLocked(s, ids)
	h.subMu.Unlock()
	// Every change from here on is delivered to s; the ring holds those before.
	walk := slices.Clone(h.base)
	var out []*entry
	found := false
	h.ring.each(func(e *entry) {
		if !found && e.offset >= from[e.partition] {
			found = true
			out = make([]*entry, 0, h.ring.n)
		}
		if found {
			out = append(out, e)
		} else {
			walk[e.partition] = e.offset + 1
		}
	})
	return out, walk, attached, nil
}

// subscribe adds ids to a registered s and queues their snapshot: only the ids
// added, so that naming watched ids again costs no state read.
func (h *Hub) subscribe(s *subscriber, add []string) {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	if s.dropped.Load() {
		return
	}
	h.indexLocked(s, add)
	h.kickSlowLocked(offer(nil, s, item{snap: &snapMarker{ids: add, at: *h.fanned.Load()}}))
}

func (h *Hub) unsubscribe(s *subscriber, ids []string) {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	if s.registered {
		h.unindexLocked(s, ids)
	}
}

// waitFor waits until the hub's position reaches pos in every partition, up to
// Config.CatchUpTimeout; false when it did not.
func (h *Hub) waitFor(ctx context.Context, s *subscriber, pos []int64) (bool, error) {
	t := time.NewTimer(h.cfg.CatchUpTimeout)
	defer t.Stop()
	for {
		h.logMu.RLock()
		ok := true
		for p, o := range pos {
			if o > h.pos[p] {
				ok = false
			}
		}
		ch := h.progress
		h.logMu.RUnlock()
		if ok {
			return true, nil
		}
		select {
		case <-ch:
		case <-t.C:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		case <-s.ctx.Done():
			return false, context.Cause(s.ctx)
		}
	}
}

// marks recognise duplicates: by partition of presence.changes, the highest source
// offset seen from each partition of presence.events.
type marks []map[int32]int64

func newMarks(partitions int) marks {
	m := make(marks, partitions)
	for i := range m {
		m[i] = make(map[int32]int64)
	}
	return m
}

// duplicate reports whether e repeats a change already seen, and records it if not.
func (m marks) duplicate(e *entry) bool {
	if int(e.partition) >= len(m) {
		return false
	}
	w := m[e.partition]
	if last, ok := w[e.sourcePartition]; ok && e.sourceOffset <= last {
		return true
	}
	w[e.sourcePartition] = e.sourceOffset
	return false
}

// ring holds the most recent changes in the order the hub applied them.
type ring struct {
	buf     []*entry
	head, n int
}

// push adds e, evicting the oldest change when full; base moves past what is evicted.
func (r *ring) push(e *entry, base []int64) {
	if len(r.buf) == 0 {
		base[e.partition] = e.offset + 1
		return
	}
	if r.n < len(r.buf) {
		r.buf[(r.head+r.n)%len(r.buf)] = e
		r.n++
		return
	}
	old := r.buf[r.head]
	base[old.partition] = max(base[old.partition], old.offset+1)
	r.buf[r.head] = e
	r.head = (r.head + 1) % len(r.buf)
}

func (r *ring) each(fn func(*entry)) {
	for i := range r.n {
		fn(r.buf[(r.head+i)%len(r.buf)])
	}
}

// queue is a subscriber's bounded FIFO. It grows with use up to its bound and lets
// its memory go when drained, so an idle connection costs a few bytes, not the bound.
type queue struct {
	mu    sync.Mutex
	buf   []item
	head  int
	n     int
	max   int
	ready chan struct{} // holds a token while items may be waiting
}

func newQueue(max int) *queue {
	return &queue{max: max, ready: make(chan struct{}, 1)}
}

// push adds it; false when the queue is full.
func (q *queue) push(it item) bool {
	q.mu.Lock()
	if q.n == len(q.buf) {
		if q.n >= q.max {
			q.mu.Unlock()
			return false
		}
		grown := make([]item, min(q.max, max(16, 2*len(q.buf))))
		for i := range q.n {
			grown[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = grown, 0
	}
	q.buf[(q.head+q.n)%len(q.buf)] = it
	q.n++
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return true
}

// pop takes the oldest item; false when there is none.
func (q *queue) pop() (item, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return item{}, false
	}
	it := q.buf[q.head]
	q.buf[q.head] = item{}
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	if q.n == 0 && len(q.buf) > 64 {
		q.buf, q.head = nil, 0 // a burst's memory goes with it
	}
	return it, true
}
