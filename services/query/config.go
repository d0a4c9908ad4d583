package main

import (
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/platform/cassx"
	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/cursor"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/platform/kafkax"
	"github.com/pulse-presence/pulse/internal/platform/ports"
	"github.com/pulse-presence/pulse/internal/platform/redisx"
	"github.com/pulse-presence/pulse/services/query/countcache"
	"github.com/pulse-presence/pulse/services/query/dashboard"
	"github.com/pulse-presence/pulse/services/query/feed"
)

// Config is everything pulse-query reads at start.
type Config struct {
	HTTP  httpserver.Config
	Redis redisx.Config
	// RedisPrefix starts every key of Pulse's state (the aggregator's setting).
	RedisPrefix string
	// ReadTimeout bounds a request's Redis work.
	ReadTimeout time.Duration
	// MaxBatch bounds the user ids of one POST /statuses.
	MaxBatch int
	// ReadPipelines is how many shared Redis pipelines the single-user reads go
	// through at once (0: each read its own round trip); ReadCoalesce bounds the reads
	// of one pipeline (coalesce.go).
	ReadPipelines int
	ReadCoalesce  int
	// MaxBody bounds request bodies.
	MaxBody int64
	// Auth is who may read (internal/api/auth): keys with the read scope, operator keys for
	// ?view=operator and the firehose, user tokens for their own status.
	Auth auth.Config
	// Kafka is where the change feed reads presence.changes.
	Kafka kafkax.Config
	// Feed is the live change feed's settings (GET /v1/watch, /v1/watch/sse).
	Feed FeedConfig
	// Counts is how GET /v1/online/count is served from memory (services/query/countcache).
	Counts countcache.Config
	// Cassandra is where the history routes read the analysts' tables.
	Cassandra cassx.Config
	// HistoryTimeout bounds a history request's Cassandra work, every partition read
	// of it together; past it the reader gets a 503.
	HistoryTimeout time.Duration
	// AtRetention is how far back at= (point in time) may reach: history's
	// PULSE_HISTORY_SNAPSHOT_RETENTION.
	AtRetention time.Duration
	// ExportRetention is how far back the export of a user (export.go) reads their
	// history: at least as far as history keeps it.
	ExportRetention time.Duration
	// Dashboard is the dashboard page's pipeline view: the peers' metrics it reads.
	Dashboard dashboard.Config
	// Limits bound what one credential may ask of an instance and the Cassandra
	// reads all requests run at once (limits.go).
	Limits LimitsConfig
	// Present is how a present socket posts its device's events (present.go).
	Present PresentConfig
	// CursorSecret signs every cursor query hands out (listing, history pages, the
	// feed); CursorSecretPrevious is still accepted while a new secret rolls out.
	CursorSecret, CursorSecretPrevious string
}

// LimitsConfig is query's rates per credential, in reads (each route's cost,
// limits.go), and its bounds on the history and point-in-time routes' Cassandra work.
type LimitsConfig struct {
	// KeyRate bounds the reads per second of one API key, up to KeyBurst at once;
	// UserRate and UserBurst those of one user token (one end user); 0: no bound.
	KeyRate, KeyBurst   int
	UserRate, UserBurst int
	// RateUsers bounds the user tokens whose buckets are remembered, but for those
	// in debt (internal/platform/limits).
	RateUsers int
	// HistoryReads bounds the Cassandra reads in flight on the instance, whatever
	// the requests; HistoryReadsPerRequest those of one request. A request waits at
	// most HistoryWait for its first slot, then it is a 503 with Retry-After; it takes
	// the others only if they are free.
	HistoryReads           int
	HistoryReadsPerRequest int
	HistoryWait            time.Duration
	// AtMaxBatch bounds the user ids of one POST /statuses?at=: each is a Cassandra
	// read.
	AtMaxBatch int
}

// DefaultKeyRate is PULSE_QUERY_KEY_RATE's default, in reads a second: a leaked key
// or a looping client cannot take a whole instance, while a back end's key carries
// its platform's reads. It is 1.6 times what `make bench` offers through one key at
// its busiest (5,000 GET /status, 100 POST /statuses of 100 ids at 10 reads each, 50
// counts and the freshness probes: about 6,100 reads a second).
const DefaultKeyRate = 10_000

// FeedConfig is the change feed's settings.
type FeedConfig struct {
	// TicketTTL is how long a ticket of POST /v1/watch/tickets may open the feed
	// (tickets.go).
	TicketTTL time.Duration
	// QueueSize bounds the changes waiting for one connection; a connection whose
	// queue fills is closed as a slow consumer.
	QueueSize int
	// ReplayBuffer is how many recent changes are kept in memory for resumes.
	ReplayBuffer int
	// DedupeLookback is how many records per partition before a position are read to
	// recognise re-produced changes after it.
	DedupeLookback int
	// MaxUsers bounds the users one connection watches.
	MaxUsers int
	// PingInterval is how often an idle-looking connection gets a ping (WebSocket
	// ping frame, SSE comment), so proxies keep it open.
	PingInterval time.Duration
	// WriteTimeout bounds one write to a client; a client that does not take a
	// message in time is disconnected as a slow consumer.
	WriteTimeout time.Duration
	// SnapshotTimeout bounds a snapshot's state read.
	SnapshotTimeout time.Duration
	// CatchUpTimeout is how long a resume waits for this instance to reach the
	// position of a cursor another instance issued.
	CatchUpTimeout time.Duration
	// MaxLogReplays bounds the resumes reading Kafka at the same time,
	// MaxLogReplaysPerPrincipal those of one key or user token; a resume waits up to
	// ReplayWait for a slot, then is refused with a 503.
	MaxLogReplays             int
	MaxLogReplaysPerPrincipal int
	ReplayWait                time.Duration
	// CommandRate bounds the WebSocket commands one connection sends per second, up
	// to CommandBurst at once; 0: no bound.
	CommandRate  int
	CommandBurst int
	// MaxConns bounds the feed connections (WebSocket and SSE) of this instance,
	// MaxConnsPerKey those of one key or user token; 0: no bound.
	MaxConns       int
	MaxConnsPerKey int
	// MaxConnsPerUser bounds those of one user token, MaxConnsPerAddr those from one
	// remote address, whatever their credentials; 0: no bound.
	MaxConnsPerUser int
	MaxConnsPerAddr int
	// Origins are the host patterns (path.Match) of web pages allowed to open a
	// WebSocket; empty allows same-origin pages only. Non-browser clients send no
	// Origin and are always allowed.
	Origins []string
}

// vars is pulse-query's configuration table, bound to c: every variable it reads.
func (c *Config) vars() []*config.Var {
	vars := httpserver.Vars(&c.HTTP, ports.ListenAddr(ports.Query))
	vars = append(vars, httpserver.TLSVars(&c.HTTP.TLS)...)
	vars = append(vars, httpserver.CORSVars(&c.HTTP.CORS)...)
	vars = append(vars, kafkax.Vars(&c.Kafka, "pulse-query")...)
	vars = append(vars, redisx.Vars(&c.Redis)...)
	vars = append(vars, cassx.Vars(&c.Cassandra)...)
	vars = append(vars, auth.Vars(&c.Auth)...)
	vars = append(vars, dashboard.Vars(&c.Dashboard)...)
	f := &c.Feed
	return append(vars, config.Group("query",
		config.String(&c.RedisPrefix, "PULSE_REDIS_PREFIX", "pulse", "first part of every Redis key; the aggregator's setting"),
		config.Duration(&c.ReadTimeout, "PULSE_QUERY_READ_TIMEOUT", time.Second, "bounds a request's Redis work", config.Positive),
		config.Int(&c.MaxBatch, "PULSE_QUERY_MAX_BATCH", 1000, "most user ids of one POST /statuses", config.Between(1, 100000)),
		config.Int(&c.ReadPipelines, "PULSE_QUERY_READ_PIPELINES", 4,
			"single-user reads (GET /status, GET /v1/users/{id}/status) waiting at once share this many Redis pipelines in flight; 0: each read makes its own round trip",
			config.Between(0, 1024)),
		config.Int(&c.ReadCoalesce, "PULSE_QUERY_READ_COALESCE", 64, "most single-user reads in one shared pipeline", config.Between(1, 10000)),
		config.Int64(&c.MaxBody, "PULSE_QUERY_MAX_BODY", 1<<20, "largest request body in bytes", config.AtLeast[int64](1024)),
		config.String(&c.CursorSecret, "PULSE_CURSOR_SECRET", "",
			"signs every cursor (HMAC-SHA256), so clients hand back only positions query gave out; the same on every instance; empty: a random secret per process, whose cursors no other instance or restart accepts",
			validCursorSecret).Secret(),
		config.String(&c.CursorSecretPrevious, "PULSE_CURSOR_SECRET_PREVIOUS", "",
			"the secret PULSE_CURSOR_SECRET replaces, still accepted (never used to sign) while the new one rolls out to every instance; empty: none",
			validCursorSecret).Secret(),
		config.Duration(&c.Counts.Interval, "PULSE_QUERY_COUNTS_INTERVAL", 100*time.Millisecond,
			"GET /v1/online/count answers from a read refreshed this often in the background; 0: a read per request",
			config.NotNegative),
		config.Duration(&c.Counts.MaxAge, "PULSE_QUERY_COUNTS_MAX_AGE", time.Second,
			"oldest background read a count is answered from; at least PULSE_QUERY_COUNTS_INTERVAL"),
		config.Duration(&c.AtRetention, "PULSE_QUERY_AT_RETENTION", 30*24*time.Hour,
			"how far in the past at= may ask (count, listing, statuses); set to history's PULSE_HISTORY_SNAPSHOT_RETENTION", config.Positive),
		config.Duration(&c.ExportRetention, "PULSE_QUERY_EXPORT_RETENTION", 400*24*time.Hour,
			"how far back GET /v1/users/{id}/export reads a user's history (one user_activity partition per day, sessions, days); at least what history keeps: 400 days for sessions and days, user_activity has no retention yet, so its older rows are not exported",
			config.Between(24*time.Hour, 3660*24*time.Hour)),
		config.Duration(&c.HistoryTimeout, "PULSE_QUERY_HISTORY_TIMEOUT", 10*time.Second,
			"bounds a history request's Cassandra work (every partition it reads); past it the answer is a 503",
			config.Positive),
		config.Int(&c.Limits.KeyRate, "PULSE_QUERY_KEY_RATE", DefaultKeyRate,
			"reads per second one API key may make on average, per instance; a request costs its route's reads (1 for a status, more for batches, at= and history ranges: docs/design.md, Security); above it a 429 with Retry-After; 0: unlimited",
			config.NotNegative),
		config.Int(&c.Limits.KeyBurst, "PULSE_QUERY_KEY_BURST", DefaultKeyRate,
			"reads one API key may make at once before PULSE_QUERY_KEY_RATE applies; a request costing more takes the whole burst",
			config.Positive),
		config.Int(&c.Limits.UserRate, "PULSE_QUERY_USER_RATE", 50,
			"reads per second one user token (one end user) may make on average, per instance, each with its own bucket; above it a 429 with Retry-After; 0: unlimited",
			config.NotNegative),
		config.Int(&c.Limits.UserBurst, "PULSE_QUERY_USER_BURST", 500,
			"reads one user token may make at once before PULSE_QUERY_USER_RATE applies; a request costing more takes the whole burst",
			config.Positive),
		config.Int(&c.Limits.RateUsers, "PULSE_QUERY_RATE_USERS", 100_000,
			"user tokens whose PULSE_QUERY_USER_RATE buckets are remembered (about 200 bytes each); past it the least recently used full bucket is forgotten, one still refilling never",
			config.Positive),
		config.Int(&c.Limits.HistoryReads, "PULSE_QUERY_HISTORY_READS", 64,
			"Cassandra reads of the history and at= routes in flight on this instance, all requests together; a request waiting longer than PULSE_QUERY_HISTORY_WAIT for its first is a 503 with Retry-After",
			config.Between(1, 100_000)),
		config.Int(&c.Limits.HistoryReadsPerRequest, "PULSE_QUERY_HISTORY_READS_PER_REQUEST", 4,
			"Cassandra reads one history or at= request runs at once (days of a concurrency range, ids of POST /statuses?at=, shards of a count at=), taken beyond the first only if free",
			config.Between(1, 1000)),
		config.Duration(&c.Limits.HistoryWait, "PULSE_QUERY_HISTORY_WAIT", 2*time.Second,
			"longest wait of a history or at= request for its first PULSE_QUERY_HISTORY_READS slot before it is a 503 with Retry-After",
			config.Positive),
		config.Duration(&c.Present.Heartbeat, "PULSE_PRESENT_HEARTBEAT", 20*time.Second,
			"a present socket (GET /v1/watch?present=) is pinged this often and each answered ping is a heartbeat of its device; keep it well below the aggregators' PULSE_OFFLINE_AFTER",
			config.Between(100*time.Millisecond, time.Hour)),
		config.Duration(&c.Present.AckTimeout, "PULSE_PRESENT_ACK_TIMEOUT", 5*time.Second,
			"longest wait for Kafka's acknowledgement of a present socket's event: before the upgrade a 503, after it an unavailable error message",
			config.Positive),
		config.Int(&c.Present.UserRate, "PULSE_INGEST_USER_RATE", 100,
			"events per second one user id's present sockets may post on average, per instance, as ingest's bound of the same name; above it a 429 before the upgrade, a rate_limited error message after; 0: unlimited",
			config.NotNegative),
		config.Int(&c.Present.UserBurst, "PULSE_INGEST_USER_BURST", 1000,
			"events of one user id's present sockets accepted at once before PULSE_INGEST_USER_RATE applies",
			config.Positive),
		config.Int(&c.Limits.AtMaxBatch, "PULSE_QUERY_AT_MAX_BATCH", 100,
			"most user ids of one POST /statuses?at= (each is a Cassandra read); more is a 400",
			config.Between(1, 100000)),
		config.Int(&f.QueueSize, "PULSE_FEED_QUEUE_SIZE", 1024,
			"changes waiting for one feed connection; a connection whose queue fills is closed as a slow consumer",
			config.Between(1, 1_000_000)),
		config.Int(&f.ReplayBuffer, "PULSE_FEED_REPLAY_BUFFER", 65536, "recent changes kept in memory for resumes",
			config.Between(0, 10_000_000)),
		config.Int(&f.DedupeLookback, "PULSE_FEED_DEDUPE_LOOKBACK", 1000,
			"records per partition before a resume position read to recognise re-produced changes after it",
			config.Between(0, 1_000_000)),
		config.Int(&f.MaxUsers, "PULSE_FEED_MAX_USERS", 10000, "most users one feed connection watches",
			config.Between(1, 1_000_000)),
		config.Duration(&f.PingInterval, "PULSE_FEED_PING_INTERVAL", 25*time.Second,
			"how often a feed connection gets a ping (WebSocket ping frame, SSE comment), so proxies keep it open",
			config.Between(time.Second, 10*time.Minute)),
		config.Duration(&f.WriteTimeout, "PULSE_FEED_WRITE_TIMEOUT", 10*time.Second,
			"bounds one write to a feed client; a client that does not take a message in time is disconnected", config.Positive),
		config.Duration(&f.SnapshotTimeout, "PULSE_FEED_SNAPSHOT_TIMEOUT", 5*time.Second,
			"bounds a feed snapshot's state read", config.Positive),
		config.Duration(&f.CatchUpTimeout, "PULSE_FEED_CATCH_UP_TIMEOUT", 5*time.Second,
			"how long a resume waits for this instance to reach a cursor another instance issued", config.Positive),
		config.Int(&f.MaxLogReplays, "PULSE_FEED_MAX_LOG_REPLAYS", 8, "most resumes reading Kafka at the same time",
			config.Between(1, 1000)),
		config.Int(&f.MaxLogReplaysPerPrincipal, "PULSE_FEED_MAX_LOG_REPLAYS_PER_PRINCIPAL", 2,
			"most resumes of one API key or user token reading Kafka at the same time, within PULSE_FEED_MAX_LOG_REPLAYS",
			config.Between(1, 1000)),
		config.Duration(&f.ReplayWait, "PULSE_FEED_REPLAY_WAIT", 5*time.Second,
			"how long a resume that must read Kafka waits for a replay slot; then it is refused with a 503 and Retry-After before any upgrade",
			config.Between(10*time.Millisecond, time.Minute)),
		config.Int(&f.CommandRate, "PULSE_FEED_COMMAND_RATE", 10,
			"WebSocket commands one feed connection may send per second on average; a command beyond it is ignored with a rate_limited error message; 0: no bound",
			config.NotNegative),
		config.Int(&f.CommandBurst, "PULSE_FEED_COMMAND_BURST", 20,
			"WebSocket commands one feed connection may send at once before PULSE_FEED_COMMAND_RATE applies",
			config.Between(1, 10000)),
		config.Int(&f.MaxConns, "PULSE_FEED_MAX_CONNECTIONS", 10000,
			"most feed connections (WebSocket and SSE) this instance holds; the next is refused with a 503 before any upgrade; 0: no bound",
			config.NotNegative),
		config.Int(&f.MaxConnsPerKey, "PULSE_FEED_MAX_CONNECTIONS_PER_KEY", 1000,
			"most feed connections one API key holds on this instance; the next is refused with a 429 before any upgrade; 0: no bound",
			config.NotNegative),
		config.Int(&f.MaxConnsPerUser, "PULSE_FEED_MAX_CONNECTIONS_PER_USER", 8,
			"most feed connections one user token (one end user) holds on this instance; the next is refused with a 429; 0: no bound",
			config.NotNegative),
		config.Int(&f.MaxConnsPerAddr, "PULSE_FEED_MAX_CONNECTIONS_PER_ADDRESS", 256,
			"most feed connections from one remote address (the TCP peer: behind a proxy, the proxy) on this instance; the next is refused with a 429; 0: no bound",
			config.NotNegative),
		config.List(&f.Origins, "PULSE_FEED_ORIGINS", nil,
			"host patterns (path.Match) of web pages allowed to open a WebSocket, comma-separated; empty: same-origin pages only (clients without Origin are always allowed)",
			validOrigins),
		ticketTTLVar(&f.TicketTTL),
	)...)
}

func validCursorSecret(s string) (string, bool) {
	return fmt.Sprintf("want empty or at least %d bytes", cursor.MinSecret), s == "" || len(s) >= cursor.MinSecret
}

// cursorKeys are the keys of the configured secrets; random says none was set.
func (c Config) cursorKeys() (keys *cursor.Keys, random bool, err error) {
	if c.CursorSecret == "" {
		if c.CursorSecretPrevious != "" {
			return nil, false, errors.New("PULSE_CURSOR_SECRET_PREVIOUS is set without PULSE_CURSOR_SECRET")
		}
		return cursor.RandomKeys(), true, nil
	}
	keys, err = cursor.NewKeys(c.CursorSecret, c.CursorSecretPrevious)
	return keys, false, err
}

// validOrigins wants every pattern to be one path.Match can use.
func validOrigins(patterns []string) (string, bool) {
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil {
			return "want path.Match patterns", false
		}
	}
	return "want path.Match patterns", true
}

func loadConfig(env *config.Env) (Config, error) {
	var cfg Config
	env.Load(cfg.vars()...)
	cfg.Counts.Timeout = cfg.ReadTimeout
	return cfg, errors.Join(env.Err(), cfg.Validate())
}

// Validate reports what the table's rules cannot see, each needing two variables.
func (c Config) Validate() error {
	errs := []error{c.Redis.Validate(), c.Kafka.Validate(), c.HTTP.TLS.Validate()}
	if c.Cassandra.Username == "" && c.Cassandra.Password != "" {
		errs = append(errs, errors.New("PULSE_CASSANDRA_USERNAME: empty while PULSE_CASSANDRA_PASSWORD is set; the driver authenticates with Username and Password together"))
	}
	if c.Counts.Interval > 0 && c.Counts.MaxAge < c.Counts.Interval {
		errs = append(errs, fmt.Errorf("PULSE_QUERY_COUNTS_MAX_AGE=%v: want at least PULSE_QUERY_COUNTS_INTERVAL (%v)", c.Counts.MaxAge, c.Counts.Interval))
	}
	return errors.Join(errs...)
}

// hub is the feed's hub configuration.
func (c Config) hub() feed.Config {
	return feed.Config{
		Kafka:                     c.Kafka,
		QueueSize:                 c.Feed.QueueSize,
		ReplayBuffer:              c.Feed.ReplayBuffer,
		DedupeLookback:            c.Feed.DedupeLookback,
		MaxUsers:                  c.Feed.MaxUsers,
		SnapshotTimeout:           c.Feed.SnapshotTimeout,
		CatchUpTimeout:            c.Feed.CatchUpTimeout,
		MaxLogReplays:             c.Feed.MaxLogReplays,
		MaxLogReplaysPerPrincipal: c.Feed.MaxLogReplaysPerPrincipal,
		ReplayWait:                c.Feed.ReplayWait,
		CommandRate:               float64(c.Feed.CommandRate),
		CommandBurst:              c.Feed.CommandBurst,
		DrainTimeout:              c.HTTP.ShutdownTimeout,
	}
}
