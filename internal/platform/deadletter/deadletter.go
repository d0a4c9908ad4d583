// Package deadletter is where a record that cannot be processed goes instead of
// stopping its partition (docs/design.md guarantee 11): to the topic of its origin
// with ".dlq" appended, unchanged (key, value, headers), with headers saying where it
// came from, which service gave up on it, why and when. The partition then moves on;
// `pulsectl dlq` lists dead letters and replays them to their origin once the cause is
// fixed. Transient failures (a server down) are retried where they happen and never
// come here.
package deadletter

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The headers a dead letter carries besides the record's own.
const (
	HeaderOrigin  = "pulse-dlq-origin"  // topic/partition/offset the record was read at
	HeaderService = "pulse-dlq-service" // the service that could not process it
	HeaderReason  = "pulse-dlq-reason"  // why, in words
	HeaderAt      = "pulse-dlq-at"      // when, RFC 3339
)

// Suffix makes a topic's dead-letter topic.
const Suffix = ".dlq"

// Topic is the dead-letter topic of origin.
func Topic(origin string) string { return origin + Suffix }

// maxReason bounds the reason header: an error can quote a whole record.
const maxReason = 1024

// Record is r as a dead letter: same key, value and headers, on r's dead-letter
// topic and in r's partition number's place left to the partitioner (keyed like r).
func Record(r *kgo.Record, service string, reason error, at time.Time) *kgo.Record {
	why := reason.Error()
	if len(why) > maxReason {
		why = why[:maxReason] + "…"
	}
	headers := make([]kgo.RecordHeader, 0, len(r.Headers)+4)
	headers = append(headers, r.Headers...)
	headers = append(headers,
		kgo.RecordHeader{Key: HeaderOrigin, Value: []byte(fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset))},
		kgo.RecordHeader{Key: HeaderService, Value: []byte(service)},
		kgo.RecordHeader{Key: HeaderReason, Value: []byte(why)},
		kgo.RecordHeader{Key: HeaderAt, Value: []byte(at.UTC().Format(time.RFC3339Nano))},
	)
	return &kgo.Record{Topic: Topic(r.Topic), Key: r.Key, Value: r.Value, Headers: headers}
}

// Letter is a dead letter as read back.
type Letter struct {
	Topic     string // of the origin
	Partition int32
	Offset    int64
	Service   string
	Reason    string
	At        time.Time
	// Key, Value and Headers are the original record's.
	Key, Value []byte
	Headers    []kgo.RecordHeader
}

// Parse reads a record of a dead-letter topic.
func Parse(r *kgo.Record) (Letter, error) {
	l := Letter{Key: r.Key, Value: r.Value}
	var origin, at string
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderOrigin:
			origin = string(h.Value)
		case HeaderService:
			l.Service = string(h.Value)
		case HeaderReason:
			l.Reason = string(h.Value)
		case HeaderAt:
			at = string(h.Value)
		default:
			l.Headers = append(l.Headers, h)
		}
	}
	i, j := strings.LastIndexByte(origin, '/'), -1
	if i > 0 {
		j = strings.LastIndexByte(origin[:i], '/')
	}
	if j <= 0 {
		return Letter{}, fmt.Errorf("dead letter at %s/%d/%d: no origin header", r.Topic, r.Partition, r.Offset)
	}
	p, err1 := strconv.ParseInt(origin[j+1:i], 10, 32)
	o, err2 := strconv.ParseInt(origin[i+1:], 10, 64)
	t, err3 := time.Parse(time.RFC3339Nano, at)
	if err := errors.Join(err1, err2, err3); err != nil {
		return Letter{}, fmt.Errorf("dead letter at %s/%d/%d: bad headers: %w", r.Topic, r.Partition, r.Offset, err)
	}
	l.Topic, l.Partition, l.Offset, l.At = origin[:j], int32(p), o, t
	return l, nil
}

// Replay is l as a record of its origin topic again, as it was first written.
func (l Letter) Replay() *kgo.Record {
	return &kgo.Record{Topic: l.Topic, Key: l.Key, Value: l.Value, Headers: l.Headers}
}
