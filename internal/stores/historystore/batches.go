package historystore

import (
	"context"
	"errors"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// Batch is the writes sent in one request: one unlogged batch, or a single statement.
// A batch of one partition key is applied by Cassandra as a single mutation,
// atomically; a batch of several keys (see Pack) is still atomic per key and costs one
// round trip and one request's overhead on the server instead of one per key.
type Batch struct {
	Keys   int // partition keys in the batch
	Writes []Write
}

// Single is a request of w alone.
func Single(w Write) *Batch { return &Batch{Keys: 1, Writes: []Write{w}} }

// Partition is the writes of one partition key, in the order they are applied.
type Partition struct {
	Key    string
	Writes []Write
}

// Pack packs partitions into requests of at most maxWrites writes and maxKeys
// partition keys each. A partition's writes stay together unless they alone exceed
// maxWrites; with maxKeys 1 every request is a single-partition batch.
func Pack(parts []*Partition, maxWrites, maxKeys int) []*Batch {
	var out []*Batch
	var cur *Batch
	for _, p := range parts {
		ws := p.Writes
		for len(ws) > maxWrites {
			out = append(out, &Batch{Keys: 1, Writes: ws[:maxWrites:maxWrites]})
			ws = ws[maxWrites:]
		}
		if len(ws) == 0 {
			continue
		}
		if cur == nil || cur.Keys >= maxKeys || len(cur.Writes)+len(ws) > maxWrites {
			cur = &Batch{}
			out = append(out, cur)
		}
		cur.Keys++
		cur.Writes = append(cur.Writes, ws...)
	}
	return out
}

// Write sends b. The driver prepares each distinct statement once per connection and
// binds values from then on.
func (s *Store) Write(ctx context.Context, b *Batch) error {
	if len(b.Writes) == 1 {
		w := b.Writes[0]
		return s.session.Query(w.cql(), w.args...).ExecContext(ctx)
	}
	// Unlogged: a batch of one partition key is applied as a single mutation, with
	// neither the batch log nor a coordinator fan-out.
	q := s.session.Batch(gocql.UnloggedBatch)
	for _, w := range b.Writes {
		q.Query(w.cql(), w.args...)
	}
	return q.ExecContext(ctx)
}

// RejectedForGood reports whether Cassandra refused a request as invalid because of
// what it carries (a batch over batch_size_fail_threshold, a value it cannot store),
// which no retry changes. An invalid request that names the schema (a table, keyspace
// or column it does not know: migrations not applied) is an operator's to fix and is
// not rejected for good: retried like an outage, nothing is dropped meanwhile.
func RejectedForGood(err error) bool {
	var re gocql.RequestError
	if err == nil || !errors.As(err, &re) || re.Code() != gocql.ErrCodeInvalid {
		return false
	}
	msg := strings.ToLower(re.Message())
	for _, schema := range []string{"unconfigured table", "keyspace", "undefined column", "unknown identifier", "does not exist"} {
		if strings.Contains(msg, schema) {
			return false
		}
	}
	return true
}
