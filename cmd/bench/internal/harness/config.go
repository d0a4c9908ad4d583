package harness

import (
	"crypto/tls"
	"net/http"
	"time"

	"github.com/pulse-presence/pulse/cmd/bench/internal/report"
)

// Config is the parsed command line (cmd/bench's flags say what each field is).
type Config struct {
	Root, Home, OutDir string // the repository, PULSE_HOME, results' parent folder
	Quick              bool
	Phases             map[string]bool
	// Services says some phase asked for runs on the stack's services (a Phase
	// without OwnProcesses): Open starts those that do not answer, and the warm-up
	// and the waits for idle consumers run.
	Services bool

	Ports                            Ports
	Keyspace, Prefix                 string // of the services bench starts
	AggGroup, HistGroup              string
	Events, Changes                  string // topics
	HTTPS                            bool   // ingest and query serve TLS
	CAFile                           string
	TLS                              *tls.Config
	Users, BatchSize                 int
	BatchRates, SingleRates          []float64
	StepTime, SingleTime             time.Duration
	Warmup, Settle, IdleWait         time.Duration
	WithoutHistory                   bool // run the batched steps again with history paused
	WarmupRun, LagEvery              time.Duration
	StepReads, FreshRate             float64
	FreshPoll                        time.Duration
	Crit                             report.Criteria
	HalfTime                         time.Duration
	HalfReads, HalfBatchReads        float64
	HalfCounts, HalfFresh            float64
	ReadBatch                        int
	HistoryAt                        float64
	ScaleUsers                       int
	ScaleOnline                      float64
	ScaleCalls, ScaleWindow          int
	ScaleWorkers, ScaleShards        int
	ScaleOutTopologies               []string
	ScaleOutEvents, ScaleOutUsers    int
	ScaleOutLimit                    time.Duration
	ScaleOutRounds                   int
	PresentSockets                   int
	PresentHeartbeat, PresentWindow  time.Duration
	LimitsTime                       time.Duration
	LimitsEchoRates                  []float64
	LimitsRedisUsers, LimitsCQLUsers int
	Groups                           GroupsConfig
	Webhooks                         WebhooksConfig
	Profile                          bool
	ProfileTime                      time.Duration
	KeepServices                     bool
	Flags                            map[string]string // every flag's final value, for results.json
}

// GroupsConfig is the groups phase's flags (cmd/bench's -groups-* flags say what each
// field is).
type GroupsConfig struct {
	Users, Members, Online  int
	Batch, Writers, Readers int
	Rooms, RoomSize, Calls  int
	Limit                   time.Duration
	Centrifugo              string
	CentrifugoEntries       int
	CentrifugoCalls         int
}

// WebhooksConfig is the webhooks phase's flags (cmd/bench's -webhooks-* flags say what
// each field is).
type WebhooksConfig struct {
	Rate          float64 // events/s when no batched step ran in this run
	Time, Wait    time.Duration
	View          string // public or operator, both endpoints
	Reload        time.Duration
	NotifierGroup string
}

// Ports of the stack and the services: stack.sh's, moved by the same PULSE_*_PORT.
type Ports struct {
	Ingest, Query, Aggregator, History int
	Notifier                           int
	Kafka, Redis, Cassandra            int
}

func (p Ports) Service(name string) int {
	return map[string]int{"ingest": p.Ingest, "query": p.Query, "aggregator": p.Aggregator, "history": p.History, "notifier": p.Notifier}[name]
}

// Transport is bench's HTTP transport: no proxy (bench measures Pulse, never a proxy
// in between), trusting the system's roots and -ca.
func (c Config) Transport() *http.Transport {
	return &http.Transport{Proxy: nil, TLSClientConfig: c.TLS}
}
