package groups

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/pulse-presence/pulse/cmd/bench/internal/scale"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/records"
	"github.com/pulse-presence/pulse/internal/domain/shard"
)

// TestPickMembers checks the large group's draw: exactly the members and online
// members asked for, distinct and increasing, the same every time, and spread over
// the whole index space rather than packed at its start.
func TestPickMembers(t *testing.T) {
	const users, members, online = 100_000, 10_000, 3000
	got, err := pickMembers(users, 0.3, members, online)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != members || onlineOf(got, 0.3) != online {
		t.Fatalf("%d members, %d online; want %d and %d", len(got), onlineOf(got, 0.3), members, online)
	}
	if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != members || got[0] < 0 || got[len(got)-1] >= users {
		t.Fatalf("members not distinct, increasing and within 0…%d: first %d, last %d", users-1, got[0], got[len(got)-1])
	}
	again, _ := pickMembers(users, 0.3, members, online)
	if !slices.Equal(got, again) {
		t.Fatal("two draws differ")
	}
	// Drawn at about a tenth of the users: each tenth of the index space (but the
	// last, where the draw's 2% slack runs out) holds about a tenth of them.
	for tenth := range 9 {
		n := 0
		for _, i := range got {
			if i/(users/10) == tenth {
				n++
			}
		}
		if n < 900 || n > 1100 {
			t.Errorf("users %d…%d hold %d members, want about 1,000", tenth*users/10, (tenth+1)*users/10-1, n)
		}
	}
}

// TestPickMembersEveryone takes every user: the draw's shortfall is made up in order.
func TestPickMembersEveryone(t *testing.T) {
	const users = 50
	on := int(onlineOf(seq(users), 0.3))
	got, err := pickMembers(users, 0.3, users, on)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, seq(users)) {
		t.Fatalf("members %v, want every user", got)
	}
	if _, err := pickMembers(users, 0.3, users, on+1); err == nil || !strings.Contains(err.Error(), "of the 50 registered are online") {
		t.Fatalf("more online members than online users: %v", err)
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func TestRoomMembers(t *testing.T) {
	a := roomMembers(7, 100, 1000)
	if len(a) != 100 || len(slices.Compact(slices.Sorted(slices.Values(a)))) != 100 {
		t.Fatalf("room 7: %d members, not 100 distinct", len(a))
	}
	if slices.Min(a) < 0 || slices.Max(a) >= 1000 {
		t.Fatalf("room 7 has members outside 0…999: %v", a)
	}
	if !slices.Equal(a, roomMembers(7, 100, 1000)) {
		t.Fatal("room 7 drawn twice differs")
	}
	if slices.Equal(a, roomMembers(8, 100, 1000)) {
		t.Fatal("rooms 7 and 8 have the same members")
	}
	if got := roomMembers(0, 10, 10); !slices.Equal(slices.Sorted(slices.Values(got)), seq(10)) {
		t.Fatalf("a room of every user: %v", got)
	}
	if roomID(42) != "bench-room-42" || presence.ValidateGroupID(roomID(9999)) != nil || presence.ValidateGroupID(largeGroup) != nil {
		t.Fatal("room ids are not valid group ids")
	}
}

func TestChunks(t *testing.T) {
	got := chunks(ids(seq(250_001)), 100_000)
	if len(got) != 3 || len(got[0]) != 100_000 || len(got[1]) != 100_000 || len(got[2]) != 50_001 {
		t.Fatalf("chunks of 250,001: %d runs", len(got))
	}
	if got[1][0] != "u100000" || got[2][50_000] != "u250000" {
		t.Fatalf("runs start %s, end %s", got[1][0], got[2][50_000])
	}
	if chunks(nil, 10) != nil {
		t.Fatal("chunks of nothing")
	}
}

// TestWarmMembers checks the warm-up group: the lowest-numbered user of each shard.
func TestWarmMembers(t *testing.T) {
	got := warmMembers(1000, 16)
	if len(got) != 16 {
		t.Fatalf("%d warm-up members, want one per shard", len(got))
	}
	seen := map[int]bool{}
	for _, i := range got {
		s := shard.For(scale.UserID(i), 16)
		if seen[s] {
			t.Fatalf("two warm-up members in shard %d", s)
		}
		seen[s] = true
		for j := range i {
			if shard.For(scale.UserID(j), 16) == s {
				t.Fatalf("u%d is in shard %d before u%d", j, s, i)
			}
		}
	}
	if got := warmMembers(3, 16); len(got) > 3 {
		t.Fatalf("3 users gave %d warm-up members", len(got))
	}
}

// TestFillers checks the filler records: on their partition, and member events that
// leave a group no one is in, which the aggregator folds into nothing.
func TestFillers(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	recs, err := fillers("t", 5, 3, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
	for _, r := range recs {
		e, err := records.DecodeEvent(r)
		if err != nil {
			t.Fatal(err)
		}
		if r.Partition != 5 || r.Topic != "t" || e.UserID != fillerUser || e.Kind != presence.KindMember || !e.Leave || !e.ReceivedAt.Equal(now) {
			t.Fatalf("filler on partition %d of %s: %+v", r.Partition, r.Topic, e)
		}
	}
	if recs[0].Value == nil || string(recs[0].Value) == string(recs[1].Value) {
		t.Fatal("fillers share an event id")
	}
}

// TestClientInfo checks Centrifugo's presence entry: protocol.ClientInfo with the user
// as field 1 and the client as field 2.
func TestClientInfo(t *testing.T) {
	if got, want := clientInfo("u1", "c1"), []byte{0x0a, 2, 'u', '1', 0x12, 2, 'c', '1'}; !slices.Equal(got, want) {
		t.Fatalf("clientInfo = %x, want %x", got, want)
	}
	long := strings.Repeat("x", 200)
	b := clientInfo(long, clientID(3))
	num, typ, n := protowire.ConsumeTag(b)
	v, m := protowire.ConsumeString(b[n:])
	if num != 1 || typ != protowire.BytesType || v != long {
		t.Fatalf("field %d type %d = %q", num, typ, v)
	}
	num, _, k := protowire.ConsumeTag(b[n+m:])
	if v, _ := protowire.ConsumeString(b[n+m+k:]); num != 2 || v != "00000003-0000-4000-8000-0001daa66d2b" {
		t.Fatalf("field %d = %q", num, v)
	}
}

func TestParsePresenceStats(t *testing.T) {
	c, u, err := parsePresenceStats([]byte(`{"result":{"num_clients":1000000,"num_users":999999}}`))
	if err != nil || c != 1_000_000 || u != 999_999 {
		t.Fatalf("= %d, %d, %v", c, u, err)
	}
	for _, tt := range []struct{ body, want string }{
		{`{"error":{"code":102,"message":"unknown channel"}}`, "presence_stats: error 102: unknown channel"},
		{`{}`, "presence_stats answered no result: {}"},
		{`<html>`, `presence_stats answered "<html>"`},
	} {
		if _, _, err := parsePresenceStats([]byte(tt.body)); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.body, err, tt.want)
		}
	}
}

func TestCentrifugoConfig(t *testing.T) {
	b, err := centrifugoConfig("127.0.0.1:28600", "k", "127.0.0.1:26399")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		HTTPServer struct {
			Address string `json:"address"`
			Port    int    `json:"port"`
		} `json:"http_server"`
		HTTPAPI struct {
			Key string `json:"key"`
		} `json:"http_api"`
		Engine struct {
			Type  string `json:"type"`
			Redis struct {
				Address   []string `json:"address"`
				IOTimeout string   `json:"io_timeout"`
			} `json:"redis"`
		} `json:"engine"`
		Channel struct {
			WithoutNamespace map[string]any `json:"without_namespace"`
		} `json:"channel"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if c.HTTPServer.Address != "127.0.0.1" || c.HTTPServer.Port != 28600 || c.HTTPAPI.Key != "k" || c.Engine.Type != "redis" ||
		!slices.Equal(c.Engine.Redis.Address, []string{"redis://127.0.0.1:26399"}) || c.Engine.Redis.IOTimeout != "60s" ||
		c.Channel.WithoutNamespace["presence"] != true || len(c.Channel.WithoutNamespace) != 1 {
		t.Fatalf("config %s", b)
	}
	if _, err := centrifugoConfig("no-port", "k", "r"); err == nil {
		t.Fatal("an address without a port was taken")
	}
}

func TestGroupCountCheck(t *testing.T) {
	c := groupCount{GroupID: "g", Total: 3, Members: 10, ByStatus: map[string]uint64{"online": 3, "idle": 0, "offline": 7}}
	if err := c.check(10, 3); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ members, online int64 }{{9, 3}, {10, 4}} {
		if err := c.check(bad.members, bad.online); err == nil {
			t.Errorf("%+v passed as %d members, %d online", c, bad.members, bad.online)
		}
	}
	c.ByStatus["idle"] = 1
	if err := c.check(10, 3); err == nil {
		t.Error("an idle member passed")
	}
}

func TestSequential(t *testing.T) {
	var calls []int
	q, err := sequential(context.Background(), 2, 4, func(i int) (time.Duration, error) {
		calls = append(calls, i)
		return time.Duration(i) * time.Millisecond, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The warm-up calls are 0 and 1; 2 … 5 are timed.
	if !slices.Equal(calls, []int{0, 1, 2, 3, 4, 5}) || q.Count != 4 || q.P50 != 3 || q.Max != 5 {
		t.Fatalf("calls %v, quantiles %+v", calls, q)
	}
	boom := errors.New("boom")
	if _, err := sequential(context.Background(), 0, 3, func(i int) (time.Duration, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Fatalf("error %v", err)
	}
}

func TestConcurrently(t *testing.T) {
	var n atomic.Int64
	took, perSec, err := concurrently(context.Background(), 4, 100, func(i int) (time.Duration, error) {
		n.Add(1)
		return time.Duration(i+1) * time.Microsecond, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n.Load() != 100 || len(took) != 100 || took[99] != 100*time.Microsecond || perSec <= 0 {
		t.Fatalf("%d calls, %d latencies, last %v, %v/s", n.Load(), len(took), took[99], perSec)
	}
	boom := errors.New("boom")
	var after atomic.Int64
	_, _, err = concurrently(context.Background(), 2, 1000, func(i int) (time.Duration, error) {
		if i == 10 {
			return 0, boom
		}
		if i > 100 {
			after.Add(1)
		}
		return 0, nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want boom", err)
	}
	if after.Load() > 10 {
		t.Fatalf("%d calls made long after the error", after.Load())
	}
}
