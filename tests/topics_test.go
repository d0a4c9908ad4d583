package tests

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/tests/harness"
)

func TestTopicsExistWithConfiguredPartitions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	adm := harness.KafkaAdmin(t)
	topics := []string{"presence.events", "presence.changes"}
	details, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		t.Fatalf("listing topics (is the stack up? run 'make up'): %v", err)
	}
	want := harness.Partitions(t)
	// The stack creates its topics with a replica on every broker, up to three: one on
	// the single stack, three on the cluster topology, whose writes then need two in
	// sync (min.insync.replicas).
	brokers, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	replicas := min(3, len(brokers.Brokers))
	wantISR := strconv.Itoa(max(1, min(2, replicas-1)))
	for _, name := range topics {
		d, ok := details[name]
		if !ok || d.Err != nil {
			t.Fatalf("topic %s missing: %v", name, d.Err)
		}
		if got := len(d.Partitions); got != want {
			t.Errorf("topic %s has %d partitions, want %d", name, got, want)
		}
		for p, pd := range d.Partitions {
			if len(pd.Replicas) != replicas {
				t.Errorf("topic %s partition %d has %d replicas, want %d on a stack of %d brokers", name, p, len(pd.Replicas), replicas, len(brokers.Brokers))
			}
		}
	}
	cfgs, err := adm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	wantRetention := strconv.FormatInt((7 * 24 * time.Hour).Milliseconds(), 10)
	for _, rc := range cfgs {
		if rc.Err != nil {
			t.Fatalf("%s configs: %v", rc.Name, rc.Err)
		}
		got, isr := "(unset)", "(unset)"
		for _, c := range rc.Configs {
			switch c.Key {
			case "retention.ms":
				got = c.MaybeValue()
			case "min.insync.replicas":
				isr = c.MaybeValue()
			}
		}
		if got != wantRetention {
			t.Errorf("%s retention.ms = %s, want %s (7 days)", rc.Name, got, wantRetention)
		}
		if isr != wantISR {
			t.Errorf("%s min.insync.replicas = %s, want %s", rc.Name, isr, wantISR)
		}
	}
}

// Re-running the topic step changes nothing, and asking for another partition count
// is refused with the reason instead of silently leaving the old count.
func TestTopicsCommandIsIdempotentAndRefusesRepartition(t *testing.T) {
	brokers := strings.Join(harness.KafkaBrokers(), ",")
	n := harness.Partitions(t)
	out, err := exec.Command(harness.Binary("pulsectl"), "topics", "-brokers", brokers, "-partitions", strconv.Itoa(n)).CombinedOutput()
	if err != nil {
		t.Fatalf("pulsectl topics: %v\n%s", err, out)
	}
	for _, topic := range []string{"presence.events", "presence.changes"} {
		want := "topic " + topic + " exists (" + strconv.Itoa(n) + " partitions)"
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	out, err = exec.Command(harness.Binary("pulsectl"), "topics", "-brokers", brokers, "-partitions", strconv.Itoa(n+1)).CombinedOutput()
	if err == nil {
		t.Fatalf("pulsectl topics with %d partitions succeeded on topics of %d:\n%s", n+1, n, out)
	}
	want := "topic presence.events exists with " + strconv.Itoa(n) + " partitions, not " + strconv.Itoa(n+1)
	if !strings.Contains(string(out), want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	details, err := harness.KafkaAdmin(t).ListTopics(context.Background(), "presence.events")
	if err != nil {
		t.Fatal(err)
	}
	if got := len(details["presence.events"].Partitions); got != n {
		t.Errorf("presence.events has %d partitions after the refused call, want %d", got, n)
	}
}
