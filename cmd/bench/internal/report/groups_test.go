package report

import (
	"strings"
	"testing"
)

// sampleGroups is a groups phase below the stated scale, compared with Centrifugo.
func sampleGroups() *GroupsResult {
	return &GroupsResult{Users: 1_000_000, OnlineUsers: 300_120, Shards: 16, Seeding: "bulk-loaded", LoadSeconds: 12.5, AggregatorStartSeconds: 4.25,
		Large: GroupCase{Groups: 1, MembersPerGroup: 100_000, Members: 100_000, OnlineMembers: 30_000, Write: "PATCH", Requests: 1, IDsPerRequest: 100_000, Writers: 4,
			WriteMs: q(900, 900), AckedSeconds: 1, FoldedSeconds: 1.25, AckedEventsPerSec: 100_000, FoldedEventsPerSec: 80_000,
			QueryCPUMicrosPerEvent: 3.5, AggregatorCPUMicrosPerEvent: 4.5, BitmapBytes: 200_000, CountHashBytes: 1000, BytesPerMember: 2.01,
			UsedMemoryBytes: 250_000, UsedBytesPerMember: 2.5, AggregatorHeapBytesPerMember: 90,
			CountMs: q(0.25, 0.5), CountConcurrent: ConcurrentRead{Readers: 8, Calls: 500, CallsPerSec: 4000, Ms: q(0.9, 3)}, StoreCountMs: q(0.05, 0.2),
			PageLimit: 100, PageMs: q(1.2, 2.5), PageUsers: 50_000, Walks: 1},
		Small: &GroupCase{Groups: 1000, MembersPerGroup: 100, Members: 100_000, OnlineMembers: 29_950, Write: "PUT", Requests: 1000, IDsPerRequest: 100, Writers: 4,
			CountMs: q(0.2, 0.4)},
		Centrifugo: &CentrifugoResult{Version: "github.com/centrifugal/centrifugo/v6 v6.9.1", Binary: "/bin/centrifugo", Redis: "a private redis-server", Setup: "defaults",
			Entries: 100_000, Ms: Quantiles{Count: 5, P50: 200, P99: 260}, NumClients: 100_000, NumUsers: 100_000, RedisBytes: 30 << 20, BytesPerEntry: 314.6},
		CentrifugoP50Speedup: 800, CentrifugoP99Speedup: 520,
	}
}

func TestGroupsTargets(t *testing.T) {
	ts := groupsTargets(sampleGroups())
	for _, tt := range []struct {
		id     string
		value  float64
		met    bool
		margin float64
	}{
		{"group-count-p99", 0.5, true, 0.5},
		{"group-page-p99", 2.5, false, -0.25},
		{"group-count-vs-centrifugo", 800, false, -0.2},
	} {
		got := target(t, ts, tt.id)
		if !got.Measured || got.Met != tt.met || abs(got.Value-tt.value) > 1e-9 || abs(got.Margin-tt.margin) > 1e-9 {
			t.Errorf("%s = %+v; want value %v, met %v, margin %v", tt.id, got, tt.value, tt.met, tt.margin)
		}
		if !strings.Contains(got.Note, "(the target is stated at 1,000,000 members)") {
			t.Errorf("%s note %q does not say the group was below the stated size", tt.id, got.Note)
		}
	}
	if n := target(t, ts, "group-count-vs-centrifugo").Note; !strings.HasPrefix(n, "presence_stats p50 200.0 ms on 100,000 entries vs the group's count p50 250 µs (p99 ratio 520×)") {
		t.Errorf("centrifugo note %q", n)
	}

	// Without Centrifugo the ratio is not measured; the latencies still are.
	g := sampleGroups()
	g.Centrifugo, g.CentrifugoP50Speedup, g.CentrifugoP99Speedup = nil, 0, 0
	g.Large.Members = GroupGoal
	ts = groupsTargets(g)
	if x := target(t, ts, "group-count-vs-centrifugo"); x.Measured {
		t.Errorf("ratio measured without Centrifugo: %+v", x)
	}
	if x := target(t, ts, "group-count-p99"); !x.Measured || strings.Contains(x.Note, "stated at") {
		t.Errorf("count at the stated size: %+v", x)
	}
}

func TestGroupsMarkdown(t *testing.T) {
	r := &Results{Groups: sampleGroups()}
	r.Targets = evaluate(r, 10_000_000)
	md := markdownOf(r, "go run ./cmd/bench -phases groups -quick")
	for _, want := range []string{
		"## Groups",
		"1,000,000 registered users (300,120 online) in 16 shards, bulk-loaded in 12.5 s;",
		"| | large group | small rooms |\n|---|---|---|\n",
		"| groups × members | 1 × 100,000 (30,000 online) | 1,000 × 100 (29,950 online) |",
		"| written as | PATCH: 1 request of ≤ 100,000 ids, 4 in flight | PUT: 1,000 requests of ≤ 100 ids, 4 in flight |",
		"| member events/s folded (all readable) | **80,000** (1.25 s) |",
		"| Redis bytes per member (bitmaps + count hashes) | **2.01 B** (195.3 KiB + 1000 B) |",
		"| count p50 / p99 (HTTP, sequential) | **250 µs / 500 µs** | **200 µs / 400 µs** |",
		"| count, concurrent readers | 8 readers: 4,000 calls/s, p50 / p99 900 µs / 3.00 ms | – |",
		"| page of 100 online members p50 / p99 | **1.20 ms / 2.50 ms** (100 pages, 50,000 users, 1 whole walk) | |",
		"p50 200.0 ms, p99 260.0 ms (num_clients 100,000, num_users 100,000); **800× the group's count at p50, 520× at p99**. Its presence keys take 30.0 MiB in Redis, 315 B per entry.",
		"| a page of 100 of a group's online members p99 (GET /v1/groups/{id}/online) | ≤ 2.00 ms | 2.50 ms | −25% | **not met** |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(md)
	}
}
