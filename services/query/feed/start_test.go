package feed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// While Kafka cannot be reached the hub retries and refuses sessions as not ready; a
// shutdown then ends Run without an error, and a Kafka that comes up is tailed.
func TestRunRetriesUntilKafkaAnswers(t *testing.T) {
	for _, tt := range []struct {
		name     string
		kafkaUp  bool
		produced string
	}{
		{"shut down while Kafka is down", false, ""},
		{"Kafka comes up", true, "u:offline>online"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			port := freePort(t)
			cfg := testConfig([]string{fmt.Sprintf("127.0.0.1:%d", port)})
			cfg.Kafka.DialTimeout, cfg.Kafka.RequestTimeout = 100*time.Millisecond, 300*time.Millisecond
			retried := make(chan struct{}, 1)
			logger := slog.New(signalHandler{msg: "retrying", ch: retried})
			hub, err := NewHub(cfg, &fakeState{users: map[string]*presence.User{}}, logger, prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- hub.Run(ctx) }()
			select {
			case <-retried:
			case <-time.After(10 * time.Second):
				t.Fatal("no retry logged within 10s of an unreachable Kafka")
			}
			if _, err := hub.Open(context.Background(), Options{}); !errors.Is(err, ErrNotReady) {
				t.Fatalf("Open while Kafka is down = %v, want ErrNotReady", err)
			}
			if tt.kafkaUp {
				c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(1, testTopic))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				for deadline := time.Now().Add(15 * time.Second); !hub.Ready(); time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("hub not ready 15s after Kafka came up")
					}
				}
				s, err := hub.Open(context.Background(), Options{UserIDs: []string{"u"}})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				read(t, s, 1)
				h := &harness{t: t, partitions: 1, status: map[string]presence.Status{}, src: map[int32]int64{}, clock: time.Now()}
				h.prod, err = kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(testTopic),
					kgo.RecordPartitioner(kgo.ManualPartitioner()))
				if err != nil {
					t.Fatal(err)
				}
				defer h.prod.Close()
				h.produce(h.change("u", on))
				if got := read(t, s, 1)[0].short(); got != tt.produced {
					t.Fatalf("after Kafka came up got %s, want %s", got, tt.produced)
				}
				s.Close() // the shutdown would wait for it
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run = %v, want nil at shutdown", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run still running 10s after shutdown")
			}
		})
	}
}

// freePort is a TCP port nothing listens on, a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// signalHandler discards log records, signalling on ch when one says msg.
type signalHandler struct {
	msg string
	ch  chan struct{}
}

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h signalHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h signalHandler) WithGroup(string) slog.Handler            { return h }

func (h signalHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.ch <- struct{}{}:
		default:
		}
	}
	return nil
}
