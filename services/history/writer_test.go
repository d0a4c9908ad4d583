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
)

// invalid is an error as Cassandra returns it for an invalid request.
type invalid string

func (e invalid) Code() int       { return gocql.ErrCodeInvalid }
func (e invalid) Message() string { return string(e) }
func (e invalid) Error() string   { return "Invalid: " + string(e) }

var _ gocql.RequestError = invalid("")

func stmts(n int) []stmt {
	out := make([]stmt, n)
	for i := range out {
		out[i] = stmt{table: tableActivity, cql: "INSERT", args: []any{i}}
	}
	return out
}

// A batch Cassandra refuses as too large is split until the halves pass; a statement
// it refuses on its own is dropped and counted, and every other one is written.
func TestWriterSplitsRejectedBatchesAndDropsWhatNeverPasses(t *testing.T) {
	store := &fakeStore{fail: func(g *group) error {
		if len(g.stmts) > 2 {
			return invalid("Batch too large")
		}
		for _, st := range g.stmts {
			if st.args[0] == 4 {
				return invalid("Key length of 70000 is longer than maximum of 65535")
			}
		}
		return nil
	}}
	m := newMetrics(prometheus.NewRegistry())
	w := newWriter(store, time.Second, 4, slog.New(slog.DiscardHandler), m)
	if err := w.write(context.Background(), []*group{{keys: 1, stmts: stmts(7)}}); err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, st := range store.stmts {
		got = append(got, st.args[0].(int))
	}
	slices.Sort(got)
	if want := []int{0, 1, 2, 3, 5, 6}; !slices.Equal(got, want) {
		t.Fatalf("written %v, want %v", got, want)
	}
	if r := testutil.ToFloat64(m.rejected.WithLabelValues(tableActivity)); r != 1 {
		t.Fatalf("rejected = %v, want 1", r)
	}
	if r := testutil.ToFloat64(m.rows.WithLabelValues(tableActivity)); r != 6 {
		t.Fatalf("rows = %v, want 6", r)
	}
}

// An invalid request that names the schema (migrations not applied) is retried like
// an outage until it passes: nothing is dropped for it.
func TestWriterRetriesSchemaErrors(t *testing.T) {
	for _, msg := range []string{"unconfigured table user_activity", "Keyspace pulse does not exist", "Undefined column name stale"} {
		t.Run(msg, func(t *testing.T) {
			fails := 0
			store := &fakeStore{fail: func(*group) error {
				if fails < 2 {
					fails++
					return invalid(msg)
				}
				return nil
			}}
			m := newMetrics(prometheus.NewRegistry())
			w := newWriter(store, time.Second, 1, slog.New(slog.DiscardHandler), m)
			if err := w.write(context.Background(), []*group{{keys: 1, stmts: stmts(3)}}); err != nil {
				t.Fatal(err)
			}
			if len(store.stmts) != 3 || fails != 2 || testutil.ToFloat64(m.rejected.WithLabelValues(tableActivity)) != 0 {
				t.Fatalf("written %d after %d failures, rejected %v; want 3, 2, 0", len(store.stmts), fails,
					testutil.ToFloat64(m.rejected.WithLabelValues(tableActivity)))
			}
		})
	}
	if rejectedForGood(fmt.Errorf("wrapped: %w", invalid("Batch too large"))) != true {
		t.Fatal("a wrapped invalid request is not recognised")
	}
}
