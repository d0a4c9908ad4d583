package dedupe

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/records"
	"github.com/pulse-presence/pulse/internal/platform/kafkax"
	"github.com/pulse-presence/pulse/internal/platform/retry"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// event is a heartbeat received at received, stamped in the log at the same time.
func event(t *testing.T, id string, received time.Time) *kgo.Record {
	t.Helper()
	e := presence.Event{ID: id, UserID: "u-" + id, Kind: presence.KindHeartbeat, DeviceID: "d",
		ReceivedAt: received, Source: presence.SourceAPI}
	r, err := records.Event("events", &e)
	if err != nil {
		t.Fatal(err)
	}
	r.Timestamp = received
	return r
}

// Against an in-process Kafka: the read starts Horizon+Slack before the first record's
// log time, stops just before it, and feeds every decodable event in log order.
func TestRebuildFromKafka(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "events"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := kafkax.Config{
		Brokers: c.ListenAddrs(), ClientID: "horizon-test",
		DialTimeout: time.Second, RequestTimeout: 5 * time.Second, RetryTimeout: 5 * time.Second,
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	poison := event(t, "poison", base.Add(2*time.Minute))
	poison.Headers = nil
	log := []*kgo.Record{
		event(t, "old", base.Add(-30*time.Minute)), // 0: before the horizon
		event(t, "a", base.Add(-5*time.Minute)),    // 1: within the slack only
		event(t, "b", base),                        // 2
		poison,                                     // 3: read, not fed
		event(t, "c", base.Add(5*time.Minute)),     // 4
		event(t, "d", base.Add(10*time.Minute)),    // 5: the first record handed over
		event(t, "e", base.Add(11*time.Minute)),    // 6: after it
	}
	prod, err := kafkax.NewClient(cfg, discard, nil, kgo.DefaultProduceTopic("events"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for _, r := range log {
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	first := &kgo.Record{Offset: 5, Timestamp: base.Add(10 * time.Minute)}

	var fed []string
	res, err := Rebuild(ctx, Spec{
		Read: FromKafka(cfg, discard), Topic: "events", Partition: 0,
		Horizon: 14 * time.Minute, What: "rebuilding",
		Retry: retry.Policy{TryTimeout: 20 * time.Second},
	}, discard, first, func(w *Window, e *presence.Event) {
		fed = append(fed, e.ID)
		w.Duplicate(e.UserID, e.ID, e.ReceivedAt)
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b", "c"}; !slices.Equal(fed, want) {
		t.Errorf("fed %v, want %v", fed, want)
	}
	if res.Records != 4 || res.Events != 3 {
		t.Errorf("records=%d events=%d, want 4 and 3 (the undecodable one read, not fed)", res.Records, res.Events)
	}
	if want := base.Add(-5 * time.Minute); !res.Since.Equal(want) {
		t.Errorf("since = %v, want %v (14m + 1m before the first record)", res.Since, want)
	}
	// The Window's clock is at c (base+5m): a and b are within 14 minutes of it.
	for _, id := range []string{"a", "b", "c"} {
		if !res.Window.Duplicate("u-"+id, id, base.Add(5*time.Minute)) {
			t.Errorf("%s not remembered by the rebuilt window", id)
		}
	}
	if res.Window.Duplicate("u-old", "old", base.Add(5*time.Minute)) {
		t.Error("an event from before the read was remembered")
	}
}

// fakeLog serves records from memory, failing the reads fail picks after serving
// part of the range: a broker lost in the middle of a read.
type fakeLog struct {
	recs  []*kgo.Record
	reads []string
	fail  func(read int) bool
}

func (l *fakeLog) read(_ context.Context, topic string, p int32, since time.Time, end int64, fn func(*kgo.Record) error) error {
	l.reads = append(l.reads, since.Format(time.TimeOnly))
	for i, r := range l.recs {
		if r.Offset >= end || r.Timestamp.Before(since) {
			continue
		}
		if i == 1 && l.fail != nil && l.fail(len(l.reads)) {
			return errors.New("broker gone")
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

func fakeRecords(t *testing.T, base time.Time, ids ...string) []*kgo.Record {
	var recs []*kgo.Record
	for i, id := range ids {
		r := event(t, id, base.Add(time.Duration(i)*time.Second))
		r.Offset = int64(i)
		recs = append(recs, r)
	}
	return recs
}

// A read that fails half way is retried from a new Window: what the failed attempts
// fed is not counted twice, and the Result is the last, complete pass.
func TestRebuildRetriesFromANewWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := time.Now()
		l := &fakeLog{recs: fakeRecords(t, base, "a", "b", "c"), fail: func(read int) bool { return read <= 2 }}
		retries := 0
		var windows []*Window
		res, err := Rebuild(t.Context(), Spec{
			Read: l.read, Topic: "events", Horizon: time.Minute, What: "rebuilding",
			Retry: retry.Policy{Initial: 100 * time.Millisecond, OnRetry: func(int, error) { retries++ }},
		}, discard, &kgo.Record{Offset: 3, Timestamp: base.Add(3 * time.Second)}, func(w *Window, e *presence.Event) {
			if len(windows) == 0 || windows[len(windows)-1] != w {
				windows = append(windows, w)
			}
			if w.Duplicate(e.UserID, e.ID, e.ReceivedAt) {
				t.Errorf("%s fed twice to one window", e.ID)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.reads) != 3 || retries != 2 {
			t.Fatalf("%d reads, %d retries; want 3 and 2", len(l.reads), retries)
		}
		if len(windows) != 3 || res.Window != windows[2] {
			t.Errorf("%d windows fed, result is the last: %v; want 3 and true", len(windows), res.Window == windows[len(windows)-1])
		}
		if res.Records != 3 || res.Events != 3 {
			t.Errorf("records=%d events=%d, want 3 and 3", res.Records, res.Events)
		}
	})
}

// The read starts from the first record's log time, capped at now: a record stamped
// in the future, or not stamped at all, does not push the horizon forward.
func TestRebuildSince(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		stamp time.Time
		want  string
	}{
		{"stamped in the past", now.Add(-time.Hour), "10:49:00"},
		{"stamped now", now, "11:49:00"},
		{"stamped in the future", now.Add(time.Hour), "11:49:00"},
		{"not stamped", time.Time{}, "11:49:00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &fakeLog{}
			res, err := Rebuild(t.Context(), Spec{Read: l.read, Horizon: 10 * time.Minute, Now: func() time.Time { return now }},
				discard, &kgo.Record{Offset: 0, Timestamp: tt.stamp}, func(*Window, *presence.Event) {})
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Since.Format(time.TimeOnly); got != tt.want || !slices.Equal(l.reads, []string{tt.want}) {
				t.Errorf("since %s, reads %v; want %s once", got, l.reads, tt.want)
			}
		})
	}
}

// Only ctx ends a rebuild that keeps failing, and the error says so.
func TestRebuildStopsWhenContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Minute, cancel)
		l := &fakeLog{recs: fakeRecords(t, time.Now().Add(-time.Second), "a", "b"), fail: func(int) bool { return true }}
		res, err := Rebuild(ctx, Spec{Read: l.read, Horizon: time.Minute, What: "rebuilding"},
			discard, &kgo.Record{Offset: 2, Timestamp: time.Now()}, func(*Window, *presence.Event) {})
		if !errors.Is(err, context.Canceled) || res.Window != nil {
			t.Fatalf("Rebuild = %+v, %v; want no window and context.Canceled", res, err)
		}
		if len(l.reads) < 10 {
			t.Errorf("%d reads in a minute, want it to keep retrying", len(l.reads))
		}
	})
}
