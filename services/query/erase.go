package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/stores/eventlog"
)

// userPath is the route that erases a user (docs/design.md, "Erasure"); it needs the
// operator scope (installAuth).
const userPath = "/v1/users/:userId"

// operatorWriteRoutes are the routes that need the operator scope whatever the view:
// "METHOD path".
var operatorWriteRoutes = []string{http.MethodDelete + " " + userPath}

// erasure is the answer to DELETE /v1/users/{id}: the erase event Kafka acknowledged.
type erasure struct {
	UserID   string    `json:"userId"`
	EventID  string    `json:"eventId"`
	ErasedAt time.Time `json:"erasedAt"`
}

// eraser serves DELETE /v1/users/{id}: it produces the user's erase event to
// presence.events, through the producer of the group routes, and answers once Kafka
// acknowledged it. The aggregator and history do the erasing as they fold it.
type eraser struct {
	producer *eventlog.Producer
	now      func() time.Time
}

func (a *api) eraseRoutes(e *echo.Echo, producer *eventlog.Producer) {
	h := &eraser{producer: producer, now: time.Now}
	e.DELETE(userPath, h.erase)
}

func (h *eraser) erase(c echo.Context) error {
	id, err := userIDParam(c)
	if err != nil {
		return err
	}
	eid, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("making an event id: %w", err)
	}
	// OccurredAt is the server's time: the erasure drops the user's events dated at or
	// before it that come later in the log (in flight), and a client's clock has no
	// say in that.
	now := h.now().UTC().Truncate(time.Microsecond)
	ev := presence.Event{ID: eid.String(), UserID: id, Kind: presence.KindErase, DeviceID: presence.AllDevices,
		OccurredAt: now, ReceivedAt: now, Source: presence.SourceSystem}
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("erase event: %w", err)
	}
	principal := auth.PrincipalOf(c).Name
	pctx, cancel := context.WithTimeout(c.Request().Context(), time.Minute)
	defer cancel()
	if err := h.producer.Produce(pctx, principal, []presence.Event{ev}); err != nil {
		return fmt.Errorf("%w: %w", httpserver.Unavailable("Kafka did not acknowledge the erasure; retry the request (erasing twice is harmless)", time.Second), err)
	}
	return httpserver.JSON(c, http.StatusAccepted, erasure{UserID: id, EventID: ev.ID, ErasedAt: now})
}
