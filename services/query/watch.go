package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/cursor"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/platform/limits"
	"github.com/pulse-presence/pulse/internal/stores/statestore"
	"github.com/pulse-presence/pulse/services/query/feed"
)

// The live change feed: GET /v1/watch (WebSocket) and GET /v1/watch/sse
// (server-sent events) carry the same messages, from a feed.Session; docs/feed.md
// is the protocol.

// watcher serves the change feed over both transports.
type watcher struct {
	hub    *feed.Hub
	cfg    FeedConfig
	logger *slog.Logger
	conns  *limits.Conns
	// stillValid, when set, is asked every recheck whether an open connection's
	// credential would still be accepted (checkCredentials).
	stillValid func(auth.Principal, time.Time) error
	recheck    time.Duration
	// rateLimited is the message of a command refused for its rate.
	rateLimited string
	// cursors check the cursors clients resume from (the hub signed them).
	cursors *cursor.Keys
	// present posts the events of present sockets (present.go); nil: ?present= is
	// refused.
	present *presenter
	// groups reads the groups a connection watches (?group=); nil: ?group= is
	// refused.
	groups *statestore.Store
}

// watchingGroups lets connections watch a group's members (?group=), read from store.
func (w *watcher) watchingGroups(store *statestore.Store) *watcher {
	w.groups = store
	return w
}

func newWatcher(hub *feed.Hub, cfg FeedConfig, logger *slog.Logger) *watcher {
	return &watcher{hub: hub, cfg: cfg, logger: logger, conns: limits.NewConns(cfg.MaxConns, cfg.MaxConnsPerAddr),
		rateLimited: fmt.Sprintf("a connection sends at most %v commands a second (PULSE_FEED_COMMAND_RATE=%v), %d at once (PULSE_FEED_COMMAND_BURST); this one was ignored: send it again later",
			cfg.CommandRate, cfg.CommandRate, cfg.CommandBurst)}
}

// checkCredentials makes open connections end once their credential would no longer
// be accepted: a key removed from the keys file within every (the keys file's reload
// interval; 0: only tokens' expiry is watched), a user token at its expiry.
func (w *watcher) checkCredentials(stillValid func(auth.Principal, time.Time) error, every time.Duration) *watcher {
	w.stillValid, w.recheck = stillValid, every
	return w
}

// checkingCursors makes resumes accept only cursors signed with keys.
func (w *watcher) checkingCursors(keys *cursor.Keys) *watcher {
	w.cursors = keys
	return w
}

// presentThrough makes ?present= sockets post their devices' events through p.
func (w *watcher) presentThrough(p *presenter) *watcher {
	w.present = p
	return w
}

// errCredentialEnded ends a connection whose credential was revoked or expired.
var errCredentialEnded = errors.New("credential no longer valid")

// guardCredential cancels ctx with errCredentialEnded once p would no longer be
// accepted; it returns when ctx ends.
func (w *watcher) guardCredential(ctx context.Context, cancel context.CancelCauseFunc, p auth.Principal) {
	if w.stillValid == nil {
		return
	}
	var expiry <-chan time.Time
	if !p.Expires.IsZero() {
		t := time.NewTimer(time.Until(p.Expires))
		defer t.Stop()
		expiry = t.C
	}
	var recheck <-chan time.Time
	if w.recheck > 0 {
		t := time.NewTicker(w.recheck)
		defer t.Stop()
		recheck = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-expiry:
		case <-recheck:
		}
		if err := w.stillValid(p, time.Now()); err != nil {
			cancel(fmt.Errorf("%w: %w", errCredentialEnded, err))
			return
		}
	}
}

// connRetryAfter is what a refused connection is told to wait: connections end at
// their clients' pace, not the server's.
const connRetryAfter = 5 * time.Second

// acquire counts the request's connection against the instance's, its credential's
// (a key's, or a user token's smaller one) and its remote address's bounds, or
// refuses it before any upgrade: 503 when the instance is full (another instance may
// have room), 429 when the credential or the address is.
func (w *watcher) acquire(c echo.Context) (func(), error) {
	p := auth.PrincipalOf(c)
	keyMax, what := w.cfg.MaxConnsPerKey, fmt.Sprintf("key %s holds its most feed connections on this instance (PULSE_FEED_MAX_CONNECTIONS_PER_KEY=%d)", p.Name, w.cfg.MaxConnsPerKey)
	if p.UserID != "" {
		keyMax, what = w.cfg.MaxConnsPerUser, fmt.Sprintf("user %s holds its most feed connections on this instance (PULSE_FEED_MAX_CONNECTIONS_PER_USER=%d)", p.UserID, w.cfg.MaxConnsPerUser)
	}
	addr, _, err := net.SplitHostPort(c.Request().RemoteAddr)
	if err != nil {
		addr = c.Request().RemoteAddr
	}
	release, err := w.conns.Acquire(p.Name, keyMax, addr)
	switch {
	case errors.Is(err, limits.ErrInstanceFull):
		return nil, httpserver.Unavailable(fmt.Sprintf(
			"this instance holds its most feed connections (PULSE_FEED_MAX_CONNECTIONS=%d); retry later or on another instance", w.cfg.MaxConns), connRetryAfter)
	case errors.Is(err, limits.ErrKeyFull):
		return nil, &httpserver.Error{Status: http.StatusTooManyRequests, Code: "rate_limited", RetryAfter: connRetryAfter,
			Message: what + "; close one first"}
	case errors.Is(err, limits.ErrAddrFull):
		return nil, &httpserver.Error{Status: http.StatusTooManyRequests, Code: "rate_limited", RetryAfter: connRetryAfter,
			Message: fmt.Sprintf("address %s holds its most feed connections on this instance (PULSE_FEED_MAX_CONNECTIONS_PER_ADDRESS=%d); close one first", addr, w.cfg.MaxConnsPerAddr)}
	}
	return release, err
}

// watchRoutes registers the live change feed.
func (a *api) watchRoutes(e *echo.Echo) {
	serve := func(h func(*watcher, echo.Context) error) echo.HandlerFunc {
		return func(c echo.Context) error {
			if a.feed == nil {
				return httpserver.Unavailable("this instance serves no change feed", 5*time.Second)
			}
			return h(a.feed, c)
		}
	}
	e.GET("/v1/watch", serve((*watcher).websocket))
	e.GET("/v1/watch/sse", serve((*watcher).sse))
}

// Close reasons and codes of a connection the server ends. WebSocket clients read
// them from the close frame, SSE clients from a last `event: error`.
type ending struct {
	status websocket.StatusCode
	code   string // the SSE error message's code
	reason string
}

var (
	endSlow       = ending{websocket.StatusPolicyViolation, "slow_consumer", "slow consumer"}
	endGoingAway  = ending{websocket.StatusGoingAway, "going_away", "going away"}
	endBacklog    = ending{websocket.StatusPolicyViolation, "too_many_commands", "too many pending commands"}
	endBadMessage = ending{websocket.StatusUnsupportedData, "invalid_command", "commands are JSON text messages"}
	endUnavail    = ending{websocket.StatusTryAgainLater, "unavailable", "presence state or change log unavailable, reconnect with the cursor"}
	endInternal   = ending{websocket.StatusInternalError, "internal", "internal error"}
	endCredential = ending{websocket.StatusPolicyViolation, "credential_ended", "the key was revoked or the token expired; reconnect with a valid credential"}
	endReplays    = ending{websocket.StatusTryAgainLater, "replay_busy", "no log replay slot freed up in time; reconnect with the cursor in a few seconds"}
	endGroupLarge = ending{websocket.StatusPolicyViolation, feed.CodeTooManyUsers, "the group has more members than a connection watches (PULSE_FEED_MAX_USERS)"}
	endClient     = ending{websocket.StatusNormalClosure, "", ""}
)

// endingFor is how the connection ends after err: the client leaving (ctx
// cancelled) needs nothing said.
func endingFor(err error) ending {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return endClient
	case errors.Is(err, feed.ErrSlowConsumer):
		return endSlow
	case errors.Is(err, feed.ErrGoingAway):
		return endGoingAway
	case errors.Is(err, feed.ErrCommandBacklog):
		return endBacklog
	case errors.Is(err, errBinaryMessage):
		return endBadMessage
	case errors.Is(err, feed.ErrUnavailable):
		return endUnavail
	case errors.Is(err, errCredentialEnded):
		return endCredential
	case errors.Is(err, feed.ErrReplaysBusy):
		return endReplays
	case errors.Is(err, feed.ErrGroupTooLarge):
		return endGroupLarge
	}
	return endInternal
}

// end is endingFor, logging the unexpected (an outage is many clients' business and
// shows in /readyz and the dependency metrics; a bug is not).
func (w *watcher) end(err error) ending {
	e := endingFor(err)
	if e == endInternal {
		w.logger.Warn("change feed connection failed", "err", err)
	}
	return e
}

var errBinaryMessage = errors.New("binary message")

// options reads and checks a watch request. Everything wrong is a 400 (403 for a
// firehose without the operator scope) before any upgrade.
func (w *watcher) options(c echo.Context, sse bool) (feed.Options, error) {
	q := c.QueryParams()
	var o feed.Options
	switch v := q.Get("firehose"); v {
	case "", "false":
	case "true":
		o.Firehose = true
	default:
		return o, httpserver.BadRequest("firehose", fmt.Sprintf("must be true or false, got %q", v))
	}
	ids, err := watchIDs(q["userIds"], w.cfg.MaxUsers)
	if err != nil {
		return o, err
	}
	if o.Group, err = w.watchGroup(c, q["group"]); err != nil {
		return o, err
	}
	switch {
	case o.Firehose && len(ids) > 0:
		return o, httpserver.BadRequest("userIds", "must be absent with firehose=true: the firehose watches every user")
	case o.Firehose && o.Group != "":
		return o, httpserver.BadRequest("group", "must be absent with firehose=true: the firehose watches every user")
	case o.Firehose && auth.PrincipalOf(c).UserID != "":
		return o, auth.Forbidden("a user token may not watch the firehose")
	case o.Firehose && !auth.IsOperator(c):
		return o, &httpserver.Error{Status: http.StatusForbidden, Code: "forbidden",
			Message: "firehose=true needs a key with the operator scope: Authorization: Bearer <key>"}
	case sse && !o.Firehose && len(ids) == 0 && o.Group == "":
		return o, httpserver.BadRequest("userIds", "is required: a comma-separated list of user ids (or a group)")
	}
	if err := mayWatch(auth.PrincipalOf(c), ids); err != nil {
		return o, err
	}
	o.UserIDs = ids
	o.Operator = auth.OperatorView(c)

	raw, field := q.Get("cursor"), "cursor"
	if raw == "" && sse {
		raw, field = c.Request().Header.Get("Last-Event-ID"), "Last-Event-ID"
	}
	if raw != "" {
		unsigned, err := w.cursors.Open(raw)
		var cur feed.Cursor
		if err == nil {
			cur, err = feed.DecodeCursor(unsigned)
		}
		if err != nil {
			return o, httpserver.BadRequest(field, err.Error()+": send the cursor of the last message received, or none")
		}
		o.Cursor = &cur
	}
	return o, nil
}

// watchGroup reads ?group=: one group id, which the reader may read (a user token
// only its user's groups) and whose members a connection may watch (at most
// PULSE_FEED_MAX_USERS). "" when absent.
func (w *watcher) watchGroup(c echo.Context, values []string) (string, error) {
	switch {
	case len(values) == 0:
		return "", nil
	case len(values) > 1:
		return "", httpserver.BadRequest("group", "a connection watches one group")
	case w.groups == nil:
		return "", httpserver.BadRequest("group", "this instance serves no groups")
	}
	g := values[0]
	if err := presence.ValidateGroupID(g); err != nil {
		return "", httpserver.BadRequest("group", err.Error())
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), w.cfg.SnapshotTimeout)
	defer cancel()
	n, err := w.groups.Shards(ctx)
	if err != nil {
		return "", groupReadErr(err)
	}
	if user := auth.PrincipalOf(c).UserID; user != "" {
		member, err := w.groups.IsMember(ctx, n, g, user)
		if err != nil {
			return "", groupReadErr(err)
		}
		if !member {
			return "", auth.Forbidden(fmt.Sprintf("a user token watches only the groups its user is a member of; %q is not a member of %q", user, g))
		}
	}
	counts, err := w.groups.GroupCounts(ctx, n, g)
	if err != nil {
		return "", groupReadErr(err)
	}
	var size uint64
	for _, sc := range counts {
		size += sc.Registered
	}
	if size > uint64(w.cfg.MaxUsers) {
		return "", httpserver.BadRequest("group", fmt.Sprintf("group %q has %d members; a connection watches at most %d users (PULSE_FEED_MAX_USERS): read its counts and listings instead", g, size, w.cfg.MaxUsers))
	}
	return g, nil
}

// groupReadErr is the 503 of a group read that failed.
func groupReadErr(err error) error {
	return fmt.Errorf("%w: %w", httpserver.Unavailable("the group could not be read; retry shortly", time.Second), err)
}

// mayWatch refuses, with a 403, the first of ids p may not watch: a user token
// watches only its own user and those of its pulse_watch claim.
func mayWatch(p auth.Principal, ids []string) *httpserver.Error {
	for _, id := range ids {
		if !p.MayWatch(id) {
			return auth.Forbidden(fmt.Sprintf("this user token may not watch %q: only its own user and the users of its %s claim", id, auth.WatchClaim))
		}
	}
	return nil
}

// watchIDs reads ?userIds=a,b&userIds=c: comma-separated, repeatable. Ids that
// contain a comma can only be subscribed with a WebSocket command.
func watchIDs(values []string, maxUsers int) ([]string, error) {
	var ids []string
	for _, v := range values {
		for _, id := range strings.Split(v, ",") {
			if err := presence.ValidateID(id, presence.MaxUserIDLen); err != nil {
				return nil, httpserver.BadRequest(fmt.Sprintf("userIds[%d]", len(ids)), err.Error())
			}
			ids = append(ids, id)
			if len(ids) > maxUsers {
				return nil, httpserver.BadRequest("userIds", fmt.Sprintf("at most %d user ids per connection", maxUsers))
			}
		}
	}
	return ids, nil
}

// open starts the session for p, or says why not as an HTTP error. A resume that
// must read the log waits here, before any upgrade, for a replay slot: when none
// frees up within PULSE_FEED_REPLAY_WAIT it is a 503 with Retry-After naming the
// bound that was full.
func (w *watcher) open(ctx context.Context, o feed.Options, p auth.Principal) (*feed.Session, error) {
	o.Principal = p.Name
	s, err := w.hub.Open(ctx, o)
	switch {
	case err == nil:
		return s, nil
	case errors.Is(err, feed.ErrNotReady), errors.Is(err, feed.ErrGoingAway):
		return nil, httpserver.Unavailable("the change feed is not available on this instance right now", time.Second)
	case errors.Is(err, feed.ErrInvalid):
		return nil, httpserver.BadRequest("userIds", err.Error())
	case errors.Is(err, feed.ErrPrincipalReplaysBusy):
		who := "key " + p.Name
		if p.UserID != "" {
			who = "user " + p.UserID
		}
		return nil, httpserver.Unavailable(fmt.Sprintf(
			"%s runs its most log replays on this instance (PULSE_FEED_MAX_LOG_REPLAYS_PER_PRINCIPAL=%d) and none finished within PULSE_FEED_REPLAY_WAIT=%v; retry with the cursor once one has",
			who, w.cfg.MaxLogReplaysPerPrincipal, w.cfg.ReplayWait), connRetryAfter)
	case errors.Is(err, feed.ErrReplaysBusy):
		return nil, httpserver.Unavailable(fmt.Sprintf(
			"this instance runs its most log replays (PULSE_FEED_MAX_LOG_REPLAYS=%d) and none finished within PULSE_FEED_REPLAY_WAIT=%v; retry with the cursor later or on another instance",
			w.cfg.MaxLogReplays, w.cfg.ReplayWait), connRetryAfter)
	case ctx.Err() != nil:
		return nil, ctx.Err() // the client left while waiting
	}
	return nil, fmt.Errorf("opening a feed session: %w", err)
}

// readLimit is the largest message a connection of p takes: a subscribe naming, once
// each, every user p may watch (at most maxUsers), with room for spaces. A key may
// name anyone: maxUsers ids of the longest kind, sent unescaped. A user token names
// only its own user and its pulse_watch claim's, each as escaped as a JSON encoder
// may (\uXXXX for non-ASCII, as Python's json does), so its connection cannot make
// the server read megabytes it could only refuse.
func readLimit(p auth.Principal, maxUsers int) int64 {
	const envelope, perID = 256, 8 // {"op":"subscribe","userIds":[…]} and spacing; `"`, `,`, spaces
	ids, all := p.Watchable()
	if all {
		return envelope + int64(maxUsers)*(presence.MaxUserIDLen+perID)
	}
	n := int64(envelope)
	for _, id := range ids[:min(len(ids), maxUsers)] {
		n += jsonEscapedLen(id) + perID
	}
	return n
}

// jsonEscapedLen is the longest JSON string body id may be sent as: ASCII as is (6
// bytes for the characters Go escapes), 6 bytes per non-ASCII character of the Basic
// Multilingual Plane, 12 for the others (a surrogate pair).
func jsonEscapedLen(id string) int64 {
	var n int64
	for _, r := range id {
		switch {
		case r == '<', r == '>', r == '&':
			n += 6
		case r == '"', r == '\\':
			n += 2
		case r < 0x80:
			n++
		case r <= 0xffff:
			n += 6
		default:
			n += 12
		}
	}
	return n
}

// clearDeadlines lifts the server's read and write timeouts, which bound ordinary
// requests, off a connection that lives for hours; each write sets its own.
func clearDeadlines(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
}

func isWebSocket(r *http.Request) bool {
	for _, v := range r.Header.Values("Upgrade") {
		if strings.EqualFold(strings.TrimSpace(v), "websocket") {
			return true
		}
	}
	return false
}

func (w *watcher) websocket(c echo.Context) error {
	if !isWebSocket(c.Request()) {
		return &httpserver.Error{Status: http.StatusUpgradeRequired, Code: "upgrade_required",
			Message: "GET /v1/watch is a WebSocket endpoint; without WebSocket use GET /v1/watch/sse"}
	}
	o, err := w.options(c, false)
	if err != nil {
		return err
	}
	dev, err := presentDevice(c, false)
	if err != nil {
		return err
	}
	if dev != nil && w.present == nil {
		return httpserver.Unavailable("this instance takes no present sockets", connRetryAfter)
	}
	if dev != nil {
		w.present.open.Add(1)
		defer w.present.open.Done()
	}
	release, err := w.acquire(c)
	if err != nil {
		return err
	}
	defer release()
	p := auth.PrincipalOf(c)
	sess, err := w.open(c.Request().Context(), o, p)
	if err != nil {
		return err
	}
	defer sess.Close()
	if dev != nil {
		// The device is present once Kafka has its first heartbeat: a refusal (429,
		// 503) is answered before the upgrade, as ingest answers a post.
		if _, err := w.present.post(c.Request().Context(), dev, presence.KindHeartbeat, presence.StatusUnknown, nil); err != nil {
			return err
		}
		w.present.sockets.Inc()
		defer w.present.sockets.Dec()
	}
	clearDeadlines(c.Response())
	conn, err := websocket.Accept(c.Response(), c.Request(), &websocket.AcceptOptions{OriginPatterns: w.cfg.Origins})
	if err != nil {
		return nil // Accept answered the request
	}
	defer conn.CloseNow()
	// A larger message closes the connection with 1009 (message too big).
	conn.SetReadLimit(readLimit(p, w.cfg.MaxUsers))

	ctx, cancel := context.WithCancelCause(c.Request().Context())
	defer cancel(nil)
	// closing is set before the server starts a close, so the reader tells a close
	// the client started (clientClosed) from the client's answer to the server's.
	var closing, clientClosed atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		if w.readCommands(ctx, cancel, conn, sess, p, dev) && !closing.Load() {
			clientClosed.Store(true)
		}
	})
	wg.Go(func() { w.ping(ctx, cancel, conn, dev) })
	// A credential that ends stops the writes only: cancelling a read would close the
	// connection before the close frame says why.
	wctx, stopWrites := context.WithCancelCause(ctx)
	defer stopWrites(nil)
	wg.Go(func() { w.guardCredential(wctx, stopWrites, p) })

	end := w.writeMessages(wctx, conn, sess)
	closing.Store(true)
	if end != endClient {
		_ = conn.Close(end.status, end.reason)
	}
	cancel(nil)
	_ = conn.CloseNow()
	wg.Wait()
	// A present device goes offline at once when its client closed the socket (a tab
	// closing, a logout); a socket that dropped, or that the server closed (shutdown,
	// a slow consumer), lets the device time out unless the client reconnects first.
	if dev != nil && clientClosed.Load() {
		w.present.offline(c.Request().Context(), dev)
	}
	return nil
}

// writeMessages writes the session's messages until it or the connection ends.
func (w *watcher) writeMessages(ctx context.Context, conn *websocket.Conn, sess *feed.Session) ending {
	for {
		m, err := sess.Next(ctx)
		if err != nil {
			if cause := context.Cause(ctx); ctx.Err() != nil && cause != nil {
				err = cause
			}
			return w.end(err)
		}
		wctx, cancel := context.WithTimeout(ctx, w.cfg.WriteTimeout)
		err = conn.Write(wctx, websocket.MessageText, m.Data)
		timedOut := wctx.Err() == context.DeadlineExceeded
		cancel()
		if err != nil {
			if timedOut {
				sess.WriteTimedOut()
			}
			return endClient // the connection is gone; nothing more can be written
		}
		sess.Sent(m)
	}
}

// readCommands hands the client's commands to the session, and a present socket's
// status and activity commands to the presenter. A command beyond the connection's
// rate (PULSE_FEED_COMMAND_RATE) is ignored, undecoded, with a rate_limited error
// message; one that cannot be decoded is answered with an invalid_command error
// message; the connection ends on a binary message, a message over its read limit
// (1009), a command flood, or when the client goes. It reports whether the client
// closed the connection with a close frame.
func (w *watcher) readCommands(ctx context.Context, cancel context.CancelCauseFunc, conn *websocket.Conn, sess *feed.Session, p auth.Principal, dev *device) (closedByClient bool) {
	for {
		typ, b, err := conn.Read(ctx)
		if err != nil {
			cancel(nil)
			return websocket.CloseStatus(err) != -1
		}
		if typ != websocket.MessageText {
			cancel(errBinaryMessage)
			return false
		}
		if !sess.AdmitCommand() {
			if err := sess.Reject(feed.CodeRateLimited, w.rateLimited); err != nil {
				cancel(err)
				return false
			}
			continue
		}
		if isPresentOp(b) {
			if err := w.presentCommand(ctx, dev, sess, b); err != nil {
				cancel(err)
				return false
			}
			continue
		}
		cmd, err := feed.DecodeCommand(b, w.cfg.MaxUsers)
		if err != nil {
			err = sess.Reject(feed.CodeInvalidCommand, err.Error())
		} else if refused := mayWatch(p, cmd.UserIDs); cmd.Op == feed.OpSubscribe && refused != nil {
			err = sess.Reject(feed.CodeForbidden, refused.Message)
		} else {
			err = sess.Handle(cmd)
		}
		if err != nil {
			cancel(err)
			return false
		}
	}
}

// presentCommand carries out a status or activity command (present.go).
func (w *watcher) presentCommand(ctx context.Context, dev *device, sess *feed.Session, b []byte) error {
	if w.present == nil {
		return sess.Reject(feed.CodeInvalidCommand, "this instance takes no present sockets")
	}
	return w.present.command(ctx, dev, sess, b)
}

// ping sends a WebSocket ping every interval; a peer that does not answer within
// the interval (at least the write timeout) is gone. A present socket is pinged every
// PULSE_PRESENT_HEARTBEAT if that is sooner, and each answer is a heartbeat of its
// device.
func (w *watcher) ping(ctx context.Context, cancel context.CancelCauseFunc, conn *websocket.Conn, dev *device) {
	interval := w.cfg.PingInterval
	if dev != nil {
		interval = min(interval, w.present.cfg.Heartbeat)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	wait := max(w.cfg.PingInterval, w.cfg.WriteTimeout)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			pctx, pcancel := context.WithTimeout(ctx, wait)
			err := conn.Ping(pctx)
			pcancel()
			if err != nil {
				cancel(nil)
				return
			}
			if dev != nil {
				w.present.heartbeat(ctx, dev)
			}
		}
	}
}

// sse serves the feed as server-sent events named by the message type (snapshot,
// change, error); a snapshot's or change's id is its cursor, so EventSource resumes
// with Last-Event-ID by itself; a comment line `: ping` keeps proxies from timing out.
func (w *watcher) sse(c echo.Context) error {
	o, err := w.options(c, true)
	if err != nil {
		return err
	}
	if _, err := presentDevice(c, true); err != nil {
		return err
	}
	release, err := w.acquire(c)
	if err != nil {
		return err
	}
	defer release()
	sess, err := w.open(c.Request().Context(), o, auth.PrincipalOf(c))
	if err != nil {
		return err
	}
	defer sess.Close()

	res := c.Response()
	clearDeadlines(res)
	h := res.Header()
	h.Set(echo.HeaderContentType, "text/event-stream; charset=utf-8")
	if h.Get(echo.HeaderCacheControl) == "" {
		h.Set(echo.HeaderCacheControl, "no-cache")
	}
	h.Set("X-Accel-Buffering", "no") // nginx would buffer the stream otherwise
	// An origin of PULSE_CORS_ORIGINS has its CORS headers already; one of
	// PULSE_FEED_ORIGINS only (a pattern) gets them here.
	if origin := c.Request().Header.Get("Origin"); origin != "" && h.Get("Access-Control-Allow-Origin") == "" && w.originAllowed(origin) {
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
	}
	res.WriteHeader(http.StatusOK)

	rc := http.NewResponseController(res)
	var mu sync.Mutex
	write := func(b []byte) error {
		mu.Lock()
		defer mu.Unlock()
		_ = rc.SetWriteDeadline(time.Now().Add(w.cfg.WriteTimeout))
		_, err := res.Write(b)
		if err == nil {
			err = rc.Flush()
		}
		_ = rc.SetWriteDeadline(time.Time{})
		return err
	}
	if err := write([]byte("retry: 1000\n\n")); err != nil {
		return nil
	}

	ctx, cancel := context.WithCancelCause(c.Request().Context())
	defer cancel(nil)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(w.cfg.PingInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if write([]byte(": ping\n\n")) != nil {
					cancel(nil)
					return
				}
			}
		}
	})
	wg.Go(func() { w.guardCredential(ctx, cancel, auth.PrincipalOf(c)) })
	defer wg.Wait()
	defer cancel(nil)

	for {
		m, err := sess.Next(ctx)
		if err != nil {
			if cause := context.Cause(ctx); ctx.Err() != nil && cause != nil {
				err = cause
			}
			if end := w.end(err); end != endClient {
				m := feed.ErrorMessage(end.code, end.reason)
				_ = write(sseEvent(m.Type, "", m.Data))
			}
			return nil
		}
		start := time.Now()
		if err := write(sseEvent(m.Type, m.Cursor, m.Data)); err != nil {
			if time.Since(start) >= w.cfg.WriteTimeout {
				sess.WriteTimedOut()
			}
			return nil
		}
		sess.Sent(m)
	}
}

func sseEvent(event, id string, data []byte) []byte {
	b := make([]byte, 0, len(data)+len(id)+32)
	if event != "" {
		b = append(b, "event: "...)
		b = append(b, event...)
		b = append(b, '\n')
	}
	if id != "" {
		b = append(b, "id: "...)
		b = append(b, id...)
		b = append(b, '\n')
	}
	b = append(b, "data: "...)
	b = append(b, data...)
	return append(b, '\n', '\n')
}

// originAllowed applies PULSE_FEED_ORIGINS to an SSE request's Origin, as the
// WebSocket handshake does.
func (w *watcher) originAllowed(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	for _, p := range w.cfg.Origins {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(target)); ok {
			return true
		}
	}
	return false
}
