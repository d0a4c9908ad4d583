package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"time"
)

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

// judge fills in Met and Margin for a measured value.
func (t Target) judge(v float64) Target {
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

// writeJSON writes r to path.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
