package dedupe

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/records"
	"github.com/pulse-presence/pulse/internal/platform/kafkax"
	"github.com/pulse-presence/pulse/internal/platform/retry"
)

// A Window lives in memory only. The aggregator (to drop duplicates) and the history
// writer (to drop duplicates and flag stale events) each keep one per events
// partition, so a worker that starts on a partition, after a restart or a rebalance,
// rebuilds it (Rebuild) by replaying the horizon just before the first record it is
// handed: its decisions are then the ones a worker that never stopped would make.

// Slack widens the log time re-read before the horizon. Record timestamps are stamped
// by ingest just after received-at (or by the broker, on append), and ingest instances'
// clocks disagree a little; reading a minute more costs little and keeps the rebuilt
// horizon a superset of the one that matters.
const Slack = time.Minute

// ReadRange calls fn, in offset order, for every record of one partition from the
// first one stamped at or after since up to, not including, offset end.
type ReadRange func(ctx context.Context, topic string, partition int32, since time.Time, end int64, fn func(*kgo.Record) error) error

// FromKafka is ReadRange over cfg's brokers (kafkax.ReadRange).
func FromKafka(cfg kafkax.Config, logger *slog.Logger) ReadRange {
	return func(ctx context.Context, topic string, partition int32, since time.Time, end int64, fn func(*kgo.Record) error) error {
		return kafkax.ReadRange(ctx, cfg, logger, topic, partition, since, end, fn)
	}
}

// Spec is what to rebuild and how.
type Spec struct {
	// Read reads the log.
	Read      ReadRange
	Topic     string
	Partition int32
	// Horizon is how much log time the Window remembers, and so how much is re-read.
	Horizon time.Duration
	// MaxIDs bounds the event ids the Window remembers (Window.LimitIDs); 0: no
	// bound but the horizon's.
	MaxIDs int
	// Retry is how a failed read is retried; its TryTimeout bounds one whole read,
	// which on a busy partition takes far longer than one request.
	Retry retry.Policy
	// What names the rebuild in retry log lines and errors.
	What string
	// Now caps a first record stamped in the future; nil is time.Now.
	Now func() time.Time
}

// Result is a rebuilt Window and what went into it.
type Result struct {
	Window *Window
	// Since is the log time the read started from.
	Since time.Time
	// Records counts the records read, undecodable ones included; Events the events
	// fed to the Window.
	Records, Events int
}

// Rebuild reads the partition from Horizon+Slack before first's log time up to first
// and calls feed with a new Window and every event it decodes, in log order; records
// that do not decode are skipped, as the workers skip them live. The horizon is measured
// from first's log time, not from now: after an outage longer than the horizon, the
// backlog's own recent past is what matters.
//
// A failed read is retried by s.Retry from a new Window, so feed sees each event once
// per attempt and the Result only the last, complete one. Rebuild returns an error only
// when ctx ends (it wraps ctx's error) or s.Retry gives up.
func Rebuild(ctx context.Context, s Spec, logger *slog.Logger, first *kgo.Record, feed func(*Window, *presence.Event)) (Result, error) {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	from := first.Timestamp
	if t := now(); from.IsZero() || from.After(t) {
		from = t
	}
	res := Result{Since: from.Add(-s.Horizon - Slack)}
	err := retry.Do(ctx, s.Retry, logger, s.What, func(ctx context.Context) error {
		res.Window, res.Records, res.Events = NewWindow(s.Horizon), 0, 0
		res.Window.LimitIDs(s.MaxIDs)
		return s.Read(ctx, s.Topic, s.Partition, res.Since, first.Offset, func(r *kgo.Record) error {
			res.Records++
			if e, err := records.DecodeEvent(r); err == nil {
				res.Events++
				feed(res.Window, &e)
			}
			return nil
		})
	})
	if err != nil {
		return Result{}, err
	}
	return res, nil
}
