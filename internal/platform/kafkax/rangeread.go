package kafkax

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadRange calls fn, in offset order, for every record of one partition from the first
// one stamped at or after since up to but excluding offset end. It reads outside any
// consumer group with short-lived clients of its own, so a partition worker can rebuild
// what the log said just before the first record the group hands it (its dedupe
// horizon, say) without disturbing the group. It returns at once when that range is
// empty, and the first error of fn, the brokers or ctx; give ctx a deadline.
//
// The range is clipped to the partition's end offset, so an end that nothing has been
// written at yet (a committed offset at the log's end) does not wait for new records.
// Records older than the log start (trimmed by retention) are simply not there.
func ReadRange(ctx context.Context, cfg Config, logger *slog.Logger, topic string, partition int32,
	since time.Time, end int64, fn func(*kgo.Record) error,
) error {
	if end <= 0 {
		return nil
	}
	logger = logger.With("topic", topic, "partition", partition)
	start, last, err := rangeBounds(ctx, cfg, logger, topic, partition, since)
	if err != nil {
		return err
	}
	end = min(end, last)
	if start < 0 || start >= end {
		return nil
	}

	cl, err := NewClient(cfg, logger, nil,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(start)}}),
		// Control records (transaction markers) hold offsets too: seeing them keeps the
		// offsets contiguous, so reaching end-1 is always observed.
		kgo.KeepControlRecords(),
	)
	if err != nil {
		return err
	}
	defer cl.Close()

	for {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reading %s/%d [%d, %d): %w", topic, partition, start, end, err)
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) {
			var loss *kgo.ErrDataLoss
			if errors.As(err, &loss) {
				// Retention trimmed the range while we read; what is left is all there is.
				logger.Warn("range read lost records to retention", "err", err)
				return
			}
			if ferr == nil {
				ferr = err
			}
		})
		if ferr != nil {
			return fmt.Errorf("reading %s/%d: %w", topic, partition, ferr)
		}
		done := false
		for r := range fetches.RecordsAll() {
			if r.Offset >= end {
				done = true
				break
			}
			if !r.Attrs.IsControl() {
				if err := fn(r); err != nil {
					return err
				}
			}
			if r.Offset == end-1 {
				done = true
				break
			}
		}
		if done {
			return nil
		}
	}
}

// rangeBounds lists the first offset stamped at or after since and the partition's end
// offset (-1, -1 when the partition has no such record).
func rangeBounds(ctx context.Context, cfg Config, logger *slog.Logger, topic string, partition int32, since time.Time) (start, end int64, err error) {
	cl, err := NewClient(cfg, logger, nil)
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	lookup := func(what string, l kadm.ListedOffsets, err error) (int64, error) {
		if err != nil {
			return 0, fmt.Errorf("listing %s offsets of %s: %w", what, topic, err)
		}
		o, ok := l.Lookup(topic, partition)
		if !ok {
			return 0, fmt.Errorf("listing %s offsets: %s has no partition %d", what, topic, partition)
		}
		if o.Err != nil {
			return 0, fmt.Errorf("listing %s offset of %s/%d: %w", what, topic, partition, o.Err)
		}
		return o.Offset, nil
	}
	listed, err := adm.ListOffsetsAfterMilli(ctx, since.UnixMilli(), topic)
	if start, err = lookup("timestamp", listed, err); err != nil {
		return 0, 0, err
	}
	listed, err = adm.ListEndOffsets(ctx, topic)
	if end, err = lookup("end", listed, err); err != nil {
		return 0, 0, err
	}
	return start, end, nil
}
