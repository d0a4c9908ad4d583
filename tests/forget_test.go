package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/redis/go-redis/v9"

	"github.com/pulse-presence/pulse/tests/harness"
)

// TestForgetErasesTheLiveState: DELETE /v1/users/{id} (operator key) answers 202 once
// Kafka took the erase event; the aggregator then removes the user from Redis: their
// status reads as a user Pulse never saw, no key or hash field under the pipeline's
// prefix names them, and others are untouched. An event of the user dated before the
// erasure, sent after it, is dropped; one dated after starts a new user. It reads the
// live state only; TestForgetLeavesNoTrace covers history too.
func TestForgetErasesTheLiveState(t *testing.T) {
	// One partition: a later event of another user is folded after the late one.
	p := harness.NewTopics(t, 1)
	for _, name := range []string{"aggregator", "ingest", "query"} {
		p.Start(t, name)
	}
	gone, kept := p.Run+"-gone", p.Run+"-kept"
	q := p.Svc["query"].URL
	for _, u := range []string{gone, kept} {
		p.Send(t, u, "status", "online", "phone")
	}
	p.WaitStatus(t, gone, "online")
	p.WaitStatus(t, kept, "online")
	code, _, body := authDo(t, http.MethodPatch, q+"/v1/groups/erase-team/members", harness.TestKeys.Admin, `{"add":["`+gone+`","`+kept+`"]}`)
	if code != http.StatusAccepted {
		t.Fatalf("PATCH members = %d %s", code, body)
	}
	_, _, never := authDo(t, http.MethodGet, q+"/status/"+p.Run+"-never", harness.TestKeys.Reader, "")

	// A reader's key may not erase.
	if code, _, body := authDo(t, http.MethodDelete, q+"/v1/users/"+gone, harness.TestKeys.Reader, ""); code != http.StatusForbidden {
		t.Fatalf("DELETE with a reader key = %d %s; want 403", code, body)
	}
	code, _, body = authDo(t, http.MethodDelete, q+"/v1/users/"+gone, harness.TestKeys.Operator, "")
	var ans struct {
		UserID, EventID string
		ErasedAt        time.Time
	}
	if code != http.StatusAccepted || json.Unmarshal([]byte(body), &ans) != nil || ans.UserID != gone || ans.EventID == "" {
		t.Fatalf("DELETE /v1/users/%s = %d %s; want 202 with the erasure", gone, code, body)
	}
	harness.Eventually(t, 10*time.Second, func() string {
		_, _, got := authDo(t, http.MethodGet, q+"/status/"+gone, harness.TestKeys.Reader, "")
		if got != strings.Replace(never, p.Run+"-never", gone, 1) {
			return "status of the erased user: " + got + "; a never-seen user reads " + never
		}
		return ""
	})
	if s := p.Status(t, kept); s != "online" {
		t.Errorf("the other user reads %s, want online", s)
	}
	_, _, members := authDo(t, http.MethodGet, q+"/v1/groups/erase-team/members", harness.TestKeys.Reader, "")
	if strings.Contains(members, gone) || !strings.Contains(members, kept) {
		t.Errorf("group members after the erasure: %s", members)
	}
	if out := p.Svc["query"].Out.String(); !strings.Contains(out, "msg=audit service=query action=erase user="+gone+" credential=it-operator") {
		t.Errorf("no audit line of the erasure in query's output:\n%s", harness.LastLines(out, 10))
	}
	assertRedisHoldsNo(t, "it-"+p.Run, gone)

	// In flight: dated before the erasure, sent after it: dropped.
	before := ans.ErasedAt.Add(-time.Second)
	code, raw := harness.PostJSON(t, p.Svc["ingest"].URL+"/v1/events", map[string]any{"events": []harness.WireEvent{
		{UserID: gone, Status: "online", DeviceID: "late", OccurredAt: &before}}})
	if code != http.StatusAccepted {
		t.Fatalf("POST of the late event = %d %s", code, raw)
	}
	// A marker of the same partition's order: once kept's change shows, the late event was folded.
	p.Send(t, kept, "status", "idle", "phone")
	p.WaitStatus(t, kept, "idle")
	harness.Eventually(t, 5*time.Second, func() string {
		_, m := harness.Get(t, p.Svc["aggregator"].URL+"/metrics")
		if !strings.Contains(m, `pulse_aggregator_events_total{outcome="in_flight"} 1`) {
			return "the aggregator counted no in-flight event dropped"
		}
		return ""
	})
	if _, _, got := authDo(t, http.MethodGet, q+"/status/"+gone, harness.TestKeys.Reader, ""); got != strings.Replace(never, p.Run+"-never", gone, 1) {
		t.Errorf("after an event dated before the erasure: %s; want it dropped", got)
	}
	assertRedisHoldsNo(t, "it-"+p.Run, gone)

	// Dated after: a new user.
	p.Send(t, gone, "status", "online", "phone")
	p.WaitStatus(t, gone, "online")
}

// assertRedisHoldsNo fails when a key under prefix, or a field of a hash under it,
// names user.
func assertRedisHoldsNo(t *testing.T, prefix, user string) {
	t.Helper()
	assertRedisAtHoldsNo(t, harness.RedisAddr(), prefix, user)
}

// assertRedisAtHoldsNo is assertRedisHoldsNo on the Redis (or the seeds of the Redis
// Cluster) at addr.
func assertRedisAtHoldsNo(t *testing.T, addr, prefix, user string) {
	t.Helper()
	rdb := stateRDB(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys, err := redisKeys(ctx, rdb, prefix+":*")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.Contains(k, user) {
			t.Errorf("key %s names %s", k, user)
		}
		if typ, _ := rdb.Type(ctx, k).Result(); typ != "hash" {
			continue
		}
		h, err := rdb.HGetAll(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		for f, v := range h {
			if f == user || v == user {
				t.Errorf("hash %s holds %s (field %q)", k, user, f)
			}
		}
	}
}

// TestForgetLeavesNoTrace: a user erased while statuses are posted for them and for
// others leaves nothing behind — no Cassandra row in any table of the keyspace (scanned
// with the driver), no row or bitmap holding their index, no Redis key, field or
// bitmap bit, no answer that differs from a user Pulse
// never saw, the counts those of the others alone — and stays erased through a Redis
// FLUSHALL and self-heal, a history SIGKILL and re-fold, and a second history reading
// both topics from the start. The other users keep their rows and statuses.
func TestForgetLeavesNoTrace(t *testing.T) {
	addr, _ := startRedis(t, harness.FreePort(t))
	p := harness.NewTopics(t, 2)
	session, ks := migratedKeyspace(t)
	p.Env["PULSE_CASSANDRA_KEYSPACE"] = ks
	p.Env["PULSE_REDIS_ADDR"] = addr
	p.Env["PULSE_AGGREGATOR_STATE_CHECK_INTERVAL"] = "1s"
	p.Env["PULSE_HISTORY_ROLLUP_INTERVAL"] = "1s"
	p.Env["PULSE_HISTORY_STATUS_INTERVAL"] = "1s"
	p.Env["PULSE_HISTORY_CHECKPOINT_INTERVAL"] = "2s"
	p.Env["PULSE_HISTORY_SNAPSHOT_INTERVAL"] = "2s"
	for _, name := range []string{"aggregator", "history", "ingest", "query"} {
		p.Start(t, name)
	}
	q := p.Svc["query"].URL
	gone := p.Run + "-gone"
	kept := make([]string, 6)
	for i := range kept {
		kept[i] = fmt.Sprintf("%s-kept-%d", p.Run, i)
	}
	statuses := []string{"online", "idle", "invisible", "offline"}
	var (
		mu   sync.Mutex
		want = map[string]string{} // the last status posted per kept user
	)
	post := func(user, status string, at time.Time) {
		code, body := harness.PostJSON(t, p.Svc["ingest"].URL+"/v1/events", map[string]any{"events": []harness.WireEvent{
			{UserID: user, Kind: "status", Status: status, DeviceID: "phone", OccurredAt: &at}}})
		if code != http.StatusAccepted {
			t.Errorf("POST /v1/events = %d %s", code, body)
		}
	}
	rnd := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 31))
	round := func() {
		for _, u := range append([]string{gone}, kept...) {
			st := statuses[rnd.IntN(len(statuses))]
			if u == gone {
				st = statuses[rnd.IntN(3)] // present: the erasure has a session to close
			}
			post(u, st, time.Now().UTC().Truncate(time.Millisecond))
			if u != gone {
				mu.Lock()
				want[u] = st
				mu.Unlock()
			}
		}
	}
	for range 4 {
		round()
		time.Sleep(300 * time.Millisecond)
	}
	// History has the user everywhere: status, timeline, sessions, index.
	holds := func(user string) []string { return cassandraRowsOf(t, session, ks, user) }
	harness.Eventually(t, 30*time.Second, func() string {
		got := strings.Join(holds(gone), ",")
		for _, table := range []string{"user_status", "user_activity", "user_sessions", "user_daily", "daily_users", "user_indexes", "shard_users"} {
			if !strings.Contains(got, table) {
				return fmt.Sprintf("history holds %s in %s, not yet in %s", gone, got, table)
			}
		}
		return ""
	})
	// And their index, in rows that do not name them: the uniques hours, the snapshots,
	// shard_changes, and Redis's bitmaps.
	var shard, index int
	if err := session.Query(`SELECT shard, user_index FROM `+ks+`.user_indexes WHERE user_id = ?`, gone).Scan(&shard, &index); err != nil {
		t.Fatalf("the index of %s: %v", gone, err)
	}
	harness.Eventually(t, 30*time.Second, func() string {
		got := strings.Join(indexRowsOf(t, session, ks, shard, uint32(index)), ",")
		for _, table := range []string{"uniques", "shard_snapshots", "shard_changes"} {
			if !strings.Contains(got, table) {
				return fmt.Sprintf("history holds index %d of shard %d in %s, not yet in %s", index, shard, got, table)
			}
		}
		return ""
	})
	if bms := redisBitmapsHolding(t, addr, "it-"+p.Run, shard, uint32(index)); len(bms) == 0 {
		t.Fatalf("no bitmap of shard %d in Redis holds index %d of %s", shard, index, gone)
	}

	// The others' load runs through the erasure; the user's own stops with it, the
	// last of theirs in flight.
	stop := make(chan struct{})
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			u := kept[rnd.IntN(len(kept))]
			st := statuses[rnd.IntN(len(statuses))]
			mu.Lock()
			want[u] = st
			mu.Unlock()
			post(u, st, time.Now().UTC().Truncate(time.Millisecond))
		}
	}()
	_, _, never := authDo(t, http.MethodGet, q+"/v1/users/"+p.Run+"-never/status?view=operator", harness.TestKeys.Operator, "")
	// pulsectl forget, as an operator would: DELETE /v1/users/{id} with the operator key.
	cmd := exec.Command(harness.Binary("pulsectl"), "forget", gone)
	cmd.Env = append(os.Environ(), "PULSE_QUERY_URL="+q, "PULSE_OPERATOR_KEY="+harness.TestKeys.Operator, "PULSE_OPERATOR_TOKEN=", "PULSE_READER_KEY=")
	out, err := cmd.CombinedOutput()
	var erasedAt time.Time
	if f := strings.Fields(string(out)); err != nil || len(f) < 4 || f[0] != "erased" || f[1] != gone || erasedAt.UnmarshalText([]byte(f[3])) != nil {
		t.Fatalf("pulsectl forget %s: %v\n%s", gone, err, out)
	}
	post(gone, "online", erasedAt.Add(-time.Second)) // in flight: dated before the erasure
	close(stop)
	<-loaded

	check := func(when string) {
		t.Helper()
		harness.Eventually(t, 30*time.Second, func() string {
			if rows := holds(gone); len(rows) > 0 {
				return fmt.Sprintf("%s: Cassandra still holds %s: %v", when, gone, rows)
			}
			if rows := indexRowsOf(t, session, ks, shard, uint32(index)); len(rows) > 0 {
				return fmt.Sprintf("%s: Cassandra still holds index %d of shard %d, %s's: %v", when, index, shard, gone, rows)
			}
			if bms := redisBitmapsHolding(t, addr, "it-"+p.Run, shard, uint32(index)); len(bms) > 0 {
				return fmt.Sprintf("%s: Redis's bitmaps %v still hold index %d, %s's", when, bms, index, gone)
			}
			_, _, got := authDo(t, http.MethodGet, q+"/v1/users/"+gone+"/status?view=operator", harness.TestKeys.Operator, "")
			if got != strings.Replace(never, p.Run+"-never", gone, 1) {
				return fmt.Sprintf("%s: status of the erased user %s; a never-seen user reads %s", when, got, never)
			}
			mu.Lock()
			defer mu.Unlock()
			var online, idle uint64
			for _, u := range kept {
				switch want[u] {
				case "online":
					online++
				case "idle":
					idle++
				}
			}
			if c := p.Count(t); c.ByStatus["online"] != online || c.ByStatus["idle"] != idle {
				return fmt.Sprintf("%s: the count reads %v, the others alone make %d online and %d idle", when, c.ByStatus, online, idle)
			}
			for _, u := range kept {
				code, _, got := authDo(t, http.MethodGet, q+"/v1/users/"+u+"/status?view=operator", harness.TestKeys.Operator, "")
				if code != http.StatusOK || !strings.Contains(got, `"status":"`+want[u]+`"`) {
					return fmt.Sprintf("%s: %s reads %d %s, want %s", when, u, code, got, want[u])
				}
				if len(holds(u)) == 0 {
					return fmt.Sprintf("%s: history holds nothing of %s", when, u)
				}
			}
			return ""
		})
		assertRedisAtHoldsNo(t, addr, "it-"+p.Run, gone)
		if code, _, body := authDo(t, http.MethodGet, q+"/v1/users/"+gone+"/export", harness.TestKeys.Operator, ""); code != http.StatusNotFound {
			t.Errorf("%s: export of the erased user = %d %s, want 404", when, code, body)
		}
		ts := url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
		if code, _, body := authDo(t, http.MethodGet, q+"/v1/users/"+gone+"/timeline?view=operator&from="+ts, harness.TestKeys.Operator, ""); code != http.StatusOK || strings.Contains(body, `"kind"`) {
			t.Errorf("%s: timeline of the erased user = %d %s, want no entry", when, code, body)
		}
	}
	check("after the erasure")

	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	check("after FLUSHALL and self-heal")

	p.Crash(t, "history")
	time.Sleep(3 * time.Second) // a re-fold from the checkpoint and a flush
	check("after history's SIGKILL and re-fold")

	// A second history in a group of its own reads both topics from the start into the
	// same keyspace.
	p.Env["PULSE_HISTORY_GROUP"] = p.Env["PULSE_HISTORY_GROUP"] + "-replay"
	replay := harness.StartService(t, "history", p.Env)
	defer replay.Stop(t)
	harness.Eventually(t, 30*time.Second, func() string {
		if out := replay.Out.String(); strings.Count(out, "rollup fold ready")+strings.Count(out, "rollup fold restored") < p.Partitions {
			return "the replaying history has not taken every changes partition"
		}
		return ""
	})
	time.Sleep(3 * time.Second)
	check("after replaying the topics from the start")
}

// indexRowsOf names every row of ks's uniques, shard_snapshots and shard_changes that
// holds index of shard, scanning each table.
func indexRowsOf(t *testing.T, session *gocql.Session, ks string, shard int, index uint32) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []string
	holds := func(blobs ...[]byte) bool {
		for _, b := range blobs {
			bm := roaring.New()
			if len(b) > 0 {
				if _, err := bm.ReadFrom(bytes.NewReader(b)); err != nil {
					t.Fatalf("a bitmap of %s: %v", ks, err)
				}
			}
			if bm.Contains(index) {
				return true
			}
		}
		return false
	}
	var (
		sh              int
		at              time.Time
		users, shown    []byte
		on, idle, invis []byte
		us              int64
		idx             int
	)
	it := session.Query(`SELECT shard, hour, users, shown FROM ` + ks + `.uniques`).PageSize(1000).IterContext(ctx)
	for it.Scan(&sh, &at, &users, &shown) {
		if sh == shard && holds(users, shown) {
			out = append(out, "uniques "+at.Format(time.RFC3339))
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	it = session.Query(`SELECT shard, at, online, idle, invisible FROM ` + ks + `.shard_snapshots`).PageSize(1000).IterContext(ctx)
	for it.Scan(&sh, &at, &on, &idle, &invis) {
		if sh == shard && holds(on, idle, invis) {
			out = append(out, "shard_snapshots "+at.Format(time.RFC3339))
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	it = session.Query(`SELECT shard, at_us, user_index FROM ` + ks + `.shard_changes`).PageSize(1000).IterContext(ctx)
	for it.Scan(&sh, &us, &idx) {
		if sh == shard && uint32(idx) == index {
			out = append(out, "shard_changes "+time.UnixMicro(us).UTC().Format(time.RFC3339Nano))
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// redisBitmapsHolding names the status and group bitmaps of shard under prefix in the
// Redis (or Redis Cluster) at addr that hold index.
func redisBitmapsHolding(t *testing.T, addr, prefix string, shard int, index uint32) []string {
	t.Helper()
	rdb := stateRDB(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []string
	for _, pattern := range []string{"bm:*", "g:*"} {
		keys, err := redisKeys(ctx, rdb, fmt.Sprintf("%s:{%d}:%s", prefix, shard, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			raw, err := rdb.Get(ctx, k).Bytes()
			if err != nil {
				t.Fatalf("reading %s: %v", k, err)
			}
			bm := roaring.New()
			if err := bm.UnmarshalBinary(raw); err != nil {
				t.Fatalf("decoding %s: %v", k, err)
			}
			if bm.Contains(index) {
				out = append(out, k)
			}
		}
	}
	return out
}

// cassandraRowsOf names every table of ks with a user_id column holding a row of
// user, scanning each (the test's keyspace is small).
func cassandraRowsOf(t *testing.T, session *gocql.Session, ks, user string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	it := session.Query(`SELECT table_name FROM system_schema.columns WHERE keyspace_name = ? AND column_name = 'user_id' ALLOW FILTERING`, ks).IterContext(ctx)
	var tables []string
	var name string
	for it.Scan(&name) {
		tables = append(tables, name)
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, table := range tables {
		it := session.Query(`SELECT user_id FROM ` + ks + `.` + table).PageSize(5000).IterContext(ctx)
		var id string
		n := 0
		for it.Scan(&id) {
			if id == user {
				n++
			}
		}
		if err := it.Close(); err != nil {
			t.Fatalf("scanning %s.%s: %v", ks, table, err)
		}
		if n > 0 {
			out = append(out, fmt.Sprintf("%s (%d)", table, n))
		}
	}
	return out
}
