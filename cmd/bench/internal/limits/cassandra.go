package limits

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"golang.org/x/sync/errgroup"

	"github.com/pulse-presence/pulse/cmd/bench/internal/harness"
	"github.com/pulse-presence/pulse/cmd/bench/internal/probe"
	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
	"github.com/pulse-presence/pulse/cmd/internal/eventgen"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/cassx"
	"github.com/pulse-presence/pulse/internal/stores/historystore"
)

// The defaults history packs and bounds its writes with (PULSE_HISTORY_MAX_BATCH_STATEMENTS,
// PULSE_HISTORY_BATCH_PARTITIONS, PULSE_HISTORY_WRITE_CONCURRENCY).
const (
	historyMaxStatements = 100
	historyMaxKeys       = 50
	historyConcurrency   = 64
	// limitsPlanEvents is the events of one planned batch: history's most records of
	// one poll (PULSE_HISTORY_MAX_POLL_RECORDS).
	limitsPlanEvents = 5000
	limitsCQLPrefix  = "blim-"
)

// cassandraLimit writes history's rows of loadgen-like events (its mix of kinds,
// heartbeats without a user_activity row as history's default keeps them) for users
// blim-0 … of -limits-cql-users into the stack's keyspace for -limits-time, then
// deletes every partition it wrote. The rows, their packing and the requests are
// historystore's, as history writes them; what the writer leaves out is the rest of
// history (its consumer, planning, retries), so it is the engine's rate for them.
func cassandraLimit(ctx context.Context, env *harness.Env) (*report.CassandraLimit, error) {
	// History's session settings but a longer connect timeout: a saturated machine can
	// take seconds to answer a new connection's handshake.
	sess, err := cassx.NewSession(cassx.Config{Hosts: []string{"127.0.0.1"}, Port: env.Cfg.Ports.Cassandra, Keyspace: env.Cfg.Keyspace,
		ConnectTimeout: 30 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("connecting to Cassandra: %w", err)
	}
	defer sess.Close()
	store := historystore.New(sess)
	res := &report.CassandraLimit{Keyspace: env.Cfg.Keyspace, UserPrefix: limitsCQLPrefix, Users: env.Cfg.LimitsCQLUsers,
		Concurrency: historyConcurrency, MaxStatements: historyMaxStatements, MaxKeys: historyMaxKeys,
		RowsByTable: map[string]int64{historystore.TableActivity: 0, historystore.TableStatus: 0}}

	touched := map[string]map[time.Time]bool{} // user → user_activity buckets
	defer func() {
		what := "deleting the Cassandra limit's rows (users " + limitsCQLPrefix + "*; the next run writes and deletes the same users)"
		res.Deleted = env.Cleanup(ctx, 5*time.Minute, what, func(ctx context.Context) error { return deleteCQLUsers(ctx, sess, touched) }) == nil
	}()

	rng := rand.New(rand.NewPCG(7, 7))
	var g errgroup.Group
	g.SetLimit(historyConcurrency)
	var mu sync.Mutex // guards res's tallies, lat and firstErr
	var lat []time.Duration
	var firstErr error
	before := env.CPU()
	start := time.Now()
	deadline := start.Add(env.Cfg.LimitsTime)
	var offset int64
	for ctx.Err() == nil && time.Now().Before(deadline) {
		for _, b := range planCQL(rng, env.Cfg.LimitsCQLUsers, time.Now(), &offset, touched) {
			if ctx.Err() != nil || time.Now().After(deadline) {
				break
			}
			g.Go(func() error {
				t := time.Now()
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := store.Write(wctx, b)
				cancel()
				d := time.Since(t)
				mu.Lock()
				defer mu.Unlock()
				res.Requests++
				if err != nil {
					res.Failed++
					firstErr = cmp.Or(firstErr, err)
					return nil
				}
				lat = append(lat, d)
				res.Rows += int64(len(b.Writes))
				for _, w := range b.Writes {
					res.RowsByTable[w.Table()]++
				}
				return nil
			})
		}
	}
	_ = g.Wait()
	elapsed := time.Since(start).Seconds()
	cpu := probe.Delta(before, env.CPU())
	res.Seconds = elapsed
	res.WriteMs = report.QuantilesOf(lat)
	res.CPU = map[string]float64{"cassandra": cpu["cassandra"] / elapsed, "bench": cpu["bench"] / elapsed}
	if elapsed > 0 {
		res.RowsPerSec = float64(res.Rows) / elapsed
	}
	if res.Failed > 0 {
		env.Note("limits: %d of %d Cassandra requests of the minimal writer failed (first: %v); its rows/s counts only those that succeeded", res.Failed, res.Requests, firstErr)
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	fmt.Fprintf(env.Out, "      minimal gocql writer: %s rows/s (%d requests, p99 %s, Cassandra %.2f cores)\n",
		report.Num(res.RowsPerSec), res.Requests, report.FmtMs(res.WriteMs.P99, res.WriteMs.Count), res.CPU["cassandra"])
	return res, nil
}

// planCQL is one batch of limitsPlanEvents events planned as history plans them:
// a user_activity row per status or activity event, one user_status update per user
// (the newest write, as history coalesces them), grouped by partition key and packed
// into requests of at most historyMaxStatements statements and historyMaxKeys keys.
func planCQL(rng *rand.Rand, users int, now time.Time, offset *int64, touched map[string]map[time.Time]bool) []*historystore.Batch {
	var parts []*historystore.Partition
	byKey := map[string]*historystore.Partition{}
	add := func(w historystore.Write) {
		p := byKey[w.Key()]
		if p == nil {
			p = &historystore.Partition{Key: w.Key()}
			byKey[w.Key()] = p
			parts = append(parts, p)
		}
		p.Writes = append(p.Writes, w)
	}
	type seen struct {
		at     time.Time
		id     string
		active bool
	}
	last := map[string]*seen{}
	var userOrder []string
	g := eventgen.Gen{Prefix: limitsCQLPrefix, Users: max(users, 1), Devices: 2, Kinds: eventgen.MustParseMix(eventgen.DefaultKinds)}
	for i := range limitsPlanEvents {
		e := g.Event(rng).Presence(now.Add(time.Duration(i) * time.Microsecond))
		*offset++
		if touched[e.UserID] == nil {
			touched[e.UserID] = map[time.Time]bool{}
		}
		if e.Kind != presence.KindHeartbeat {
			add(historystore.EventRow(&e, false, int32(*offset%16), *offset))
			y, m, d := e.OccurredAt.UTC().Date()
			touched[e.UserID][time.Date(y, m, d, 0, 0, 0, 0, time.UTC)] = true
		}
		s := last[e.UserID]
		if s == nil {
			s = &seen{}
			last[e.UserID] = s
			userOrder = append(userOrder, e.UserID)
		}
		s.at, s.id = e.OccurredAt, e.ID
		s.active = s.active || e.Kind != presence.KindHeartbeat
	}
	for _, user := range userOrder {
		if s := last[user]; s.active {
			add(historystore.ActiveUpdate(user, s.at, s.id))
		} else {
			add(historystore.SeenUpdate(user, s.at, s.id))
		}
	}
	return historystore.Pack(parts, historyMaxStatements, historyMaxKeys)
}

// deleteCQLUsers deletes the partitions the minimal writer wrote: each user's
// user_activity buckets and user_status row, 16 at a time, each tried up to five times
// (a Cassandra still busy with the writes times some out).
func deleteCQLUsers(ctx context.Context, sess *gocql.Session, touched map[string]map[time.Time]bool) error {
	var g errgroup.Group
	g.SetLimit(16)
	run := func(cql string, args ...any) {
		g.Go(func() error {
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
			return err
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
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}
