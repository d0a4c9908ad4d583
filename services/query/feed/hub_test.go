package feed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

const (
	on  = presence.Online
	off = presence.Offline
	idl = presence.Idle
	inv = presence.Invisible
)

func TestFanOutByUserAndFirehose(t *testing.T) {
	h := newHarness(t, 3, nil)
	h.start()
	a := h.open(Options{UserIDs: []string{"u1", "u2"}})
	b := h.open(Options{UserIDs: []string{"u2", "u3", "u2"}})
	f := h.open(Options{Firehose: true, Operator: true})
	for _, s := range []*Session{a, b, f} {
		if w := read(t, s, 1)[0]; w.Type != TypeSnapshot {
			t.Fatalf("first message %s, want a snapshot", w.short())
		}
	}
	h.produce(h.change("u1", on), h.change("u2", idl), h.change("u3", on), h.change("u4", on),
		h.change("u2", off), h.change("u1", idl))

	// Per user order is the log's; across users the interleaving is the hub's.
	byUser := perUser
	check := func(name string, s *Session, n int, want map[string][]string) {
		t.Helper()
		got := byUser(read(t, s, n))
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s got %v, want %v", name, got, want)
		}
		quiet(t, s, 50*time.Millisecond)
	}
	check("a", a, 4, map[string][]string{
		"u1": {"u1:offline>online", "u1:online>idle"}, "u2": {"u2:offline>idle", "u2:idle>offline"}})
	check("b", b, 3, map[string][]string{
		"u2": {"u2:offline>idle", "u2:idle>offline"}, "u3": {"u3:offline>online"}})
	check("firehose", f, 6, map[string][]string{
		"u1": {"u1:offline>online", "u1:online>idle"}, "u2": {"u2:offline>idle", "u2:idle>offline"},
		"u3": {"u3:offline>online"}, "u4": {"u4:offline>online"}})
}

// Readers other than operators see invisible as offline; the changes between the
// two are not changes to them.
func TestPublicMapping(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.start()
	pub := h.open(Options{UserIDs: []string{"u"}})
	op := h.open(Options{UserIDs: []string{"u"}, Operator: true})
	read(t, pub, 1)
	read(t, op, 1)
	seq := []presence.Status{inv, on, inv, off, inv, idl, inv, off}
	for _, st := range seq {
		h.produce(h.change("u", st))
	}
	want := []string{"u:offline>online", "u:online>offline", "u:offline>idle", "u:idle>offline"}
	if got := shorts(read(t, pub, len(want))); !slices.Equal(got, want) {
		t.Errorf("public view %v, want %v", got, want)
	}
	quiet(t, pub, 50*time.Millisecond)
	wantOp := []string{"u:offline>invisible", "u:invisible>online", "u:online>invisible", "u:invisible>offline",
		"u:offline>invisible", "u:invisible>idle", "u:idle>invisible", "u:invisible>offline"}
	if got := shorts(read(t, op, len(wantOp))); !slices.Equal(got, wantOp) {
		t.Errorf("operator view %v, want %v", got, wantOp)
	}
}

// A change produced again (same source offset) or an older one is dropped, also when
// the original was produced before the hub started.
func TestDuplicatesAreDropped(t *testing.T) {
	h := newHarness(t, 2, nil)
	c1 := h.change("u", on)
	h.produce(c1)
	h.start()
	s := h.open(Options{UserIDs: []string{"u", "v"}})
	read(t, s, 1)
	c2 := h.change("u", idl)
	v1 := h.change("v", on)
	older := proto.Clone(c2).(*pulsev1.Change)
	older.SourceOffset--
	h.produce(c1, c2, c2, older, v1, v1)
	c3 := h.change("u", off)
	h.produce(c2, c3)
	got := perUser(read(t, s, 3))
	want := map[string][]string{"u": {"u:online>idle", "u:idle>offline"}, "v": {"v:offline>online"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	quiet(t, s, 50*time.Millisecond)
}

// perUser groups messages' short forms by user: the order a client can rely on.
func perUser(ws []wire) map[string][]string {
	m := map[string][]string{}
	for _, w := range ws {
		m[w.UserID] = append(m[w.UserID], w.short())
	}
	return m
}

// The snapshot reflects state the aggregator wrote before producing its changes;
// those changes, when they arrive, are not sent again.
func TestSnapshotThenChangesWithoutOverlap(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.start()
	at := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	c1 := h.change("u", on)
	h.state.set("u", on, c1.SourceOffset, at) // Redis written, change not produced yet
	h.state.set("w", inv, 3, at)
	s := h.open(Options{UserIDs: []string{"u", "nobody", "w"}})
	snap := read(t, s, 1)[0]
	want := []Status{{UserID: "u", Status: "online", LastUpdated: &at}, {UserID: "nobody", Status: "offline"},
		{UserID: "w", Status: "offline", LastUpdated: &at}}
	if snap.Type != TypeSnapshot || snap.Cursor == "" || fmt.Sprint(snap.Statuses) != fmt.Sprint(want) {
		t.Fatalf("snapshot %+v, want statuses %v", snap, want)
	}
	c2 := h.change("u", idl)
	h.produce(c1, c2)
	if got := shorts(read(t, s, 1)); !slices.Equal(got, []string{"u:online>idle"}) {
		t.Fatalf("got %v, want only the change after the snapshot", got)
	}
	quiet(t, s, 50*time.Millisecond)
}

// collect reads until n changes arrived, returning every message.
func collectChanges(t testing.TB, s *Session, n int) []wire {
	t.Helper()
	var out []wire
	for changes := 0; changes < n; {
		w := read(t, s, 1)[0]
		if w.Type == TypeChange {
			changes++
		}
		out = append(out, w)
	}
	return out
}

// A client that resumes with the cursor of any message gets exactly the changes
// after it: from memory, from the log, or both; duplicates around the cursor included.
func TestResumeIsExact(t *testing.T) {
	for _, tt := range []struct {
		name   string
		buffer int
		source string
	}{
		{"from memory", 10_000, "buffer"},
		{"from the log then memory", 7, "log"},
		{"from the log only", 0, "log"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, 3, func(c *Config) { c.ReplayBuffer = tt.buffer })
			h.start()
			users := []string{"a", "b", "c", "d", "e", "f"}
			all := h.open(Options{UserIDs: users[:4]})
			read(t, all, 1)
			statuses := []presence.Status{on, idl, off, inv, on, off}
			var produced []*pulsev1.Change
			for i := range 60 {
				c := h.change(users[i%len(users)], statuses[(i/len(users)+i)%len(statuses)])
				if c.Previous == c.Current {
					continue
				}
				produced = append(produced, c)
				h.produce(c)
				if i%9 == 0 { // the aggregator re-produces after a crash
					h.produce(produced[max(0, len(produced)-3):]...)
				}
			}
			want := 0
			for _, c := range produced {
				if slices.Contains(users[:4], c.UserId) && presence.StatusFromPB(c.Previous).Public() != presence.StatusFromPB(c.Current).Public() {
					want++
				}
			}
			if testing.Verbose() {
				for _, c := range produced {
					t.Logf("produced %s %v>%v src %d/%d", c.UserId, c.Previous, c.Current, c.SourcePartition, c.SourceOffset)
				}
			}
			full := collectChanges(t, all, want)
			quiet(t, all, 50*time.Millisecond)
			for _, k := range []int{0, want / 3, want / 2, want - 2, want - 1} {
				s := h.open(Options{UserIDs: users[:4], Cursor: mustCursor(t, full[k].Cursor)})
				got := read(t, s, want-k-1)
				if g, w := perUser(got), perUser(full[k+1:]); fmt.Sprint(g) != fmt.Sprint(w) {
					t.Fatalf("resume after message %d: got\n%v\nwant\n%v", k, g, w)
				}
				if tt.source == "buffer" {
					// From memory even the order across partitions and the cursors are the live ones.
					for i := range got {
						if got[i].short() != full[k+1+i].short() || got[i].Cursor != full[k+1+i].Cursor {
							t.Fatalf("resume after %d: message %d is %s %s, live %s %s", k, i,
								got[i].short(), got[i].Cursor, full[k+1+i].short(), full[k+1+i].Cursor)
						}
					}
				}
				quiet(t, s, 50*time.Millisecond)
				s.Close()
			}
			if got := testutilCounter(t, h, "pulse_feed_resumes_total", tt.source); got == 0 {
				t.Errorf("no resume counted as %s", tt.source)
			}
		})
	}
}

// A resume goes on live afterwards, without a gap or a repeat at the hand-over.
func TestResumeContinuesLive(t *testing.T) {
	h := newHarness(t, 2, func(c *Config) { c.ReplayBuffer = 2 })
	h.start()
	s := h.open(Options{UserIDs: []string{"x", "y"}})
	read(t, s, 1)
	h.produce(h.change("x", on), h.change("y", on), h.change("x", idl))
	first := read(t, s, 3)
	s.Close()
	h.produce(h.change("x", on), h.change("y", off), h.change("y", on), h.change("x", off))
	// Resume after the first message the first session got, whichever user's it was.
	r := h.open(Options{UserIDs: []string{"x", "y"}, Cursor: mustCursor(t, first[0].Cursor)})
	got := read(t, r, 6)
	h.produce(h.change("y", idl))
	got = append(got, read(t, r, 1)...)
	want := map[string][]string{
		"x": {"x:offline>online", "x:online>idle", "x:idle>online", "x:online>offline"},
		"y": {"y:offline>online", "y:online>offline", "y:offline>online", "y:online>idle"},
	}
	u := first[0].UserID
	want[u] = want[u][1:]
	if g := perUser(got); fmt.Sprint(g) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", g, want)
	}
	quiet(t, r, 50*time.Millisecond)
}

func mustCursor(t testing.TB, s string) *Cursor {
	t.Helper()
	c, err := DecodeCursor(s)
	if err != nil {
		t.Fatalf("cursor %q: %v", s, err)
	}
	return &c
}

// A cursor the log no longer holds gets cursor_expired, then a fresh snapshot, then
// live changes.
func TestExpiredCursor(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.ReplayBuffer = 0 })
	h.start()
	s := h.open(Options{UserIDs: []string{"u"}})
	snap := read(t, s, 1)[0]
	h.produce(h.change("u", on), h.change("u", off), h.change("u", on))
	read(t, s, 3)
	s.Close()

	adm := kadm.NewClient(h.prod)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var del kadm.Offsets
	del.AddOffset(testTopic, 0, 2, -1)
	if _, err := adm.DeleteRecords(ctx, del); err != nil {
		t.Fatal(err)
	}
	h.state.set("u", on, h.src[0], time.Now())
	r := h.open(Options{UserIDs: []string{"u"}, Cursor: mustCursor(t, snap.Cursor)})
	got := read(t, r, 2)
	if got[0].Type != TypeError || got[0].Code != CodeCursorExpired || got[1].Type != TypeSnapshot ||
		len(got[1].Statuses) != 1 || got[1].Statuses[0].Status != "online" {
		t.Fatalf("got %+v, want cursor_expired then a snapshot of u online", got)
	}
	h.produce(h.change("u", idl))
	if w := read(t, r, 1)[0]; w.short() != "u:online>idle" {
		t.Fatalf("after the snapshot got %s", w.short())
	}

	// A cursor of another log, or of another partition count, is expired too.
	for _, c := range []Cursor{{Topic: TopicFingerprint("other"), Offsets: []int64{0}}, {Topic: h.hub.fingerprint, Offsets: []int64{0, 0}}} {
		r := h.open(Options{UserIDs: []string{"u"}, Cursor: &c})
		if got := shorts(read(t, r, 2)); !slices.Equal(got, []string{"error:cursor_expired", "snapshot"}) {
			t.Errorf("cursor %+v: got %v", c, got)
		}
	}
}

// A subscriber that does not read is closed as a slow consumer; the others get
// everything and the hub never waits for it.
func TestSlowConsumerIsDisconnected(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.QueueSize = 4 })
	h.start()
	slow := h.open(Options{UserIDs: []string{"u"}})
	fast := h.open(Options{UserIDs: []string{"u"}})
	read(t, slow, 1)
	read(t, fast, 1)
	statuses := []presence.Status{on, off}
	for i := range 20 {
		h.produce(h.change("u", statuses[i%2]))
		read(t, fast, 1)
	}
	_, err := next(t, slow, time.Second)
	if !errors.Is(err, ErrSlowConsumer) {
		t.Fatalf("slow subscriber's Next = %v, want ErrSlowConsumer", err)
	}
	if got := testutilCounter(t, h, "pulse_feed_slow_consumer_disconnects_total", ""); got != 1 {
		t.Errorf("slow consumer disconnects = %v, want 1", got)
	}
}

// Subscribing on an open session sends a snapshot of the added users, then their
// changes; unsubscribing stops them; the per-connection limit holds.
func TestSubscribeAndUnsubscribe(t *testing.T) {
	h := newHarness(t, 2, func(c *Config) { c.MaxUsers = 3 })
	h.start()
	s := h.open(Options{})
	if w := read(t, s, 1)[0]; w.Type != TypeSnapshot || len(w.Statuses) != 0 {
		t.Fatalf("first message %+v, want an empty snapshot", w)
	}
	h.produce(h.change("a", on))
	quiet(t, s, 50*time.Millisecond)
	h.state.set("a", on, 1, time.Now())
	if err := s.Subscribe([]string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if w := read(t, s, 1)[0]; w.Type != TypeSnapshot || len(w.Statuses) != 2 || w.Statuses[0].Status != "online" {
		t.Fatalf("after subscribe %+v, want a snapshot of a (online) and b", w)
	}
	h.produce(h.change("a", idl), h.change("b", on))
	got := shorts(read(t, s, 2))
	slices.Sort(got)
	if !slices.Equal(got, []string{"a:online>idle", "b:offline>online"}) {
		t.Fatalf("got %v", got)
	}
	if err := s.Subscribe([]string{"c", "d"}); err != nil {
		t.Fatal(err)
	}
	if w := read(t, s, 1)[0]; w.Type != TypeError || w.Code != CodeTooManyUsers {
		t.Fatalf("over the limit: %+v", w)
	}
	if err := s.Unsubscribe([]string{"a"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Reject(CodeInvalidCommand, "nope"); err != nil {
		t.Fatal(err)
	}
	if w := read(t, s, 1)[0]; w.Type != TypeError || w.Code != CodeInvalidCommand {
		t.Fatalf("reject: %+v", w)
	}
	h.produce(h.change("a", on), h.change("b", off))
	if got := shorts(read(t, s, 1)); !slices.Equal(got, []string{"b:online>offline"}) {
		t.Fatalf("after unsubscribe got %v", got)
	}
	quiet(t, s, 50*time.Millisecond)
}

// Shutdown closes every session with ErrGoingAway and waits for them to close.
func TestShutdownClosesSessions(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.start()
	s := h.open(Options{UserIDs: []string{"u"}})
	read(t, s, 1)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Next(context.Background())
		s.Close()
		errc <- err
	}()
	h.stop()
	if err := <-errc; !errors.Is(err, ErrGoingAway) {
		t.Fatalf("Next at shutdown = %v, want ErrGoingAway", err)
	}
	if _, err := h.hub.Open(context.Background(), Options{}); !errors.Is(err, ErrGoingAway) {
		t.Fatalf("Open after shutdown = %v, want ErrGoingAway", err)
	}
}

func TestOpenRefusesBeforeReadyAndBadOptions(t *testing.T) {
	h := newHarness(t, 1, nil)
	hub, err := NewHub(h.cfg, h.state, discardLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hub.Open(context.Background(), Options{UserIDs: []string{"u"}}); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Open before Run = %v, want ErrNotReady", err)
	}
	h.start()
	if _, err := h.hub.Open(context.Background(), Options{Firehose: true, UserIDs: []string{"u"}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("firehose with ids = %v, want ErrInvalid", err)
	}
	many := make([]string, h.cfg.MaxUsers+1)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	if _, err := h.hub.Open(context.Background(), Options{UserIDs: many}); !errors.Is(err, ErrInvalid) {
		t.Errorf("too many ids = %v, want ErrInvalid", err)
	}
}

// A failing state read ends the session with ErrUnavailable.
func TestSnapshotFailureEndsSession(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.state.err = errors.New("redis down")
	h.start()
	s := h.open(Options{UserIDs: []string{"u"}})
	if _, err := next(t, s, time.Second); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Next = %v, want ErrUnavailable", err)
	}
}

// The queue is a FIFO that refuses past its bound and lets its memory go when
// drained; checked against a slice under random pushes and pops.
func TestQueueBoundAndOrder(t *testing.T) {
	const bound = 100
	q := newQueue(bound)
	var want []int64
	rng := rand.New(rand.NewPCG(3, 4))
	next := int64(0)
	for step := range 20_000 {
		if rng.IntN(3) > 0 { // push twice as often as pop, so it fills up
			ok := q.push(item{e: &entry{offset: next}})
			if ok != (len(want) < bound) {
				t.Fatalf("step %d: push with %d queued = %v", step, len(want), ok)
			}
			if ok {
				want = append(want, next)
			}
			next++
			continue
		}
		it, ok := q.pop()
		if ok != (len(want) > 0) {
			t.Fatalf("step %d: pop with %d queued = %v", step, len(want), ok)
		}
		if ok {
			if it.e.offset != want[0] {
				t.Fatalf("step %d: popped %d, want %d", step, it.e.offset, want[0])
			}
			want = want[1:]
		}
	}
	for len(want) > 0 {
		it, _ := q.pop()
		if it.e == nil || it.e.offset != want[0] {
			t.Fatalf("draining: popped %v, want %d", it.e, want[0])
		}
		want = want[1:]
	}
	if _, ok := q.pop(); ok || q.buf != nil {
		t.Fatalf("drained queue still holds %d slots", cap(q.buf))
	}
}

// Sessions attaching while changes flow, with a snapshot or with a cursor out of the
// ring, get exactly the changes after their position, each once: the tail moves the
// ring and delivers under different locks, and neither hand-over may lose or repeat
// a change.
func TestAttachWhileChangesFlow(t *testing.T) {
	h := newHarness(t, 2, nil)
	h.start()
	ref := h.open(Options{Firehose: true})
	start := read(t, ref, 1)[0].Cursor

	// attached is a session opened meanwhile, the position it starts at, and the
	// change it got while attaching, if any.
	type attached struct {
		s     *Session
		from  string
		first *Message
	}
	var mu sync.Mutex
	var sessions []attached
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				select {
				case <-done:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				fresh, err := h.hub.Open(ctx, Options{Firehose: true})
				if err != nil {
					cancel()
					t.Error(err)
					return
				}
				m, err := fresh.Next(ctx)
				cancel()
				if err != nil || m.Type != TypeSnapshot {
					t.Errorf("fresh session's first message %s, %v; want a snapshot", m.Type, err)
					fresh.Close()
					return
				}
				c, err := DecodeCursor(m.Cursor)
				if err != nil {
					t.Error(err)
					fresh.Close()
					return
				}
				resumed, err := h.hub.Open(context.Background(), Options{Firehose: true, Cursor: &c})
				if err != nil {
					t.Error(err)
					fresh.Close()
					return
				}
				// The first Next attaches the resume, here while changes flow; it
				// returns the first change after the cursor if one is there.
				ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
				var first *Message
				if m, err := resumed.Next(ctx); err == nil {
					first = &m
				} else if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("resumed session: %v", err)
				}
				cancel()
				mu.Lock()
				sessions = append(sessions, attached{fresh, m.Cursor, nil}, attached{resumed, m.Cursor, first})
				mu.Unlock()
			}
		})
	}
	users := []string{"a", "b", "c", "d"}
	const n = 300
	for i := range n {
		to := on
		if (i/len(users))%2 == 1 {
			to = off
		}
		h.produce(h.change(users[i%len(users)], to))
	}
	close(done)
	wg.Wait()
	all := read(t, ref, n)
	if len(sessions) == 0 {
		t.Fatal("no session attached")
	}
	for i, a := range sessions {
		k := 0 // the first change after a.from
		if a.from != start {
			k = slices.IndexFunc(all, func(w wire) bool { return w.Cursor == a.from }) + 1
			if k == 0 {
				t.Fatalf("session %d starts at a cursor no change has", i)
			}
		}
		var got []wire
		if a.first != nil {
			var w wire
			if err := json.Unmarshal(a.first.Data, &w); err != nil {
				t.Fatal(err)
			}
			got = append(got, w)
		}
		got = append(got, read(t, a.s, n-k-len(got))...)
		for j := range got {
			if got[j].short() != all[k+j].short() || got[j].Cursor != all[k+j].Cursor {
				t.Fatalf("session %d from change %d: message %d is %s %s, live %s %s", i, k, j,
					got[j].short(), got[j].Cursor, all[k+j].short(), all[k+j].Cursor)
			}
		}
		quiet(t, a.s, 10*time.Millisecond)
		a.s.Close()
	}
}

// Changes carry the user's custom status; a change of it alone has status equal to
// previous. Readers other than operators see none while the user reads offline to
// them, and no change of it alone then.
func TestCustomStatusInChanges(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.start()
	pub := h.open(Options{UserIDs: []string{"u"}})
	op := h.open(Options{UserIDs: []string{"u"}, Operator: true})
	read(t, pub, 1)
	read(t, op, 1)
	lunch := &pulsev1.CustomStatus{Text: "lunch", Emoji: "🥪"}
	gone := &pulsev1.CustomStatus{Text: "gone", UntilUs: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()}
	with := func(c *pulsev1.Change, cs *pulsev1.CustomStatus) *pulsev1.Change {
		c.Custom = cs
		return c
	}
	alone := func(cs *pulsev1.CustomStatus, cause pulsev1.Cause) *pulsev1.Change {
		c := h.change("u", h.status["u"])
		c.Previous, c.CustomOnly, c.Custom, c.Cause = c.Current, true, cs, cause
		return c
	}
	h.produce(with(h.change("u", on), lunch))
	h.produce(alone(nil, pulsev1.Cause_CAUSE_TIMEOUT))
	h.produce(alone(lunch, pulsev1.Cause_CAUSE_EVENT))
	h.produce(with(h.change("u", inv), lunch))
	h.produce(alone(&pulsev1.CustomStatus{Text: "secret"}, pulsev1.Cause_CAUSE_EVENT))
	h.produce(with(h.change("u", idl), &pulsev1.CustomStatus{Text: "secret"}))
	h.produce(alone(gone, pulsev1.Cause_CAUSE_EVENT)) // until already past when rendered

	lunchJSON := `{"text":"lunch","emoji":"🥪"}`
	want := []string{"u:offline>online " + lunchJSON, "u:online>online", "u:online>online " + lunchJSON,
		"u:online>offline", `u:offline>idle {"text":"secret"}`, "u:idle>idle"}
	got := read(t, pub, len(want))
	if s := shorts(got); !slices.Equal(s, want) {
		t.Errorf("public view %v, want %v", s, want)
	}
	if got[1].Cause != "timeout" || got[2].Cause != "event" {
		t.Errorf("causes %q %q, want timeout, event", got[1].Cause, got[2].Cause)
	}
	quiet(t, pub, 50*time.Millisecond)
	wantOp := []string{"u:offline>online " + lunchJSON, "u:online>online", "u:online>online " + lunchJSON,
		"u:online>invisible " + lunchJSON, `u:invisible>invisible {"text":"secret"}`, `u:invisible>idle {"text":"secret"}`, "u:idle>idle"}
	if s := shorts(read(t, op, len(wantOp))); !slices.Equal(s, wantOp) {
		t.Errorf("operator view %v, want %v", s, wantOp)
	}
}

// Error messages written are counted by code: a command rate's refusals are visible.
func TestErrorMessagesCountedByCode(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.start()
	s := h.open(Options{UserIDs: []string{"u"}})
	read(t, s, 1)
	for _, code := range []string{CodeRateLimited, CodeRateLimited, CodeInvalidCommand} {
		s.Sent(ErrorMessage(code, "refused"))
	}
	s.Sent(Message{Type: TypeSnapshot})
	for code, want := range map[string]float64{CodeRateLimited: 2, CodeInvalidCommand: 1, CodeForbidden: 0} {
		if got := testutilCounter(t, h, "pulse_feed_error_messages_total", code); got != want {
			t.Errorf("pulse_feed_error_messages_total{code=%q} = %v, want %v", code, got, want)
		}
	}
	if got := testutilCounter(t, h, "pulse_feed_error_messages_total", ""); got != 3 {
		t.Errorf("error messages counted %v, want 3", got)
	}
}
