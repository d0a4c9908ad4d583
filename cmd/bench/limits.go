package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
)

// LimitsResult is the limits phase: what each engine Pulse is built on does on its own,
// on the same servers and in the same run, for work of the same shape as Pulse's. Each
// part is nil when it was not measured (its error is in the notes).
type LimitsResult struct {
	Kafka     *KafkaLimit     `json:"kafka,omitempty"`
	Redis     *RedisLimit     `json:"redis,omitempty"`
	Cassandra *CassandraLimit `json:"cassandra,omitempty"`
	Echo      *EchoLimit      `json:"echo,omitempty"`
}

// KafkaLimit is Kafka's own producer (org.apache.kafka.tools.ProducerPerformance) at
// full speed against a throwaway topic with the events topic's partition count.
type KafkaLimit struct {
	Tool       string   `json:"tool"` // the jar that ran
	Topic      string   `json:"topic"`
	Partitions int      `json:"partitions"`
	Replicas   int      `json:"replicas"`
	Props      []string `json:"producerProps"`
	// RecordBytes is the mean payload the tool sent per record: a presence.events
	// record's key, schema header and value (ValueBytes, the protobuf event) together,
	// since the tool sends no key or header of its own.
	RecordBytes float64 `json:"recordBytes"`
	ValueBytes  float64 `json:"valueBytes"`
	Keys        string  `json:"keys"`
	// Windows are the tool's periodic reports that were counted (the first three, the
	// producer warming up, are left out); the rates are their records over their time.
	Windows       int     `json:"windows"`
	Records       int64   `json:"records"`
	Seconds       float64 `json:"seconds"`
	RecordsPerSec float64 `json:"recordsPerSec"`
	// MBPerSec is the tool's MB/s: payload bytes over 2^20 per second.
	MBPerSec      float64 `json:"mbPerSec"`
	AvgLatencyMs  float64 `json:"avgLatencyMs"`
	MaxLatencyMs  float64 `json:"maxLatencyMs"`
	CPUSeconds    float64 `json:"cpuSeconds"` // the tool's JVM, user + system
	KafkaCPUCores float64 `json:"kafkaCpuCores"`
	Raw           string  `json:"raw"`
}

// RedisLimit is one aggregator window's writes, pipelined by a minimal go-redis loop,
// beside the same windows written by statestore.WriteWindow as the aggregator does.
type RedisLimit struct {
	Shards         int     `json:"shards"`
	UsersPerWindow int     `json:"usersPerWindow"`
	Writers        int     `json:"writers"`
	StateBytes     float64 `json:"stateBytes"` // mean encoded state, as the loop writes it
	Commands       string  `json:"commands"`
	// Loop is the minimal client's run, WriteWindow statestore's.
	Loop        RedisRun `json:"loop"`
	WriteWindow RedisRun `json:"writeWindow"`
}

// RedisRun is one pass of writing windows.
type RedisRun struct {
	Users        int     `json:"users"`
	Windows      int     `json:"windows"`
	Seconds      float64 `json:"seconds"`
	UsersPerSec  float64 `json:"usersPerSec"`
	RedisCPUCore float64 `json:"redisCpuCores"`
}

// CassandraLimit is history's user_activity and user_status rows written by a minimal
// gocql writer: the same statements, grouped and packed as history packs them, with
// history's default concurrency.
type CassandraLimit struct {
	Keyspace      string             `json:"keyspace"`
	UserPrefix    string             `json:"userPrefix"`
	Users         int                `json:"users"`
	Concurrency   int                `json:"concurrency"`
	MaxStatements int                `json:"maxStatementsPerRequest"`
	MaxKeys       int                `json:"maxKeysPerRequest"`
	Rows          int64              `json:"rows"`
	RowsByTable   map[string]int64   `json:"rowsByTable"`
	Requests      int64              `json:"requests"`
	Failed        int64              `json:"failedRequests"`
	Seconds       float64            `json:"seconds"`
	RowsPerSec    float64            `json:"rowsPerSec"`
	WriteMs       Quantiles          `json:"writeMs"`
	CPU           map[string]float64 `json:"cpuCores"` // cassandra and bench, in cores over the run
	// Deleted says every partition written was deleted afterwards.
	Deleted bool `json:"deleted"`
}

// EchoLimit is an Echo handler that only decodes POST /status and answers 202, in
// bench's own process, stepped with loadgen's single-event load as the single steps are.
type EchoLimit struct {
	// MaxAcceptedEventsPerSec is what the last step that kept up accepted (0: none did);
	// PeakAcceptedEventsPerSec the most any step accepted.
	MaxOfferedEventsPerSec   float64    `json:"maxOfferedEventsPerSec"`
	MaxAcceptedEventsPerSec  float64    `json:"maxAcceptedEventsPerSec"`
	PeakAcceptedEventsPerSec float64    `json:"peakAcceptedEventsPerSec"`
	Steps                    []EchoStep `json:"steps"`
}

// EchoStep is one loadgen run against the bare handler.
type EchoStep struct {
	OfferedEventsPerSec  float64   `json:"offeredEventsPerSec"`
	AcceptedEventsPerSec float64   `json:"acceptedEventsPerSec"`
	FailedFraction       float64   `json:"failedFraction"`
	Ms                   Quantiles `json:"ms"`
	// LoadgenCores is loadgen's CPU over the run's wall time; LoadgenMachineShare that
	// over the machine's cores. BenchCores is bench's process, the handler included.
	LoadgenCores        float64 `json:"loadgenCores"`
	LoadgenMachineShare float64 `json:"loadgenMachineShare"`
	BenchCores          float64 `json:"benchCores"`
	KeptUp              bool    `json:"keptUp"`
	Raw                 string  `json:"raw"`
}

// LimitRatio is one stage of Pulse against its engine's limit.
type LimitRatio struct {
	ID         string  `json:"id"`
	Stage      string  `json:"stage"`
	Pulse      string  `json:"pulse"` // what Pulse's figure is
	Limit      string  `json:"limit"` // what the limit is
	Unit       string  `json:"unit"`
	Measured   bool    `json:"measured"`
	PulseValue float64 `json:"pulseValue"`
	LimitValue float64 `json:"limitValue"`
	Ratio      float64 `json:"ratio"`
	Note       string  `json:"note,omitempty"`
}

// limitRatios pairs each stage's Pulse figure with its limit. A ratio is measured only
// when both sides are, and the limit is above 0.
func limitRatios(r *Results) []LimitRatio {
	nan := math.NaN()
	pick := func(ok bool, v float64) float64 {
		if ok {
			return v
		}
		return nan
	}
	l := r.Limits
	if l == nil {
		l = &LimitsResult{}
	}
	var out []LimitRatio
	add := func(x LimitRatio, p, lim float64) {
		if !math.IsNaN(p) && !math.IsNaN(lim) && lim > 0 && !math.IsInf(p, 0) {
			x.Measured, x.PulseValue, x.LimitValue, x.Ratio = true, p, lim, p/lim
		} else {
			if !math.IsNaN(p) {
				x.PulseValue = p
			}
			if !math.IsNaN(lim) {
				x.LimitValue = lim
			}
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
	batched := nan
	if r.Batched != nil {
		batched = r.Batched.MaxAcceptedEventsPerSec
	}
	add(LimitRatio{ID: "batched-vs-kafka", Stage: "ingest → Kafka → aggregator → Redis, batched",
		Pulse: "events/s accepted at the highest batched step that kept up", Limit: "records/s of Kafka's ProducerPerformance, same record size, acks=all",
		Unit: "events/s", Note: floor(r.Batched)}, batched, pick(l.Kafka != nil, fieldOr(l.Kafka, func(k *KafkaLimit) float64 { return k.RecordsPerSec })))
	single := nan
	if r.Single != nil {
		single = r.Single.MaxAcceptedEventsPerSec
	}
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
		Unit: "events/s", Note: echoNote}, single, echo)
	hist := nan
	var histNote string
	if r.History != nil {
		hist = r.History.RowsPerSec
		histNote = fmt.Sprintf("history at the batched step of %s events/s", num(r.History.AtOfferedEventsPerSec))
		if r.History.LagRecords <= lagGrowthFloor {
			histNote += "; it had caught up by the step's end, so the offered load set its rate: a floor of what it can write"
		}
	}
	add(LimitRatio{ID: "history-vs-gocql", Stage: "history → Cassandra",
		Pulse: "rows/s history wrote (every table)", Limit: "rows/s of a minimal gocql writer of user_activity and user_status",
		Unit: "rows/s", Note: histNote}, hist, pick(l.Cassandra != nil, fieldOr(l.Cassandra, func(c *CassandraLimit) float64 { return c.RowsPerSec })))
	loop := pick(l.Redis != nil, fieldOr(l.Redis, func(x *RedisLimit) float64 { return x.Loop.UsersPerSec }))
	ww := nan
	if l.Redis != nil && l.Redis.WriteWindow.Users > 0 {
		ww = l.Redis.WriteWindow.UsersPerSec
	}
	add(LimitRatio{ID: "writewindow-vs-redis", Stage: "aggregator's window write → Redis",
		Pulse: "users/s through statestore.WriteWindow (the aggregator's write), same windows", Limit: "users/s of a minimal pipelined go-redis loop writing the same keys",
		Unit: "users/s"}, ww, loop)
	rebuild := nan
	if r.Rebuild != nil {
		rebuild = r.Rebuild.UsersPerSecond
	}
	add(LimitRatio{ID: "rebuild-vs-redis", Stage: "aggregator folding the log into Redis (rebuild)",
		Pulse: "users/s registered by the aggregators rebuilding every shard", Limit: "users/s of the minimal go-redis loop",
		Unit: "users/s", Note: "the rebuild reads and folds every record of the log, about 20 per user; the loop only writes"}, rebuild, loop)
	return out
}

// fieldOr is f(p), or NaN for a nil p.
func fieldOr[T any](p *T, f func(*T) float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return f(p)
}

// ratioOf finds a ratio by id.
func ratioOf(rs []LimitRatio, id string) (LimitRatio, bool) {
	for _, x := range rs {
		if x.ID == id {
			return x, true
		}
	}
	return LimitRatio{}, false
}

// ratioTargets are the targets stated against the limits.
func ratioTargets(rs []LimitRatio) []Target {
	val := func(id string) (float64, string) {
		x, ok := ratioOf(rs, id)
		if !ok || !x.Measured {
			return math.NaN(), ""
		}
		note := fmt.Sprintf("%s of %s %s", num(x.PulseValue), num(x.LimitValue), x.Unit)
		if x.Note != "" {
			note += "; " + x.Note
		}
		return x.Ratio, note
	}
	b, bn := val("batched-vs-kafka")
	s, sn := val("single-vs-echo")
	h, hn := val("history-vs-gocql")
	return []Target{
		judged(Target{ID: "batched-vs-kafka", What: "batched ingest → Redis ÷ Kafka's own producer rate for the same records", Op: ">=", Threshold: 0.5, Unit: "ratio"}, b, bn),
		judged(Target{ID: "single-vs-echo", What: "one event per POST ÷ a bare Echo handler under the same load generator", Op: ">=", Threshold: 0.5, Unit: "ratio"}, s, sn),
		judged(Target{ID: "history-vs-gocql", What: "history rows/s ÷ a minimal gocql writer's", Op: ">=", Threshold: 0.7, Unit: "ratio"}, h, hn),
	}
}

// limits runs every limit; one that fails is noted and the others still run.
func (b *bench) limits(ctx context.Context) (*LimitsResult, error) {
	res := &LimitsResult{}
	for _, part := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"Kafka's producer", func(ctx context.Context) (err error) { res.Kafka, err = b.kafkaLimit(ctx); return err }},
		{"Redis window writes", func(ctx context.Context) (err error) { res.Redis, err = b.redisLimit(ctx); return err }},
		{"Cassandra rows", func(ctx context.Context) (err error) { res.Cassandra, err = b.cassandraLimit(ctx); return err }},
		{"a bare Echo handler", func(ctx context.Context) (err error) { res.Echo, err = b.echoLimit(ctx); return err }},
	} {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		fmt.Fprintf(b.out, "    limit: %s\n", part.name)
		start := time.Now()
		if err := part.run(ctx); err != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			b.note("limits: %s not measured: %v", part.name, err)
			continue
		}
		fmt.Fprintf(b.out, "      (%.0f s)\n", time.Since(start).Seconds())
	}
	return res, nil
}

// pct prints a fraction as a percentage: 0.5 → 50%.
func pct(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	if v != 0 && math.Abs(v) < 0.01 {
		return fmt.Sprintf("%.2f%%", 100*v)
	}
	return fmt.Sprintf("%.0f%%", 100*v)
}

// limits renders the limits phase and Pulse ÷ limit for each stage.
func (m *markdown) limits(r *Results) {
	m.p("## Pulse against the engines' own limits\n\n")
	m.p("Each limit is the engine alone, on the same servers in the same run, doing work of the same shape as Pulse's stage. The machine is shared by everything, so a limit is what the engine did beside the rest of the stack at rest, not on a machine of its own.\n\n")
	if len(r.Ratios) > 0 {
		m.p("| stage | Pulse | limit | Pulse ÷ limit | Pulse's figure | the limit |\n|---|---|---|---|---|---|\n")
		for _, x := range r.Ratios {
			pv, lv, ratio := "not measured", "not measured", "not measured"
			if x.PulseValue > 0 {
				pv = num(x.PulseValue) + " " + x.Unit
			}
			if x.LimitValue > 0 {
				lv = num(x.LimitValue) + " " + x.Unit
			}
			if x.Measured {
				ratio = "**" + pct(x.Ratio) + "**"
			}
			what := x.Pulse
			if x.Note != "" {
				what += " (" + x.Note + ")"
			}
			m.p("| %s | %s | %s | %s | %s | %s |\n", x.Stage, pv, lv, ratio, what, x.Limit)
		}
		m.p("\n")
	}
	l := r.Limits
	if l == nil {
		return
	}
	if k := l.Kafka; k != nil {
		m.p("**Kafka**: `org.apache.kafka.tools.ProducerPerformance` (%s), unthrottled, %s B per record (a presence.events record's key, schema header and %s B protobuf value), %d partitions × %d replicas, `%s`: **%s records/s, %.2f MB/s**, average latency %s, max %s, over %d report windows (%.1f s) after %d of warm-up. Keys: %s. Kafka's CPU meanwhile: %.2f cores; the tool's JVM: %.1f CPU seconds. Output: `%s`.\n\n",
			k.Tool, sig(k.RecordBytes), sig(k.ValueBytes), k.Partitions, k.Replicas, strings.Join(k.Props[1:], " "), num(k.RecordsPerSec), k.MBPerSec,
			fmtMs(k.AvgLatencyMs, 1), fmtMs(k.MaxLatencyMs, 1), k.Windows, k.Seconds, perfWarmWindows, k.Keys, k.KafkaCPUCores, k.CPUSeconds, k.Raw)
	}
	if x := l.Redis; x != nil {
		m.p("**Redis**: windows of %d users of one shard (%d shards, %d writers, %s B states), as the aggregator writes them. Minimal pipelined go-redis loop (%s): **%s users/s** (%s users in %.1f s, Redis %.2f cores). The same windows through `statestore.WriteWindow` (one Lua script call, guarded by the shard's offset): %s users/s (%s users in %.1f s, Redis %.2f cores).\n\n",
			x.UsersPerWindow, x.Shards, x.Writers, sig(x.StateBytes), x.Commands, num(x.Loop.UsersPerSec), num(float64(x.Loop.Users)), x.Loop.Seconds, x.Loop.RedisCPUCore,
			num(x.WriteWindow.UsersPerSec), num(float64(x.WriteWindow.Users)), x.WriteWindow.Seconds, x.WriteWindow.RedisCPUCore)
	}
	if c := l.Cassandra; c != nil {
		m.p("**Cassandra**: a minimal gocql writer of history's user_activity inserts and user_status updates (internal/stores/historystore's statements, heartbeats without an activity row as history's default), %d users under `%s` in keyspace %s, packed as history packs them (≤ %d statements and ≤ %d partition keys per unlogged batch), %d requests in flight: **%s rows/s** (%s user_activity, %s user_status rows in %.1f s; %d requests, %d failed; request p50 %s, p99 %s; Cassandra %.2f cores, bench %.2f).\n\n",
			c.Users, c.UserPrefix, c.Keyspace, c.MaxStatements, c.MaxKeys, c.Concurrency, num(c.RowsPerSec), num(float64(c.RowsByTable["user_activity"])),
			num(float64(c.RowsByTable["user_status"])), c.Seconds, c.Requests, c.Failed, fmtMs(c.WriteMs.P50, c.WriteMs.Count), fmtMs(c.WriteMs.P99, c.WriteMs.Count),
			c.CPU["cassandra"], c.CPU["bench"])
		if c.Deleted {
			m.p("Every partition it wrote was deleted afterwards.\n\n")
		}
	}
	if e := l.Echo; e != nil {
		m.p("**Bare Echo handler** (decodes the POST /status body, answers 202; in bench's process), under loadgen's single-event load:\n\n")
		m.p("| offered ev/s | accepted ev/s | failed | p50 | p99 | loadgen cores | loadgen share of the machine | bench cores (handler) | result |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, s := range e.Steps {
			res := "kept up"
			if !s.KeptUp {
				res = "**fell behind**"
			}
			m.p("| %s | %s | %.2f%% | %s | %s | %.2f | %s | %.2f | %s |\n", num(s.OfferedEventsPerSec), num(s.AcceptedEventsPerSec), 100*s.FailedFraction,
				fmtMs(s.Ms.P50, s.Ms.Count), fmtMs(s.Ms.P99, s.Ms.Count), s.LoadgenCores, pct(s.LoadgenMachineShare), s.BenchCores, res)
		}
		if last := e.Steps[len(e.Steps)-1]; last.KeptUp {
			m.p("\nEvery step kept up: %s events/s is a floor of the handler's rate, and Pulse ÷ it a ceiling of the ratio.\n", num(e.MaxAcceptedEventsPerSec))
		}
		m.p("\n")
	}
}
