package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/pulse-presence/pulse/internal/platform/cassx"
	"github.com/pulse-presence/pulse/internal/platform/migrate"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
	"github.com/pulse-presence/pulse/tests/harness"
)

// pitBench is a keyspace holding one minute of point-in-time rows for 16 shards with
// 1,000,000 users online in all (62,500 of 100,000 registered per shard), 1,000
// changes per shard in the minute, and the names of the first 4,096 indexes of each
// shard, written as history writes them.
type pitBench struct {
	reader *historystore.Store
	at     time.Time // 30 s after the snapshot: half the minute's changes apply
	bytes  int       // serialized bitmaps of one snapshot of all shards
}

const pitShards = 16

func newPITBench(b *testing.B) *pitBench {
	b.Helper()
	port, _ := strconv.Atoi(harness.CassandraPort())
	hosts := strings.Split(harness.CassandraHost(), ",")
	admin, err := cassx.NewSession(cassx.Config{Hosts: hosts, Port: port, Timeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	ks := fmt.Sprintf("pulse_bench_pit_%d", time.Now().UnixNano())
	migrations, err := migrate.Load(os.DirFS("../migrations"))
	if err != nil {
		b.Fatal(err)
	}
	m, err := migrate.New(admin, migrate.Options{Keyspace: ks, Migrations: migrations, StatementTimeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := m.Apply(ctx); err != nil {
		b.Fatalf("migrating %s: %v", ks, err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := cassx.NewSession(cassx.Config{Hosts: hosts, Port: port, Timeout: time.Minute})
		if err == nil {
			_ = s.Query("DROP KEYSPACE IF EXISTS " + ks).ExecContext(ctx)
			s.Close()
		}
	})
	s, err := cassx.NewSession(cassx.Config{Hosts: hosts, Port: port, Keyspace: ks, Timeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)

	snap := time.Date(2026, 11, 20, 20, 13, 0, 0, time.UTC)
	pb := &pitBench{reader: historystore.New(s), at: snap.Add(30 * time.Second)}
	exec := func(q string, args ...any) {
		if err := s.Query(q, args...).ExecContext(ctx); err != nil {
			b.Fatalf("%s: %v", q[:40], err)
		}
	}
	for shard := range pitShards {
		online, idle := roaring.New(), roaring.New()
		for i := uint32(0); i < 100_000; i++ {
			switch {
			case i%8 < 5: // 62,500 of 100,000
				online.Add(i)
			case i%8 == 5:
				idle.Add(i)
			}
		}
		blobs := [][]byte{}
		for _, bm := range []*roaring.Bitmap{online, idle, roaring.New()} {
			var buf bytes.Buffer
			if _, err := bm.WriteTo(&buf); err != nil {
				b.Fatal(err)
			}
			pb.bytes += buf.Len()
			blobs = append(blobs, buf.Bytes())
		}
		exec(`INSERT INTO shard_snapshots (shard, hour, at, online, idle, invisible, online_count, idle_count, invisible_count)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, shard, snap.Truncate(time.Hour), snap, blobs[0], blobs[1], blobs[2],
			int(online.GetCardinality()), int(idle.GetCardinality()), 0)
		batch := s.Batch(gocql.UnloggedBatch)
		for k := range 1000 {
			at := snap.Add(time.Duration(k) * 60 * time.Millisecond)
			status := []string{"offline", "online", "idle", "invisible"}[k%4]
			batch.Query(`INSERT INTO shard_changes (shard, minute, at_us, user_index, status) VALUES (?, ?, ?, ?, ?)`,
				shard, snap, at.UnixMicro(), k*97%100_000, status)
			if len(batch.Entries) == 100 {
				if err := batch.ExecContext(ctx); err != nil {
					b.Fatal(err)
				}
				batch = s.Batch(gocql.UnloggedBatch)
			}
		}
		batch = s.Batch(gocql.UnloggedBatch)
		for i := range historystore.ShardUsersBlock {
			batch.Query(`INSERT INTO shard_users (shard, block, user_index, user_id) VALUES (?, 0, ?, ?)`,
				shard, i, fmt.Sprintf("user-%02d-%06d", shard, i))
			if len(batch.Entries) == 100 {
				if err := batch.ExecContext(ctx); err != nil {
					b.Fatal(err)
				}
				batch = s.Batch(gocql.UnloggedBatch)
			}
		}
		if len(batch.Entries) > 0 {
			if err := batch.ExecContext(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	return pb
}

// BenchmarkPointInTimeCount is a count at T with 1,000,000 users online: every
// shard's snapshot and its changes up to T, read and applied.
func BenchmarkPointInTimeCount(b *testing.B) {
	pb := newPITBench(b)
	ctx := context.Background()
	var online uint64
	for b.Loop() {
		states, err := pb.reader.StatesAt(ctx, pitShards, pb.at)
		if err != nil {
			b.Fatal(err)
		}
		online = 0
		for _, st := range states {
			online += st.Online.GetCardinality()
		}
	}
	if online < 990_000 || online > 1_010_000 {
		b.Fatalf("%d online at T, want about 1,000,000", online)
	}
	b.ReportMetric(float64(pb.bytes)*1e6/float64(pitShards*62_500), "snapshot-bytes/1M-online")
}

// BenchmarkPointInTimePage is a page of 100 users of the who-is-online listing at T:
// one shard's state and the names of the page's indexes.
func BenchmarkPointInTimePage(b *testing.B) {
	pb := newPITBench(b)
	ctx := context.Background()
	for b.Loop() {
		st, err := pb.reader.StateAt(ctx, 3, pb.at)
		if err != nil {
			b.Fatal(err)
		}
		page := make([]uint32, 0, 100)
		it := st.Online.Iterator()
		for it.HasNext() && len(page) < 100 {
			page = append(page, it.Next())
		}
		names, err := pb.reader.UserNames(ctx, 3, page)
		if err != nil {
			b.Fatal(err)
		}
		if len(names) != 100 {
			b.Fatalf("named %d of 100", len(names))
		}
	}
}
