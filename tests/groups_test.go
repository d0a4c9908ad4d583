package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
	"github.com/pulse-presence/pulse/tests/harness"
)

// groupModel is what the groups must show, kept by the test alone: each group's
// members and each user's status (one device, so the last status event decides).
type groupModel struct {
	members map[string]map[string]bool
	status  map[string]presence.Status
}

// view is group g's members in status order as reader (operator false) or operator
// sees them: "user status" lines, sorted; invisible is offline to readers.
func (m *groupModel) listing(g string, operator bool) []string {
	var out []string
	for u := range m.members[g] {
		st := m.status[u]
		if !operator {
			st = st.Public()
		}
		if st == presence.Online || st == presence.Idle || st == presence.Invisible {
			out = append(out, u+" "+st.String())
		}
	}
	sort.Strings(out)
	return out
}

// counts is group g's count view, as JSON numbers keyed like the API's byStatus, with
// "members" and "total".
func (m *groupModel) counts(g string, operator bool) map[string]uint64 {
	c := map[string]uint64{"online": 0, "idle": 0, "offline": 0, "members": uint64(len(m.members[g]))}
	if operator {
		c["invisible"] = 0
	}
	for u := range m.members[g] {
		st := m.status[u]
		if !operator {
			st = st.Public()
		}
		if st == presence.StatusUnknown {
			st = presence.Offline
		}
		c[st.String()]++
	}
	c["total"] = c["online"] + c["idle"] + c["invisible"]
	return c
}

func (m *groupModel) memberList(g string) []string {
	var out []string
	for u := range m.members[g] {
		out = append(out, u)
	}
	sort.Strings(out)
	return out
}

// TestGroupsMatchAModel writes the memberships of four overlapping groups through
// query (PUT, PATCH and DELETE) and the statuses of their users straight to
// presence.events, at random, and holds every group's counts (reader and operator
// views), its online listing (paged, each status filter), its member listing and the
// change feed of two of them to an independent model: after each round, after Redis
// lost every key of the pipeline (guarantee 10: the aggregator rebuilds groups from the
// log), and after an aggregator SIGKILL with writes made while it was down. It runs on
// the topology's Redis: a Redis Cluster in the cluster topology.
func TestGroupsMatchAModel(t *testing.T) {
	p := harness.NewTopics(t, 4)
	p.Env["PULSE_AGGREGATOR_STATE_CHECK_INTERVAL"] = "1s"
	p.Start(t, "aggregator")
	p.Start(t, "query")
	q := p.Svc["query"].URL

	prod, err := kgo.NewClient(kgo.SeedBrokers(harness.KafkaBrokers()...), kgo.DefaultProduceTopic(p.Events))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 28))
	groups := []string{"team-a", "team-b", "chan:general", "server.eu@1"}
	users := make([]string, 80)
	for i := range users {
		users[i] = fmt.Sprintf("g-%s-%02d", p.Run, i)
	}
	m := &groupModel{members: map[string]map[string]bool{}, status: map[string]presence.Status{}}
	for _, g := range groups {
		m.members[g] = map[string]bool{}
	}
	clock := time.Now().UTC()
	seq := 0
	// setStatuses posts one status event for each of n random users.
	statuses := []presence.Status{presence.Online, presence.Idle, presence.Offline, presence.Invisible}
	setStatuses := func(n int) {
		t.Helper()
		var recs []*kgo.Record
		for range n {
			u := users[rng.IntN(len(users))]
			st := statuses[rng.IntN(len(statuses))]
			clock = clock.Add(time.Millisecond)
			seq++
			e := presence.Event{ID: fmt.Sprintf("st-%d", seq), UserID: u, DeviceID: "d", Source: presence.SourceAPI,
				Kind: presence.KindStatus, Status: st, OccurredAt: clock, ReceivedAt: clock}
			b, err := proto.Marshal(e.ToPB())
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, &kgo.Record{Key: []byte(u), Value: b,
				Headers: []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaEvent)}}})
			m.status[u] = st
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	write := func(method, g string, body any) {
		t.Helper()
		code, res := harness.OnlineDo(t, method, q+"/v1/groups/"+url.PathEscape(g)+"/members", harness.TestKeys.Producer, body)
		if code != http.StatusAccepted {
			t.Fatalf("%s group %s = %d %s", method, g, code, res)
		}
	}
	pick := func(n int) []string {
		out := slices.Clone(users)
		rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		return out[:n]
	}
	// changeMembers makes one random membership write to each group.
	changeMembers := func() {
		t.Helper()
		for _, g := range groups {
			switch r := rng.IntN(10); {
			case r < 3: // replace
				ids := pick(5 + rng.IntN(30))
				write(http.MethodPut, g, map[string]any{"userIds": ids})
				m.members[g] = map[string]bool{}
				for _, u := range ids {
					m.members[g][u] = true
				}
			case r < 9: // add some, remove some (members or not)
				ids := pick(20)
				add, remove := ids[:10+rng.IntN(5)], ids[15:]
				write(http.MethodPatch, g, map[string]any{"add": add, "remove": remove})
				for _, u := range add {
					m.members[g][u] = true
				}
				for _, u := range remove {
					delete(m.members[g], u)
				}
			default:
				write(http.MethodDelete, g, nil)
				m.members[g] = map[string]bool{}
			}
		}
	}

	// check compares every group's reads with the model, "" when all agree.
	check := func() string {
		for _, g := range groups {
			base := q + "/v1/groups/" + url.PathEscape(g)
			for _, operator := range []bool{false, true} {
				key, view := harness.TestKeys.Reader, ""
				if operator {
					key, view = harness.TestKeys.Operator, "?view=operator"
				}
				code, body := harness.OnlineDo(t, http.MethodGet, base+"/online/count"+view, key, nil)
				if code != http.StatusOK {
					return fmt.Sprintf("count of %s: %d %s", g, code, body)
				}
				var c struct {
					Total    uint64            `json:"total"`
					Members  uint64            `json:"members"`
					ByStatus map[string]uint64 `json:"byStatus"`
				}
				if err := json.Unmarshal(body, &c); err != nil {
					t.Fatal(err)
				}
				got := map[string]uint64{"total": c.Total, "members": c.Members}
				for k, v := range c.ByStatus {
					got[k] = v
				}
				if want := m.counts(g, operator); !mapsEqual(got, want) {
					return fmt.Sprintf("count of %s (operator %v) = %v, want %v", g, operator, got, want)
				}
				listed, bad := pages(t, base+"/online"+view, key, "users", func(raw json.RawMessage) string {
					var u struct{ UserID, Status string }
					_ = json.Unmarshal(raw, &u)
					return u.UserID + " " + u.Status
				})
				if bad != "" {
					return bad
				}
				sort.Strings(listed)
				if want := m.listing(g, operator); !slices.Equal(listed, want) {
					return fmt.Sprintf("online of %s (operator %v) = %v, want %v", g, operator, listed, want)
				}
			}
			// One status filter, to check the AND with a single status bitmap.
			listed, bad := pages(t, base+"/online?status=idle", harness.TestKeys.Reader, "users", func(raw json.RawMessage) string {
				var u struct{ UserID string }
				_ = json.Unmarshal(raw, &u)
				return u.UserID
			})
			if bad != "" {
				return bad
			}
			var wantIdle []string
			for u := range m.members[g] {
				if m.status[u] == presence.Idle {
					wantIdle = append(wantIdle, u)
				}
			}
			sort.Strings(listed)
			sort.Strings(wantIdle)
			if !slices.Equal(listed, wantIdle) {
				return fmt.Sprintf("idle of %s = %v, want %v", g, listed, wantIdle)
			}
			members, bad := pages(t, base+"/members", harness.TestKeys.Reader, "userIds", func(raw json.RawMessage) string {
				var s string
				_ = json.Unmarshal(raw, &s)
				return s
			})
			if bad != "" {
				return bad
			}
			sort.Strings(members)
			if want := m.memberList(g); !slices.Equal(members, want) {
				return fmt.Sprintf("members of %s = %v, want %v", g, members, want)
			}
		}
		return ""
	}

	// Two readers watch a group each on the change feed; what they are sent must
	// add up to the model too.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	watched := []*groupFeed{}
	for _, g := range groups[:2] {
		f := &groupFeed{group: g, members: map[string]bool{}, status: map[string]string{}}
		harness.Eventually(t, 30*time.Second, func() string {
			sock, res, err := openSocket(t, ctx, q, harness.TestKeys.Reader, url.Values{"group": {g}})
			if err != nil {
				return fmt.Sprintf("watch?group=%s: %v (%v)", g, err, res)
			}
			f.sock = sock
			return ""
		})
		watched = append(watched, f)
	}
	feedsDiffer := func() string {
		for _, f := range watched {
			if bad := f.differs(m); bad != "" {
				return bad
			}
		}
		return ""
	}
	checkAll := func() string {
		if bad := check(); bad != "" {
			return bad
		}
		return feedsDiffer()
	}

	setStatuses(len(users))
	for round := range 4 {
		changeMembers()
		setStatuses(40)
		harness.Eventually(t, 30*time.Second, checkAll)
		t.Logf("round %d: %s", round, m.summary(groups))
	}

	// Redis loses every key of the pipeline: the groups come back from the log, and
	// meanwhile no read shows a wrong count as a right one. The shards' bookkeeping
	// goes first, as a FLUSHALL takes every key at once: readers answer 503 from then.
	rdb := stateRDB(t, harness.RedisAddr())
	flushed := time.Now()
	lose(t, rdb, p.Env["PULSE_REDIS_PREFIX"])
	deadline := time.Now().Add(60 * time.Second)
	unavailable := 0
	for {
		bad := check()
		if bad == "" {
			break
		}
		if !strings.Contains(bad, ": 503 ") {
			t.Fatalf("%v after the loss, a read answered a wrong state: %s", time.Since(flushed).Round(time.Millisecond), bad)
		}
		unavailable++
		if time.Now().After(deadline) {
			t.Fatalf("groups not correct again within 60 s of the loss: %s", bad)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("keys lost: groups correct again after %v, %d checks answered 503 meanwhile", time.Since(flushed).Round(time.Millisecond), unavailable)
	harness.Eventually(t, 30*time.Second, feedsDiffer)

	// The aggregator dies mid-stream; writes acknowledged while it is down are folded
	// once it is back, and the groups keep what was written before.
	s := p.Svc["aggregator"]
	_ = s.Cmd.Process.Kill()
	<-s.Done
	changeMembers()
	setStatuses(40)
	p.Start(t, "aggregator")
	harness.Eventually(t, 60*time.Second, checkAll)
	changeMembers()
	setStatuses(40)
	harness.Eventually(t, 30*time.Second, checkAll)
	for _, f := range watched {
		t.Logf("feed of %s: %d messages (%d member messages)", f.group, f.messages, f.memberMsgs)
	}
	t.Logf("after an aggregator SIGKILL: %s", m.summary(groups))
}

func (m *groupModel) summary(groups []string) string {
	var parts []string
	for _, g := range groups {
		c := m.counts(g, true)
		parts = append(parts, fmt.Sprintf("%s %d members (%d online, %d idle, %d invisible)", g, c["members"], c["online"], c["idle"], c["invisible"]))
	}
	return strings.Join(parts, "; ")
}

func mapsEqual(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// pages follows a cursor listing from target (limit 7, so that it takes pages) and
// returns each entry of field through entry; a failure is returned as text.
func pages(t *testing.T, target, key, field string, entry func(json.RawMessage) string) ([]string, string) {
	t.Helper()
	sep := "?"
	if strings.Contains(target, "?") {
		sep = "&"
	}
	var out []string
	cursor := ""
	for range 100 {
		u := target + sep + "limit=7"
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		code, body := harness.OnlineDo(t, http.MethodGet, u, key, nil)
		if code != http.StatusOK {
			return nil, fmt.Sprintf("GET %s: %d %s", u, code, body)
		}
		var page map[string]json.RawMessage
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		var items []json.RawMessage
		if err := json.Unmarshal(page[field], &items); err != nil {
			t.Fatalf("GET %s: %s: %v", u, body, err)
		}
		for _, it := range items {
			out = append(out, entry(it))
		}
		var next *string
		_ = json.Unmarshal(page["nextCursor"], &next)
		if next == nil {
			return out, ""
		}
		cursor = *next
	}
	return nil, "listing did not end within 100 pages"
}

// groupFeed is what a reader watching a group on the change feed was told: the members
// and their statuses, as the snapshot, member and change messages add up.
type groupFeed struct {
	group                string
	sock                 *liveSocket
	members              map[string]bool
	status               map[string]string
	messages, memberMsgs int
}

// differs takes every message sent so far and says how the members and their public
// statuses differ from the model's, "" when they agree.
func (f *groupFeed) differs(m *groupModel) string {
	for more := true; more; {
		select {
		case msg, ok := <-f.sock.msgs:
			if !ok {
				f.sock.t.Fatalf("the feed of %s ended: %v", f.group, <-f.sock.done)
			}
			f.apply(msg.watchMsg)
		default:
			more = false
		}
	}
	if len(f.members) != len(m.members[f.group]) {
		return fmt.Sprintf("feed of %s: %d members, model %d", f.group, len(f.members), len(m.members[f.group]))
	}
	for u := range m.members[f.group] {
		if !f.members[u] {
			return fmt.Sprintf("feed of %s: %s is no member, the model's is", f.group, u)
		}
		want := m.status[u].Public()
		if want == presence.StatusUnknown {
			want = presence.Offline
		}
		if f.status[u] != want.String() {
			return fmt.Sprintf("feed of %s: %s is %q, model %s", f.group, u, f.status[u], want)
		}
	}
	return ""
}

func (f *groupFeed) apply(msg watchMsg) {
	f.messages++
	switch msg.Type {
	case "snapshot":
		for _, u := range msg.Members {
			f.members[u] = true
		}
		for _, st := range msg.Statuses {
			f.status[st.UserID] = st.Status
		}
	case "member":
		f.memberMsgs++
		if msg.GroupID != f.group {
			f.sock.t.Fatalf("the feed of %s sent a member message of %s", f.group, msg.GroupID)
		}
		if msg.Joined {
			f.members[msg.UserID] = true
		} else {
			delete(f.members, msg.UserID)
		}
		f.status[msg.UserID] = msg.Status
	case "change":
		if !f.members[msg.UserID] {
			f.sock.t.Fatalf("the feed of %s sent a change of %s, no member", f.group, msg.UserID)
		}
		f.status[msg.UserID] = msg.Status
	default:
		f.sock.t.Fatalf("the feed of %s sent %+v", f.group, msg)
	}
}

// lose deletes every key under prefix as if Redis had lost them: the shards'
// bookkeeping (meta) first, then the rest, on every master of a Redis Cluster.
func lose(t *testing.T, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys, err := redisKeys(ctx, rdb, prefix+":*")
	if err != nil {
		t.Fatal(err)
	}
	meta := func(k string) bool { return strings.HasSuffix(k, ":meta") }
	for _, first := range []bool{true, false} {
		pipe := rdb.Pipeline()
		for _, k := range keys {
			if meta(k) == first {
				pipe.Del(ctx, k)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
