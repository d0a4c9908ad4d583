package shard

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The shard of a user must be the partition Kafka puts the user's events in.
func TestForMatchesKafkaPartitioner(t *testing.T) {
	part := kgo.StickyKeyPartitioner(nil).ForTopic("presence.events")
	ids := []string{"", "a", "ab", "abc", "abcd", "abcde", "alice", "42", "9007199254740993",
		"0f8fad5b-d9cb-469f-a165-70867728950e", "ユーザー", string(make([]byte, 128))}
	for i := range 2000 {
		ids = append(ids, fmt.Sprintf("user-%d", i), fmt.Sprint(i*7919))
	}
	for _, n := range []int{1, 3, 16, 64, 1000} {
		for _, id := range ids {
			want := part.Partition(&kgo.Record{Key: []byte(id)}, n)
			if got := For(id, n); got != want {
				t.Fatalf("For(%q, %d) = %d, Kafka's partitioner says %d", id, n, got, want)
			}
		}
	}
}

// Known values of Kafka's murmur2, from its Java client's tests of Utils.murmur2.
func TestMurmur2KnownValues(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
	} {
		if got := int32(murmur2(tt.in)); got != tt.want {
			t.Errorf("murmur2(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func BenchmarkFor(b *testing.B) {
	for b.Loop() {
		For("0f8fad5b-d9cb-469f-a165-70867728950e", 16)
	}
}
