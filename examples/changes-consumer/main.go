// Command changes-consumer reads Pulse's presence.changes topic in a Kafka consumer
// group and prints one line per change (docs/changes.md). It checks each record's
// schema header, decodes and validates the pulse.v1.Change, drops the repeats an
// aggregator replay produces, and commits offsets only after printing.
//
// With `make run` up (Kafka on 127.0.0.1:19092), in another terminal:
//
//	go run ./examples/changes-consumer -group my-changes -from start
//
// Of Pulse it imports only the public pkg/pb/pulsev1, so it can be copied out of the
// tree as the start of a consumer of your own.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:19092", "Kafka brokers, comma-separated (the default is make run's)")
	topic := flag.String("topic", "presence.changes", "the changes topic (PULSE_TOPIC_CHANGES)")
	group := flag.String("group", "changes-consumer", "consumer group; never one of Pulse's own")
	from := flag.String("from", "end", "where a group without committed offsets starts: start or end")
	flag.Parse()
	reset := kgo.NewOffset().AtEnd()
	switch *from {
	case "start":
		reset = kgo.NewOffset().AtStart()
	case "end":
	default:
		log.Fatalf("-from=%q: want start or end", *from)
	}
	cl, err := newClient(strings.Split(*brokers, ","), *topic, *group, reset)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	consume(ctx, cl, &printer{out: os.Stdout, seen: marks{}})
	cl.Close() // leaves the group, so its partitions move on at once
}

// newClient is a member of group reading topic, which starts at reset when the group
// has no committed offsets.
func newClient(brokers []string, topic, group string, reset kgo.Offset) (*kgo.Client, error) {
	return kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(reset),
		// Offsets are committed after the records are printed, and no rebalance
		// comes between a poll and its commit.
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
	)
}

// consume polls, prints and commits until ctx ends or the client is closed.
func consume(ctx context.Context, cl *kgo.Client, p *printer) {
	for {
		fetches := cl.PollFetches(ctx)
		if fetches.IsClientClosed() {
			return
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.Canceled) {
				log.Printf("fetching %s/%d: %v", topic, partition, err)
			}
		})
		fetches.EachRecord(p.handle)
		// Commit even when ctx has ended: what was printed is done.
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := cl.CommitUncommittedOffsets(cctx); err != nil {
			log.Printf("committing: %v", err) // the next commit covers these records
		}
		cancel()
		cl.AllowRebalance()
		if ctx.Err() != nil {
			return
		}
	}
}

// printer prints each change of the records it is handed, once.
type printer struct {
	out  io.Writer
	seen marks
}

func (p *printer) handle(r *kgo.Record) {
	c, err := decode(r)
	if err != nil {
		log.Printf("skipping %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
		return
	}
	if p.seen.repeat(r.Partition, c) {
		return
	}
	fmt.Fprintln(p.out, format(c))
}

// decode reads a presence.changes record: the schema header first, then the change,
// checked as Pulse's own reader checks it.
func decode(r *kgo.Record) (*pulsev1.Change, error) {
	found := false
	for _, h := range r.Headers {
		if h.Key == pulsev1.SchemaHeader {
			if string(h.Value) != pulsev1.SchemaChange {
				return nil, fmt.Errorf("schema %q, want %q", h.Value, pulsev1.SchemaChange)
			}
			found = true
		}
	}
	if !found {
		return nil, errors.New("no " + pulsev1.SchemaHeader + " header")
	}
	c := new(pulsev1.Change)
	if err := proto.Unmarshal(r.Value, c); err != nil {
		return nil, fmt.Errorf("decoding change: %w", err)
	}
	switch {
	case c.UserId == "" || c.UserId != string(r.Key):
		return nil, fmt.Errorf("user id %q, record key %q", c.UserId, r.Key)
	case !known(c.Previous) || !known(c.Current):
		return nil, fmt.Errorf("unknown status in %v -> %v", c.Previous, c.Current)
	case c.ChangedAtUs == 0:
		return nil, errors.New("no changed_at_us")
	case (c.Previous == c.Current) != (c.CustomOnly || c.GroupId != ""):
		return nil, fmt.Errorf("%v -> %v is not a change (custom only %v, group %q)", c.Previous, c.Current, c.CustomOnly, c.GroupId)
	}
	return c, nil
}

// known reports whether s is a status this program knows; an unknown value reads as
// STATUS_UNSPECIFIED, which no change carries.
func known(s pulsev1.Status) bool {
	_, ok := pulsev1.Status_name[int32(s)]
	return ok && s != pulsev1.Status_STATUS_UNSPECIFIED
}

// marks recognise the repeats an aggregator replay produces: by partition of
// presence.changes, the highest source offset seen from each partition of
// presence.events.
type marks map[int32]map[int32]int64

// repeat reports whether c, read from partition, repeats a change already seen, and
// records it if not.
func (m marks) repeat(partition int32, c *pulsev1.Change) bool {
	w := m[partition]
	if w == nil {
		w = make(map[int32]int64)
		m[partition] = w
	}
	if last, ok := w[c.SourcePartition]; ok && c.SourceOffset <= last {
		return true
	}
	w[c.SourcePartition] = c.SourceOffset
	return false
}

// format is c's line: time, user, previous -> current, cause, and what a change that
// is not a status transition changed.
func format(c *pulsev1.Change) string {
	at := time.UnixMicro(c.ChangedAtUs).UTC().Format("2006-01-02T15:04:05.000000Z07:00")
	line := fmt.Sprintf("%s %s %s -> %s (%s)", at, c.UserId, name(c.Previous.String()), name(c.Current.String()), name(c.Cause.String()))
	switch {
	case c.GroupId != "" && c.Left:
		return line + " left " + c.GroupId
	case c.GroupId != "":
		return line + " joined " + c.GroupId
	case !c.CustomOnly:
		return line
	case c.Custom.GetText() == "" && c.Custom.GetEmoji() == "":
		return line + " custom only: cleared"
	case c.Custom.GetText() == "":
		return line + " custom only: " + c.Custom.GetEmoji()
	}
	return strings.TrimSpace(fmt.Sprintf("%s custom only: %q %s", line, c.Custom.GetText(), c.Custom.GetEmoji()))
}

// name is an enum value's name without its type's prefix: STATUS_ONLINE is online.
// A value this program does not know is its number.
func name(s string) string {
	if _, v, ok := strings.Cut(s, "_"); ok {
		return strings.ToLower(v)
	}
	return s
}
