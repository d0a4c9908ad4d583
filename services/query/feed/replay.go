package feed

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/platform/kafkax"
)

// errTrimmed: retention removed records of a range while it was being read.
var errTrimmed = errors.New("records were trimmed while being read")

// logReader reads ranges [from, to) of presence.changes partitions, outside any
// group, with a short-lived client of its own.
type logReader struct {
	cl   *kgo.Client
	to   []int64
	done []bool
	left int
}

func (h *Hub) openLog(from, to []int64) (*logReader, error) {
	l := &logReader{to: to, done: make([]bool, len(to))}
	offsets := make(map[int32]kgo.Offset)
	for p := range to {
		if from[p] >= to[p] {
			l.done[p] = true
			continue
		}
		offsets[int32(p)] = kgo.NewOffset().At(from[p])
		l.left++
	}
	if l.left == 0 {
		return l, nil
	}
	cl, err := kafkax.NewClient(h.cfg.Kafka, h.logger, nil,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{h.topic: offsets}),
		// Control records hold offsets too: seeing them keeps the offsets contiguous,
		// so reaching to-1 is always observed.
		kgo.KeepControlRecords(),
	)
	if err != nil {
		return nil, err
	}
	l.cl = cl
	return l, nil
}

func (l *logReader) finished() bool { return l.left == 0 }

// poll returns the next records below the range ends, control records left out;
// each partition's in offset order. A poll that gets nothing for the Kafka request
// timeout is an error: the brokers are not answering.
func (l *logReader) poll(ctx context.Context) ([]*kgo.Record, error) {
	if l.left == 0 {
		return nil, nil
	}
	fs := l.cl.PollFetches(ctx)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("reading presence.changes: %w", err)
	}
	var ferr error
	fs.EachError(func(_ string, p int32, err error) {
		var loss *kgo.ErrDataLoss
		if errors.As(err, &loss) {
			ferr = fmt.Errorf("partition %d: %w", p, errTrimmed)
			return
		}
		if ferr == nil {
			ferr = fmt.Errorf("reading partition %d: %w", p, err)
		}
	})
	if ferr != nil {
		return nil, ferr
	}
	var out []*kgo.Record
	fs.EachRecord(func(r *kgo.Record) {
		p := r.Partition
		if int(p) >= len(l.to) || l.done[p] || r.Offset >= l.to[p] {
			return
		}
		if !r.Attrs.IsControl() {
			out = append(out, r)
		}
		if r.Offset >= l.to[p]-1 {
			l.done[p] = true
			l.left--
		}
	})
	return out, nil
}

func (l *logReader) close() {
	if l != nil && l.cl != nil {
		l.cl.Close()
		l.cl = nil
	}
}

// readLog calls fn for every record of [from, to) of each partition.
func (h *Hub) readLog(ctx context.Context, from, to []int64, fn func(*kgo.Record)) error {
	l, err := h.openLog(from, to)
	if err != nil {
		return err
	}
	defer l.close()
	for !l.finished() {
		pctx, cancel := context.WithTimeout(ctx, h.cfg.Kafka.RequestTimeout)
		recs, err := l.poll(pctx)
		cancel()
		if err != nil {
			return err
		}
		for _, r := range recs {
			fn(r)
		}
	}
	return nil
}
