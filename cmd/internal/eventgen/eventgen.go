// Package eventgen draws the events loadgen sends and bench writes straight to Kafka
// and Cassandra: users, devices, kinds by weight and statuses by weight, so that
// every load of the two tools has one mix.
package eventgen

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// DefaultKinds is loadgen's default -mix, which bench's own events follow too.
const DefaultKinds = "status=1,heartbeat=3,activity=1"

// statuses is the statuses a producer sets, weighted roughly like a chat platform's
// traffic.
var statuses = Mix{{"online", 5}, {"idle", 2}, {"offline", 2}, {"invisible", 1}}

// Event is one drawn event, as an item of POST /v1/events carries it.
type Event struct {
	UserID   string `json:"userId"`
	Kind     string `json:"kind"`
	Status   string `json:"status,omitempty"`
	DeviceID string `json:"deviceId,omitempty"`
}

// Gen draws the ids, statuses and kinds of events.
type Gen struct {
	Prefix  string // of user ids: <Prefix><n>, n below Users
	Users   int
	Devices int // device ids d0 … d<Devices-1>
	Kinds   Mix
}

func (g Gen) User(rng *rand.Rand) string   { return g.Prefix + strconv.Itoa(rng.IntN(g.Users)) }
func (g Gen) Device(rng *rand.Rand) string { return "d" + strconv.Itoa(rng.IntN(g.Devices)) }

// Status is a status drawn by its weight.
func Status(rng *rand.Rand) string { return statuses.Pick(rng) }

// UserList is n users, drawn with repetition.
func (g Gen) UserList(rng *rand.Rand, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = g.User(rng)
	}
	return ids
}

// Event is one event of a drawn user, device and kind; status events carry a status.
func (g Gen) Event(rng *rand.Rand) Event {
	e := Event{UserID: g.User(rng), Kind: g.Kinds.Pick(rng), DeviceID: g.Device(rng)}
	if e.Kind == "status" {
		e.Status = Status(rng)
	}
	return e
}

// Presence is e as ingest hands it on, received at at: a UUIDv7 id as ingest gives
// one, the API as its source.
func (e Event) Presence(at time.Time) presence.Event {
	k, _ := presence.ParseKind(e.Kind)
	p := presence.Event{ID: uuid.Must(uuid.NewV7()).String(), UserID: e.UserID, Kind: k, DeviceID: e.DeviceID,
		OccurredAt: at, ReceivedAt: at, Source: presence.SourceAPI}
	if e.Status != "" {
		p.Status, _ = presence.ParseStatus(e.Status)
	}
	return p
}

// Splitmix scatters neighbouring integers (request or user numbers) across the 64-bit
// space: SplitMix64's finaliser.
func Splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// Mix is a weighted choice: of event kinds, of statuses.
type Mix []Weighted

type Weighted struct {
	Kind   string
	Weight int
}

func (m Mix) Pick(rng *rand.Rand) string {
	total := 0
	for _, k := range m {
		total += k.Weight
	}
	n := rng.IntN(total)
	for _, k := range m {
		if n < k.Weight {
			return k.Kind
		}
		n -= k.Weight
	}
	return m[len(m)-1].Kind // unreachable: n < total
}

// ParseMix reads "status=1,heartbeat=3,activity=1".
func ParseMix(s string) (Mix, error) {
	var m Mix
	seen := map[string]bool{}
	total := 0
	for part := range strings.SplitSeq(s, ",") {
		kind, w, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("%q: want kind=weight", part)
		}
		switch kind {
		case "status", "heartbeat", "activity":
		default:
			return nil, fmt.Errorf("%q: kind must be status, heartbeat or activity", kind)
		}
		if seen[kind] {
			return nil, fmt.Errorf("%q given twice", kind)
		}
		seen[kind] = true
		n, err := strconv.Atoi(w)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q: weight must be a whole number ≥ 0", part)
		}
		total += n
		m = append(m, Weighted{kind, n})
	}
	if total == 0 {
		return nil, errors.New("at least one weight must be above 0")
	}
	return m, nil
}

// MustParseMix is ParseMix for a mix known to be valid.
func MustParseMix(s string) Mix {
	m, err := ParseMix(s)
	if err != nil {
		panic(err)
	}
	return m
}
