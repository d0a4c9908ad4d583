package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/records"
)

// The duplicate horizon is re-read from DedupeHorizon plus a minute before the first
// record handed over, retried while the log cannot be read, and remembers the ids read.
func TestRebuildDedupe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := time.Date(1999, 12, 31, 23, 0, 0, 0, time.UTC) // before the bubble's clock
		var log []*kgo.Record
		// The read starts 10m+1m before the first record (base+25m): "old" lies before it.
		received := map[string]time.Duration{"old": 0, "a": 15 * time.Minute, "b": 20 * time.Minute}
		for i, id := range []string{"old", "a", "b"} {
			e := presence.Event{ID: id, UserID: "u1", Kind: presence.KindHeartbeat, DeviceID: "d",
				ReceivedAt: base.Add(received[id]), Source: presence.SourceAPI}
			r, err := records.Event("ev", &e)
			if err != nil {
				t.Fatal(err)
			}
			r.Offset, r.Timestamp = int64(i), e.ReceivedAt
			log = append(log, r)
		}
		var reads []string
		w := &worker{
			cfg:     Config{DedupeHorizon: 10 * time.Minute},
			topic:   "ev",
			logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
			metrics: newMetrics(prometheus.NewRegistry()),
			st:      shardState{partition: 4},
			now:     time.Now,
			readRange: func(_ context.Context, topic string, p int32, since time.Time, end int64, fn func(*kgo.Record) error) error {
				reads = append(reads, fmt.Sprintf("%s/%d since=%s end=%d", topic, p, since.Format(time.TimeOnly), end))
				if len(reads) == 1 {
					return errors.New("broker gone")
				}
				for _, r := range log {
					if r.Offset < end && !r.Timestamp.Before(since) {
						if err := fn(r); err != nil {
							return err
						}
					}
				}
				return nil
			},
		}
		first := &kgo.Record{Offset: 3, Timestamp: base.Add(25 * time.Minute)}
		if err := w.rebuildDedupe(t.Context(), first); err != nil {
			t.Fatal(err)
		}
		want := []string{"ev/4 since=23:14:00 end=3", "ev/4 since=23:14:00 end=3"}
		if !slices.Equal(reads, want) {
			t.Errorf("reads %v, want %v", reads, want)
		}
		if got := testutil.ToFloat64(w.metrics.retries.WithLabelValues("rebuilding the duplicate horizon")); got != 1 {
			t.Errorf("retries = %v, want 1", got)
		}
		at := first.Timestamp
		for id, want := range map[string]bool{"a": true, "b": true, "old": false} {
			if got := w.dedupe.Duplicate("u1", id, at); got != want {
				t.Errorf("Duplicate(%q) = %v, want %v", id, got, want)
			}
		}
	})
}
