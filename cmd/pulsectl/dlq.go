package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/platform/deadletter"
	"github.com/pulse-presence/pulse/internal/platform/kafkax"
	"github.com/pulse-presence/pulse/internal/platform/ports"
)

// pulsectl dlq list|replay: the dead letters of a topic (records a service could not
// process, docs/design.md guarantee 11), and their replay to the topic they came from
// once the cause is fixed.
func runDLQ(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "replay") {
		return errors.New("usage: pulsectl dlq list [-topic T] [-csv] | pulsectl dlq replay -offsets P:O[,P:O…]|-all [-topic T]")
	}
	fs := flag.NewFlagSet("dlq "+args[0], flag.ContinueOnError)
	brokers := fs.String("brokers", ports.LocalAddr(ports.Kafka), "comma-separated broker addresses")
	topic := fs.String("topic", deadletter.Topic(kafkax.DefaultEventsTopic), "the dead-letter topic ("+deadletter.Topic(kafkax.DefaultChangesTopic)+" for history's, "+deadletter.Topic(kafkax.DefaultWebhooksTopic)+" for webhook batches)")
	asCSV := fs.Bool("csv", false, "print CSV instead of an aligned table (list)")
	offsets := fs.String("offsets", "", "dead letters to replay, as partition:offset of the dead-letter topic, comma-separated (replay)")
	all := fs.Bool("all", false, "replay every dead letter of the topic (replay)")
	timeout := fs.Duration("timeout", 60*time.Second, "bounds the whole command")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	cfg := kafkaConfig(*brokers, *timeout)
	want := map[[2]int64]bool{}
	if args[0] == "replay" {
		if *all == (*offsets != "") {
			return errors.New("replay: give either -offsets or -all")
		}
		for _, po := range strings.Split(*offsets, ",") {
			if po == "" {
				continue
			}
			p, o, ok := strings.Cut(po, ":")
			pn, err1 := strconv.ParseInt(p, 10, 32)
			on, err2 := strconv.ParseInt(o, 10, 64)
			if !ok || err1 != nil || err2 != nil {
				return fmt.Errorf("-offsets: %q is not partition:offset", po)
			}
			want[[2]int64{pn, on}] = true
		}
	}
	type item struct {
		partition int32
		offset    int64
		letter    deadletter.Letter
	}
	var items []item
	var bad int
	if err := readAll(ctx, cfg, *topic, func(r *kgo.Record) {
		l, err := deadletter.Parse(r)
		if err != nil {
			bad++
			return
		}
		items = append(items, item{r.Partition, r.Offset, l})
	}); err != nil {
		return err
	}
	if args[0] == "list" {
		t := &table{header: []string{"DLQ", "AT", "SERVICE", "ORIGIN", "KEY", "BYTES", "REASON"}}
		for _, it := range items {
			l := it.letter
			t.add(fmt.Sprintf("%d:%d", it.partition, it.offset), l.At.UTC().Format(time.RFC3339), l.Service,
				fmt.Sprintf("%s/%d/%d", l.Topic, l.Partition, l.Offset), string(l.Key), strconv.Itoa(len(l.Value)), l.Reason)
		}
		if err := t.print(stdout, *asCSV); err != nil {
			return err
		}
		if bad > 0 {
			return fmt.Errorf("%d records of %s are not dead letters (no origin header)", bad, *topic)
		}
		return nil
	}
	cl, err := kafkax.NewClient(cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		return err
	}
	defer cl.Close()
	var recs []*kgo.Record
	for _, it := range items {
		if *all || want[[2]int64{int64(it.partition), it.offset}] {
			recs = append(recs, it.letter.Replay())
			delete(want, [2]int64{int64(it.partition), it.offset})
		}
	}
	if len(want) > 0 {
		return fmt.Errorf("no dead letter at %v in %s", want, *topic)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("replaying: %w", err)
	}
	fmt.Fprintf(stdout, "replayed %d dead letters of %s to their topics\n", len(recs), *topic)
	return nil
}

// readAll calls fn for every record of topic, from the start of each partition up to
// its end when the command began.
func readAll(ctx context.Context, cfg kafkax.Config, topic string, fn func(*kgo.Record)) error {
	cl, err := kafkax.NewClient(cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		return err
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	cl.Close()
	if err != nil {
		return fmt.Errorf("reading the end of %s: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		return fmt.Errorf("reading the end of %s: %w", topic, err)
	}
	var errs []error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset <= 0 {
			return
		}
		err := kafkax.ReadRange(ctx, cfg, slog.New(slog.DiscardHandler), topic, o.Partition, time.UnixMilli(0), o.Offset,
			func(r *kgo.Record) error { fn(r); return nil })
		if err != nil {
			errs = append(errs, fmt.Errorf("reading %s/%d: %w", topic, o.Partition, err))
		}
	})
	return errors.Join(errs...)
}
