package online

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/shard"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
)

// A walk, page by page, lists exactly the users in the statuses asked for (active
// since the time asked for, if any), each once, in (shard, index) order; every page
// but the last is full unless activity is asked for.
func TestPageWalksEveryShard(t *testing.T) {
	store := testStore(t)
	const shards = 8
	f := newFixture(t, store, shards)
	now := time.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	sts := []presence.Status{presence.Online, presence.Online, presence.Idle, presence.Invisible, presence.Offline}
	users := make([]testUser, 700)
	for i := range users {
		users[i] = testUser{id: fmt.Sprintf("w-%d", i), status: sts[rng.IntN(len(sts))],
			lastActive: now.Add(-time.Duration(rng.IntN(120)) * time.Minute).Truncate(time.Microsecond)}
	}
	f.set(users, func() uint32 { return uint32(rng.IntN(3)) })

	on, idle, inv := presence.Online, presence.Idle, presence.Invisible
	cutoff := now.Add(-30 * time.Minute)
	tests := []struct {
		name string
		q    Query
		keep func(testUser) bool
	}{
		{"online and idle, 7 a page", Query{Statuses: []presence.Status{on, idle}, Limit: 7},
			func(u testUser) bool { return u.status == on || u.status == idle }},
		{"every tracked status in one page", Query{Statuses: statestore.Tracked[:], Limit: 1000},
			func(u testUser) bool { return u.status != presence.Offline }},
		{"idle, 50 a page", Query{Statuses: []presence.Status{idle}, Limit: 50},
			func(u testUser) bool { return u.status == idle }},
		{"invisible, 1 a page", Query{Statuses: []presence.Status{inv}, Limit: 1},
			func(u testUser) bool { return u.status == inv }},
		{"active in the last 30m, 11 a page", Query{Statuses: []presence.Status{on, idle}, Limit: 11, ActiveSince: cutoff},
			func(u testUser) bool { return (u.status == on || u.status == idle) && !u.lastActive.Before(cutoff) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := map[string]presence.Status{}
			for _, u := range users {
				if tt.keep(u) {
					want[u.id] = u.status
				}
			}
			var got []User
			var pos Position
			for page := 0; pos.Shard < shards; page++ {
				if page > len(users) {
					t.Fatal("the walk does not end")
				}
				us, next, err := Page(context.Background(), store, shards, tt.q, pos)
				if err != nil {
					t.Fatal(err)
				}
				if len(us) > tt.q.Limit || tt.q.ActiveSince.IsZero() && next.Shard < shards && len(us) != tt.q.Limit {
					t.Fatalf("page %d from %+v holds %d users, then %+v; limit %d", page, pos, len(us), next, tt.q.Limit)
				}
				if next.Shard < pos.Shard || next.Shard == pos.Shard && next.From <= pos.From {
					t.Fatalf("page %d went from %+v back to %+v", page, pos, next)
				}
				got, pos = append(got, us...), next
			}
			if len(got) != len(want) {
				t.Errorf("listed %d users, want %d", len(got), len(want))
			}
			for i, u := range got {
				if st, ok := want[u.ID]; !ok || st != u.Status {
					t.Errorf("listed %+v; want status %v", u, st)
				}
				delete(want, u.ID) // a second listing fails the check above
				if i == 0 {
					continue
				}
				a, b := got[i-1].ID, u.ID
				sa, sb := shard.For(a, shards), shard.For(b, shards)
				if sa > sb || sa == sb && f.users[a].Index >= f.users[b].Index {
					t.Fatalf("%s (shard %d #%d) listed before %s (shard %d #%d)", a, sa, f.users[a].Index, b, sb, f.users[b].Index)
				}
			}
		})
	}
}
