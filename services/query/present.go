package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/api/customjson"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/platform/limits"
	"github.com/pulse-presence/pulse/internal/stores/eventlog"
	"github.com/pulse-presence/pulse/services/query/feed"
)

// Presence that follows the socket (docs/feed.md, "Present sockets"): a WebSocket
// opened with ?present=<deviceId> speaks for that device of its user. Its answered
// pings are the device's heartbeats, its status and activity commands are the
// device's events, and a close the client starts posts the device offline. Every
// one of these is an event on presence.events, produced as ingest produces them and
// acknowledged by Kafka before the client hears it was taken.

// PresentConfig is how present sockets post their devices' events.
type PresentConfig struct {
	// Heartbeat is how often a present socket is pinged; each answered ping is one
	// heartbeat of its device.
	Heartbeat time.Duration
	// AckTimeout bounds the wait for Kafka's acknowledgement of one event.
	AckTimeout time.Duration
	// UserRate and UserBurst bound one user id's events from present sockets, as
	// ingest's PULSE_INGEST_USER_RATE and PULSE_INGEST_USER_BURST bound its posts.
	UserRate, UserBurst int
}

// presentUsers bounds the user ids whose rate buckets are remembered.
const presentUsers = 100_000

// presenter posts present sockets' events.
type presenter struct {
	producer *eventlog.Producer
	rates    *limits.Rates
	cfg      PresentConfig
	logger   *slog.Logger
	// now is the server clock; tests replace it.
	now func() time.Time

	sockets prometheus.Gauge
	events  *prometheus.CounterVec
	// open counts the present sockets' handlers still running: the server's shutdown
	// does not wait for hijacked connections, and a closing socket's offline event
	// needs the producer (drain).
	open sync.WaitGroup
}

func newPresenter(producer *eventlog.Producer, cfg PresentConfig, logger *slog.Logger, reg prometheus.Registerer) *presenter {
	p := &presenter{
		producer: producer,
		rates:    limits.NewRates(cfg.UserRate, cfg.UserBurst, presentUsers),
		cfg:      cfg,
		logger:   logger,
		now:      time.Now,
		sockets: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulse_query_present_sockets",
			Help: "Open feed WebSockets that keep a device present (?present=).",
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_query_present_events_total",
			Help: "Events present sockets posted, by kind and outcome (acked, rate_limited, failed).",
		}, []string{"kind", "outcome"}),
	}
	reg.MustRegister(p.sockets, p.events)
	return p
}

// drain waits, at most timeout, for the present sockets' handlers to finish (their
// last offline events acknowledged), so the producer is closed after them.
func (p *presenter) drain(timeout time.Duration) bool {
	done := make(chan struct{})
	go func() { p.open.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// device is the device a present socket speaks for.
type device struct {
	user, id string
	// principal names the credential in the records' principal header.
	principal string
}

// Query parameters of a present socket.
const (
	presentParam     = "present"
	presentUserParam = "presentUser"
)

// device reads ?present=<deviceId> (and, for a credential that is not a user token,
// ?presentUser=<userId>): nil when the connection is not present. A user token speaks
// for its own user only; an API key needs the write scope as well as the read scope.
func presentDevice(c echo.Context, sse bool) (*device, error) {
	q := c.QueryParams()
	id, user := q.Get(presentParam), q.Get(presentUserParam)
	if _, ok := q[presentParam]; !ok {
		if _, ok := q[presentUserParam]; ok {
			return nil, httpserver.BadRequest(presentUserParam, "only with present=<deviceId>")
		}
		return nil, nil
	}
	if sse {
		return nil, httpserver.BadRequest(presentParam, "a present connection is a WebSocket (GET /v1/watch): server-sent events cannot answer pings")
	}
	if err := presence.ValidateID(id, presence.MaxDeviceIDLen); err != nil {
		return nil, httpserver.BadRequest(presentParam, err.Error())
	}
	p := auth.PrincipalOf(c)
	switch {
	case p.UserID != "" && user != "" && user != p.UserID:
		return nil, auth.Forbidden(fmt.Sprintf("this user token is present only for its own user; %q is another", user))
	case p.UserID != "":
		user = p.UserID
	case !p.Has(auth.ScopeWrite):
		return nil, &httpserver.Error{Status: http.StatusForbidden, Code: "forbidden",
			Message: "present=<deviceId> posts events: it needs a user token, or a key with the write scope as well as read"}
	case user == "":
		return nil, httpserver.BadRequest(presentUserParam, "is required with present=<deviceId> for an API key: the user the device belongs to")
	}
	if err := presence.ValidateID(user, presence.MaxUserIDLen); err != nil {
		return nil, httpserver.BadRequest(presentUserParam, err.Error())
	}
	return &device{user: user, id: id, principal: p.Name}, nil
}

// post produces one event of d and returns its id once Kafka acknowledged it. A
// refusal is an *httpserver.Error: 429 over the user's rate, 503 when Kafka did not
// acknowledge in time.
func (p *presenter) post(ctx context.Context, d *device, kind presence.Kind, status presence.Status, custom *presence.CustomStatus) (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("making an event id: %w", err)
	}
	now := p.now()
	e := presence.Event{ID: id.String(), UserID: d.user, Kind: kind, Status: status, DeviceID: d.id,
		ReceivedAt: now.UTC().Truncate(time.Microsecond), Source: presence.SourceAPI, Custom: custom}
	if err := e.Validate(); err != nil {
		return "", fmt.Errorf("present event: %w", err)
	}
	if _, wait, err := p.rates.Reserve(d.user, 1, now); err != nil || wait > 0 {
		p.events.WithLabelValues(kind.String(), "rate_limited").Inc()
		return "", &httpserver.Error{Status: http.StatusTooManyRequests, Code: "rate_limited", RetryAfter: wait,
			Message: fmt.Sprintf("user %q is over its rate of %d events/s (PULSE_INGEST_USER_RATE); retry after Retry-After seconds", d.user, p.cfg.UserRate)}
	}
	if err := p.producer.Produce(ctx, d.principal, []presence.Event{e}); err != nil {
		p.events.WithLabelValues(kind.String(), "failed").Inc()
		return "", fmt.Errorf("%w: %w", httpserver.Unavailable("Kafka did not acknowledge the event; retry later", time.Second), err)
	}
	p.events.WithLabelValues(kind.String(), "acked").Inc()
	return e.ID, nil
}

// Commands of a present socket, besides the feed's subscribe and unsubscribe:
//
//	{"op":"status","status":"idle"}   the device's status: online, idle, invisible or offline
//	{"op":"status","status":"online","data":{"text":"In a meeting","emoji":"📅"}}
//	                                  the same, setting the user's custom status ({} clears it)
//	{"op":"activity"}                 the user did something on the device
const (
	opStatus   = "status"
	opActivity = "activity"
)

type presentCommand struct {
	Op     string  `json:"op"`
	Status *string `json:"status,omitempty"`
	// Data is the user's custom status, on status commands only (customjson).
	Data json.RawMessage `json:"data,omitempty"`
}

// isPresentOp reports whether b is a command a present socket answers, by its op
// alone: anything else is the feed's to decode (and refuse).
func isPresentOp(b []byte) bool {
	var peek struct {
		Op string `json:"op"`
	}
	return json.Unmarshal(b, &peek) == nil && (peek.Op == opStatus || peek.Op == opActivity)
}

// ackBody is what a present socket hears once Kafka acknowledged its command's event.
type ackBody struct {
	Type    string `json:"type"`
	Op      string `json:"op"`
	EventID string `json:"eventId"`
}

// command posts the event of a present command and answers it in order with the
// feed's messages: an ack with the event id, or an error message (invalid_command,
// rate_limited, unavailable). Without a present device it is an invalid_command.
func (p *presenter) command(ctx context.Context, d *device, sess *feed.Session, b []byte) error {
	if d == nil {
		return sess.Reject(feed.CodeInvalidCommand,
			"status and activity commands need a present connection: open it with ?present=<deviceId>")
	}
	var cmd presentCommand
	if err := httpserver.DecodeObject(b, &cmd, ""); err != nil {
		return sess.Reject(feed.CodeInvalidCommand, err.Error())
	}
	kind, status := presence.KindActivity, presence.StatusUnknown
	var custom *presence.CustomStatus
	switch {
	case cmd.Op == opActivity && cmd.Status != nil:
		return sess.Reject(feed.CodeInvalidCommand, "status: only a status command carries a status")
	case cmd.Op == opActivity && cmd.Data != nil:
		return sess.Reject(feed.CodeInvalidCommand, "data: only a status command carries data")
	case cmd.Op == opStatus && cmd.Status == nil:
		return sess.Reject(feed.CodeInvalidCommand, "status: is required: online, idle, invisible or offline")
	case cmd.Op == opStatus:
		st, err := presence.ParseStatus(*cmd.Status)
		if err != nil {
			return sess.Reject(feed.CodeInvalidCommand, "status: "+err.Error())
		}
		kind, status = presence.KindStatus, st
		if cmd.Data != nil {
			c, err := customjson.Decode(cmd.Data, "data", p.now())
			if apiErr, ok := errors.AsType[*httpserver.Error](err); ok {
				return sess.Reject(feed.CodeInvalidCommand, apiErr.Field+": "+apiErr.Message)
			}
			if err != nil {
				return err
			}
			custom = c
		}
	}
	id, err := p.post(ctx, d, kind, status, custom)
	if apiErr, ok := errors.AsType[*httpserver.Error](err); ok {
		if apiErr.Status == http.StatusServiceUnavailable {
			p.logger.Debug("present command not acknowledged", "user", d.user, "device", d.id, "err", err)
		}
		return sess.Reject(apiErr.Code, apiErr.Message)
	}
	if err != nil {
		return err
	}
	data, err := json.Marshal(ackBody{Type: feed.TypeAck, Op: cmd.Op, EventID: id})
	if err != nil {
		return err
	}
	return sess.Reply(feed.Message{Type: feed.TypeAck, Data: data})
}

// heartbeat posts a heartbeat of d after an answered ping. A refusal ends nothing:
// the next ping tries again, and a device whose heartbeats all fail times out as a
// silent one would.
func (p *presenter) heartbeat(ctx context.Context, d *device) {
	if _, err := p.post(ctx, d, presence.KindHeartbeat, presence.StatusUnknown, nil); err != nil && ctx.Err() == nil {
		p.logger.Debug("present heartbeat not posted", "user", d.user, "device", d.id, "err", err)
	}
}

// offline posts d offline after the client closed its socket. The request is over
// by then, so it runs on its own deadline.
func (p *presenter) offline(ctx context.Context, d *device) {
	ctx = context.WithoutCancel(ctx)
	if _, err := p.post(ctx, d, presence.KindStatus, presence.Offline, nil); err != nil {
		// The device times out after PULSE_OFFLINE_AFTER instead.
		p.logger.Info("present socket closed but its device's offline was not posted; it times out instead",
			"user", d.user, "device", d.id, "err", err)
	}
}
