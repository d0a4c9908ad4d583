package historystore

import (
	"context"
	"fmt"
	"time"
)

// MinuteCounts is one shard's concurrency row of a minute (Q4).
type MinuteCounts struct {
	Minute time.Time
	Shard  int
	// Online is the shard's users online at the end of each second of the minute.
	Online []int
	// The users in each status at the end of the minute.
	CloseOnline, CloseIdle, CloseInvisible int
}

const concurrencyCQL = `SELECT minute, shard, online, close_online, close_idle, close_invisible FROM concurrency
				WHERE day = ? AND minute >= ? AND minute < ?`

// Concurrency yields the rows of day (a UTC midnight) of the minutes in [from, to), in
// minute order and the shards of a minute in any order, until yield returns false.
func (s *Store) Concurrency(ctx context.Context, day, from, to time.Time, yield func(MinuteCounts) bool) error {
	it := s.session.Query(concurrencyCQL, day, from, to).PageSize(2000).IterContext(ctx)
	var r MinuteCounts
	for it.Scan(&r.Minute, &r.Shard, &r.Online, &r.CloseOnline, &r.CloseIdle, &r.CloseInvisible) {
		if !yield(r) {
			break
		}
		r = MinuteCounts{}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("concurrency of %s: %w", day.Format(time.DateOnly), err)
	}
	return nil
}
