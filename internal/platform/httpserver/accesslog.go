package httpserver

import (
	"net"
	"time"

	"github.com/labstack/echo/v4"
)

// principalKey is where SetPrincipal leaves the credential's name for the access log.
const principalKey = "httpserver.principal"

// SetPrincipal records the name of the credential a request was authenticated with
// (a key's name, "user:<id>"; never a secret), for the access log.
func SetPrincipal(c echo.Context, name string) { c.Set(principalKey, name) }

// accessLog logs one request in every AccessLogEvery (0: none): the route template,
// method, status, principal, remote address and duration. It never holds a credential,
// a query string or a user id from the path, so sampling it is safe at any rate.
func (s *Server) accessLog(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		every := uint64(s.cfg.AccessLogEvery)
		if every == 0 || s.requests.Add(1)%every != 0 {
			return next(c)
		}
		start := time.Now()
		err := next(c)
		status := c.Response().Status
		if err != nil {
			status = toError(err).Status
		}
		principal, _ := c.Get(principalKey).(string)
		if principal == "" {
			principal = "-"
		}
		remote, _, splitErr := net.SplitHostPort(c.Request().RemoteAddr)
		if splitErr != nil {
			remote = c.Request().RemoteAddr
		}
		s.logger.Info("request", "route", routeLabel(c.Path()), "method", MethodLabel(c.Request().Method),
			"status", status, "principal", principal, "remote", remote, "ms", time.Since(start).Milliseconds())
		return err
	}
}
