package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/pulse-presence/pulse/internal/platform/deadletter"
	"github.com/pulse-presence/pulse/internal/platform/kafkax"
	"github.com/pulse-presence/pulse/internal/platform/ports"
)

// runTopics creates Pulse's topics, or checks existing ones: a topic that exists with
// a different partition count is reported, never changed, because repartitioning moves
// users between partitions and so between aggregators and bitmap shards.
func runTopics(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("topics", flag.ContinueOnError)
	brokers := fs.String("brokers", ports.LocalAddr(ports.Kafka), "comma-separated broker addresses")
	partitions := fs.Int("partitions", 16, "partitions per topic (also Pulse's shard count)")
	replication := fs.Int("replication", 1, "replication factor (3 in production)")
	names := fs.String("topics", strings.Join([]string{kafkax.DefaultEventsTopic, kafkax.DefaultChangesTopic,
		deadletter.Topic(kafkax.DefaultEventsTopic), deadletter.Topic(kafkax.DefaultChangesTopic),
		kafkax.DefaultWebhooksTopic, deadletter.Topic(kafkax.DefaultWebhooksTopic)}, ","),
		"topics to create: the events, the changes, the webhooks' replay topic and their dead-letter topics")
	retention := fs.Duration("retention", 7*24*time.Hour, "how long the log keeps records; replays and feed resumes reach back this far")
	timeout := fs.Duration("timeout", 30*time.Second, "deadline for the whole operation")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *partitions < 1 || *partitions > 4096 {
		return fmt.Errorf("-partitions=%d: want 1..4096", *partitions)
	}
	if *replication < 1 {
		return fmt.Errorf("-replication=%d: want at least 1", *replication)
	}
	topics := strings.Split(*names, ",")
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	cl, err := kafkax.NewClient(kafkaConfig(*brokers, *timeout), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	retentionMs := fmt.Sprint(retention.Milliseconds())
	// With acks=all, a write is acknowledged once min.insync.replicas replicas hold it:
	// 2 of 3 survives the loss of one broker without losing an acknowledged event.
	minISR := fmt.Sprint(max(1, min(2, *replication-1)))
	resp, err := adm.CreateTopics(ctx, int32(*partitions), int16(*replication),
		map[string]*string{"retention.ms": &retentionMs, "min.insync.replicas": &minISR}, topics...)
	if err != nil {
		return fmt.Errorf("creating topics: %w", err)
	}
	details, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return fmt.Errorf("describing topics: %w", err)
	}
	var errs []error
	for _, name := range topics {
		r := resp[name]
		switch {
		case r.Err == nil:
			fmt.Fprintf(stdout, "    created topic %s (%d partitions, replication %d, min.insync.replicas %s)\n", name, *partitions, *replication, minISR)
		case errors.Is(r.Err, kerr.TopicAlreadyExists):
			d := details[name]
			if n := len(d.Partitions); n != *partitions {
				errs = append(errs, fmt.Errorf("topic %s exists with %d partitions, not %d: Pulse does not repartition a topic in place", name, n, *partitions))
				continue
			}
			fmt.Fprintf(stdout, "    topic %s exists (%d partitions)\n", name, len(d.Partitions))
		default:
			errs = append(errs, fmt.Errorf("topic %s: %w", name, r.Err))
		}
	}
	return errors.Join(errs...)
}
