package main

import (
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/platform/limits"
	"github.com/pulse-presence/pulse/internal/stores/eventlog"
)

// retryAfter is what a 503 tells clients to wait: Kafka leader elections and broker
// restarts usually settle within seconds.
const retryAfter = time.Second

// handler serves the ingest endpoints.
type handler struct {
	producer *eventlog.Producer
	maxBody  int64
	maxBatch int
	maxSkew  time.Duration
	// now is the server clock; tests replace it.
	now func() time.Time
	// keyRates and userRates bound events per second per key and per user id.
	keyRates, userRates *limits.Rates
	keyRate, userRate   int

	accepted *prometheus.CounterVec
	rejected *prometheus.CounterVec
	// acceptedBy caches accepted's counter of each kind, so an accepted request
	// skips the label lookup; filled on first use, so that a kind never accepted
	// has no series.
	acceptedBy [len(kindNames)]atomic.Pointer[prometheus.Counter]
}

// kindNames are the event kinds by presence.Kind, for acceptedBy.
var kindNames = [...]string{presence.KindUnknown: "", presence.KindStatus: "status",
	presence.KindHeartbeat: "heartbeat", presence.KindActivity: "activity"}

func newHandler(cfg Config, p *eventlog.Producer, reg prometheus.Registerer) *handler {
	h := &handler{
		producer:  p,
		maxBody:   cfg.MaxBody,
		maxBatch:  cfg.MaxBatch,
		maxSkew:   cfg.MaxSkew,
		now:       time.Now,
		keyRates:  limits.NewRates(cfg.KeyRate, max(cfg.KeyRate, cfg.MaxBatch), rateKeys),
		userRates: limits.NewRates(cfg.UserRate, cfg.UserBurst, cfg.RateUsers),
		keyRate:   cfg.KeyRate,
		userRate:  cfg.UserRate,
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_ingest_events_accepted_total",
			Help: "Events Kafka acknowledged, by kind.",
		}, []string{"kind"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_ingest_requests_rejected_total",
			Help: "Ingest requests answered with an error, by reason (the error code).",
		}, []string{"reason"}),
	}
	reg.MustRegister(h.accepted, h.rejected)
	return h
}

// register adds the ingest routes to e.
func (h *handler) register(e *echo.Echo) {
	e.POST("/status", h.counted(h.postStatus))
	e.POST("/v1/events", h.counted(h.postEvents))
	e.POST("/v1/heartbeat", h.counted(h.postHeartbeat))
}

type eventsResponse struct {
	Accepted int      `json:"accepted"`
	EventIDs []string `json:"eventIds"`
}

type heartbeatResponse struct {
	EventID string `json:"eventId"`
}

// postStatus is the seed's endpoint: a status event for the default device.
func (h *handler) postStatus(c echo.Context) error {
	body, err := httpserver.ReadBody(c, h.maxBody)
	if err != nil {
		return err
	}
	e, err := decodeStatus(body, h.rules())
	if err != nil {
		return err
	}
	if err := h.send(c, []presence.Event{e}); err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, statusUpdated)
}

// statusUpdated is every successful POST /status's answer, the seed API's shape, as
// httpserver.JSON would encode it.
var statusUpdated = []byte(`{"success":true,"message":"Status updated successfully."}` + "\n")

// jsonContentType is the Content-Type of writeJSON's answers; net/http only reads
// it, and its length equals its capacity, so an append copies it.
var jsonContentType = []string{echo.MIMEApplicationJSON}

// writeJSON answers body, already JSON, with status code: httpserver.JSON without
// encoding the same answer again for every request.
func writeJSON(c echo.Context, code int, body []byte) error {
	c.Response().Header()[echo.HeaderContentType] = jsonContentType
	c.Response().WriteHeader(code)
	if _, err := c.Response().Write(body); err != nil {
		// As httpserver.JSON: the status line is gone already.
		return echo.NewHTTPError(http.StatusInternalServerError, "encoding the answer").SetInternal(err)
	}
	return nil
}

// postEvents takes a batch: all of it is checked before any of it is produced.
func (h *handler) postEvents(c echo.Context) error {
	body, err := httpserver.ReadBody(c, h.maxBody)
	if err != nil {
		return err
	}
	events, err := decodeBatch(body, h.rules(), h.maxBatch)
	if err != nil {
		return err
	}
	if err := h.send(c, events); err != nil {
		return err
	}
	ids := make([]string, len(events))
	for i := range events {
		ids[i] = events[i].ID
	}
	return httpserver.JSON(c, http.StatusAccepted, eventsResponse{Accepted: len(events), EventIDs: ids})
}

func (h *handler) postHeartbeat(c echo.Context) error {
	body, err := httpserver.ReadBody(c, h.maxBody)
	if err != nil {
		return err
	}
	e, err := decodeHeartbeat(body, h.rules())
	if err != nil {
		return err
	}
	if err := h.send(c, []presence.Event{e}); err != nil {
		return err
	}
	return httpserver.JSON(c, http.StatusAccepted, heartbeatResponse{EventID: e.ID})
}

func (h *handler) rules() rules { return newRules(h.now(), h.maxSkew) }

// rateKeys bounds the keys whose event rates ingest remembers: keys are few, but
// every user token is one.
const rateKeys = 100_000

// admit checks that the request may post events: a user token only for its own
// user (403), and within the rates of its key and of each user (429 with
// Retry-After). A refused request produces nothing.
func (h *handler) admit(c echo.Context, events []presence.Event) error {
	for i := range events {
		if err := auth.ForUser(c, events[i].UserID); err != nil {
			return err
		}
	}
	now := h.now()
	key := auth.PrincipalOf(c).Name
	g, wait, err := h.keyRates.Reserve(key, len(events), now)
	if err != nil || wait > 0 {
		return rateLimited(fmt.Sprintf("key %s is over its rate of %d events/s (PULSE_INGEST_KEY_RATE)", key, h.keyRate), wait, err)
	}
	if len(events) == 1 {
		// Most requests carry one event: no map of users to build.
		if _, err := h.reserveUser(events[0].UserID, 1, now); err != nil {
			g.Cancel()
			return err
		}
		return nil
	}
	perUser := make(map[string]int, len(events))
	for i := range events {
		perUser[events[i].UserID]++
	}
	grants := []limits.Grant{g}
	for id, n := range perUser {
		g, err := h.reserveUser(id, n, now)
		if err != nil {
			for _, g := range grants {
				g.Cancel()
			}
			return err
		}
		grants = append(grants, g)
	}
	return nil
}

// reserveUser takes n events of user id's rate, or answers the 429 of a refusal.
func (h *handler) reserveUser(id string, n int, now time.Time) (limits.Grant, error) {
	g, wait, err := h.userRates.Reserve(id, n, now)
	if err != nil || wait > 0 {
		msg := fmt.Sprintf("user %q is over its rate of %d events/s (PULSE_INGEST_USER_RATE)", id, h.userRate)
		if err != nil {
			msg = fmt.Sprintf("%d events for user %q in one request; at most %d (PULSE_INGEST_USER_BURST)", n, id, h.userRates.Burst())
		}
		return g, rateLimited(msg, wait, err)
	}
	return g, nil
}

// rateLimited is the 429 of a refusal, to retry after wait; or, when the request
// could never fit (err: more events in one request than a bucket holds), a 413: a
// 429 always says when to come back.
func rateLimited(message string, wait time.Duration, err error) error {
	if err != nil {
		return &httpserver.Error{Status: http.StatusRequestEntityTooLarge, Code: "too_large", Message: message + "; send fewer events per request"}
	}
	return &httpserver.Error{Status: http.StatusTooManyRequests, Code: "rate_limited",
		Message: message + "; retry after Retry-After seconds", RetryAfter: wait}
}

// send produces events and maps a failure onto the 503 clients retry on.
func (h *handler) send(c echo.Context, events []presence.Event) error {
	if err := h.admit(c, events); err != nil {
		return err
	}
	if err := h.producer.Produce(c.Request().Context(), auth.PrincipalOf(c).Name, events); err != nil {
		// The client sees only the 503; the server's error handler logs the whole
		// chain, cause included, once per request (never per event).
		unavailable := httpserver.Unavailable(
			"Kafka did not acknowledge the events; retry later, reusing any eventId you sent", retryAfter)
		return fmt.Errorf("%w: %w", unavailable, err)
	}
	for i := range events {
		h.acceptedOf(events[i].Kind).Inc()
	}
	return nil
}

// acceptedOf is the accepted counter of kind k.
func (h *handler) acceptedOf(k presence.Kind) prometheus.Counter {
	if int(k) >= len(h.acceptedBy) {
		return h.accepted.WithLabelValues(k.String())
	}
	if c := h.acceptedBy[k].Load(); c != nil {
		return *c
	}
	c := h.accepted.WithLabelValues(k.String())
	h.acceptedBy[k].Store(&c)
	return c
}

// counted counts the requests a handler rejects, by the error code clients see.
func (h *handler) counted(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := next(c)
		if err != nil {
			reason := "internal"
			if apiErr, ok := errors.AsType[*httpserver.Error](err); ok {
				reason = apiErr.Code
			}
			h.rejected.WithLabelValues(reason).Inc()
		}
		return err
	}
}
