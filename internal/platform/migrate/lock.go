package migrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// lockID is the single row of the lock table: one migrator per keyspace at a time.
const lockID = "migrate"

// lockPoll is how often a waiting migrator retries the lock.
const lockPoll = time.Second

// lock is a held migration lock. Every change to the row is a lightweight transaction
// conditioned on the owner, so a migrator whose lock expired finds out at its next
// renewal instead of running on beside the new holder.
type lock struct {
	m *Migrator
}

// acquire creates the lock table if needed and takes the lock, waiting up to LockWait
// for a holder to finish.
func (m *Migrator) acquire(ctx context.Context) (*lock, error) {
	err := m.exec(ctx, `CREATE TABLE IF NOT EXISTS `+m.opts.Keyspace+`.`+LockTable+` (
  id text PRIMARY KEY,
  owner text,
  renewed_at timestamp
) WITH comment = 'held by the one pulsectl migrate run at a time; rows expire by TTL'`)
	if err != nil {
		return nil, fmt.Errorf("creating %s.%s: %w", m.opts.Keyspace, LockTable, err)
	}

	deadline := time.Now().Add(m.opts.LockWait)
	for {
		held, err := m.tryLock(ctx)
		if err != nil && (!undecided(err) || time.Now().After(deadline) || ctx.Err() != nil) {
			return nil, err
		}
		if err != nil {
			// The insert may or may not have been applied; trying again tells, since
			// a row of our own counts as taken.
			m.log.Info("taking migration lock timed out; trying again", "err", err)
			held = &holder{owner: "(unknown: the last attempt timed out)"}
		} else if held == nil {
			m.log.Debug("took migration lock", "owner", m.owner)
			return &lock{m: m}, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("migration lock in %s.%s held by %s, last renewed at %s; waited %v (it expires %v after its last renewal)",
				m.opts.Keyspace, LockTable, held.owner, held.at.UTC().Format(time.RFC3339), m.opts.LockWait, m.opts.LockTTL)
		}
		m.log.Info("waiting for migration lock", "holder", held.owner)
		t := time.NewTimer(lockPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("waiting for migration lock held by %s: %w", held.owner, ctx.Err())
		case <-t.C:
		}
	}
}

// undecided reports whether a lightweight transaction timed out without saying whether
// it was applied: Paxos on a busy or just restarted node (CAS write timeout, read
// timeout of the Paxos read, or no answer at all).
func undecided(err error) bool {
	var wt *gocql.RequestErrWriteTimeout
	var rt *gocql.RequestErrReadTimeout
	var cu *gocql.RequestErrCASWriteUnknown
	return errors.As(err, &wt) || errors.As(err, &rt) || errors.As(err, &cu) ||
		errors.Is(err, gocql.ErrTimeoutNoResponse) || errors.Is(err, context.DeadlineExceeded)
}

type holder struct {
	owner string
	at    time.Time
}

// tryLock inserts the lock row if absent. It returns nil when this migrator now holds
// it, or the current holder.
func (m *Migrator) tryLock(ctx context.Context) (*holder, error) {
	ctx, cancel := context.WithTimeout(ctx, m.opts.StatementTimeout)
	defer cancel()
	prev := map[string]any{}
	applied, err := m.session.Query(`INSERT INTO `+m.opts.Keyspace+`.`+LockTable+` (id, owner, renewed_at) VALUES (?, ?, ?) IF NOT EXISTS USING TTL ?`,
		lockID, m.owner, time.Now().UTC(), ttlSeconds(m.opts.LockTTL)).
		MapScanCASContext(ctx, prev)
	if err != nil {
		return nil, fmt.Errorf("taking migration lock: %w", err)
	}
	if applied {
		return nil, nil
	}
	h := &holder{}
	h.owner, _ = prev["owner"].(string)
	h.at, _ = prev["renewed_at"].(time.Time)
	if h.owner == m.owner {
		return nil, nil // our own row, e.g. a retried insert that had succeeded
	}
	return h, nil
}

// renew extends the lock's TTL, failing if the lock is no longer ours.
func (l *lock) renew(ctx context.Context) error {
	m := l.m
	ctx, cancel := context.WithTimeout(ctx, m.opts.StatementTimeout)
	defer cancel()
	prev := map[string]any{}
	applied, err := m.session.Query(`UPDATE `+m.opts.Keyspace+`.`+LockTable+` USING TTL ? SET owner = ?, renewed_at = ? WHERE id = ? IF owner = ?`,
		ttlSeconds(m.opts.LockTTL), m.owner, time.Now().UTC(), lockID, m.owner).
		MapScanCASContext(ctx, prev)
	if err != nil {
		return fmt.Errorf("renewing migration lock: %w", err)
	}
	if !applied {
		return fmt.Errorf("lost migration lock (now held by %v): a statement ran longer than the lock TTL %v", prev["owner"], m.opts.LockTTL)
	}
	return nil
}

// release deletes the lock row if it is still ours.
func (l *lock) release(ctx context.Context) error {
	m := l.m
	_, err := m.session.Query(`DELETE FROM `+m.opts.Keyspace+`.`+LockTable+` WHERE id = ? IF owner = ?`, lockID, m.owner).
		MapScanCASContext(ctx, map[string]any{})
	return err
}

func ttlSeconds(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}
