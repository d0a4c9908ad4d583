package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/cassx"
)

// History's statements (internal/stores/historystore) the minimal writer runs, and the
// defaults it packs and bounds them with (PULSE_HISTORY_MAX_BATCH_STATEMENTS,
// PULSE_HISTORY_BATCH_PARTITIONS, PULSE_HISTORY_WRITE_CONCURRENCY).
const (
	limitsInsertEventCQL = `INSERT INTO user_activity (user_id, bucket, occurred_at, entry_id, entry_type,
 kind, status, device_id, source, received_at, stale, log_partition, log_offset)
 VALUES (?, ?, ?, ?, 'event', ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?`
	limitsUpdateSeenCQL   = `UPDATE user_status USING TIMESTAMP ? SET last_seen = ?, last_event_id = ? WHERE user_id = ?`
	limitsUpdateActiveCQL = `UPDATE user_status USING TIMESTAMP ? SET last_seen = ?, last_active = ?, last_event_id = ? WHERE user_id = ?`

	historyMaxStatements = 100
	historyMaxKeys       = 50
	historyConcurrency   = 64
	// limitsPlanEvents is the events of one planned batch: history's most records of
	// one poll (PULSE_HISTORY_MAX_POLL_RECORDS).
	limitsPlanEvents = 5000
	limitsCQLPrefix  = "blim-"
)

// cqlStmt is one statement with its values.
type cqlStmt struct {
	table string
	cql   string
	args  []any
}

// cassandraLimit writes history's rows of loadgen-like events (its mix of kinds,
// heartbeats without a user_activity row as history's default keeps them) for users
// blim-0 … of -limits-cql-users into the stack's keyspace for -limits-time, then
// deletes every partition it wrote.
func (b *bench) cassandraLimit(ctx context.Context) (*CassandraLimit, error) {
	// History's session settings but a longer connect timeout: a saturated machine can
	// take seconds to answer a new connection's handshake.
	sess, err := cassx.NewSession(cassx.Config{Hosts: []string{"127.0.0.1"}, Port: b.cfg.ports.cassandra, Keyspace: b.cfg.keyspace,
		ConnectTimeout: 30 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("connecting to Cassandra: %w", err)
	}
	defer sess.Close()
	res := &CassandraLimit{Keyspace: b.cfg.keyspace, UserPrefix: limitsCQLPrefix, Users: b.cfg.limitsCQLUsers,
		Concurrency: historyConcurrency, MaxStatements: historyMaxStatements, MaxKeys: historyMaxKeys, RowsByTable: map[string]int64{}}

	touched := map[string]map[time.Time]bool{} // user → user_activity buckets
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		if err := deleteCQLUsers(cctx, sess, touched); err != nil {
			b.note("deleting the Cassandra limit's rows (users %s*): %v; the next run writes and deletes the same users", limitsCQLPrefix, err)
		} else {
			res.Deleted = true
		}
	}()

	rng := rand.New(rand.NewPCG(7, 7))
	sem := make(chan struct{}, historyConcurrency)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var lat []time.Duration
	var rows, reqs, failed atomic.Int64
	var activity, status atomic.Int64
	var firstErr atomic.Value
	before := b.st.cpu(b.ticks)
	start := time.Now()
	deadline := start.Add(b.cfg.limitsTime)
	var offset int64
	for ctx.Err() == nil && time.Now().Before(deadline) {
		groups := planCQL(rng, b.cfg.limitsCQLUsers, time.Now(), &offset, touched)
		for _, g := range groups {
			if time.Now().After(deadline) {
				break
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				break
			}
			wg.Go(func() {
				defer func() { <-sem }()
				t := time.Now()
				err := execCQL(ctx, sess, g)
				d := time.Since(t)
				reqs.Add(1)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					return
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
				rows.Add(int64(len(g)))
				for _, s := range g {
					if s.table == "user_activity" {
						activity.Add(1)
					} else {
						status.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	cpu := cpuDelta(before, b.st.cpu(b.ticks))
	res.Rows, res.Requests, res.Failed, res.Seconds = rows.Load(), reqs.Load(), failed.Load(), elapsed
	res.RowsByTable["user_activity"], res.RowsByTable["user_status"] = activity.Load(), status.Load()
	res.WriteMs = quantilesOf(lat)
	res.CPU = map[string]float64{"cassandra": cpu["cassandra"] / elapsed, "bench": cpu["bench"] / elapsed}
	if elapsed > 0 {
		res.RowsPerSec = float64(res.Rows) / elapsed
	}
	if res.Failed > 0 {
		b.note("limits: %d of %d Cassandra requests of the minimal writer failed (first: %v); its rows/s counts only those that succeeded", res.Failed, res.Requests, firstErr.Load())
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	fmt.Fprintf(b.out, "      minimal gocql writer: %s rows/s (%d requests, p99 %s, Cassandra %.2f cores)\n",
		num(res.RowsPerSec), res.Requests, fmtMs(res.WriteMs.P99, res.WriteMs.Count), res.CPU["cassandra"])
	return res, nil
}

// planCQL is one batch of limitsPlanEvents events planned as history plans them:
// a user_activity row per status or activity event, one user_status update per user
// (the newest write, as history coalesces them), grouped by partition key and packed
// into requests of at most historyMaxStatements statements and historyMaxKeys keys.
func planCQL(rng *rand.Rand, users int, now time.Time, offset *int64, touched map[string]map[time.Time]bool) [][]cqlStmt {
	type key struct {
		name  string
		stmts []cqlStmt
	}
	var order []*key
	byKey := map[string]*key{}
	add := func(k string, s cqlStmt) {
		kk := byKey[k]
		if kk == nil {
			kk = &key{name: k}
			byKey[k] = kk
			order = append(order, kk)
		}
		kk.stmts = append(kk.stmts, s)
	}
	type seen struct {
		at     time.Time
		id     string
		active bool
	}
	last := map[string]*seen{}
	var userOrder []string
	y, m, d := now.UTC().Date()
	bucket := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	kinds := []presence.Kind{presence.KindStatus, presence.KindHeartbeat, presence.KindHeartbeat, presence.KindHeartbeat, presence.KindActivity}
	for i := range limitsPlanEvents {
		user := limitsCQLPrefix + strconv.Itoa(rng.IntN(max(users, 1)))
		kind := kinds[rng.IntN(len(kinds))]
		at := now.Add(time.Duration(i) * time.Microsecond)
		id := fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64())
		*offset++
		if touched[user] == nil {
			touched[user] = map[time.Time]bool{}
		}
		if kind != presence.KindHeartbeat {
			status := any(gocql.UnsetValue)
			if kind == presence.KindStatus {
				status = "online"
			}
			add("a\x00"+user, cqlStmt{"user_activity", limitsInsertEventCQL, []any{user, bucket, at, "e:" + id,
				kind.String(), status, "d" + strconv.Itoa(rng.IntN(2)), "api", at, false, int32(*offset % 16), *offset, presence.Micros(at)}})
			touched[user][bucket] = true
		}
		s := last[user]
		if s == nil {
			s = &seen{}
			last[user] = s
			userOrder = append(userOrder, user)
		}
		s.at, s.id = at, id
		s.active = s.active || kind != presence.KindHeartbeat
	}
	for _, user := range userOrder {
		s := last[user]
		if s.active {
			add("s\x00"+user, cqlStmt{"user_status", limitsUpdateActiveCQL, []any{presence.Micros(s.at), s.at, s.at, s.id, user}})
		} else {
			add("s\x00"+user, cqlStmt{"user_status", limitsUpdateSeenCQL, []any{presence.Micros(s.at), s.at, s.id, user}})
		}
	}
	return packCQL(order2stmts(order, func(k *key) []cqlStmt { return k.stmts }), historyMaxStatements, historyMaxKeys)
}

func order2stmts[K any](keys []K, f func(K) []cqlStmt) [][]cqlStmt {
	out := make([][]cqlStmt, len(keys))
	for i, k := range keys {
		out[i] = f(k)
	}
	return out
}

// packCQL packs the statements of each partition key into requests of at most
// maxStmts statements and maxKeys keys, a key's statements together unless they alone
// are more than maxStmts (history's batchPlan.requests).
func packCQL(keys [][]cqlStmt, maxStmts, maxKeys int) [][]cqlStmt {
	var out [][]cqlStmt
	var cur []cqlStmt
	curKeys := 0
	for _, stmts := range keys {
		for len(stmts) > maxStmts {
			out = append(out, stmts[:maxStmts:maxStmts])
			stmts = stmts[maxStmts:]
		}
		if len(stmts) == 0 {
			continue
		}
		if cur == nil || curKeys >= maxKeys || len(cur)+len(stmts) > maxStmts {
			if cur != nil {
				out = append(out, cur)
			}
			cur, curKeys = nil, 0
		}
		curKeys++
		cur = append(cur, stmts...)
	}
	if cur != nil {
		out = append(out, cur)
	}
	return out
}

// execCQL runs a request as history does: one statement alone, more as an unlogged batch.
func execCQL(ctx context.Context, sess *gocql.Session, g []cqlStmt) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if len(g) == 1 {
		return sess.Query(g[0].cql, g[0].args...).ExecContext(ctx)
	}
	bt := sess.Batch(gocql.UnloggedBatch)
	for _, s := range g {
		bt.Query(s.cql, s.args...)
	}
	return bt.ExecContext(ctx)
}

// deleteCQLUsers deletes the partitions the minimal writer wrote: each user's
// user_activity buckets and user_status row, 16 at a time, each tried up to five times
// (a Cassandra still busy with the writes times some out).
func deleteCQLUsers(ctx context.Context, sess *gocql.Session, touched map[string]map[time.Time]bool) error {
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	run := func(cql string, args ...any) {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var err error
			for try := range 5 {
				if err = sess.Query(cql, args...).ExecContext(ctx); err == nil || ctx.Err() != nil {
					break
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Duration(try+1) * time.Second):
				}
			}
			if err != nil {
				firstErr.CompareAndSwap(nil, err)
			}
		})
	}
	for user, buckets := range touched {
		if ctx.Err() != nil {
			break
		}
		for bk := range buckets {
			run(`DELETE FROM user_activity WHERE user_id = ? AND bucket = ?`, user, bk)
		}
		run(`DELETE FROM user_status WHERE user_id = ?`, user)
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return err
	}
	return ctx.Err()
}
