package kafkax

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestReadRange(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "events"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := Config{
		Brokers: c.ListenAddrs(), ClientID: "rangeread-test",
		DialTimeout: time.Second, RequestTimeout: 5 * time.Second, RetryTimeout: 5 * time.Second,
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Partition 0 holds offsets 0..9 stamped base+0s .. base+9s; partition 1 stays empty.
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	prod, err := NewClient(cfg, logger, nil, kgo.DefaultProduceTopic("events"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := range 10 {
		r := &kgo.Record{Partition: 0, Value: []byte(strconv.Itoa(i)), Timestamp: base.Add(time.Duration(i) * time.Second)}
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	read := func(p int32, since time.Time, end int64) []int64 {
		t.Helper()
		var got []int64
		err := ReadRange(ctx, cfg, logger, "events", p, since, end, func(r *kgo.Record) error {
			if want := strconv.FormatInt(r.Offset, 10); string(r.Value) != want {
				t.Errorf("offset %d has value %q, want %q", r.Offset, r.Value, want)
			}
			got = append(got, r.Offset)
			return nil
		})
		if err != nil {
			t.Fatalf("ReadRange(p%d, %v, %d): %v", p, since.Sub(base), end, err)
		}
		return got
	}
	offsets := func(from, to int64) []int64 {
		var o []int64
		for i := from; i < to; i++ {
			o = append(o, i)
		}
		return o
	}

	tests := []struct {
		name  string
		p     int32
		since time.Duration
		end   int64
		want  []int64
	}{
		{"whole log", 0, -time.Hour, 10, offsets(0, 10)},
		{"from a timestamp", 0, 3 * time.Second, 10, offsets(3, 10)},
		{"between two timestamps", 0, 2500 * time.Millisecond, 10, offsets(3, 10)},
		{"up to end", 0, 3 * time.Second, 6, offsets(3, 6)},
		{"end past the log is clipped", 0, 8 * time.Second, 1000, offsets(8, 10)},
		{"empty: start at end", 0, 6 * time.Second, 6, nil},
		{"empty: end before start", 0, 6 * time.Second, 2, nil},
		{"empty: nothing after since", 0, time.Hour, 10, nil},
		{"empty: zero end", 0, -time.Hour, 0, nil},
		{"empty partition", 1, -time.Hour, 5, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := read(tt.p, base.Add(tt.since), tt.end); !slices.Equal(got, tt.want) {
				t.Fatalf("read %v, want %v", got, tt.want)
			}
		})
	}

	t.Run("fn error stops the read", func(t *testing.T) {
		boom := errors.New("boom")
		n := 0
		err := ReadRange(ctx, cfg, logger, "events", 0, base, 10, func(*kgo.Record) error {
			n++
			if n == 3 {
				return boom
			}
			return nil
		})
		if !errors.Is(err, boom) || n != 3 {
			t.Fatalf("err = %v after %d records, want boom after 3", err, n)
		}
	})

	t.Run("unknown partition", func(t *testing.T) {
		err := ReadRange(ctx, cfg, logger, "events", 7, base, 10, func(*kgo.Record) error { return nil })
		if err == nil {
			t.Fatal("ReadRange of a partition that does not exist succeeded")
		}
	})
}
