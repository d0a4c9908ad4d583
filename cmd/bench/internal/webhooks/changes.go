package webhooks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/pulse-presence/pulse/cmd/bench/internal/harness"
	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/domain/records"
	"github.com/pulse-presence/pulse/pkg/pb/pulsev1"
)

// change is what the phase needs of one record of presence.changes.
type change struct {
	// id is the change's id as the notifier sends it: the causing event's
	// "<partition>:<offset>" in presence.events.
	id string
	// produced is the record's timestamp: when the aggregator wrote it.
	produced time.Time
	// public says a public view shows the change (an operator view shows every one).
	public bool
}

// decode reads a record of presence.changes as the notifier does; a record the
// notifier would skip (no schema header, not a change) is an error.
func decode(r *kgo.Record) (change, error) {
	if err := records.CheckSchema(r, pulsev1.SchemaChange); err != nil {
		return change{}, err
	}
	var p pulsev1.Change
	if err := proto.Unmarshal(r.Value, &p); err != nil {
		return change{}, fmt.Errorf("decoding change: %w", err)
	}
	if string(r.Key) != p.GetUserId() || p.GetUserId() == "" {
		return change{}, fmt.Errorf("record key %q, user id %q", r.Key, p.GetUserId())
	}
	prev, cur := presence.StatusFromPB(p.GetPrevious()), presence.StatusFromPB(p.GetCurrent())
	member := p.GetGroupId() != ""
	if prev == presence.StatusUnknown || cur == presence.StatusUnknown || (prev == cur) != (p.GetCustomOnly() || member) {
		return change{}, fmt.Errorf("transition %v -> %v is not a change", p.GetPrevious(), p.GetCurrent())
	}
	if p.GetChangedAtUs() == 0 {
		return change{}, errors.New("no changed_at")
	}
	return change{
		id:       strconv.Itoa(int(p.GetSourcePartition())) + ":" + strconv.FormatInt(p.GetSourceOffset(), 10),
		produced: r.Timestamp,
		public:   publicSees(prev, cur, p.GetCustomOnly(), member),
	}, nil
}

// publicSees is the notifier's visibility rule for a public view
// (services/notifier/change.go, visible): membership changes always; a change of the
// custom status alone when the user reads as online or idle; a status transition when
// it changes the public status (invisible reads as offline, so online -> invisible
// shows as going offline and offline -> invisible not at all).
func publicSees(prev, cur presence.Status, customOnly, member bool) bool {
	switch {
	case member:
		return true
	case customOnly:
		st := cur.Public()
		return st == presence.Online || st == presence.Idle
	}
	return prev.Public() != cur.Public()
}

// expected is the ids of the changes a view shows, each with its earliest record's
// timestamp (a change written twice, as after the aggregator's crash, is one change).
func expected(cs []change, operator bool) map[string]time.Time {
	out := make(map[string]time.Time, len(cs))
	for _, c := range cs {
		if !operator && !c.public {
			continue
		}
		if t, ok := out[c.id]; !ok || c.produced.Before(t) {
			out[c.id] = c.produced
		}
	}
	return out
}

// window is the load's schedule.
type window struct{ from, to time.Time }

func (w window) seconds() float64 { return w.to.Sub(w.from).Seconds() }

func (w window) holds(t time.Time) bool { return !t.Before(w.from) && !t.After(w.to) }

// summarize is one endpoint's figures: what it got against what its view shows of the
// window's changes.
func summarize(s endpointSpec, want map[string]time.Time, got receipts, w window) report.WebhookEndpoint {
	e := report.WebhookEndpoint{ID: s.id, View: s.view, MaxChanges: s.maxChanges, MaxWaitSeconds: s.maxWait.Seconds(),
		Expected: int64(len(want)), Requests: got.requests, InvalidSignatures: got.invalidSignatures, Malformed: got.malformed}
	if taken := got.requests - got.invalidSignatures - got.malformed; taken > 0 {
		e.ChangesPerRequest = float64(got.changes) / float64(taken)
	}
	for id, n := range got.count {
		e.Duplicates += int64(n - 1)
		if _, ok := want[id]; !ok {
			e.Outside++
		}
	}
	var lat []time.Duration
	var last time.Time
	var produced, delivered int64
	var missing []string
	for id, at := range want {
		if w.holds(at) {
			produced++
		}
		first, ok := got.first[id]
		if !ok {
			missing = append(missing, id)
			continue
		}
		e.Delivered++
		lat = append(lat, first.Sub(at))
		if first.After(last) {
			last = first
		}
		if w.holds(first) {
			delivered++
		}
	}
	e.Missing = int64(len(missing))
	slices.Sort(missing)
	e.MissingIDs = missing[:min(len(missing), 10)]
	e.LatencyMs = report.QuantilesOf(lat)
	if secs := w.seconds(); secs > 0 {
		e.ProducedPerSec, e.DeliveredPerSec = float64(produced)/secs, float64(delivered)/secs
	}
	if !last.IsZero() {
		e.LastDeliverySeconds = max(last.Sub(w.to).Seconds(), 0)
	}
	return e
}

// endOffsets is the changes topic's end offset of every partition.
func endOffsets(ctx context.Context, env *harness.Env) (map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ends, err := env.Lag.Adm.ListEndOffsets(ctx, env.Cfg.Changes)
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", env.Cfg.Changes, err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", env.Cfg.Changes, err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out, nil
}

// windowChanges is the changes topic's records between two sets of offsets.
type windowChanges struct {
	all         []change
	undecodable int
}

// readChanges reads every record of the changes topic from start to end (exclusive),
// partition by partition offsets, outside any consumer group.
func readChanges(ctx context.Context, env *harness.Env, start, end map[int32]int64) (windowChanges, error) {
	var out windowChanges
	from := map[int32]kgo.Offset{}
	left := map[int32]int64{} // the last offset each partition has yet to reach
	for p, e := range end {
		if s := start[p]; e > s {
			from[p] = kgo.NewOffset().At(s)
			left[p] = e - 1
		}
	}
	if len(from) == 0 {
		return out, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(fmt.Sprintf("127.0.0.1:%d", env.Cfg.Ports.Kafka)),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{env.Cfg.Changes: from}), kgo.KeepControlRecords())
	if err != nil {
		return out, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for len(left) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("reading %s: %w", env.Cfg.Changes, err)
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			return out, fmt.Errorf("reading %s/%d: %w", env.Cfg.Changes, errs[0].Partition, errs[0].Err)
		}
		for r := range fetches.RecordsAll() {
			last, ok := left[r.Partition]
			if !ok || r.Offset > last {
				continue
			}
			if r.Offset == last {
				delete(left, r.Partition)
			}
			if r.Attrs.IsControl() {
				continue
			}
			c, err := decode(r)
			if err != nil {
				out.undecodable++
				continue
			}
			out.all = append(out.all, c)
		}
	}
	return out, nil
}
