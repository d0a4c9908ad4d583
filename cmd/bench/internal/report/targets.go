package report

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// historyCheck picks the batched step closest to rate and reads history's numbers
// from it. The lag in seconds is the commit-lag histogram's p99 over the step when
// the history writer exported it, else the records behind over the accepted rate.
func historyCheck(m *ModeResult, rate float64) *HistoryCheck {
	if m == nil {
		return nil
	}
	i := closestStep(m.Steps, rate)
	if i < 0 {
		return nil
	}
	s := m.Steps[i]
	h := &HistoryCheck{AtOfferedEventsPerSec: s.OfferedEventsPerSec, AcceptedEventsPerSec: s.AcceptedEventsPerSec,
		RowsPerSec: s.History.RowsPerSec, LagRecords: s.History.LagRecords, RowsByTable: s.History.RowsByTable,
		HistoryCPUPerEvent: s.CPU["history"].SecondsPerEvent, CassandraCPUPerEvent: s.CPU["cassandra"].SecondsPerEvent}
	h.LagKnown = true
	switch {
	case s.History.CommitLagKnown:
		h.LagSeconds, h.LagSource = s.History.CommitLagP99Seconds, "p99 of pulse_history_commit_lag_seconds over the step"
	case s.AcceptedEventsPerSec > 0:
		h.LagSeconds, h.LagSource = float64(s.History.LagRecords)/s.AcceptedEventsPerSec, "records behind at the step's end ÷ accepted events/s"
	default:
		h.LagKnown, h.LagSource = false, "not measured"
	}
	return h
}

// evaluate judges every target of the issue on r; a target whose phase did not run
// is listed as not measured.
func evaluate(r *Results, scaleGoal int) []Target {
	return slices.Concat(throughputTargets(r), []Target{historyCostTarget(r)}, halfTargets(r.Half), scaleTargets(r.Scale, scaleGoal), historyTargets(r.History),
		ratioTargets(limitRatios(r)), groupsTargets(r.Groups), webhooksTargets(r.Webhooks))
}

func throughputTargets(r *Results) []Target {
	batched, single := math.NaN(), math.NaN()
	var bNote, sNote string
	if m := r.Batched; m != nil {
		batched, bNote = m.MaxAcceptedEventsPerSec, modeNote(m)
	}
	if m := r.Single; m != nil {
		single, sNote = m.MaxAcceptedEventsPerSec, modeNote(m)
	}
	return []Target{
		Target{ID: "batched-throughput", What: "events/s through ingest→Kafka→aggregator→Redis, batched POSTs", Op: ">=", Threshold: 100000, Unit: "events/s"}.judge(batched, bNote),
		Target{ID: "single-throughput", What: "events/s with one event per POST", Op: ">=", Threshold: 20000, Unit: "events/s"}.judge(single, sNote),
	}
}

func halfTargets(h *StepResult) []Target {
	f50, f99, read99 := math.NaN(), math.NaN(), math.NaN()
	var hNote, readNote string
	if h != nil {
		hNote = fmt.Sprintf("at %s events/s (half the max batched rate)", Num(h.OfferedEventsPerSec))
		if h.Freshness.Seen > 0 {
			f50, f99 = h.Freshness.Ms.P50, h.Freshness.Ms.P99
		}
		if rd, ok := h.StatusRead(); ok {
			read99 = rd.Ms.P99
			readNote = fmt.Sprintf("%s reads/s achieved of %s, %s", Num(rd.AchievedRate), Num(rd.TargetRate), hNote)
		}
	}
	return []Target{
		Target{ID: "freshness-p50", What: "freshness p50 at half the max rate", Op: "<=", Threshold: 60, Unit: "ms"}.judge(f50, hNote),
		Target{ID: "freshness-p99", What: "freshness p99 at half the max rate", Op: "<=", Threshold: 150, Unit: "ms"}.judge(f99, hNote),
		Target{ID: "status-read-p99", What: "GET /status/{id} p99 at 5,000 reads/s under ingest at half max", Op: "<=", Threshold: 2, Unit: "ms"}.judge(read99, readNote),
	}
}

func scaleTargets(s *ScaleResult, scaleGoal int) []Target {
	c99, speed, online, registered := math.NaN(), math.NaN(), math.NaN(), math.NaN()
	var scNote, speedNote string
	if s != nil {
		scNote = fmt.Sprintf("%s registered users, %s online", Num(float64(s.Users)), Num(float64(s.Online)))
		if s.Users < scaleGoal {
			scNote += fmt.Sprintf(" (the target is stated at %s)", Num(float64(scaleGoal)))
		}
		if s.Pulse.CountsMs.Count > 0 {
			c99 = s.Pulse.CountsMs.P99
		}
		if s.Pulse.CountsMs.Count > 0 && s.Baseline.CountsMs.Count > 0 {
			speed = s.CountsP50Speedup
			speedNote = fmt.Sprintf("p50 %s vs baseline %s (p99 ratio %s×); %s", FmtMs(s.Pulse.CountsMs.P50, 1),
				FmtMs(s.Baseline.CountsMs.P50, 1), Sig(s.CountsP99Speedup), scNote)
			if s.Pulse.RedisCountsMs.Count > 0 {
				speedNote += fmt.Sprintf("; Pulse's count is served from memory and re-read from Redis every %v (that read: p50 %s, %s× the baseline's)",
					CountsInterval, FmtMs(s.Pulse.RedisCountsMs.P50, 1), Sig(Ratio(s.Baseline.CountsMs.P50, s.Pulse.RedisCountsMs.P50)))
			}
		}
		if s.Pulse.BytesPerOnlineUser > 0 && s.Baseline.BytesPerOnlineUser > 0 {
			online = s.OnlineMemoryRatio
		}
		if s.Pulse.BytesPerRegisteredUser > 0 && s.Baseline.BytesPerRegisteredUser > 0 {
			registered = s.RegisteredMemoryRatio
		}
	}
	return []Target{
		Target{ID: "counts-p99", What: "online count p99 with 10M registered users", Op: "<=", Threshold: 2, Unit: "ms"}.judge(c99, scNote),
		Target{ID: "counts-speedup", What: "online count vs the baseline (baseline p50 ÷ Pulse p50)", Op: ">=", Threshold: 10, Unit: "×"}.judge(speed, speedNote),
		Target{ID: "online-memory-ratio", What: "baseline sorted set ÷ Pulse bitmaps, bytes per online user", Op: ">=", Threshold: 20, Unit: "×"}.judge(online, scNote),
		Target{ID: "registered-memory-ratio", What: "baseline (sorted set + hashes) ÷ Pulse, Redis bytes per registered user", Op: ">=", Threshold: 2, Unit: "×"}.judge(registered, scNote),
	}
}

// GroupGoal is the member count the groups targets are stated at.
const GroupGoal = 1_000_000

// CentrifugoGoal is how many times Centrifugo's default presence_stats a group's
// count must be faster, at the same number of present users.
const CentrifugoGoal = 1000

// groupsTargets judges the large group's count and page latencies, and its count
// against Centrifugo's presence_stats.
func groupsTargets(g *GroupsResult) []Target {
	count, page, speed := math.NaN(), math.NaN(), math.NaN()
	var note, speedNote string
	if g != nil {
		l := g.Large
		note = fmt.Sprintf("a group of %s members, %s online, among %s registered users", Num(float64(l.Members)), Num(float64(l.OnlineMembers)), Num(float64(g.Users)))
		if l.Members < GroupGoal {
			note += fmt.Sprintf(" (the target is stated at %s members)", Num(GroupGoal))
		}
		if l.CountMs.Count > 0 {
			count = l.CountMs.P99
		}
		if l.PageMs.Count > 0 {
			page = l.PageMs.P99
		}
		if c := g.Centrifugo; c != nil && c.Ms.Count > 0 && l.CountMs.Count > 0 {
			speed = g.CentrifugoP50Speedup
			speedNote = fmt.Sprintf("presence_stats p50 %s on %s entries vs the group's count p50 %s (p99 ratio %s×); %s",
				FmtMs(c.Ms.P50, c.Ms.Count), Num(float64(c.Entries)), FmtMs(l.CountMs.P50, l.CountMs.Count), Sig(g.CentrifugoP99Speedup), note)
		}
	}
	return []Target{
		Target{ID: "group-count-p99", What: "a group's online count p99, uncached (GET /v1/groups/{id}/online/count)", Op: "<=", Threshold: 1, Unit: "ms"}.judge(count, note),
		Target{ID: "group-page-p99", What: "a page of 100 of a group's online members p99 (GET /v1/groups/{id}/online)", Op: "<=", Threshold: 2, Unit: "ms"}.judge(page, note),
		Target{ID: "group-count-vs-centrifugo", What: "a group's count vs Centrifugo's default presence_stats at as many present users (its p50 ÷ Pulse's)", Op: ">=", Threshold: CentrifugoGoal, Unit: "×"}.judge(speed, speedNote),
	}
}

// WebhookEndpoints are the webhooks phase's endpoints: both send batches of at most
// WebhookMaxChanges changes, one after its first change waited at most 100 ms, the
// other the notifier's default 1 s.
var WebhookEndpoints = []struct {
	ID      string
	MaxWait time.Duration
}{{"bench-100ms", 100 * time.Millisecond}, {"bench-1s", time.Second}}

// WebhookMaxChanges is the webhooks phase's batch.maxChanges, the notifier's default.
const WebhookMaxChanges = 100

// WebhookSlack is what bench's own delivery bound allows beyond an endpoint's maxWait:
// no target is stated for webhooks' latency, so its p99 is held to maxWait + 1 s.
const WebhookSlack = time.Second

// webhooksTargets judges each endpoint's delivery p99 against maxWait + WebhookSlack,
// and that every change of the load reached every endpoint.
func webhooksTargets(w *WebhooksResult) []Target {
	byID := map[string]WebhookEndpoint{}
	var at string
	if w != nil {
		for _, e := range w.Endpoints {
			byID[e.ID] = e
		}
		at = fmt.Sprintf("batched load at %s events/s for %.0f s", Num(w.OfferedEventsPerSec), w.LoadSeconds)
	}
	var out []Target
	for _, spec := range WebhookEndpoints {
		v, note := math.NaN(), ""
		if e, ok := byID[spec.ID]; ok && e.LatencyMs.Count > 0 {
			v = e.LatencyMs.P99
			note = fmt.Sprintf("p50 %s, max %s; %s changes/s delivered of %s produced in its %s view; %s", FmtMs(e.LatencyMs.P50, e.LatencyMs.Count),
				FmtMs(e.LatencyMs.Max, e.LatencyMs.Count), Num(e.DeliveredPerSec), Num(e.ProducedPerSec), e.View, at)
		}
		out = append(out, Target{ID: "webhook-p99-" + spec.ID,
			What: fmt.Sprintf("webhook delivery p99, batches of ≤ %d changes or %v (bench's own bound, maxWait + %v: no target is stated)", WebhookMaxChanges, spec.MaxWait, WebhookSlack),
			Op:   "<=", Threshold: float64((spec.MaxWait + WebhookSlack).Milliseconds()), Unit: "ms"}.judge(v, note))
	}
	// Every change expected must be delivered: the threshold is their number, which
	// only the run knows.
	t := Target{ID: "webhook-delivered", What: "changes of the load delivered to the webhook endpoints, each in its view (distinct ids, both endpoints; required: every one expected)",
		Op: ">=", Unit: "changes"}
	if w == nil || len(w.Endpoints) == 0 {
		return append(out, t.judge(math.NaN(), ""))
	}
	var delivered int64
	var parts []string
	for _, e := range w.Endpoints {
		t.Threshold += float64(e.Expected)
		delivered += e.Delivered
		parts = append(parts, fmt.Sprintf("%s %s of %s (%d duplicates, %d invalid signatures)", e.ID, Num(float64(e.Delivered)), Num(float64(e.Expected)), e.Duplicates, e.InvalidSignatures))
	}
	if t.Threshold == 0 {
		// No change to deliver: nothing was shown either way.
		return append(out, t.judge(math.NaN(), "no change of the load was expected: "+strings.Join(parts, "; ")))
	}
	return append(out, t.judge(float64(delivered), strings.Join(parts, "; ")))
}

func historyTargets(h *HistoryCheck) []Target {
	rows, lag := math.NaN(), math.NaN()
	var histNote string
	if h != nil {
		rows = h.RowsPerSec
		if h.LagKnown {
			lag = h.LagSeconds
		}
		histNote = fmt.Sprintf("batched step at %s events/s (%s accepted); lag: %s", Num(h.AtOfferedEventsPerSec), Num(h.AcceptedEventsPerSec), h.LagSource)
	}
	return []Target{
		Target{ID: "history-rows", What: "Cassandra rows/s written by history at 50,000 events/s", Op: ">=", Threshold: 20000, Unit: "rows/s"}.judge(rows, histNote),
		Target{ID: "history-lag", What: "history lag at 50,000 events/s", Op: "<=", Threshold: 5, Unit: "s"}.judge(lag, histNote),
	}
}

// historyCostTarget compares the batched capacity with history and with history
// paused, measured in the same run: what history's writes take from the live path.
func historyCostTarget(r *Results) Target {
	t := Target{ID: "live-with-history", What: "batched capacity with history ÷ with history paused, same run", Op: ">=", Threshold: 0.8, Unit: "ratio"}
	with, without := r.Batched, r.BatchedWithoutHistory
	if with == nil || without == nil || without.MaxAcceptedEventsPerSec == 0 {
		return t.judge(math.NaN(), "")
	}
	note := fmt.Sprintf("with history: %s; paused: %s", modeNote(with), modeNote(without))
	if last := without.Steps[len(without.Steps)-1]; last.KeptUp {
		note += " (the paused run's capacity is a floor, so the ratio is a ceiling)"
	}
	return t.judge(with.MaxAcceptedEventsPerSec/without.MaxAcceptedEventsPerSec, note)
}

func modeNote(m *ModeResult) string {
	if len(m.Steps) == 0 {
		return "no step ran"
	}
	last := m.Steps[len(m.Steps)-1]
	if last.KeptUp {
		return fmt.Sprintf("every step kept up: %s events/s is a floor", Num(last.OfferedEventsPerSec))
	}
	if m.MaxOfferedEventsPerSec == 0 {
		return fmt.Sprintf("the first step (%s events/s) already fell behind", Num(last.OfferedEventsPerSec))
	}
	return fmt.Sprintf("last step that kept up: %s offered; fell behind at %s", Num(m.MaxOfferedEventsPerSec), Num(last.OfferedEventsPerSec))
}

// limitRatios pairs each stage's Pulse figure with its limit. A ratio is measured only
// when both sides are, and the limit is above 0.
func limitRatios(r *Results) []LimitRatio {
	nan := math.NaN()
	l := r.Limits
	if l == nil {
		l = &LimitsResult{}
	}
	var out []LimitRatio
	add := func(x LimitRatio, p, lim float64) {
		if !math.IsNaN(p) {
			x.PulseValue = p
		}
		if !math.IsNaN(lim) {
			x.LimitValue = lim
		}
		if x.Measured = !math.IsNaN(p) && !math.IsNaN(lim) && lim > 0 && !math.IsInf(p, 0); x.Measured {
			x.Ratio = p / lim
		}
		out = append(out, x)
	}
	// A mode whose every step kept up gives a floor of Pulse's rate, and of the ratio.
	floor := func(m *ModeResult) string {
		if m != nil && len(m.Steps) > 0 && m.Steps[len(m.Steps)-1].KeptUp {
			return "every step kept up: Pulse's rate, and the ratio, are floors"
		}
		return ""
	}
	maxAccepted := func(m *ModeResult) float64 { return m.MaxAcceptedEventsPerSec }
	add(LimitRatio{ID: "batched-vs-kafka", Stage: "ingest → Kafka → aggregator → Redis, batched",
		Pulse: "events/s accepted at the highest batched step that kept up", Limit: "records/s of Kafka's ProducerPerformance, same record size, acks=all",
		Unit: "events/s", Note: floor(r.Batched)}, fieldOr(r.Batched, maxAccepted), fieldOr(l.Kafka, func(k *KafkaLimit) float64 { return k.RecordsPerSec }))
	echo, echoNote := nan, floor(r.Single)
	if e := l.Echo; e != nil {
		echo = e.MaxAcceptedEventsPerSec
		if echo == 0 {
			// No step kept up: what it accepted while overloaded is its rate.
			echo = e.PeakAcceptedEventsPerSec
			echoNote = strings.TrimPrefix(echoNote+"; no step of the bare handler kept up: its limit is the most it accepted", "; ")
		}
	}
	add(LimitRatio{ID: "single-vs-echo", Stage: "one event per POST /status",
		Pulse: "events/s accepted at the highest single step that kept up", Limit: "events/s a bare Echo handler (decode, 202) accepted under the same loadgen: the highest step that kept up",
		Unit: "events/s", Note: echoNote}, fieldOr(r.Single, maxAccepted), echo)
	hist := nan
	var histNote string
	if r.History != nil {
		hist = r.History.RowsPerSec
		histNote = fmt.Sprintf("history at the batched step of %s events/s", Num(r.History.AtOfferedEventsPerSec))
		if r.History.LagRecords <= LagGrowthFloor {
			histNote += "; it had caught up by the step's end, so the offered load set its rate: a floor of what it can write"
		}
	}
	add(LimitRatio{ID: "history-vs-gocql", Stage: "history → Cassandra",
		Pulse: "rows/s history wrote (every table)", Limit: "rows/s of a minimal gocql writer of user_activity and user_status",
		Unit: "rows/s", Note: histNote}, hist, fieldOr(l.Cassandra, func(c *CassandraLimit) float64 { return c.RowsPerSec }))
	loop := fieldOr(l.Redis, func(x *RedisLimit) float64 { return x.Loop.UsersPerSec })
	ww := nan
	if l.Redis != nil && l.Redis.WriteWindow.Users > 0 {
		ww = l.Redis.WriteWindow.UsersPerSec
	}
	add(LimitRatio{ID: "writewindow-vs-redis", Stage: "aggregator's window write → Redis",
		Pulse: "users/s through statestore.WriteWindow (the aggregator's write), same windows", Limit: "users/s of a minimal pipelined go-redis loop writing the same keys",
		Unit: "users/s"}, ww, loop)
	add(LimitRatio{ID: "rebuild-vs-redis", Stage: "aggregator folding the log into Redis (rebuild)",
		Pulse: "users/s registered by the aggregators rebuilding every shard", Limit: "users/s of the minimal go-redis loop",
		Unit: "users/s", Note: "the rebuild reads and folds every record of the log, about 20 per user; the loop only writes"},
		fieldOr(r.Rebuild, func(x *RebuildResult) float64 { return x.UsersPerSecond }), loop)
	return out
}

// fieldOr is f(p), or NaN for a nil p.
func fieldOr[T any](p *T, f func(*T) float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return f(p)
}

// ratioGoals are the targets stated against the limits, by the ratio's id.
var ratioGoals = map[string]Target{
	"batched-vs-kafka": {What: "batched ingest → Redis ÷ Kafka's own producer rate for the same records", Op: ">=", Threshold: 0.5, Unit: "ratio"},
	"single-vs-echo":   {What: "one event per POST ÷ a bare Echo handler under the same load generator", Op: ">=", Threshold: 0.5, Unit: "ratio"},
	"history-vs-gocql": {What: "history rows/s ÷ a minimal gocql writer's", Op: ">=", Threshold: 0.7, Unit: "ratio"},
}

// ratioTargets judges the ratios that have a goal, in the ratios' order.
func ratioTargets(rs []LimitRatio) []Target {
	var out []Target
	for _, x := range rs {
		t, ok := ratioGoals[x.ID]
		if !ok {
			continue
		}
		t.ID = x.ID
		v, note := math.NaN(), ""
		if x.Measured {
			v, note = x.Ratio, fmt.Sprintf("%s of %s %s", Num(x.PulseValue), Num(x.LimitValue), x.Unit)
			if x.Note != "" {
				note += "; " + x.Note
			}
		}
		out = append(out, t.judge(v, note))
	}
	return out
}
