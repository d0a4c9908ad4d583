package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
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

// docs/design.md guarantee 10: Redis loses everything (FLUSHALL on a private server)
// under a running pipeline. Reads must turn 503 with Retry-After ("rebuilding") and
// /readyz fail, never an empty state with 200; the aggregator rebuilds every shard
// from the log without anyone acting, and the counts and statuses then equal the
// model again — including for users whose last event came before the flush, in a
// partition that gets no event after it.
func TestRedisFlushHealsItself(t *testing.T) {
	addr, _ := startRedis(t, harness.FreePort(t))
	p := harness.NewTopics(t, 2)
	p.Env["PULSE_REDIS_ADDR"] = addr
	p.Env["PULSE_AGGREGATOR_STATE_CHECK_INTERVAL"] = "1s"
	p.Start(t, "aggregator")
	p.Start(t, "query")
	q := p.Svc["query"].URL

	prod, err := kgo.NewClient(kgo.SeedBrokers(harness.KafkaBrokers()...), kgo.DefaultProduceTopic(p.Events))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	statuses := []presence.Status{presence.Online, presence.Idle, presence.Offline, presence.Online}
	want := map[string]presence.Status{}
	var recs []*kgo.Record
	now := time.Now().UTC()
	for u := range 300 {
		user := fmt.Sprintf("heal-%s-%03d", p.Run, u)
		for k := range 1 + u%3 {
			st := statuses[(u+k)%len(statuses)]
			at := now.Add(time.Duration(k) * time.Millisecond)
			e := presence.Event{ID: fmt.Sprintf("%s-%d", user, k), UserID: user, DeviceID: "phone", Source: presence.SourceAPI,
				Kind: presence.KindStatus, Status: st, OccurredAt: at, ReceivedAt: at}
			b, err := proto.Marshal(e.ToPB())
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, &kgo.Record{Key: []byte(user), Value: b,
				Headers: []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaEvent)}}})
			want[user] = st
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var wantOnline, wantIdle int
	for _, st := range want {
		switch st {
		case presence.Online:
			wantOnline++
		case presence.Idle:
			wantIdle++
		}
	}
	// correct says whether the count and every user's status equal the model.
	correct := func() string {
		code, body := harness.Get(t, q+"/v1/online/count")
		if code != http.StatusOK {
			return fmt.Sprintf("count: %d %s", code, body)
		}
		var c struct {
			ByStatus map[string]int `json:"byStatus"`
		}
		if err := json.Unmarshal([]byte(body), &c); err != nil {
			t.Fatal(err)
		}
		if c.ByStatus["online"] != wantOnline || c.ByStatus["idle"] != wantIdle {
			return fmt.Sprintf("count %v, model online %d idle %d", c.ByStatus, wantOnline, wantIdle)
		}
		return publicStatusesDiffer(t, q, want)
	}
	harness.Eventually(t, 30*time.Second, correct)

	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	flushed := time.Now()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	// No 200 may show a wrong answer from here on: every read is either the model's
	// answer or a 503 with Retry-After.
	var detected, healed time.Duration
	unavailable := 0
	deadline := time.Now().Add(60 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		code, body := harness.Get(t, q+"/v1/online/count")
		switch {
		case code == http.StatusServiceUnavailable:
			unavailable++
			if detected == 0 {
				detected = time.Since(flushed)
				if !strings.Contains(body, "rebuil") {
					t.Errorf("503 while rebuilding says %s, want it to say the state is being rebuilt", body)
				}
				if code, body := harness.Get(t, q+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "state") {
					t.Errorf("query /readyz while rebuilding = %d %s, want 503 naming state", code, body)
				}
			}
		case code == http.StatusOK:
			if bad := correct(); bad != "" {
				if strings.Contains(bad, ": 503 ") {
					unavailable++
					if detected == 0 {
						detected = time.Since(flushed)
						if !strings.Contains(bad, "rebuil") {
							t.Errorf("503 while rebuilding says %s, want it to say the state is being rebuilt", bad)
						}
					}
					continue
				}
				t.Fatalf("%v after the flush, a read answered 200 with a wrong state: %s", time.Since(flushed).Round(time.Millisecond), bad)
			}
			healed = time.Since(flushed)
		default:
			t.Fatalf("count after the flush = %d %s", code, body)
		}
		if healed > 0 {
			break
		}
	}
	if healed == 0 {
		t.Fatalf("the state was not correct again within 60 s of the flush; the aggregator's output ends:\n%s", harness.LastLines(p.Svc["aggregator"].Out.String(), 20))
	}
	if detected == 0 {
		t.Fatalf("no read answered 503 between the flush and the repair (healed after %v)", healed)
	}
	if out := p.Svc["aggregator"].Out.String(); !strings.Contains(out, "shard rebuilt from the log") {
		t.Fatalf("the aggregator did not log a rebuild; its output ends:\n%s", harness.LastLines(out, 20))
	}
	t.Logf("FLUSHALL: detected (first 503) after %v, correct again after %v, %d reads answered 503 meanwhile",
		detected.Round(time.Millisecond), healed.Round(time.Millisecond), unavailable)

	// On demand: pulsectl rebuild has every shard rebuilt from the log again, and
	// follows it to the end.
	start := time.Now()
	out, err := exec.Command(harness.Binary("pulsectl"), "rebuild", "-redis", addr, "-prefix", p.Env["PULSE_REDIS_PREFIX"],
		"-brokers", strings.Join(harness.KafkaBrokers(), ","), "-topic", p.Events, "-timeout", "60s").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "2/2 shards done") || !strings.Contains(string(out), "rebuilt in") {
		t.Fatalf("pulsectl rebuild: %v\n%s", err, out)
	}
	harness.Eventually(t, 10*time.Second, correct)
	t.Logf("pulsectl rebuild of 2 shards (%d records) took %v:\n%s", len(recs), time.Since(start).Round(time.Millisecond), out)

	// A user state Redis holds but Pulse did not write (bytes that do not decode):
	// the next event of that user has the shard rebuilt from the log, instead of
	// stopping the partition on a read that can never succeed.
	victim := fmt.Sprintf("heal-%s-%03d", p.Run, 7)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	corrupted := 0
	iter := rdb.Scan(ctx2, 0, p.Env["PULSE_REDIS_PREFIX"]+":{*}:st:*", 1000).Iterator()
	for iter.Next(ctx2) {
		if ok, err := rdb.HExists(ctx2, iter.Val(), victim).Result(); err == nil && ok {
			if err := rdb.HSet(ctx2, iter.Val(), victim, "not a state").Err(); err != nil {
				t.Fatal(err)
			}
			corrupted++
		}
	}
	if err := iter.Err(); err != nil || corrupted != 1 {
		t.Fatalf("found %s's state in %d buckets (%v), want 1", victim, corrupted, err)
	}
	at := time.Now().UTC()
	e := presence.Event{ID: victim + "-after-corruption", UserID: victim, DeviceID: "phone", Source: presence.SourceAPI,
		Kind: presence.KindStatus, Status: presence.Idle, OccurredAt: at, ReceivedAt: at}
	b, err := proto.Marshal(e.ToPB())
	if err != nil {
		t.Fatal(err)
	}
	if err := prod.ProduceSync(ctx2, &kgo.Record{Key: []byte(victim), Value: b,
		Headers: []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaEvent)}}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if want[victim] == presence.Online {
		wantOnline--
	}
	if want[victim] != presence.Idle {
		wantIdle++
	}
	want[victim] = presence.Idle
	harness.Eventually(t, 30*time.Second, correct)
	if out := p.Svc["aggregator"].Out.String(); !strings.Contains(out, "does not decode: rebuilding the shard") {
		t.Fatalf("the aggregator did not log the undecodable state; its output ends:\n%s", harness.LastLines(out, 20))
	}
}

// docs/design.md guarantee 10, where the log no longer reaches back: retention has
// deleted the first records of presence.events (DeleteRecords moves the log's start,
// as retention does), and Redis then loses everything. Users whose every event was
// deleted come back from history's tables — status, last-seen time, custom status —
// and the others from the log, with the custom status they set before its start from
// history; the counts, every status and every custom status equal the model, and no
// read answers 200 with a wrong state meanwhile.
func TestRedisFlushRestoresUsersBeyondTheLogFromHistory(t *testing.T) {
	addr, _ := startRedis(t, harness.FreePort(t))
	p := harness.NewTopics(t, 2)
	_, ks := migratedKeyspace(t)
	p.Env["PULSE_CASSANDRA_KEYSPACE"] = ks
	p.Env["PULSE_REDIS_ADDR"] = addr
	p.Env["PULSE_AGGREGATOR_STATE_CHECK_INTERVAL"] = "1s"
	// History writes a user's last-seen at most once per PULSE_HISTORY_STATUS_INTERVAL,
	// and the aggregator, which reads the same variable, waits that long after history
	// caught up before it restores users from user_status: 2 s on both sides rather
	// than the default 30 s, which the repair would only sit through.
	p.Env["PULSE_HISTORY_STATUS_INTERVAL"] = "2s"
	p.Start(t, "aggregator")
	p.Start(t, "history")
	p.Start(t, "query")
	q := p.Svc["query"].URL

	prod, err := kgo.NewClient(kgo.SeedBrokers(harness.KafkaBrokers()...), kgo.DefaultProduceTopic(p.Events))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	statuses := []presence.Status{presence.Online, presence.Idle, presence.Offline, presence.Invisible}
	want := map[string]presence.Status{}
	seen := map[string]time.Time{}
	wantCustom := map[string]presence.CustomStatus{}
	// produce sends each user one event of round; round 0 sets everyone online, the
	// others a mix of the four statuses. In round 1 every third user sets a custom
	// status, half of them with an until (to the microsecond).
	produce := func(users []string, round int) {
		t.Helper()
		var recs []*kgo.Record
		at := time.Now().UTC().Truncate(time.Millisecond)
		for i, user := range users {
			st := statuses[(i+round)%len(statuses)]
			if round == 0 {
				st = presence.Online
			}
			e := presence.Event{ID: fmt.Sprintf("%s-%d", user, round), UserID: user, DeviceID: "phone", Source: presence.SourceAPI,
				Kind: presence.KindStatus, Status: st, OccurredAt: at, ReceivedAt: at}
			if round == 1 && i%3 == 0 {
				c := presence.CustomStatus{Text: fmt.Sprintf("note %d", i), Emoji: "📅"}
				if i%2 == 0 {
					c.Until = at.Add(24*time.Hour + 7*time.Microsecond)
				}
				e.Custom, wantCustom[user] = &c, c
			}
			b, err := proto.Marshal(e.ToPB())
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, &kgo.Record{Key: []byte(user), Value: b,
				Headers: []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaEvent)}}})
			want[user], seen[user] = st, at
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	names := func(prefix string, n int) []string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("%s-%s-%03d", prefix, p.Run, i)
		}
		return ids
	}
	// members is the model of the groups; member posts users' member events.
	members := map[string]map[string]bool{"crew": {}, "night": {}}
	member := func(group string, leave bool, users ...string) {
		t.Helper()
		var recs []*kgo.Record
		at := time.Now().UTC().Truncate(time.Millisecond)
		for _, user := range users {
			e := presence.Event{ID: fmt.Sprintf("%s-%s-%v-%d", user, group, leave, at.UnixNano()), UserID: user, DeviceID: presence.AllDevices,
				Source: presence.SourceAPI, Kind: presence.KindMember, GroupID: group, Leave: leave, ReceivedAt: at}
			b, err := proto.Marshal(e.ToPB())
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, &kgo.Record{Key: []byte(user), Value: b,
				Headers: []kgo.RecordHeader{{Key: pulsev1.SchemaHeader, Value: []byte(pulsev1.SchemaEvent)}}})
			if leave {
				delete(members[group], user)
			} else {
				members[group][user] = true
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// groupsDiffer says how a group's operator count differs from the model, "" when
	// none does.
	groupsDiffer := func() string {
		for g, m := range members {
			code, body := harness.OnlineDo(t, http.MethodGet, q+"/v1/groups/"+g+"/online/count?view=operator", harness.TestKeys.Operator, nil)
			if code != http.StatusOK {
				return fmt.Sprintf("count of %s: %d %s", g, code, body)
			}
			var c struct {
				Members  int            `json:"members"`
				ByStatus map[string]int `json:"byStatus"`
			}
			if err := json.Unmarshal(body, &c); err != nil {
				t.Fatal(err)
			}
			var online, idle, invisible int
			for u := range m {
				switch want[u] { // a member who never posted a status is offline
				case presence.Online:
					online++
				case presence.Idle:
					idle++
				case presence.Invisible:
					invisible++
				}
			}
			if c.Members != len(m) || c.ByStatus["online"] != online || c.ByStatus["idle"] != idle || c.ByStatus["invisible"] != invisible {
				return fmt.Sprintf("group %s: %d members, %v; model %d members, %d online, %d idle, %d invisible", g, c.Members, c.ByStatus, len(m), online, idle, invisible)
			}
		}
		return ""
	}
	// correct says whether the counts (operator view) and every status equal the model.
	correct := func() string {
		var wantCount [3]int
		for _, st := range want {
			for k, s := range []presence.Status{presence.Online, presence.Idle, presence.Invisible} {
				if st == s {
					wantCount[k]++
				}
			}
		}
		code, body := harness.OnlineDo(t, http.MethodGet, q+"/v1/online/count?view=operator", harness.TestKeys.Operator, nil)
		if code != http.StatusOK {
			return fmt.Sprintf("count: %d %s", code, body)
		}
		var c struct {
			ByStatus map[string]int `json:"byStatus"`
		}
		if err := json.Unmarshal(body, &c); err != nil {
			t.Fatal(err)
		}
		if got := [3]int{c.ByStatus["online"], c.ByStatus["idle"], c.ByStatus["invisible"]}; got != wantCount {
			return fmt.Sprintf("count online, idle, invisible %v, model %v", got, wantCount)
		}
		if bad := groupsDiffer(); bad != "" {
			return bad
		}
		return publicStatusesDiffer(t, q, want)
	}

	// Old users: every event of theirs will be deleted from the log. Each is online
	// first: history indexes a shard's users at their first change.
	old := names("old", 120)
	produce(old, 0)
	time.Sleep(5 * time.Millisecond) // the next round is strictly newer
	produce(old, 1)
	// Groups (docs/design.md, "Groups"): old users join two overlapping groups, one
	// leaves again, and lurkers who never post a status join one.
	lurkers := names("lurker", 10)
	member("crew", false, old[:60]...)
	member("crew", false, lurkers...)
	member("night", false, old[:30]...)
	time.Sleep(5 * time.Millisecond)
	member("night", true, old[0])
	harness.Eventually(t, 30*time.Second, correct)
	adm := harness.KafkaAdmin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, p.Events)
	if err != nil {
		t.Fatal(err)
	}
	trimmed, err := adm.DeleteRecords(ctx, ends.Offsets())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range trimmed.Sorted() {
		if r.Err != nil || r.LowWatermark == 0 {
			t.Fatalf("deleting the log of %s partition %d: low watermark %d, %v", r.Topic, r.Partition, r.LowWatermark, r.Err)
		}
	}
	// Then the log goes on: new users, and a third of the old ones change again.
	newUsers := names("new", 60)
	produce(newUsers, 2)
	time.Sleep(5 * time.Millisecond)
	produce(old[:40], 3)
	// Member events in the log apply after the memberships history restores.
	member("crew", false, newUsers[0])
	member("crew", true, old[1])
	harness.Eventually(t, 30*time.Second, correct)
	onlyHistory := len(old) - 40 + len(lurkers)

	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	flushed := time.Now()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	unavailable := 0
	var healed time.Duration
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		bad := correct()
		if bad == "" {
			healed = time.Since(flushed)
			break
		}
		if !strings.Contains(bad, ": 503") {
			t.Fatalf("%v after the flush, a read answered 200 with a wrong state: %s", time.Since(flushed).Round(time.Millisecond), bad)
		}
		unavailable++
	}
	if healed == 0 {
		t.Fatalf("the state was not correct again within 90 s of the flush; the aggregator's output ends:\n%s", harness.LastLines(p.Svc["aggregator"].Out.String(), 20))
	}
	if unavailable == 0 {
		t.Errorf("no read answered 503 between the flush and the repair (healed after %v)", healed)
	}
	// Every old user's custom status is history's: those restored in full, and those
	// the log holds later events of, set before the log's start.
	customs := 0
	for _, id := range old {
		code, body := harness.OnlineDo(t, http.MethodGet, q+"/v1/users/"+id+"/status?view=operator", harness.TestKeys.Operator, nil)
		var v struct {
			Data *struct {
				Text, Emoji string
				Until       *time.Time
			} `json:"data"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &v) != nil {
			t.Fatalf("status of %s: %d %s", id, code, body)
		}
		var got presence.CustomStatus
		if v.Data != nil {
			got = presence.CustomStatus{Text: v.Data.Text, Emoji: v.Data.Emoji}
			if v.Data.Until != nil {
				got.Until = *v.Data.Until
			}
		}
		if w := wantCustom[id]; !got.Equal(w) {
			t.Fatalf("%s's custom status after the flush: %+v, want %+v", id, got, w)
		}
		if !got.IsZero() {
			customs++
		}
	}
	if customs != len(wantCustom) || customs == 0 {
		t.Fatalf("%d custom statuses back after the flush, the model has %d", customs, len(wantCustom))
	}

	// The restored users' times are history's: last-seen of their one event.
	for _, id := range old[40:] {
		// The operator view: an invisible user's times are hidden from readers.
		code, body := harness.OnlineDo(t, http.MethodGet, q+"/v1/users/"+id+"/status?view=operator", harness.TestKeys.Operator, nil)
		if code != http.StatusOK {
			t.Fatalf("status of %s: %d %s", id, code, body)
		}
		var v struct {
			LastSeen *time.Time `json:"lastSeen"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatal(err)
		}
		if v.LastSeen == nil || !v.LastSeen.Equal(seen[id]) {
			t.Fatalf("%s restored from history with last seen %v, its one event was at %v", id, v.LastSeen, seen[id])
		}
	}
	code, body := harness.Get(t, p.Svc["aggregator"].URL+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("aggregator /metrics: %d", code)
	}
	if line := fmt.Sprintf("pulse_aggregator_rebuild_restored_users_total %d", onlyHistory); !strings.Contains(body, line+"\n") {
		t.Fatalf("the aggregator's metrics lack %q", line)
	}
	t.Logf("FLUSHALL with the log trimmed: %d users restored from history, %d from the log, %d custom statuses from history, groups of %d and %d members; correct again after %v, %d reads answered 503 meanwhile",
		onlyHistory, len(want)+len(lurkers)-onlyHistory, customs, len(members["crew"]), len(members["night"]), healed.Round(time.Millisecond), unavailable)
}

// publicStatusesDiffer reads every user of want through POST /statuses at query q and
// says how the first answer differs from the model's public view ("" when none does),
// or what refused the read.
func publicStatusesDiffer(t *testing.T, q string, want map[string]presence.Status) string {
	t.Helper()
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	code, b := harness.PostJSON(t, q+"/statuses", map[string]any{"userIds": ids})
	if code != http.StatusOK {
		return fmt.Sprintf("statuses: %d %s", code, b)
	}
	var res struct {
		Statuses []struct{ UserID, Status string } `json:"statuses"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Statuses {
		if s.Status != harness.Public(want[s.UserID].String()) {
			return fmt.Sprintf("%s is %s, model %s", s.UserID, s.Status, want[s.UserID])
		}
	}
	return ""
}
