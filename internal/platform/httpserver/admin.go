package httpserver

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// adminListener serves /metrics and Go's profiles on PULSE_ADMIN_ADDR, apart from the
// port clients reach: a deployment exposes the main port and keeps this one on the
// cluster's network, so neither the metrics (which name routes, keys' counts and
// internals) nor the profiles are one request away from the Internet. It speaks plain
// HTTP and asks no credentials; the network is its access control (docs/design.md,
// Security). The probes stay on the main port: they check the port that serves traffic.
type adminListener struct {
	addr string
	srv  *http.Server
	ln   net.Listener
}

// newAdmin builds the admin listener of s; its requests are measured and logged like
// the main port's.
func (s *Server) newAdmin(reg *prometheus.Registry, latency *prometheus.HistogramVec) *adminListener {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = s.handleError
	e.Use(s.securityHeaders, s.recoverPanics, measure(latency), s.accessLog)
	registerAdminRoutes(e, reg, s.cfg.PProf)
	return &adminListener{addr: s.cfg.AdminAddr, srv: s.httpServer(e)}
}

func (a *adminListener) listen() error {
	ln, err := net.Listen("tcp", a.addr)
	if err != nil {
		return fmt.Errorf("listening on %s (PULSE_ADMIN_ADDR): %w", a.addr, err)
	}
	a.ln = ln
	return nil
}

func (a *adminListener) serve() error {
	if err := a.srv.Serve(a.ln); err != http.ErrServerClosed {
		return fmt.Errorf("admin listener: %w", err)
	}
	return nil
}

// AdminAddr is the address of the admin listener once Listen succeeded; nil without
// PULSE_ADMIN_ADDR.
func (s *Server) AdminAddr() net.Addr {
	if s.admin == nil || s.admin.ln == nil {
		return nil
	}
	return s.admin.ln.Addr()
}

// adminElsewhere answers 404 on the main port for what the admin listener serves, before
// routing, so the answer is the same with or without credentials and the services'
// guards never see these paths.
func adminElsewhere(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		p := c.Request().URL.Path
		if p == "/metrics" || p == "/debug/pprof" || strings.HasPrefix(p, "/debug/pprof/") {
			return echo.ErrNotFound
		}
		return next(c)
	}
}

// optionalHostPort accepts an unset address or a "host:port" (the host may be empty).
func optionalHostPort(v string) (string, bool) {
	const want = "want host:port or unset"
	if v == "" {
		return want, true
	}
	_, _, err := net.SplitHostPort(v)
	return want, err == nil
}
