package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
)

// invalid is an error as Cassandra returns it for an invalid request.
type invalid string

func (e invalid) Code() int       { return gocql.ErrCodeInvalid }
func (e invalid) Message() string { return string(e) }
func (e invalid) Error() string   { return "Invalid: " + string(e) }

var _ gocql.RequestError = invalid("")

// stmts are n user_activity rows, of users u0 to u<n-1>.
func stmts(n int) []historystore.Write {
	out := make([]historystore.Write, n)
	for i := range out {
		e := event(fmt.Sprint("e", i), fmt.Sprint("u", i), "phone", presence.KindStatus, ms(i), ms(i))
		out[i] = historystore.EventRow(&e, false, 0, int64(i))
	}
	return out
}

// userOf is the user a statement of stmts writes.
func userOf(w historystore.Write) string { return w.Values()[0].(string) }

// A batch Cassandra refuses as too large is split until the halves pass; a statement
// it refuses on its own is dropped and counted, and every other one is written.
func TestWriterSplitsRejectedBatchesAndDropsWhatNeverPasses(t *testing.T) {
	store := &fakeStore{fail: func(b *historystore.Batch) error {
		if len(b.Writes) > 2 {
			return invalid("Batch too large")
		}
		for _, st := range b.Writes {
			if userOf(st) == "u4" {
				return invalid("Key length of 70000 is longer than maximum of 65535")
			}
		}
		return nil
	}}
	m := newMetrics(prometheus.NewRegistry())
	w := newWriter(store, time.Second, 4, slog.New(slog.DiscardHandler), m)
	if err := w.write(context.Background(), []*historystore.Batch{{Keys: 1, Writes: stmts(7)}}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range store.stmts {
		got = append(got, userOf(st))
	}
	slices.Sort(got)
	if want := []string{"u0", "u1", "u2", "u3", "u5", "u6"}; !slices.Equal(got, want) {
		t.Fatalf("written %v, want %v", got, want)
	}
	if r := testutil.ToFloat64(m.rejected.WithLabelValues(historystore.TableActivity)); r != 1 {
		t.Fatalf("rejected = %v, want 1", r)
	}
	if r := testutil.ToFloat64(m.rows.WithLabelValues(historystore.TableActivity)); r != 6 {
		t.Fatalf("rows = %v, want 6", r)
	}
}

// An invalid request that names the schema (migrations not applied) is retried like
// an outage until it passes: nothing is dropped for it.
func TestWriterRetriesSchemaErrors(t *testing.T) {
	for _, msg := range []string{"unconfigured table user_activity", "Keyspace pulse does not exist", "Undefined column name stale"} {
		t.Run(msg, func(t *testing.T) {
			fails := 0
			store := &fakeStore{fail: func(*historystore.Batch) error {
				if fails < 2 {
					fails++
					return invalid(msg)
				}
				return nil
			}}
			m := newMetrics(prometheus.NewRegistry())
			w := newWriter(store, time.Second, 1, slog.New(slog.DiscardHandler), m)
			if err := w.write(context.Background(), []*historystore.Batch{{Keys: 1, Writes: stmts(3)}}); err != nil {
				t.Fatal(err)
			}
			if len(store.stmts) != 3 || fails != 2 || testutil.ToFloat64(m.rejected.WithLabelValues(historystore.TableActivity)) != 0 {
				t.Fatalf("written %d after %d failures, rejected %v; want 3, 2, 0", len(store.stmts), fails,
					testutil.ToFloat64(m.rejected.WithLabelValues(historystore.TableActivity)))
			}
		})
	}
}
