package main

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/domain/presence"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
)

// auditedActions are the routes that act on one user's data as a whole, "METHOD
// path", and the action their audit line names.
var auditedActions = map[string]string{
	http.MethodGet + " " + exportPath:  "export",
	http.MethodDelete + " " + userPath: "erase",
}

// auditRecord is what the audit line of one call says beyond who asked, whom, and the
// answer's status; the handler fills it in.
type auditRecord struct {
	// next: a page after the first; entries: timeline entries answered (exports).
	next    bool
	entries int
}

// auditKey holds the call's auditRecord in its echo.Context.
const auditKey = "pulse.query.audit"

// auditUserData writes one info line, msg=audit, for every call of an audited route
// that the guard let through, whatever answers it (the operator view refused by
// auth.Views, a rate's 429, the handler's 403, 400, 404, 503, 2xx): the action, whom
// (the user id once valid), who (the credential's name, never the key or token), the
// status and the time taken, and for an export the page and the entries answered.
// Operators keep these lines as the record of who read or erased whom; the access log
// is sampled and names no user. Calls without a valid credential, or whose
// credential lacks the route's scope, are the guard's 401s and 403s, counted in
// pulse_auth_refused_total. Installed right after the guard, so it wraps every check
// that follows.
func auditUserData(logger *slog.Logger) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			action, ok := auditedActions[c.Request().Method+" "+c.Path()]
			if !ok {
				return next(c)
			}
			var user string
			if id := c.Param("userId"); presence.ValidateID(id, presence.MaxUserIDLen) == nil {
				user = id
			}
			rec := &auditRecord{}
			c.Set(auditKey, rec)
			began := time.Now()
			err := next(c)
			status := c.Response().Status
			if err != nil {
				status = errorStatus(err)
			}
			attrs := []any{"action", action, "user", user, "credential", auth.PrincipalOf(c).Name, "status", status}
			if action == "export" {
				attrs = append(attrs, "page", pageName(rec.next), "entries", rec.entries)
			}
			logger.Info("audit", append(attrs, "took", time.Since(began).Round(time.Millisecond).String())...)
			return err
		}
	}
}

// auditOf is the call's auditRecord; one of its own for a handler served without
// auditUserData (unit tests of the handler alone).
func auditOf(c echo.Context) *auditRecord {
	if rec, ok := c.Get(auditKey).(*auditRecord); ok {
		return rec
	}
	return &auditRecord{}
}

func pageName(next bool) string {
	if next {
		return "next"
	}
	return "first"
}

// errorStatus is the HTTP status err is answered with (httpserver's error handler).
func errorStatus(err error) int {
	var e *httpserver.Error
	if errors.As(err, &e) {
		return e.Status
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return he.Code
	}
	return http.StatusInternalServerError
}
