package main

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

// countingStore counts what history sends to Cassandra: statements by table and
// requests (each one unlogged batch or single statement).
type countingStore struct {
	mu       sync.Mutex
	byTable  map[string]int
	requests int
	keys     int // partition keys: each is one mutation in Cassandra
}

func (s *countingStore) Write(_ context.Context, b *historystore.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byTable == nil {
		s.byTable = map[string]int{}
	}
	s.requests++
	s.keys += b.Keys
	for _, w := range b.Writes {
		s.byTable[w.Table()]++
	}
	return nil
}

func (s *countingStore) statements() int {
	n := 0
	for _, c := range s.byTable {
		n += c
	}
	return n
}

func (s *countingStore) String() string {
	var b strings.Builder
	for _, t := range slices.Sorted(maps.Keys(s.byTable)) {
		fmt.Fprintf(&b, " %s=%d", t, s.byTable[t])
	}
	return b.String()
}

// The write budget of history, as stated in docs/design.md (History, "What a write
// costs"): Cassandra statements per 1,000 events of the default mix, and per effective
// change, on one partition at a sixteenth of 50,000 events/s over 100,000 users.
const (
	budgetPer1000Events = 870
	budgetPerChange     = 6.3
)

// defaultMix drives one partition with loadgen's default mix (status=1, heartbeat=3,
// activity=1; statuses online 5, idle 2, offline 2, invisible 1; two devices a user)
// for a minute of the synctest clock, folds the events through internal/domain/presence as the
// aggregator would, and feeds the events to one history worker and the changes they
// made to another.
func defaultMix(t *testing.T, mod func(*Config)) (events, changes int, ev, ch *countingStore) {
	const (
		users    = 100_000 / 16
		rate     = 50_000 / 16 // events/s on this partition
		tick     = 100 * time.Millisecond
		duration = time.Minute
	)
	ev, ch = &countingStore{}, &countingStore{}
	synctest.Test(t, func(t *testing.T) {
		he, hc := newHarness(t, mod), newHarness(t, mod)
		he.h.writer = newWriter(ev, time.Second, 8, he.h.logger, he.h.m)
		hc.h.writer = newWriter(ch, time.Second, 8, hc.h.logger, hc.h.m)
		evRecs, evDone := he.start(t.Context(), "ev")
		chRecs, chDone := hc.start(t.Context(), "ch")
		rng := rand.New(rand.NewPCG(1, 2))
		states := make([]*presence.User, users)
		kinds := []presence.Kind{presence.KindStatus, presence.KindHeartbeat, presence.KindHeartbeat, presence.KindHeartbeat, presence.KindActivity}
		statuses := []presence.Status{presence.Online, presence.Online, presence.Online, presence.Online, presence.Online,
			presence.Idle, presence.Idle, presence.Offline, presence.Offline, presence.Invisible}
		var evOff, chOff int64
		for range int(duration / tick) {
			var evBatch, chBatch []*kgo.Record
			now := time.Now()
			for range int(rate * tick / time.Second) {
				u := rng.IntN(users)
				if states[u] == nil {
					states[u] = presence.NewUser(uint32(u))
				}
				e := presence.Event{
					ID: fmt.Sprintf("e%d", evOff), UserID: fmt.Sprintf("lg-%d", u), DeviceID: fmt.Sprintf("d%d", rng.IntN(2)),
					Kind: kinds[rng.IntN(len(kinds))], ReceivedAt: now, Source: presence.SourceAPI,
				}
				if e.Kind == presence.KindStatus {
					e.Status = statuses[rng.IntN(len(statuses))]
				}
				evBatch = append(evBatch, eventRecord(evOff, e))
				if out := states[u].Apply(&e); out.Changed {
					chBatch = append(chBatch, changeRecord(chOff, &pulsev1.Change{
						UserId: e.UserID, EventId: e.ID, Previous: presence.StatusToPB(out.Previous), Current: presence.StatusToPB(out.Current),
						ChangedAtUs: presence.Micros(out.At), Cause: pulsev1.Cause_CAUSE_EVENT, DeviceId: e.DeviceID,
						SourcePartition: 3, SourceOffset: evOff, UserIndex: uint32(u),
					}))
					chOff++
				}
				evOff++
			}
			evRecs <- evBatch
			if len(chBatch) > 0 {
				chRecs <- chBatch
			}
			time.Sleep(tick)
		}
		close(evRecs)
		close(chRecs)
		if err := <-evDone; err != nil {
			t.Fatal(err)
		}
		if err := <-chDone; err != nil {
			t.Fatal(err)
		}
		events, changes = int(evOff), int(chOff)
	})
	return events, changes, ev, ch
}

// History keeps its write budget for the default mix: the statements it sends per
// 1,000 events and per effective change stay within docs/design.md's figures.
func TestWriteBudgetOfTheDefaultMix(t *testing.T) {
	def, err := loadConfig(config.NewEnv(config.MapLookup(nil)))
	if err != nil {
		t.Fatal(err)
	}
	// The defaults of every setting that shapes the writes.
	events, changes, ev, ch := defaultMix(t, func(c *Config) {
		c.FlushInterval, c.FlushStatements, c.StatusInterval, c.RollupInterval = def.FlushInterval, def.FlushStatements, def.StatusInterval, def.RollupInterval
		c.MaxBatchStatements, c.BatchPartitions, c.EventRows = def.MaxBatchStatements, def.BatchPartitions, def.EventRows
		c.SnapshotInterval, c.SnapshotRetention, c.ShardChangesRetention = def.SnapshotInterval, def.SnapshotRetention, def.ShardChangesRetention
	})
	total := ev.statements() + ch.statements()
	per1000 := float64(total) * 1000 / float64(events)
	perChange := float64(ch.statements()) / float64(changes)
	t.Logf("%d events, %d changes (%.3f per event)", events, changes, float64(changes)/float64(events))
	t.Logf("events worker: %d statements in %d requests:%s", ev.statements(), ev.requests, ev)
	t.Logf("changes worker: %d statements in %d requests:%s", ch.statements(), ch.requests, ch)
	t.Logf("%.1f statements per 1,000 events (budget %d), %.2f per change (budget %.1f); per 1,000 events %.1f partition keys (mutations) in %.1f requests",
		per1000, budgetPer1000Events, perChange, budgetPerChange,
		float64(ev.keys+ch.keys)*1000/float64(events), float64(ev.requests+ch.requests)*1000/float64(events))
	if per1000 > budgetPer1000Events {
		t.Errorf("%.1f statements per 1,000 events, over the budget of %d", per1000, budgetPer1000Events)
	}
	if perChange > budgetPerChange {
		t.Errorf("%.2f statements per change, over the budget of %.1f", perChange, budgetPerChange)
	}
}
