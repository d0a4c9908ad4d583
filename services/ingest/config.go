package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/platform/kafkax"
	"github.com/pulse-presence/pulse/internal/platform/ports"
)

// Config is everything pulse-ingest reads at start.
type Config struct {
	HTTP  httpserver.Config
	Kafka kafkax.Config
	// AckTimeout bounds the wait for Kafka to acknowledge a request's events; past it
	// the producer gets a 503 with Retry-After and may retry with the same event ids.
	AckTimeout time.Duration
	// Linger is how long a partition's batch waits for more records before it is
	// sent: concurrent single-event requests then share produce requests instead
	// of each paying one, for at most this much more latency (franz-go's default
	// is 10ms, which a lone request would wait whole).
	Linger time.Duration
	// MaxSkew is how far an event's occurredAt may be from the server clock, either
	// way; a client clock further off would make its events stale or block newer ones.
	MaxSkew time.Duration
	// MaxBody is the largest request body accepted, in bytes; larger gets a 413.
	MaxBody int64
	// MaxBatch is the most events one POST /v1/events may carry.
	MaxBatch int
	// Auth is who may post (internal/api/auth): keys with the write scope, user tokens for
	// their own user.
	Auth auth.Config
	// KeyRate bounds the events per second one key (or user token) may post, on
	// average; 0: no bound. Its burst is a second's worth, at least a full batch.
	KeyRate int
	// RateUsers bounds the user ids whose buckets ingest remembers, but for those in
	// debt (internal/platform/limits).
	RateUsers int
	// UserRate bounds the events per second posted for one user id, whichever key
	// posts them, up to UserBurst at once; 0: no bound.
	UserRate  int
	UserBurst int
	// GCPercent is the garbage collector's target (GOGC) ingest runs with; 0 leaves
	// the runtime's (GOGC's) as it is.
	GCPercent int
}

// DefaultKeyRate is PULSE_INGEST_KEY_RATE's default: a key that leaks, or a client
// that loops, cannot take a whole instance by default. It is 1.6 times the most
// `make bench` and loadgen offer (125,000 events/s batched, 25,000 single posts/s,
// both from one producer key), so they are never throttled by it.
const DefaultKeyRate = 200_000

// minBody is the smallest body limit that still fits a full single event.
const minBody = 1024

// vars is pulse-ingest's configuration table, bound to c: every variable it reads.
func (c *Config) vars() []*config.Var {
	vars := httpserver.Vars(&c.HTTP, ports.ListenAddr(ports.Ingest))
	vars = append(vars, httpserver.TLSVars(&c.HTTP.TLS)...)
	vars = append(vars, httpserver.CORSVars(&c.HTTP.CORS)...)
	vars = append(vars, kafkax.Vars(&c.Kafka, "pulse-ingest")...)
	vars = append(vars, auth.Vars(&c.Auth)...)
	return append(vars, config.Group("ingest",
		config.Duration(&c.AckTimeout, "PULSE_INGEST_ACK_TIMEOUT", 5*time.Second,
			"longest wait for Kafka's acknowledgement before a 503; below PULSE_HTTP_WRITE_TIMEOUT and PULSE_SHUTDOWN_TIMEOUT",
			config.Positive),
		config.Duration(&c.Linger, "PULSE_INGEST_LINGER", time.Millisecond,
			"how long events wait for others to share a Kafka produce request; adds at most this to a request's latency; 0: send at once",
			config.Between(0, time.Second)),
		config.Duration(&c.MaxSkew, "PULSE_INGEST_MAX_SKEW", 5*time.Minute,
			"how far an event's occurredAt may be from the server clock, either way", config.Positive),
		config.Int64(&c.MaxBody, "PULSE_INGEST_MAX_BODY", 1<<20, "largest request body in bytes; larger gets a 413",
			config.AtLeast[int64](minBody).Want(fmt.Sprintf("must be at least %d bytes", minBody))),
		config.Int(&c.MaxBatch, "PULSE_INGEST_MAX_BATCH", 1000, "most events one POST /v1/events may carry", config.Positive),
		config.Int(&c.KeyRate, "PULSE_INGEST_KEY_RATE", DefaultKeyRate,
			"events per second one API key or user token may post on average, per instance (burst: a second's worth, at least PULSE_INGEST_MAX_BATCH); above it a 429 with Retry-After; 0: unlimited",
			config.NotNegative),
		config.Int(&c.UserRate, "PULSE_INGEST_USER_RATE", 100,
			"events per second posted for one user id on average, whatever the key; above it a 429 with Retry-After; 0: unlimited",
			config.NotNegative),
		config.Int(&c.UserBurst, "PULSE_INGEST_USER_BURST", 1000,
			"events for one user id accepted at once before PULSE_INGEST_USER_RATE applies; also the most one request may carry for one user",
			config.Positive),
		config.Int(&c.RateUsers, "PULSE_INGEST_RATE_USERS", 100_000,
			"user ids whose PULSE_INGEST_USER_RATE buckets are remembered (about 200 bytes each); past it the least recently used full bucket is forgotten, one still refilling never (that would refill it), so a user cannot escape its rate by posting for others",
			config.Positive),
		config.Int(&c.GCPercent, "PULSE_INGEST_GOGC", 200,
			"Go garbage collector target, as GOGC: heap growth in percent between collections (ingest's live heap is small, so Go's 100 collects more often than its memory needs); overrides GOGC; 0: as GOGC says",
			config.NotNegative),
	)...)
}

func loadConfig(env *config.Env) (Config, error) {
	var cfg Config
	env.Load(cfg.vars()...)
	return cfg, errors.Join(env.Err(), cfg.Validate())
}

// Validate reports what the table's rules cannot see, each needing two variables.
func (c Config) Validate() error {
	errs := []error{c.Kafka.Validate(), c.HTTP.TLS.Validate()}
	// A request waits up to the ack timeout before it answers; the answer must still
	// be writable, and a shutdown must still let it finish.
	if c.AckTimeout >= c.HTTP.WriteTimeout || c.AckTimeout >= c.HTTP.ShutdownTimeout {
		errs = append(errs, fmt.Errorf("PULSE_INGEST_ACK_TIMEOUT=%v: must be below PULSE_HTTP_WRITE_TIMEOUT (%v) and PULSE_SHUTDOWN_TIMEOUT (%v)",
			c.AckTimeout, c.HTTP.WriteTimeout, c.HTTP.ShutdownTimeout))
	}
	return errors.Join(errs...)
}
