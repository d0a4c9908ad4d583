package main

import (
	"bytes"
	"context"
	"log"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

const (
	online    = pulsev1.Status_STATUS_ONLINE
	idle      = pulsev1.Status_STATUS_IDLE
	offline   = pulsev1.Status_STATUS_OFFLINE
	invisible = pulsev1.Status_STATUS_INVISIBLE
)

// at is 2026-11-22T07:20:03.5Z in microseconds, plus s seconds.
func at(s int64) int64 {
	return time.Date(2026, 11, 22, 7, 20, 3, 500_000_000, time.UTC).UnixMicro() + s*1_000_000
}

// transition is a status change of user caused by the event at (0, offset).
func transition(user string, offset int64, prev, cur pulsev1.Status) *pulsev1.Change {
	return &pulsev1.Change{UserId: user, EventId: "e" + user, Previous: prev, Current: cur, ChangedAtUs: at(offset),
		Cause: pulsev1.Cause_CAUSE_EVENT, DeviceId: "phone", SourcePartition: 0, SourceOffset: offset}
}

// record is c as Pulse writes it on presence.changes: keyed by user id, with the
// schema header, the protobuf value.
func record(t *testing.T, c *pulsev1.Change) *kgo.Record {
	t.Helper()
	value, err := proto.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: "presence.changes", Key: []byte(c.UserId), Value: value,
		Headers: []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaChange)}}}
}

func TestDecode(t *testing.T) {
	custom := transition("alice", 3, online, online)
	custom.CustomOnly = true
	custom.Custom = &pulsev1.CustomStatus{Text: "In a meeting", Emoji: "📅"}
	member := transition("alice", 4, idle, idle)
	member.GroupId, member.DeviceId = "team-a", "*"
	for _, c := range []*pulsev1.Change{transition("alice", 1, offline, online), custom, member} {
		got, err := decode(record(t, c))
		if err != nil || !proto.Equal(got, c) {
			t.Errorf("decode(%v) = %v, %v; want it back", c, got, err)
		}
	}

	bad := func(edit func(*pulsev1.Change, *kgo.Record)) *kgo.Record {
		c := transition("alice", 1, offline, online)
		r := record(t, c)
		edit(c, r)
		r.Value, _ = proto.Marshal(c)
		return r
	}
	for _, tc := range []struct {
		name string
		r    *kgo.Record
		want string
	}{
		{"no header", bad(func(_ *pulsev1.Change, r *kgo.Record) { r.Headers = nil }), `no pulse-schema header`},
		{"an event's header", bad(func(_ *pulsev1.Change, r *kgo.Record) { r.Headers[0].Value = []byte(pulsev1.SchemaEvent) }),
			`schema "pulse.v1.Event", want "pulse.v1.Change"`},
		{"a second header of another schema", bad(func(_ *pulsev1.Change, r *kgo.Record) {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: pulsev1.SchemaHeader, Value: []byte("pulse.v2.Change")})
		}), `schema "pulse.v2.Change", want "pulse.v1.Change"`},
		{"not protobuf", &kgo.Record{Key: []byte("alice"), Value: []byte{0xff},
			Headers: []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaChange)}}}, `decoding change: `},
		{"key of another user", bad(func(_ *pulsev1.Change, r *kgo.Record) { r.Key = []byte("bob") }), `user id "alice", record key "bob"`},
		{"no user", bad(func(c *pulsev1.Change, r *kgo.Record) { c.UserId, r.Key = "", nil }), `user id "", record key ""`},
		{"unspecified status", bad(func(c *pulsev1.Change, _ *kgo.Record) { c.Previous = pulsev1.Status_STATUS_UNSPECIFIED }),
			`unknown status in STATUS_UNSPECIFIED -> STATUS_ONLINE`},
		{"a status of a later schema", bad(func(c *pulsev1.Change, _ *kgo.Record) { c.Current = 9 }), `unknown status in STATUS_OFFLINE -> 9`},
		{"no time", bad(func(c *pulsev1.Change, _ *kgo.Record) { c.ChangedAtUs = 0 }), `no changed_at_us`},
		{"no change", bad(func(c *pulsev1.Change, _ *kgo.Record) { c.Current = offline }),
			`STATUS_OFFLINE -> STATUS_OFFLINE is not a change (custom only false, group "")`},
		{"custom only with a transition", bad(func(c *pulsev1.Change, _ *kgo.Record) { c.CustomOnly = true }),
			`STATUS_OFFLINE -> STATUS_ONLINE is not a change (custom only true, group "")`},
	} {
		got, err := decode(tc.r)
		if got != nil || err == nil || !strings.HasPrefix(err.Error(), tc.want) || (tc.name != "not protobuf" && err.Error() != tc.want) {
			t.Errorf("%s: decode = %v, %v; want error %q", tc.name, got, err, tc.want)
		}
	}
}

func TestMarksDropRepeatsBySourcePosition(t *testing.T) {
	m := marks{}
	change := func(sourcePartition int32, sourceOffset int64) *pulsev1.Change {
		c := transition("alice", sourceOffset, offline, online)
		c.SourcePartition = sourcePartition
		return c
	}
	for i, step := range []struct {
		partition       int32 // of presence.changes
		sourcePartition int32
		sourceOffset    int64
		repeat          bool
	}{
		{0, 0, 10, false},
		{0, 0, 11, false},
		{0, 0, 10, true},  // a replayed window: positions seen already
		{0, 0, 11, true},  //
		{0, 0, 12, false}, // the replay's first new change
		{0, 1, 5, false},  // another source partition has its own mark
		{0, 1, 5, true},
		{1, 0, 10, false}, // another partition of presence.changes too
		{1, 0, 9, true},
		{0, 0, 12, true},
	} {
		if got := m.repeat(step.partition, change(step.sourcePartition, step.sourceOffset)); got != step.repeat {
			t.Errorf("step %d: repeat(%d, %d@%d) = %v, want %v", i, step.partition, step.sourcePartition, step.sourceOffset, got, step.repeat)
		}
	}
	want := marks{0: {0: 12, 1: 5}, 1: {0: 10}}
	if len(m) != len(want) || len(m[0]) != 2 || m[0][0] != 12 || m[0][1] != 5 || len(m[1]) != 1 || m[1][0] != 10 {
		t.Errorf("marks = %v, want %v", m, want)
	}
}

func TestFormat(t *testing.T) {
	timeout := transition("bob", 60, online, idle)
	timeout.Cause = pulsev1.Cause_CAUSE_TIMEOUT
	custom := transition("alice", 5, online, online)
	custom.CustomOnly, custom.Custom = true, &pulsev1.CustomStatus{Text: "In a meeting", Emoji: "📅"}
	emoji := transition("alice", 6, online, online)
	emoji.CustomOnly, emoji.Custom = true, &pulsev1.CustomStatus{Emoji: "📅"}
	cleared := transition("alice", 7, online, online)
	cleared.CustomOnly, cleared.Cause = true, pulsev1.Cause_CAUSE_TIMEOUT
	joined := transition("alice", 8, online, online)
	joined.GroupId = "team-a"
	left := transition("alice", 9, invisible, invisible)
	left.GroupId, left.Left = "team-a", true
	later := transition("carol", 0, offline, 9)
	later.Cause = 7
	for _, tc := range []struct {
		c    *pulsev1.Change
		want string
	}{
		{transition("alice", 0, offline, online), "2026-11-22T07:20:03.500000Z alice offline -> online (event)"},
		{timeout, "2026-11-22T07:21:03.500000Z bob online -> idle (timeout)"},
		{custom, `2026-11-22T07:20:08.500000Z alice online -> online (event) custom only: "In a meeting" 📅`},
		{emoji, "2026-11-22T07:20:09.500000Z alice online -> online (event) custom only: 📅"},
		{cleared, "2026-11-22T07:20:10.500000Z alice online -> online (timeout) custom only: cleared"},
		{joined, "2026-11-22T07:20:11.500000Z alice online -> online (event) joined team-a"},
		{left, "2026-11-22T07:20:12.500000Z alice invisible -> invisible (event) left team-a"},
		{later, "2026-11-22T07:20:03.500000Z carol offline -> 9 (7)"},
	} {
		if got := format(tc.c); got != tc.want {
			t.Errorf("format(%v) =\n%s\nwant\n%s", tc.c, got, tc.want)
		}
	}
}

// lockedBuffer is a bytes.Buffer the consumer writes while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestConsumeCommitsWhatItPrinted runs the consumer against an in-memory Kafka: it
// prints each change once, skips a record of another schema, and commits, so a member
// that joins the group later prints only what came after.
func TestConsumeCommitsWhatItPrinted(t *testing.T) {
	const topic, group = "presence.changes", "changes-consumer-test"
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	produce := func(recs ...*kgo.Record) {
		t.Helper()
		if err := producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var logged lockedBuffer
	log.SetOutput(&logged)
	log.SetFlags(0)
	defer func() { log.SetOutput(os.Stderr); log.SetFlags(log.LstdFlags) }()

	// run is one member of the group until it printed want lines.
	run := func(want int) string {
		t.Helper()
		cl, err := newClient(cluster.ListenAddrs(), topic, group, kgo.NewOffset().AtStart())
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		var out lockedBuffer
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); consume(ctx, cl, &printer{out: &out, seen: marks{}}) }()
		for deadline := time.Now().Add(20 * time.Second); strings.Count(out.String(), "\n") < want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("printed after 20 s:\n%s", out.String())
			}
		}
		cancel()
		<-done
		return out.String()
	}

	stray := &kgo.Record{Topic: topic, Key: []byte("alice"), Value: []byte("not a change")}
	produce(record(t, transition("alice", 1, offline, online)), stray,
		record(t, transition("alice", 2, online, idle)),
		record(t, transition("alice", 1, offline, online)), // an aggregator's replay
		record(t, transition("alice", 2, online, idle)),
		record(t, transition("alice", 3, idle, online)))
	want := "2026-11-22T07:20:04.500000Z alice offline -> online (event)\n" +
		"2026-11-22T07:20:05.500000Z alice online -> idle (event)\n" +
		"2026-11-22T07:20:06.500000Z alice idle -> online (event)\n"
	if got := run(3); got != want {
		t.Errorf("first member printed\n%s\nwant\n%s", got, want)
	}
	if got, want := logged.String(), "skipping presence.changes/0@1: no pulse-schema header\n"; got != want {
		t.Errorf("logged %q, want %q", got, want)
	}
	offsets, err := kadm.NewClient(producer).FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offsets.Lookup(topic, 0); !ok || o.Err != nil || o.At != 6 {
		t.Errorf("committed %+v (found: %v), want offset 6", o, ok)
	}

	produce(record(t, transition("alice", 4, online, offline)))
	if got, want := run(1), "2026-11-22T07:20:07.500000Z alice online -> offline (event)\n"; got != want {
		t.Errorf("second member printed\n%s\nwant\n%s", got, want)
	}
}
