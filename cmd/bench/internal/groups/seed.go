package groups

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pulse-presence/pulse/cmd/bench/internal/scale"
	"github.com/pulse-presence/pulse/cmd/internal/eventgen"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/records"
	"github.com/pulse-presence/pulse/internal/domain/shard"
)

// The phase's names. The Redis prefix is apart from any deployment's and fixed, so a
// run that died before cleaning up is cleaned up by the next; it is as long as Pulse's
// default prefix "pulse", since key lengths weigh in the bytes per member.
const (
	prefix     = "bgrps"
	largeGroup = "bench-large"
	warmGroup  = "bench-warmup"
	roomPrefix = "bench-room-"
	fillerUser = "bench-filler"
)

// Salts that make the group's members and the rooms' independent of scale.Online's
// hash of the user number, which decides who is online.
const (
	memberSalt = 0x6a09e667f3bcc908
	roomSalt   = 0xbb67ae8584caa73b
)

// roomID is small room r's group id.
func roomID(r int) string { return roomPrefix + strconv.Itoa(r) }

// unit is a number in [0, 1) drawn from user i, independent of whether i is online.
func unit(i int) float64 {
	return float64(eventgen.Splitmix(uint64(i)^memberSalt)>>11) / (1 << 53)
}

// slack is the chance of taking each of have candidates so that a pass over them
// takes at least want with near certainty: 2% more than want ÷ have.
func slack(want, have int) float64 {
	if want == 0 {
		return 0
	}
	return min(1, 1.02*float64(want)/float64(have))
}

// pickMembers chooses the large group's members among the bulk-loaded users 0 …
// users-1, of whom scale.Online(i, fraction) are online: exactly members of them,
// exactly online of those online. Members are drawn by a hash of the user number, so
// they spread over every shard's index space as real ones do (a dense run of
// indexes would compress to a few bytes and flatter the bytes per member). It answers
// their numbers in increasing order.
func pickMembers(users int, fraction float64, members, online int) ([]int, error) {
	onUsers := 0
	for i := range users {
		if scale.Online(i, fraction) {
			onUsers++
		}
	}
	offline := members - online
	if online > onUsers || offline > users-onUsers {
		return nil, fmt.Errorf("a group of %d members with %d online needs %d online and %d offline users; %d of the %d registered are online",
			members, online, online, offline, onUsers, users)
	}
	pOn, pOff := slack(online, onUsers), slack(offline, users-onUsers)
	taken := make([]bool, users)
	out := make([]int, 0, members)
	var gotOn, gotOff int
	// take takes user i if its side (online or not) still needs members, and, when
	// draw, the hash draws it.
	take := func(i int, draw bool) {
		if taken[i] {
			return
		}
		on := scale.Online(i, fraction)
		switch {
		case on && gotOn < online && (!draw || unit(i) < pOn):
			gotOn++
		case !on && gotOff < offline && (!draw || unit(i) < pOff):
			gotOff++
		default:
			return
		}
		taken[i] = true
		out = append(out, i)
	}
	for i := 0; i < users && len(out) < members; i++ {
		take(i, true)
	}
	// The slack leaves a shortfall only for small groups: it is made up in order.
	for i := 0; i < users && len(out) < members; i++ {
		take(i, false)
	}
	slices.Sort(out)
	return out, nil
}

// roomMembers is small room r's size distinct members of users 0 … users-1, drawn
// at random (the same for the same r).
func roomMembers(r, size, users int) []int {
	rng := rand.New(rand.NewPCG(uint64(r), roomSalt))
	seen := make(map[int]bool, size)
	out := make([]int, 0, size)
	for len(out) < size {
		i := rng.IntN(users)
		if !seen[i] {
			seen[i] = true
			out = append(out, i)
		}
	}
	return out
}

// ids are the bulk-loaded users' ids of numbers.
func ids(numbers []int) []string {
	out := make([]string, len(numbers))
	for k, i := range numbers {
		out[k] = scale.UserID(i)
	}
	return out
}

// onlineOf counts the online users among numbers.
func onlineOf(numbers []int, fraction float64) int64 {
	var n int64
	for _, i := range numbers {
		if scale.Online(i, fraction) {
			n++
		}
	}
	return n
}

// chunks splits ids into runs of at most n.
func chunks(ids []string, n int) [][]string {
	var out [][]string
	for lo := 0; lo < len(ids); lo += n {
		out = append(out, ids[lo:min(lo+n, len(ids))])
	}
	return out
}

// warmMembers is one user of each of shards shards, the lowest-numbered one there,
// among users 0 … users-1: a group of them is folded by every shard's worker.
func warmMembers(users, shards int) []int {
	found := make([]bool, shards)
	var out []int
	for i := 0; i < users && len(out) < shards; i++ {
		if s := shard.For(scale.UserID(i), shards); !found[s] {
			found[s] = true
			out = append(out, i)
		}
	}
	return out
}

// fillers are n records for partition p of topic: member events that leave a group
// no one joined, of a user no one registered, which change nothing when folded. They
// stand for the records a bulk-loaded shard says it folded: the bulk load writes one
// window per offset 0 … n-1, and the aggregator resumes each shard after the offset it
// holds, so the memberships written next must land after them.
func fillers(topic string, p int32, n int64, now time.Time) ([]*kgo.Record, error) {
	out := make([]*kgo.Record, 0, n)
	for range n {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		e := presence.Event{ID: id.String(), UserID: fillerUser, Kind: presence.KindMember, DeviceID: presence.AllDevices,
			ReceivedAt: now, Source: presence.SourceAPI, GroupID: "bench-filler", Leave: true}
		if err := e.Validate(); err != nil {
			return nil, fmt.Errorf("filler event: %w", err)
		}
		r, err := records.Event(topic, &e)
		if err != nil {
			return nil, err
		}
		r.Partition = p
		out = append(out, r)
	}
	return out, nil
}
