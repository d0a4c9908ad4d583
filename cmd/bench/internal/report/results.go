// Package report is results.json, results.md and what they judge: the result types
// (their JSON names are the stable keys), the step verdicts, the targets and Pulse ÷
// each engine's limit.
package report

import (
	"math"
	"time"

	"github.com/pulse-presence/pulse/cmd/internal/loadreport"
)

// Quantiles are loadgen's latency summaries, which results.json keeps as they are.
type Quantiles = loadreport.Quantiles

// Results is results.json: every number bench measured, under names that stay
// stable so runs can be compared. Rates are per second, latencies in milliseconds,
// memory in bytes, CPU in seconds; a key absent (or null) was not measured.
type Results struct {
	Version    int               `json:"version"`
	StartedAt  time.Time         `json:"startedAt"`
	FinishedAt time.Time         `json:"finishedAt"`
	Quick      bool              `json:"quick"`
	Machine    Machine           `json:"machine"`
	Config     map[string]string `json:"config"`
	Processes  []ProcessInfo     `json:"processes"`

	Batched *ModeResult `json:"batched,omitempty"`
	// BatchedWithoutHistory is the batched steps again with history paused: the live
	// path's capacity when Cassandra's writer takes nothing from the machine.
	BatchedWithoutHistory *ModeResult    `json:"batchedWithoutHistory,omitempty"`
	Single                *ModeResult    `json:"single,omitempty"`
	Half                  *StepResult    `json:"half,omitempty"`
	History               *HistoryCheck  `json:"history,omitempty"`
	Scale                 *ScaleResult   `json:"scale,omitempty"`
	Rebuild               *RebuildResult `json:"rebuild,omitempty"`
	Limits                *LimitsResult  `json:"limits,omitempty"`
	// ScaleOut is one aggregator against two on each topology.
	ScaleOut *ScaleOutResult `json:"scaleOut,omitempty"`
	// Present is many present sockets on one query instance.
	Present *PresentResult `json:"present,omitempty"`
	// Groups is a large group and many small rooms: counts, pages, memory, writes.
	Groups *GroupsResult `json:"groups,omitempty"`
	// Webhooks is presence changes delivered by the notifier to two endpoints served by
	// bench: latency, changes/s, every change delivered.
	Webhooks *WebhooksResult `json:"webhooks,omitempty"`
	// Ratios are Pulse ÷ its engine's limit for each stage, measured or not.
	Ratios []LimitRatio `json:"ratios"`

	Profiles []string `json:"profiles"`
	Targets  []Target `json:"targets"`
	Notes    []string `json:"notes"`
}

// Machine is where the run happened.
type Machine struct {
	CPUs        int    `json:"cpus"`
	MemoryBytes uint64 `json:"memoryBytes"`
	GoVersion   string `json:"goVersion"`
	GitCommit   string `json:"gitCommit"`
	GitDirty    bool   `json:"gitDirty"`
	RedisAOF    string `json:"redisAppendonly"`
}

// ProcessInfo is one process whose CPU time was measured.
type ProcessInfo struct {
	Name           string `json:"name"`
	PID            int    `json:"pid"`
	StartedByBench bool   `json:"startedByBench"`
	RSSBytesAtEnd  int64  `json:"rssBytesAtEnd"`
}

// ModeResult is one ingest mode's stepping.
type ModeResult struct {
	Mode      string `json:"mode"` // batched or single
	BatchSize int    `json:"batchSize"`
	// MaxOfferedEventsPerSec is the last step that kept up (0: none did);
	// MaxAcceptedEventsPerSec what ingest accepted in it.
	MaxOfferedEventsPerSec  float64      `json:"maxOfferedEventsPerSec"`
	MaxAcceptedEventsPerSec float64      `json:"maxAcceptedEventsPerSec"`
	Steps                   []StepResult `json:"steps"`
}

// StepResult is one loadgen run at one offered rate and what the pipeline did meanwhile.
type StepResult struct {
	Mode                 string  `json:"mode"` // batched, single or half
	OfferedEventsPerSec  float64 `json:"offeredEventsPerSec"`
	AcceptedEventsPerSec float64 `json:"acceptedEventsPerSec"`
	MeasuredSeconds      float64 `json:"measuredSeconds"`
	Requests             uint64  `json:"requests"`
	FailedRequests       uint64  `json:"failedRequests"`
	FailedFraction       float64 `json:"failedFraction"`
	// IngestMs is the ingest workload's 2xx latency from each request's intended start.
	IngestMs  Quantiles    `json:"ingestMs"`
	Freshness Freshness    `json:"freshness"`
	Reads     []ReadResult `json:"reads"`

	AggregatorLag LagSummary `json:"aggregatorLagRecords"`
	// AggregatorEventsPerSec is the aggregator's folded events over the CPU window.
	AggregatorEventsPerSec float64    `json:"aggregatorEventsPerSec"`
	History                HistoryObs `json:"history"`
	// Internals are quantiles of the services' own histograms over the step (bucket
	// bounded), to tell where latency went; absent when a service did not export them.
	Internals map[string]float64 `json:"internals"`

	// CPU is per process over the CPU window: from just before loadgen started to
	// when the aggregator had caught up after it (or -settle passed), divided by the
	// events ingest accepted in that window (warm-up and probes included).
	CPUWindowSeconds float64            `json:"cpuWindowSeconds"`
	EventsInWindow   float64            `json:"eventsInWindow"`
	CPU              map[string]ProcCPU `json:"cpu"`
	Machine          MachineCPU         `json:"machine"`
	// LoadgenMachineShare is the load generator's CPU over the window as a share of
	// every core of the machine: the harness's part, not the pipeline's.
	LoadgenMachineShare float64 `json:"loadgenMachineShare"`

	SettleSeconds float64  `json:"settleSeconds"`
	Settled       bool     `json:"settled"`
	KeptUp        bool     `json:"keptUp"`
	Reasons       []string `json:"reasons"`
	Raw           string   `json:"raw"` // loadgen's report, relative to the results folder
}

// Freshness is from a status write's 2xx to the first read showing it.
type Freshness struct {
	Probes   uint64    `json:"probes"`
	Seen     uint64    `json:"seen"`
	Timeouts uint64    `json:"timeouts"`
	Ms       Quantiles `json:"ms"`
}

// ReadResult is one read workload.
type ReadResult struct {
	Name         string    `json:"name"`
	Endpoint     string    `json:"endpoint"`
	TargetRate   float64   `json:"targetRate"`
	AchievedRate float64   `json:"achievedRate"`
	OK           uint64    `json:"ok"`
	Failed       uint64    `json:"failed"`
	Ms           Quantiles `json:"ms"`
}

// StatusRead is the step's GET /status/{id} workload ("read"), when it measured any.
func (s StepResult) StatusRead() (ReadResult, bool) {
	for _, rd := range s.Reads {
		if rd.Name == "read" && rd.Ms.Count > 0 {
			return rd, true
		}
	}
	return ReadResult{}, false
}

// ProcCPU is one process's CPU use over a step's CPU window.
type ProcCPU struct {
	Seconds float64 `json:"seconds"`
	// Cores is Seconds over the window's length: 1 is one core busy throughout.
	Cores float64 `json:"cores"`
	// SecondsPerEvent is Seconds over the events accepted in the window.
	SecondsPerEvent float64 `json:"secondsPerEvent"`
}

// MachineCPU is the whole machine's CPU use over a window, in cores.
type MachineCPU struct {
	Known     bool    `json:"known"`
	BusyCores float64 `json:"busyCores"`
	// OtherCores is busy time of processes bench does not watch (other work on the
	// machine, the kernel's own threads); StolenCores what the hypervisor withheld.
	OtherCores  float64 `json:"otherCores"`
	StolenCores float64 `json:"stolenCores"`
}

// HistoryObs is what the history writer did during a step.
type HistoryObs struct {
	RowsPerSec  float64            `json:"rowsPerSec"`
	RowsByTable map[string]float64 `json:"rowsByTable"`
	// LagRecords is pulse-history's lag (both topics) at the end of the measured
	// window; LagRecordsStart at its start, so a backlog from before shows.
	LagRecordsStart int64 `json:"lagRecordsStart"`
	LagRecords      int64 `json:"lagRecords"`
	MaxLagRecords   int64 `json:"maxLagRecords"`
	// CommitLagSeconds are quantiles of the age of each committed batch's last record
	// (pulse_history_commit_lag_seconds over the step), the lag in time; bucket-bounded.
	CommitLagP50Seconds float64 `json:"commitLagP50Seconds"`
	CommitLagP99Seconds float64 `json:"commitLagP99Seconds"`
	CommitLagKnown      bool    `json:"commitLagKnown"`
}

// HistoryCheck is history at the batched step closest to -history-at.
type HistoryCheck struct {
	AtOfferedEventsPerSec float64 `json:"atOfferedEventsPerSec"`
	AcceptedEventsPerSec  float64 `json:"acceptedEventsPerSec"`
	RowsPerSec            float64 `json:"rowsPerSec"`
	LagRecords            int64   `json:"lagRecords"`
	LagKnown              bool    `json:"lagKnown"`
	LagSeconds            float64 `json:"lagSeconds"`
	LagSource             string  `json:"lagSource"`
	// RowsByTable is rows/s per history table at that step.
	RowsByTable map[string]float64 `json:"rowsByTable,omitempty"`
	// HistoryCPUPerEvent and CassandraCPUPerEvent are the CPU seconds each process
	// used per accepted event over the step (NaN-free: 0 when not measured).
	HistoryCPUPerEvent   float64 `json:"historyCpuPerEvent"`
	CassandraCPUPerEvent float64 `json:"cassandraCpuPerEvent"`
}

// ScaleResult is counts and memory at scale, Pulse's layout against the baseline.
type ScaleResult struct {
	Users          int     `json:"users"`
	Online         int     `json:"online"`
	OnlineFraction float64 `json:"onlineFraction"`
	Shards         int     `json:"shards"`
	Pulse          Layout  `json:"pulse"`
	Baseline       Layout  `json:"baseline"`
	// Ratios are baseline ÷ Pulse, for latencies and memory alike: above 1 favours Pulse.
	CountsP50Speedup      float64 `json:"countsP50Speedup"`
	CountsP99Speedup      float64 `json:"countsP99Speedup"`
	OnlineMemoryRatio     float64 `json:"onlineMemoryRatio"`
	RegisteredMemoryRatio float64 `json:"registeredMemoryRatio"`
}

// Layout is one layout's bulk load, memory and counts.
type Layout struct {
	Prefix      string  `json:"prefix"`
	LoadSeconds float64 `json:"loadSeconds"`
	// UsedMemoryBytes is INFO's used_memory after the load minus before it.
	UsedMemoryBytes        int64   `json:"usedMemoryBytes"`
	BytesPerRegisteredUser float64 `json:"bytesPerRegisteredUser"`
	// OnlineStructureBytes is the structure that answers "who is online": the online
	// bitmaps (MEMORY USAGE, summed over shards) or the online sorted set.
	OnlineStructureBytes int64   `json:"onlineStructureBytes"`
	BytesPerOnlineUser   float64 `json:"bytesPerOnlineUser"`
	// Parts breaks UsedMemoryBytes down by key family (MEMORY USAGE, exact or sampled).
	Parts map[string]int64 `json:"parts"`
	// Counts is the latency of one counts read as a request pays it; CountsCall says
	// what it is.
	CountsCall string    `json:"countsCall"`
	CountsMs   Quantiles `json:"countsMs"`
	// RedisCounts is the Redis read behind a cached count (Pulse only).
	RedisCountsCall string    `json:"redisCountsCall,omitempty"`
	RedisCountsMs   Quantiles `json:"redisCountsMs"`
	// CountsOnline is what the counts read returned for online users, as a check.
	CountsOnline uint64 `json:"countsOnline"`
	// CountsMachine is the machine's CPU use while counts were timed.
	CountsMachine MachineCPU `json:"countsMachine"`
}

// Target is one of the targets, judged on this run.
type Target struct {
	ID        string  `json:"id"`
	What      string  `json:"what"`
	Op        string  `json:"op"` // ">=" or "<="
	Threshold float64 `json:"threshold"`
	Unit      string  `json:"unit"`
	Measured  bool    `json:"measured"`
	Value     float64 `json:"value"`
	Met       bool    `json:"met"`
	// Margin is how far the value is on the good side of the threshold, as a fraction
	// of it (0.25: 25% of headroom; −0.5: half the threshold short).
	Margin float64 `json:"margin"`
	Note   string  `json:"note,omitempty"`
}

// judge is t on v (NaN: not measured), with note as its context: Met and Margin
// filled in for a measured value.
func (t Target) judge(v float64, note string) Target {
	t.Note = note
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return t // JSON has no NaN: an unmeasured target keeps Value 0 and Measured false
	}
	t.Measured, t.Value = true, v
	switch t.Op {
	case ">=":
		t.Met = v >= t.Threshold
		t.Margin = (v - t.Threshold) / t.Threshold
	case "<=":
		t.Met = v <= t.Threshold
		t.Margin = (t.Threshold - v) / t.Threshold
	}
	return t
}

// LagSummary is the aggregator's lag over a measured window.
type LagSummary struct {
	Known bool  `json:"known"`
	Start int64 `json:"start"`
	End   int64 `json:"end"`
	Max   int64 `json:"max"`
}

// RebuildResult is the rebuild phase: every shard of the stack's state rebuilt from
// the log by the running aggregators, as after Redis lost it (docs/design.md
// guarantee 10), timed from the moment the shards' bookkeeping went.
type RebuildResult struct {
	Shards int `json:"shards"`
	// Records is how many records of presence.events the rebuild folded again.
	Records int64 `json:"records"`
	// Registered is the users in the state before and after (they must be equal).
	RegisteredBefore int64   `json:"registeredBefore"`
	RegisteredAfter  int64   `json:"registeredAfter"`
	Seconds          float64 `json:"seconds"`
	// UsersPerSecond is registered users written into Redis per second of rebuild;
	// RecordsPerSecond the log's records folded per second.
	UsersPerSecond   float64 `json:"usersPerSecond"`
	RecordsPerSecond float64 `json:"recordsPerSecond"`
}

// PresentResult is the present phase: Sockets present sockets on one query instance,
// each pinged every HeartbeatSeconds.
type PresentResult struct {
	Sockets          int     `json:"sockets"`
	HeartbeatSeconds float64 `json:"heartbeatSeconds"`
	// OpenSeconds is the time to open every socket, 64 at a time; OpenFailed those
	// that did not open.
	OpenSeconds float64 `json:"openSeconds"`
	OpenFailed  int64   `json:"openFailed"`
	// RSSBytesPerSocket and HeapBytesPerSocket are query's resident memory and Go heap
	// in use with every socket open, less before, per socket.
	RSSBytesPerSocket  float64 `json:"rssBytesPerSocket"`
	HeapBytesPerSocket float64 `json:"heapBytesPerSocket"`
	// Over WindowSeconds of steady state: heartbeats Kafka acknowledged per second
	// (ExpectedPerSecond = sockets ÷ interval), query's CPU per heartbeat and in
	// cores, the acknowledgement's latency.
	WindowSeconds         float64 `json:"windowSeconds"`
	HeartbeatsPerSecond   float64 `json:"heartbeatsPerSecond"`
	ExpectedPerSecond     float64 `json:"expectedPerSecond"`
	CPUMicrosPerHeartbeat float64 `json:"cpuMicrosPerHeartbeat"`
	QueryCores            float64 `json:"queryCores"`
	AckP50Ms              float64 `json:"ackP50Ms"`
	AckP99Ms              float64 `json:"ackP99Ms"`
	// Refused is the events refused (rate limited or not acknowledged) over the run.
	Refused int64 `json:"refused"`
	// Every socket closed at once: the time until each offline event was
	// acknowledged, and those events per second.
	OfflineSeconds   float64 `json:"offlineSeconds"`
	OfflinePerSecond float64 `json:"offlinePerSecond"`
}

// ScaleOutResult is the scaleout phase: the events/s one aggregator folds, and two
// sharing the consumer group, on each topology asked for.
type ScaleOutResult struct {
	// Events were produced once per topology, straight into a topic of the phase's
	// own, spread over Users users; each run folds all of them with a group and a
	// Redis prefix of its own.
	Events     int                `json:"events"`
	Users      int                `json:"users"`
	Topologies []ScaleOutTopology `json:"topologies"`
}

// ScaleOutTopology is one topology's runs.
type ScaleOutTopology struct {
	Topology   string `json:"topology"` // single or cluster
	Partitions int    `json:"partitions"`
	// Replication is the topic's replication factor (min.insync.replicas 2 when 3).
	Replication int `json:"replication"`
	RedisNodes  int `json:"redisNodes"`
	// StartedByBench: bench started the topology's servers for the phase and stopped
	// them after it.
	StartedByBench bool          `json:"startedByBench"`
	Runs           []ScaleOutRun `json:"runs"`
	// Speedup is the mean events/s of the runs with two aggregators ÷ that with one.
	Speedup float64 `json:"speedup"`
}

// ScaleOutRun is one fold of the whole topic by Aggregators members of one group.
type ScaleOutRun struct {
	Aggregators int `json:"aggregators"`
	// EventsPerSec is the records ÷ Seconds: a backlog's fold, start-up and the group's
	// join included. (A steady rate from the shards' progress would flatter two
	// members: while their group forms, each has already fetched and decoded much of
	// its partitions, and then writes them out in a burst.)
	EventsPerSec float64 `json:"eventsPerSec"`
	// FirstWriteSeconds is from the processes' start to the first window in Redis
	// (start-up and the group's join); Seconds to the last record folded.
	FirstWriteSeconds float64 `json:"firstWriteSeconds"`
	Seconds           float64 `json:"seconds"`
	// AggregatorCores is the CPU the aggregators used over Seconds, in cores;
	// MachineBusyCores the whole machine's.
	AggregatorCores  float64 `json:"aggregatorCores"`
	MachineBusyCores float64 `json:"machineBusyCores"`
}

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

// GroupsResult is the groups phase: Users registered users bulk-loaded into Redis
// under a prefix of the phase's own, then group memberships written through query's
// API and folded by an aggregator of the phase's own, both on a topic of the phase's
// own.
type GroupsResult struct {
	Users       int `json:"users"`
	OnlineUsers int `json:"onlineUsers"`
	Shards      int `json:"shards"`
	// Seeding says how the registered users' state was made; LoadSeconds is its time.
	Seeding     string  `json:"seeding"`
	LoadSeconds float64 `json:"loadSeconds"`
	// AggregatorStartSeconds is from the aggregator's start until a warm-up group of
	// one member in every shard was folded: its start reads every online user's state,
	// to arm their deadlines.
	AggregatorStartSeconds float64 `json:"aggregatorStartSeconds"`
	// Large is the one large group, Small the small rooms.
	Large GroupCase  `json:"large"`
	Small *GroupCase `json:"small,omitempty"`
	// Centrifugo is its presence_stats on a channel of as many presence entries as the
	// large group has members, when it was compared.
	Centrifugo *CentrifugoResult `json:"centrifugo,omitempty"`
	// CentrifugoP50Speedup and CentrifugoP99Speedup are Centrifugo's presence_stats ÷
	// the large group's HTTP count, p50 and p99 (0: not compared).
	CentrifugoP50Speedup float64 `json:"centrifugoP50Speedup"`
	CentrifugoP99Speedup float64 `json:"centrifugoP99Speedup"`
}

// GroupCase is one shape of group: Groups groups of MembersPerGroup members each.
type GroupCase struct {
	Groups          int `json:"groups"`
	MembersPerGroup int `json:"membersPerGroup"`
	// Members is every membership written; OnlineMembers those of online users.
	Members       int64 `json:"members"`
	OnlineMembers int64 `json:"onlineMembers"`
	// Write is how the memberships were written: Requests requests of at most
	// IDsPerRequest ids, Writers in flight.
	Write         string    `json:"write"`
	Requests      int       `json:"requests"`
	IDsPerRequest int       `json:"idsPerRequest"`
	Writers       int       `json:"writers"`
	WriteMs       Quantiles `json:"writeMs"`
	// AckedSeconds is from the first write sent to the last 202 (Kafka acknowledged
	// every member event); FoldedSeconds to the aggregator having folded them all.
	AckedSeconds       float64 `json:"ackedSeconds"`
	FoldedSeconds      float64 `json:"foldedSeconds"`
	AckedEventsPerSec  float64 `json:"ackedEventsPerSec"`
	FoldedEventsPerSec float64 `json:"foldedEventsPerSec"`
	// CPU per member event over the writes until folded, in microseconds.
	QueryCPUMicrosPerEvent      float64 `json:"queryCpuMicrosPerEvent"`
	AggregatorCPUMicrosPerEvent float64 `json:"aggregatorCpuMicrosPerEvent"`
	// Redis memory: MEMORY USAGE of the groups' member bitmaps, the growth of the
	// shards' group count hashes, and both per member; UsedMemoryBytes is INFO's
	// used_memory growth over the writes, less that of the clients' buffers, as a
	// check.
	BitmapBytes        int64   `json:"bitmapBytes"`
	CountHashBytes     int64   `json:"countHashBytes"`
	BytesPerMember     float64 `json:"bytesPerMember"`
	UsedMemoryBytes    int64   `json:"usedMemoryBytes"`
	UsedBytesPerMember float64 `json:"usedBytesPerMember"`
	// AggregatorHeapBytesPerMember is the growth of the aggregator's live Go heap
	// (after a forced collection) over the writes, per member: the groups' bitmaps
	// and its member -> groups index.
	AggregatorHeapBytesPerMember float64 `json:"aggregatorHeapBytesPerMember"`
	// CountMs is GET /v1/groups/{id}/online/count, sequential, over random groups of
	// the case; CountConcurrent the same from several readers at once; StoreCountMs
	// statestore.Store.GroupCounts in bench's process, the Redis read behind it.
	CountMs         Quantiles      `json:"countMs"`
	CountConcurrent ConcurrentRead `json:"countConcurrent"`
	StoreCountMs    Quantiles      `json:"storeCountMs"`
	// PageMs is GET /v1/groups/{id}/online?limit=PageLimit, walking the listing with
	// its cursors and starting again at its end (large group only); Walks the walks
	// completed, each checked to list every online member once.
	PageLimit int       `json:"pageLimit,omitempty"`
	PageMs    Quantiles `json:"pageMs"`
	PageUsers int64     `json:"pageUsers,omitempty"`
	Walks     int       `json:"walks,omitempty"`
	// ReadsMachine is the machine while the reads were timed; its others are
	// processes outside the stack's servers, the phase's services and bench.
	ReadsMachine MachineCPU `json:"readsMachine"`
}

// ConcurrentRead is Readers readers each calling as soon as its last call returned.
type ConcurrentRead struct {
	Readers     int       `json:"readers"`
	Calls       int       `json:"calls"`
	CallsPerSec float64   `json:"callsPerSec"`
	Ms          Quantiles `json:"ms"`
}

// CentrifugoResult is Centrifugo's server API presence_stats on one channel of
// Entries presence entries, written into its Redis engine's keys in its own format.
type CentrifugoResult struct {
	Version string `json:"version"`
	Binary  string `json:"binary"`
	// Redis is where its engine's Redis ran; Setup its non-default settings.
	Redis   string `json:"redis"`
	Setup   string `json:"setup"`
	Entries int    `json:"entries"`
	// Ms is the timed calls (after one untimed), each checked to count every entry.
	Ms         Quantiles `json:"ms"`
	NumClients int       `json:"numClients"`
	NumUsers   int       `json:"numUsers"`
	// RedisBytes is MEMORY USAGE of the channel's presence hash and expiry sorted set.
	RedisBytes    int64   `json:"redisBytes"`
	BytesPerEntry float64 `json:"bytesPerEntry"`
}

// WebhooksResult is the webhooks phase: the stack's notifier delivering presence.changes
// to two endpoints whose receivers run in bench, under batched ingest load.
type WebhooksResult struct {
	// OfferedEventsPerSec is the load's batched rate; RateSource says where it came
	// from. AcceptedEventsPerSec is what ingest accepted of it, over LoadSeconds.
	OfferedEventsPerSec  float64 `json:"offeredEventsPerSec"`
	RateSource           string  `json:"rateSource"`
	AcceptedEventsPerSec float64 `json:"acceptedEventsPerSec"`
	LoadSeconds          float64 `json:"loadSeconds"`
	// ReloadSeconds is from writing the endpoints file to the notifier's
	// pulse_notifier_endpoints showing the phase's endpoints.
	ReloadSeconds float64 `json:"reloadSeconds"`
	// Changes is the records of presence.changes from just before the load until the
	// aggregator had folded it (SettleSeconds after its end): every view's changes.
	// ChangeIDs is the distinct change ids among them; Undecodable records that are
	// not changes (the notifier skips them).
	Changes       int64   `json:"changes"`
	ChangeIDs     int64   `json:"changeIds"`
	Undecodable   int64   `json:"undecodable"`
	SettleSeconds float64 `json:"settleSeconds"`
	// NotifierCores is the notifier's CPU from the load's start until bench had seen
	// every change delivered (or stopped waiting), in cores; NotifierCPUMicrosPerChange
	// its CPU time ÷ the changes delivered to both endpoints.
	NotifierCores              float64           `json:"notifierCores"`
	NotifierCPUMicrosPerChange float64           `json:"notifierCpuMicrosPerChange"`
	Endpoints                  []WebhookEndpoint `json:"endpoints"`
}

// WebhookEndpoint is what one endpoint's receiver got.
type WebhookEndpoint struct {
	ID             string  `json:"id"`
	View           string  `json:"view"` // public or operator
	MaxChanges     int     `json:"maxChanges"`
	MaxWaitSeconds float64 `json:"maxWaitSeconds"`
	// Expected is the window's change ids the endpoint's view shows; Delivered those
	// its receiver got (each once however often it came), Missing the others.
	// Duplicates is the changes received again after their first delivery; Outside
	// the distinct changes received that are not of the window (produced before it,
	// or after: timeouts of the load's users, say).
	Expected   int64 `json:"expected"`
	Delivered  int64 `json:"delivered"`
	Missing    int64 `json:"missing"`
	Duplicates int64 `json:"duplicates"`
	Outside    int64 `json:"outside"`
	// MissingIDs are a few of the missing ids, to look for.
	MissingIDs []string `json:"missingIds,omitempty"`
	// Requests is the POSTs received; InvalidSignatures those whose Pulse-Signature
	// did not verify with the endpoint's secret, Malformed those whose body was not a
	// batch for the endpoint (both answered 400 and not counted as delivered).
	Requests          int64   `json:"requests"`
	InvalidSignatures int64   `json:"invalidSignatures"`
	Malformed         int64   `json:"malformed"`
	ChangesPerRequest float64 `json:"changesPerRequest"`
	// LatencyMs is from each expected change's record timestamp in presence.changes to
	// its receiver's first receipt of it.
	LatencyMs Quantiles `json:"latencyMs"`
	// NotifierP50Ms and NotifierP99Ms are the notifier's own
	// pulse_notifier_latency_seconds over the phase (bucket bounded; to its 2xx).
	NotifierP50Ms float64 `json:"notifierP50Ms"`
	NotifierP99Ms float64 `json:"notifierP99Ms"`
	// ProducedPerSec is the expected changes produced during the load ÷ its length;
	// DeliveredPerSec the expected changes first received during the load ÷ its length.
	ProducedPerSec  float64 `json:"producedPerSec"`
	DeliveredPerSec float64 `json:"deliveredPerSec"`
	// LastDeliverySeconds is from the load's end until the last expected change was
	// first received (of those received: Missing never were). The window's last
	// changes may come after the load, as the aggregator folds its end.
	LastDeliverySeconds float64 `json:"lastDeliverySeconds"`
}
