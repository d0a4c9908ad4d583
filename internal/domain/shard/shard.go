// Package shard maps user ids to shards. A shard is the user's partition of
// presence.events: ingest keys records by user id and Kafka's default partitioner
// places them, so readers that know the partition count find a user's state (and its
// bitmap shard) without asking Kafka.
package shard

// For returns the shard of userID among n: Kafka's default partitioner for keyed
// records (murmur2 of the key, sign bit cleared, modulo the partition count), the one
// franz-go, the Java client and librdkafka agree on.
func For(userID string, n int) int {
	return int(murmur2(userID)&0x7fffffff) % n
}

// murmur2 is the 32-bit MurmurHash2 variant Kafka hashes keys with (seed 0x9747b28c).
func murmur2(s string) uint32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
		r    = 24
	)
	n := len(s)
	h := uint32(seed) ^ uint32(n)
	i := 0
	for ; n-i >= 4; i += 4 {
		k := uint32(s[i]) | uint32(s[i+1])<<8 | uint32(s[i+2])<<16 | uint32(s[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch n - i {
	case 3:
		h ^= uint32(s[i+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(s[i+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(s[i])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
