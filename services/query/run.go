package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/api/openapi"
	"github.com/pulse-presence/pulse/internal/platform/app"
	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/health"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/platform/kafkax"
	"github.com/pulse-presence/pulse/internal/platform/redisx"
	"github.com/pulse-presence/pulse/internal/stores/eventlog"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
	"github.com/pulse-presence/pulse/services/query/countcache"
	"github.com/pulse-presence/pulse/services/query/dashboard"
	"github.com/pulse-presence/pulse/services/query/feed"
)

// userRoutes are the routes a user token may read: its own user's status, in the
// seed's shapes and in /v1's, and the feed and full statuses (POST /v1/statuses) of
// its own user and of those its pulse_watch claim lists (watcher.options,
// watcher.readCommands, api.postFullStatuses), and the reads of the groups its user
// is a member of (groups.readableGroup; the members route's writes refuse user
// tokens). Everything else (counts, listings, history) needs an API key.
var userRoutes = []string{"/status/:userId", "/statuses", "/v1/users/:userId/status", "/v1/statuses", "/v1/watch", "/v1/watch/sse", TicketsPath,
	groupMembersPath, groupCountPath, groupOnlinePath}

// feedRoutes take a single-use ticket from ?ticket= too, for browsers (tickets.go).
var feedRoutes = []string{"/v1/watch", "/v1/watch/sse"}

// installAuth guards every route but the probes, /metrics and /openapi.json: the read
// scope, and the operator scope for ?view=operator and for erasures. Every call of a
// user's export or erasure that the guard lets through is audited, whatever answers
// it (audit.go).
// installTickets adds the feed's tickets to the Guard it returns.
func installAuth(e *echo.Echo, authn *auth.Authenticator, reg prometheus.Registerer, logger *slog.Logger) *auth.Guard {
	g := authn.Guard(reg, auth.ScopeRead, userRoutes...).RouteScope(auth.ScopeWrite, groupWriteRoutes...).
		RouteScope(auth.ScopeOperator, operatorWriteRoutes...)
	g.Install(e)
	e.Use(auditUserData(logger))
	e.Use(auth.Views)
	return g
}

// feedState is the statestore as the change feed reads it.
type feedState struct{ *statestore.Store }

// GroupMembers reads a group's members for a snapshot; a group larger than a
// connection may watch is feed.ErrGroupTooLarge.
func (f feedState) GroupMembers(ctx context.Context, g string, max int) ([]string, error) {
	ids, err := f.Store.GroupMembers(ctx, g, max)
	if errors.Is(err, statestore.ErrGroupTooLarge) {
		return nil, fmt.Errorf("%w: %w", feed.ErrGroupTooLarge, err)
	}
	return ids, err
}

func run(ctx context.Context, logger *slog.Logger, env *config.Env) error {
	cfg, err := loadConfig(env)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	authn, err := auth.New(cfg.Auth)
	if err != nil {
		return fmt.Errorf("authentication: %w", err)
	}
	cursors, randomCursors, err := cfg.cursorKeys()
	if err != nil {
		return fmt.Errorf("cursors: %w", err)
	}
	if randomCursors {
		logger.Warn("PULSE_CURSOR_SECRET is not set: cursors are signed with a random secret of this process, which other instances and a restart refuse; set the same secret on every instance")
	}
	logger.Info("starting", append([]any{"http_addr", cfg.HTTP.Addr, "redis", cfg.Redis, "prefix", cfg.RedisPrefix,
		"kafka", cfg.Kafka.Brokers, "changes_topic", cfg.Kafka.ChangesTopic, "cassandra", cfg.Cassandra.String(),
		"feed_max_connections", cfg.Feed.MaxConns, "feed_max_connections_per_key", cfg.Feed.MaxConnsPerKey,
		"feed_max_connections_per_user", cfg.Feed.MaxConnsPerUser, "feed_max_connections_per_address", cfg.Feed.MaxConnsPerAddr,
		"key_rate", cfg.Limits.KeyRate, "user_rate", cfg.Limits.UserRate, "history_reads", cfg.Limits.HistoryReads}, authn.Describe()...)...)
	loops := app.NewLoops(ctx)
	defer func() { _ = loops.Stop() }() // on an early return; the last one reports the loops' errors
	loops.Go("auth warning", func(ctx context.Context) error { authn.WarnWhileOff(ctx, logger, time.Minute); return nil })
	loops.Go("keys reload", func(ctx context.Context) error { authn.WatchKeys(ctx, logger, cfg.Auth.KeysReload); return nil })

	reg := app.NewRegistry()
	rdb := redisx.NewClient(cfg.Redis)
	defer rdb.Close()

	store := statestore.New(rdb, cfg.RedisPrefix)
	srv := httpserver.New(cfg.HTTP, logger, reg, health.Check{
		Name: "redis",
		Func: func(ctx context.Context) error { return redisx.Ping(ctx, rdb) },
	}, health.Check{
		// Not ready while Redis lacks state it had (guarantee 10): the aggregators are
		// rebuilding it from the log.
		Name: "state",
		Func: stateWhole(store),
	})
	// The change feed tails presence.changes on its own; while Kafka is unreachable
	// its routes answer 503 and every other read keeps working, so Kafka is not a
	// /readyz dependency of this service.
	hubCfg := cfg.hub()
	hubCfg.Cursors = cursors
	hub, err := feed.NewHub(hubCfg, feedState{store}, logger, reg)
	if err != nil {
		return fmt.Errorf("change feed: %w", err)
	}
	// Present sockets post their devices' events to presence.events as ingest does.
	// The client registers no Kafka metrics: the feed's client has the names.
	producer, err := kafkax.NewClient(cfg.Kafka, logger, nil, eventlog.Opts(cfg.Kafka.EventsTopic, cfg.Present.AckTimeout, time.Millisecond)...)
	if err != nil {
		return err
	}
	// Closed after the server has drained: the last sockets' offline events get their acks.
	defer producer.Close()
	present := newPresenter(eventlog.NewProducer(producer, cfg.Kafka.EventsTopic, cfg.Present.AckTimeout,
		"pulse_query_present_produce_duration_seconds", reg), cfg.Present, logger, reg)
	counts := countcache.New(store.Counts, cfg.Counts, logger)
	a := &api{store: store, get: store.Get, counts: counts, timeout: cfg.ReadTimeout, maxBatch: cfg.MaxBatch, maxBody: cfg.MaxBody, logger: logger,
		feed:    newWatcher(hub, cfg.Feed, logger).checkCredentials(authn.StillValid, cfg.Auth.KeysReload).checkingCursors(cursors).presentThrough(present).watchingGroups(store),
		history: newHistoryDB(cfg.Cassandra, logger), historyTimeout: cfg.HistoryTimeout, atRetention: cfg.AtRetention, exportRetention: cfg.ExportRetention,
		limits: newReadLimits(cfg.Limits, reg), atMaxBatch: cfg.Limits.AtMaxBatch, cursors: cursors}
	var reads *coalescer
	if cfg.ReadPipelines > 0 {
		reads = newCoalescer(store, cfg.ReadTimeout, cfg.ReadPipelines, cfg.ReadCoalesce)
		a.get = reads.Get
	}
	reg.MustRegister(a.history.connectedGauge())
	if a.pipeline, err = dashboard.NewPipeline(cfg.Dashboard, reg, stateWhole(store), logger); err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	installTickets(srv.Echo, installAuth(srv.Echo, authn, reg, logger),
		auth.NewTickets(redisTickets{rdb: rdb, prefix: cfg.RedisPrefix}, cfg.Feed.TicketTTL, ticketTimeout))
	a.routes(srv.Echo)
	// Member events and erasures share one producer and its latency metric.
	writes := eventlog.NewProducer(producer, cfg.Kafka.EventsTopic, cfg.Present.AckTimeout,
		"pulse_query_groups_produce_duration_seconds", reg)
	a.groupRoutes(srv.Echo, writes)
	a.eraseRoutes(srv.Echo, writes)
	if err := openapi.Register(srv.Echo, "query"); err != nil {
		return err
	}

	// On shutdown the hub closes every feed connection (going away) while the server
	// drains, so the server's wait for SSE streams ends as soon as they have said so.
	loops.Go("change feed", hub.Run)
	loops.Go("counts", counts.Run)
	// History's Cassandra is connected in the background: query serves the live
	// routes, and is ready, whether or not Cassandra answers.
	loops.Go("history connection", a.history.Run)
	if reads != nil {
		loops.Go("read pipelines", reads.Run)
	}
	err = srv.Run(ctx)
	// The server's drain does not wait for WebSockets (hijacked): the present ones may
	// still be posting their devices' offline events, which need the producer.
	if !present.drain(cfg.HTTP.ShutdownTimeout) {
		logger.Warn("present sockets still closing at shutdown; their devices time out instead")
	}
	return errors.Join(err, loops.Stop())
}

// stateWhole is nil while every shard's state is whole, statestore.ErrRebuilding
// while the aggregators rebuild one from the log.
func stateWhole(store *statestore.Store) func(context.Context) error {
	return func(ctx context.Context) error {
		n, err := store.Shards(ctx)
		if err != nil || n == 0 {
			return err
		}
		return store.CheckShards(ctx, n)
	}
}
