package historystore

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

func TestPack(t *testing.T) {
	part := func(key string, n int) *Partition {
		p := &Partition{Key: key}
		for i := range n {
			p.Writes = append(p.Writes, Write{key: key, args: []any{fmt.Sprint(key, i)}})
		}
		return p
	}
	parts := []*Partition{part("a", 7), part("b", 1), part("c", 2), part("d", 1)}
	render := func(bs []*Batch) []string {
		var out []string
		for _, b := range bs {
			var s []string
			for _, w := range b.Writes {
				s = append(s, w.args[0].(string))
			}
			out = append(out, fmt.Sprintf("%d:%s", b.Keys, strings.Join(s, ",")))
		}
		return out
	}
	for _, tt := range []struct {
		maxWrites, maxKeys int
		want               []string
	}{
		// One key per request: a key longer than maxWrites is split, nothing is merged.
		{3, 1, []string{"1:a0,a1,a2", "1:a3,a4,a5", "1:a6", "1:b0", "1:c0,c1", "1:d0"}},
		// Keys are packed while both limits allow; a key's writes are never split over
		// two requests unless they alone exceed maxWrites.
		{3, 2, []string{"1:a0,a1,a2", "1:a3,a4,a5", "2:a6,b0", "2:c0,c1,d0"}},
		{4, 10, []string{"1:a0,a1,a2,a3", "2:a4,a5,a6,b0", "2:c0,c1,d0"}},
		{100, 100, []string{"4:a0,a1,a2,a3,a4,a5,a6,b0,c0,c1,d0"}},
	} {
		if got := render(Pack(parts, tt.maxWrites, tt.maxKeys)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Pack(%d, %d) = %v, want %v", tt.maxWrites, tt.maxKeys, got, tt.want)
		}
	}
}

// invalid is an error as Cassandra returns it for an invalid request.
type invalid string

func (e invalid) Code() int       { return gocql.ErrCodeInvalid }
func (e invalid) Message() string { return string(e) }
func (e invalid) Error() string   { return "Invalid: " + string(e) }

// What a request carries that Cassandra refuses is refused for good; a schema it does
// not know (migrations not applied) or any other error is not.
func TestRejectedForGood(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{invalid("Batch too large"), true},
		{fmt.Errorf("wrapped: %w", invalid("Key length of 70000 is longer than maximum of 65535")), true},
		{invalid("unconfigured table user_activity"), false},
		{invalid("Keyspace pulse does not exist"), false},
		{invalid("Undefined column name stale"), false},
		{gocql.ErrTimeoutNoResponse, false},
		{nil, false},
	} {
		if got := RejectedForGood(tt.err); got != tt.want {
			t.Errorf("RejectedForGood(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
