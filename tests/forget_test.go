package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pulse-presence/pulse/tests/harness"
)

// TestForgetErasesTheLiveState: DELETE /v1/users/{id} (operator key) answers 202 once
// Kafka took the erase event; the aggregator then removes the user from Redis: their
// status reads as a user Pulse never saw, no key or hash field under the pipeline's
// prefix names them, and others are untouched. An event of the user dated before the
// erasure, sent after it, is dropped; one dated after starts a new user. History's
// part of the erasure is not built yet (docs/design.md, Erasure), so this test reads
// the live state only; TestForgetLeavesNoTrace is to cover history too.
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
	rdb := redis.NewClient(&redis.Options{Addr: harness.RedisAddr()})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
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
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
}
