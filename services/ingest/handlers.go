package main

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulse-presence/pulse/pkg/httpserver"
	"github.com/pulse-presence/pulse/pkg/presence"
)

// retryAfter is what a 503 tells clients to wait: Kafka leader elections and broker
// restarts usually settle within seconds.
const retryAfter = time.Second

// handler serves the ingest endpoints.
type handler struct {
	producer *producer
	maxBody  int64
	maxBatch int
	maxSkew  time.Duration
	// now is the server clock; tests replace it.
	now func() time.Time

	accepted *prometheus.CounterVec
	rejected *prometheus.CounterVec
}

func newHandler(cfg Config, p *producer, reg prometheus.Registerer) *handler {
	h := &handler{
		producer: p,
		maxBody:  cfg.MaxBody,
		maxBatch: cfg.MaxBatch,
		maxSkew:  cfg.MaxSkew,
		now:      time.Now,
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

type statusResponse struct {
	Success bool   `json:"success"`
	Message string `json:"message"`
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
	return c.JSON(http.StatusOK, statusResponse{Success: true, Message: "Status updated successfully."})
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
	return c.JSON(http.StatusAccepted, eventsResponse{Accepted: len(events), EventIDs: ids})
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
	return c.JSON(http.StatusAccepted, heartbeatResponse{EventID: e.ID})
}

func (h *handler) rules() rules { return newRules(h.now(), h.maxSkew) }

// send produces events and maps a failure onto the 503 clients retry on.
func (h *handler) send(c echo.Context, events []presence.Event) error {
	if err := h.producer.produce(c.Request().Context(), events); err != nil {
		// The client sees only the 503; the server's error handler logs the whole
		// chain, cause included, once per request (never per event).
		unavailable := httpserver.Unavailable(
			"Kafka did not acknowledge the events; retry later, reusing any eventId you sent", retryAfter)
		return fmt.Errorf("%w: %w", unavailable, err)
	}
	for i := range events {
		h.accepted.WithLabelValues(events[i].Kind.String()).Inc()
	}
	return nil
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
