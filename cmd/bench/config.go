package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pulse-presence/pulse/cmd/bench/internal/harness"
	"github.com/pulse-presence/pulse/cmd/internal/cli"
	"github.com/pulse-presence/pulse/cmd/internal/trust"
	pulseports "github.com/pulse-presence/pulse/internal/platform/ports"
)

// rates is a flag holding a comma-separated list of rates.
type rates []float64

func (r *rates) String() string {
	parts := make([]string, len(*r))
	for i, v := range *r {
		parts[i] = strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strings.Join(parts, ",")
}

func (r *rates) Set(s string) error {
	var out []float64
	for part := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return fmt.Errorf("%q: want a rate above 0", part)
		}
		out = append(out, v)
	}
	if !slices.IsSorted(out) {
		return errors.New("rates must be in increasing order")
	}
	*r = out
	return nil
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// quickValues are the defaults -quick changes, by flag name: a run of about three
// minutes that exercises every phase with fewer, shorter steps and 1M users.
var quickValues = map[string]string{
	"batch-rates":    "5000,10000,20000,35000,50000",
	"single-rates":   "1000,2000,5000,10000",
	"step":           "8s",
	"single-step":    "6s",
	"warmup":         "2s",
	"settle":         "10s",
	"idle-wait":      "60s",
	"warmup-run":     "5s",
	"half":           "10s",
	"scale-users":    "1000000",
	"present-window": "15s",
	"scale-calls":    "2000",
	"profile-time":   "5s",
	"lag-interval":   "1s",
	"fresh-rate":     "20",
	"half-fresh":     "40",
	"half-count":     "20",
	"half-statuses":  "50",
	"limits-time":    "10s",
	"limits-echo":    "2000,5000,10000,20000,40000",
	// The cluster topology takes a minute or more to start: a quick run stays on the
	// single one unless asked.
	"scaleout-topologies": "single",
	"scaleout-events":     "300000",
	// A tenth of the groups phase's sizes: 1M registered users, a group of 100,000.
	"groups-users":   "1000000",
	"groups-members": "100000",
	"groups-online":  "30000",
	"groups-rooms":   "1000",
	"groups-calls":   "500",
	"webhooks-time":  "10s",
}

func parseFlags(args []string, stderr io.Writer) (harness.Config, error) {
	cfg := harness.Config{
		BatchRates:  rates{5000, 10000, 20000, 35000, 50000, 75000, 100000, 125000},
		SingleRates: rates{1000, 2000, 5000, 10000, 15000, 20000, 25000},

		LimitsEchoRates: rates{5000, 10000, 20000, 40000, 80000, 160000},
	}
	fs := cli.FlagSet("bench", "Measures Pulse on the local stack; see `go doc ./cmd/bench` and docs/performance.md.", stderr)
	fs.StringVar(&cfg.Root, "root", ".", "the repository's top `folder`")
	fs.StringVar(&cfg.Home, "pulse-home", os.Getenv("PULSE_HOME"), "the stack's `folder` (default <root>/.pulse, or $PULSE_HOME)")
	fs.StringVar(&cfg.OutDir, "out", "bench-results", "results go to `folder`/<UTC time>/")
	fs.BoolVar(&cfg.Quick, "quick", false, "a ~3 minute run: fewer and shorter steps, 1M users at scale (flags given explicitly still win)")
	phases := fs.String("phases", strings.Join(allPhases, ","), "phases to run, of "+strings.Join(allPhases, ","))

	cfg.Ports = harness.Ports{
		Ingest: envInt("PULSE_INGEST_PORT", pulseports.Ingest), Query: envInt("PULSE_QUERY_PORT", pulseports.Query),
		Aggregator: envInt("PULSE_AGGREGATOR_PORT", pulseports.Aggregator), History: envInt("PULSE_HISTORY_PORT", pulseports.History),
		Notifier: envInt("PULSE_NOTIFIER_PORT", pulseports.Notifier), Kafka: envInt("PULSE_KAFKA_PORT", pulseports.Kafka),
		Redis: envInt("PULSE_REDIS_PORT", pulseports.Redis), Cassandra: envInt("PULSE_CASSANDRA_PORT", pulseports.Cassandra),
	}
	fs.StringVar(&cfg.Keyspace, "keyspace", cmp.Or(os.Getenv("PULSE_KEYSPACE"), "pulse"), "Cassandra keyspace of the services bench starts")
	fs.StringVar(&cfg.Prefix, "redis-prefix", "pulse", "Pulse's Redis prefix (services bench starts use it)")
	fs.StringVar(&cfg.AggGroup, "aggregator-group", "pulse-aggregator", "the aggregator's consumer group")
	fs.StringVar(&cfg.HistGroup, "history-group", "pulse-history", "the history writer's consumer group")
	fs.StringVar(&cfg.Events, "events-topic", "presence.events", "the events topic")
	fs.StringVar(&cfg.Changes, "changes-topic", "presence.changes", "the changes topic")

	fs.IntVar(&cfg.Users, "users", 100000, "`number` of users the load is spread over (loadgen -users)")
	fs.IntVar(&cfg.BatchSize, "batch-size", 200, "events per batched POST (100…500 is typical)")
	fs.Var((*rates)(&cfg.BatchRates), "batch-rates", "batched steps, offered `events/s`, increasing")
	fs.Var((*rates)(&cfg.SingleRates), "single-rates", "single-event steps, offered `events/s`, increasing")
	fs.DurationVar(&cfg.StepTime, "step", 20*time.Second, "measured length of a batched step")
	fs.DurationVar(&cfg.SingleTime, "single-step", 15*time.Second, "measured length of a single-event step")
	fs.DurationVar(&cfg.Warmup, "warmup", 2*time.Second, "load before each measured window, excluded from latency numbers")
	fs.DurationVar(&cfg.Settle, "settle", 30*time.Second, "longest wait after a step for the aggregator to catch up")
	fs.DurationVar(&cfg.WarmupRun, "warmup-run", 10*time.Second, "an unmeasured load at half the first batched rate before the first step (0: none)")
	fs.DurationVar(&cfg.IdleWait, "idle-wait", 2*time.Minute, "longest wait before the first step for both consumer groups to catch up")
	fs.BoolVar(&cfg.WithoutHistory, "batch-without-history", true, "batch phase: run the batched steps again with history paused (SIGSTOP), to compare the live path's capacity with and without it")
	fs.DurationVar(&cfg.LagEvery, "lag-interval", 2*time.Second, "how often consumer lag is sampled during a step")
	fs.Float64Var(&cfg.StepReads, "step-reads", 200, "GET /status/s during steps")
	fs.Float64Var(&cfg.FreshRate, "fresh-rate", 20, "freshness probes/s during steps")
	fs.DurationVar(&cfg.FreshPoll, "fresh-poll", 5*time.Millisecond, "interval of a probe's status reads (finer adds read load on 2 cores)")
	fs.Float64Var(&cfg.Crit.MinAccepted, "min-accepted", 0.95, "a step keeps up only if ingest accepted this fraction of the offered events")
	fs.Float64Var(&cfg.Crit.MaxFailed, "max-failed", 0.01, "… and at most this fraction of its requests failed or were dropped")
	fs.DurationVar(&cfg.Crit.MaxFreshP99, "max-fresh-p99", time.Second, "… and the freshness p99 stayed at most this")
	fs.DurationVar(&cfg.Crit.LagGrowth, "max-lag-growth", time.Second, "… and the aggregator's lag grew by at most this much of offered events")

	fs.DurationVar(&cfg.HalfTime, "half", 30*time.Second, "measured length of the half-max phase")
	fs.Float64Var(&cfg.HalfReads, "half-reads", 5000, "GET /status/s in the half-max phase")
	fs.Float64Var(&cfg.HalfBatchReads, "half-statuses", 100, "POST /statuses/s in the half-max phase")
	fs.Float64Var(&cfg.HalfCounts, "half-count", 50, "GET /v1/online/count/s in the half-max phase")
	fs.Float64Var(&cfg.HalfFresh, "half-fresh", 50, "freshness probes/s in the half-max phase")
	fs.IntVar(&cfg.ReadBatch, "read-batch", 100, "ids per POST /statuses")

	fs.Float64Var(&cfg.HistoryAt, "history-at", 50000, "history is judged at the batched step closest to this `events/s`")

	fs.IntVar(&cfg.ScaleUsers, "scale-users", 10_000_000, "registered users bulk-loaded for counts and memory")
	fs.IntVar(&cfg.PresentSockets, "present-sockets", 10_000, "present phase: WebSockets held open on one query instance")
	fs.DurationVar(&cfg.PresentHeartbeat, "present-heartbeat", 5*time.Second, "present phase: PULSE_PRESENT_HEARTBEAT of its query instance")
	fs.DurationVar(&cfg.PresentWindow, "present-window", 30*time.Second, "present phase: the steady state measured")
	fs.Float64Var(&cfg.ScaleOnline, "scale-online", 0.3, "fraction of them online")
	fs.IntVar(&cfg.ScaleCalls, "scale-calls", 2000, "counts calls timed per layout")
	fs.IntVar(&cfg.ScaleWindow, "scale-window", 5000, "users per bulk-load write (one WriteWindow, or one pipeline of the baseline)")
	fs.IntVar(&cfg.ScaleWorkers, "scale-workers", 4, "concurrent bulk-load writers")
	fs.IntVar(&cfg.ScaleShards, "scale-shards", 0, "shards of the bulk-loaded layout (0: presence.events' partition count)")

	scaleOutTopos := fs.String("scaleout-topologies", "single,cluster", "scaleout phase: topologies to fold on, of single and cluster (the cluster topology is started for the phase when it is not up, and stopped after)")
	fs.IntVar(&cfg.ScaleOutEvents, "scaleout-events", 2_000_000, "scaleout phase: events each run folds")
	fs.IntVar(&cfg.ScaleOutUsers, "scaleout-users", 200_000, "scaleout phase: users the events are spread over")
	fs.IntVar(&cfg.ScaleOutRounds, "scaleout-rounds", 2, "scaleout phase: rounds of one run with one aggregator and one with two")
	fs.DurationVar(&cfg.ScaleOutLimit, "scaleout-limit", 10*time.Minute, "scaleout phase: longest one run's fold may take")

	fs.DurationVar(&cfg.LimitsTime, "limits-time", 20*time.Second, "limits phase: measured length of Kafka's producer run, each Redis pass and the Cassandra writer")
	fs.Var((*rates)(&cfg.LimitsEchoRates), "limits-echo", "limits phase: offered `events/s` of the bare Echo handler's steps (one event per POST, each -single-step long), increasing")
	fs.IntVar(&cfg.LimitsRedisUsers, "limits-redis-users", 1_000_000, "limits phase: most users written by each Redis pass")
	fs.IntVar(&cfg.LimitsCQLUsers, "limits-cql-users", 20000, "limits phase: users the minimal Cassandra writer spreads its rows over")

	g := &cfg.Groups
	fs.IntVar(&g.Users, "groups-users", 10_000_000, "groups phase: registered users bulk-loaded under the phase's own prefix (-scale-online of them online)")
	fs.IntVar(&g.Members, "groups-members", 1_000_000, "groups phase: members of the large group")
	fs.IntVar(&g.Online, "groups-online", 300_000, "groups phase: how many of them are online")
	fs.IntVar(&g.Batch, "groups-batch", 100_000, "groups phase: user ids per PATCH of the large group's membership (query takes at most 100,000)")
	fs.IntVar(&g.Writers, "groups-writers", 4, "groups phase: membership writes in flight")
	fs.IntVar(&g.Readers, "groups-readers", 8, "groups phase: concurrent readers of the counts' concurrent pass")
	fs.IntVar(&g.Rooms, "groups-rooms", 10_000, "groups phase: small rooms, each written with one PUT")
	fs.IntVar(&g.RoomSize, "groups-room-size", 100, "groups phase: members per small room")
	fs.IntVar(&g.Calls, "groups-calls", 2000, "groups phase: reads timed per measure (counts, pages)")
	fs.DurationVar(&g.Limit, "groups-limit", 10*time.Minute, "groups phase: longest wait for the aggregator to start or to fold a membership")
	fs.StringVar(&g.Centrifugo, "groups-centrifugo", "", "groups phase: a Centrifugo v6 `binary` whose presence_stats is timed on a channel of as many presence entries, on a private redis-server (empty: not compared)")
	fs.IntVar(&g.CentrifugoEntries, "groups-centrifugo-entries", 0, "groups phase: presence entries of Centrifugo's channel (0: -groups-members)")
	fs.IntVar(&g.CentrifugoCalls, "groups-centrifugo-calls", 5, "groups phase: presence_stats calls timed, after one untimed")

	w := &cfg.Webhooks
	fs.Float64Var(&w.Rate, "webhooks-rate", 5000, "webhooks phase: offered batched `events/s` when no batched step ran in this run (after batched steps: half the highest that kept up, the half phase's rate)")
	fs.DurationVar(&w.Time, "webhooks-time", 30*time.Second, "webhooks phase: length of the load")
	fs.DurationVar(&w.Wait, "webhooks-wait", 2*time.Minute, "webhooks phase: longest wait, once the load's changes are read, for every endpoint to have received them")
	fs.StringVar(&w.View, "webhooks-view", "public", "webhooks phase: both endpoints' view, public or operator")
	fs.DurationVar(&w.Reload, "webhooks-reload", 10*time.Second, "webhooks phase: the notifier's PULSE_NOTIFIER_ENDPOINTS_RELOAD; the phase waits up to three of them for its endpoints to be in force")
	fs.StringVar(&w.NotifierGroup, "notifier-group", "pulse-notifier", "the notifier's consumer group")

	fs.BoolVar(&cfg.Profile, "profile", false, "take CPU profiles of aggregator, ingest and query during the half-max phase (needs /debug/pprof: PULSE_PPROF=1)")
	fs.DurationVar(&cfg.ProfileTime, "profile-time", 20*time.Second, "length of each CPU profile")
	fs.BoolVar(&cfg.KeepServices, "keep-services", false, "leave the services bench started running at the end")
	fs.BoolVar(&cfg.HTTPS, "https", os.Getenv("PULSE_TLS_CERT_FILE") != "",
		"ingest and query serve TLS: call them at https URLs (default: when PULSE_TLS_CERT_FILE is set, which the services bench starts inherit)")
	caFile := trust.Flag(fs, os.Getenv)

	if err := cli.Parse(fs, args); err != nil {
		return cfg, err
	}
	if cfg.Quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range quickValues {
			if set[name] {
				continue
			}
			if err := fs.Set(name, v); err != nil {
				return cfg, fmt.Errorf("-quick's -%s=%s: %w", name, v, err)
			}
		}
	}
	cfg.Phases = map[string]bool{}
	for p := range strings.SplitSeq(*phases, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(allPhases, p) {
			return cfg, fmt.Errorf("-phases: unknown phase %q (have %s)", p, strings.Join(allPhases, ","))
		}
		cfg.Phases[p] = true
	}
	cfg.Services = needServices(phaseList, cfg.Phases)
	for t := range strings.SplitSeq(*scaleOutTopos, ",") {
		if t = strings.TrimSpace(t); t != "" {
			cfg.ScaleOutTopologies = append(cfg.ScaleOutTopologies, t)
		}
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return cfg, err
	}
	cfg.Root = root
	if cfg.Home == "" {
		cfg.Home = filepath.Join(root, ".pulse")
	}
	if !filepath.IsAbs(cfg.OutDir) {
		cfg.OutDir = filepath.Join(root, cfg.OutDir)
	}
	cfg.CAFile = *caFile
	if cfg.TLS, err = trust.Config(cfg.CAFile); err != nil {
		return cfg, fmt.Errorf("-ca: %w", err)
	}
	cfg.Flags = cli.Values(fs)
	return cfg, validate(cfg)
}

// validate names every bad flag at once.
func validate(c harness.Config) error {
	var p cli.Problems
	bad := p.Check
	bad(c.Users < 1, "-users must be at least 1")
	bad(c.BatchSize < 1 || c.BatchSize > 1000, "-batch-size must be 1…1000")
	bad(c.ReadBatch < 1 || c.ReadBatch > 1000, "-read-batch must be 1…1000")
	bad(len(c.SingleRates) == 0 && c.Phases["single"], "-single-rates: at least one rate")
	for name, d := range map[string]time.Duration{"-step": c.StepTime, "-single-step": c.SingleTime, "-half": c.HalfTime,
		"-lag-interval": c.LagEvery, "-fresh-poll": c.FreshPoll, "-profile-time": c.ProfileTime} {
		bad(d <= 0, "%s must be above 0", name)
	}
	bad(c.Warmup < 0 || c.Settle < 0 || c.IdleWait < 0 || c.WarmupRun < 0, "-warmup, -warmup-run, -settle and -idle-wait must not be negative")
	bad(len(c.BatchRates) == 0, "-batch-rates: at least one rate (the warm-up and the half-max phase use the first)")
	bad(c.Crit.MinAccepted <= 0 || c.Crit.MinAccepted > 1, "-min-accepted must be in (0, 1]")
	bad(c.Crit.MaxFailed < 0 || c.Crit.MaxFailed >= 1, "-max-failed must be in [0, 1)")
	bad(c.Crit.MaxFreshP99 <= 0 || c.Crit.LagGrowth <= 0, "-max-fresh-p99 and -max-lag-growth must be above 0")
	for name, r := range map[string]float64{"-step-reads": c.StepReads, "-fresh-rate": c.FreshRate, "-half-reads": c.HalfReads,
		"-half-statuses": c.HalfBatchReads, "-half-count": c.HalfCounts, "-half-fresh": c.HalfFresh} {
		bad(!(r >= 0) || math.IsInf(r, 0), "%s must be a number ≥ 0", name)
	}
	bad(c.ScaleUsers < 1 || c.ScaleUsers > 1<<31, "-scale-users must be 1…2^31")
	bad(c.PresentSockets < 1 || c.PresentSockets > 100_000, "-present-sockets must be 1…100,000")
	bad(c.PresentHeartbeat < 100*time.Millisecond, "-present-heartbeat must be at least 100ms")
	bad(c.PresentWindow < time.Second, "-present-window must be at least 1s")
	bad(!(c.ScaleOnline > 0 && c.ScaleOnline <= 1), "-scale-online must be in (0, 1]")
	bad(c.ScaleCalls < 1, "-scale-calls must be at least 1")
	bad(c.ScaleWindow < 1 || c.ScaleWorkers < 1, "-scale-window and -scale-workers must be at least 1")
	bad(c.ScaleShards < 0, "-scale-shards must not be negative")
	bad(c.LimitsTime <= 0, "-limits-time must be above 0")
	for _, t := range c.ScaleOutTopologies {
		bad(t != "single" && t != "cluster", fmt.Sprintf("-scaleout-topologies: %q: want single or cluster", t))
	}
	bad(len(c.ScaleOutTopologies) == 0 && c.Phases["scaleout"], "-scaleout-topologies: at least one topology")
	bad(c.ScaleOutEvents < 1000 || c.ScaleOutUsers < 1, "-scaleout-events must be at least 1000 and -scaleout-users at least 1")
	bad(c.ScaleOutLimit <= 0, "-scaleout-limit must be positive")
	bad(c.ScaleOutRounds < 1, "-scaleout-rounds must be at least 1")
	bad(len(c.LimitsEchoRates) == 0 && c.Phases["limits"], "-limits-echo: at least one rate")
	bad(c.LimitsRedisUsers < 1 || c.LimitsCQLUsers < 1, "-limits-redis-users and -limits-cql-users must be at least 1")
	validateGroups(&p, c.Groups)
	w := c.Webhooks
	bad(!(w.Rate > 0) || math.IsInf(w.Rate, 0), "-webhooks-rate must be above 0")
	bad(w.Time <= 0 || w.Wait <= 0 || w.Reload <= 0, "-webhooks-time, -webhooks-wait and -webhooks-reload must be above 0")
	bad(w.View != "public" && w.View != "operator", "-webhooks-view %q: want public or operator", w.View)
	return p.Err()
}

// validateGroups checks the groups phase's flags.
func validateGroups(p *cli.Problems, g harness.GroupsConfig) {
	bad := p.Check
	bad(g.Users < 1 || g.Users > 1<<31, "-groups-users must be 1…2^31")
	bad(g.Members < 1 || g.Members > g.Users, "-groups-members must be 1…-groups-users")
	bad(g.Online < 0 || g.Online > g.Members, "-groups-online must be 0…-groups-members")
	bad(g.Batch < 1 || g.Batch > 100_000, "-groups-batch must be 1…100,000 (query's most ids per membership write)")
	bad(g.Writers < 1 || g.Readers < 1 || g.Calls < 1, "-groups-writers, -groups-readers and -groups-calls must be at least 1")
	bad(g.Rooms < 0, "-groups-rooms must not be negative")
	bad(g.RoomSize < 1 || g.RoomSize > min(100_000, g.Users), "-groups-room-size must be 1…100,000 and at most -groups-users")
	bad(g.Limit <= 0, "-groups-limit must be positive")
	bad(g.CentrifugoEntries < 0 || g.CentrifugoCalls < 1, "-groups-centrifugo-entries must not be negative and -groups-centrifugo-calls must be at least 1")
}
