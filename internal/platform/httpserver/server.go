// Package httpserver is the HTTP edge every Pulse service shares: an Echo server with
// /healthz, /readyz and /metrics, request metrics, JSON errors of one shape, a
// graceful shutdown bounded by a deadline, TLS from files reloaded when they change,
// and CORS for the configured origins.
package httpserver

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pulse-presence/pulse/internal/platform/config"
	"github.com/pulse-presence/pulse/internal/platform/health"
)

// Config is the HTTP server's settings.
type Config struct {
	Addr string
	// ShutdownTimeout bounds draining in-flight requests on SIGTERM.
	ShutdownTimeout   time.Duration
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	// CheckTimeout bounds each dependency check of /readyz.
	CheckTimeout time.Duration
	// PProf serves Go's profiles under /debug/pprof/ (off by default: they expose internals).
	PProf bool
	// AdminAddr, when set, is the admin listener: /metrics and the profiles move there
	// and the main listener answers 404 for them (admin.go).
	AdminAddr string
	// AccessLogEvery logs one request in every AccessLogEvery (0: none; accessLog).
	AccessLogEvery int
	// TLS, when enabled, makes the port speak only TLS. Its rows (TLSVars) are in the
	// tables of the services that face clients; the others serve plain HTTP.
	TLS TLSConfig
	// CORS, when it lists origins, lets those origins' pages call the API from a
	// browser (cors.go). Its row (CORSVars) is in the tables of the services that face
	// clients.
	CORS CORSConfig
}

// Vars are the HTTP rows of a service's configuration table; defAddr is the service's
// own port.
func Vars(c *Config, defAddr string) []*config.Var {
	return config.Group("http",
		config.String(&c.Addr, "PULSE_HTTP_ADDR", defAddr, "address the API, /healthz, /readyz and /metrics (unless PULSE_ADMIN_ADDR) listen on",
			config.HostPort).DocDefault("the service's port (Ports above)"),
		config.Duration(&c.ShutdownTimeout, "PULSE_SHUTDOWN_TIMEOUT", 15*time.Second,
			"how long in-flight requests (and the service's own draining) may take after SIGTERM", config.Positive),
		config.Duration(&c.ReadHeaderTimeout, "PULSE_HTTP_READ_HEADER_TIMEOUT", 5*time.Second,
			"longest wait for a request's headers", config.Positive),
		config.Duration(&c.ReadTimeout, "PULSE_HTTP_READ_TIMEOUT", 30*time.Second,
			"longest read of a whole request, body included", config.Positive),
		config.Duration(&c.WriteTimeout, "PULSE_HTTP_WRITE_TIMEOUT", 30*time.Second,
			"longest time from the end of a request's headers to the end of its answer", config.Positive),
		config.Duration(&c.IdleTimeout, "PULSE_HTTP_IDLE_TIMEOUT", 120*time.Second,
			"how long a keep-alive connection may wait for its next request", config.Positive),
		config.Duration(&c.CheckTimeout, "PULSE_READY_CHECK_TIMEOUT", 2*time.Second,
			"deadline of each dependency check of /readyz", config.Positive),
		config.Int(&c.AccessLogEvery, "PULSE_ACCESS_LOG_EVERY", 1000,
			"log one request in every N (route template, method, status, credential name, remote address, duration; never a key): 1 logs all, 0 none",
			config.NotNegative),
		config.Bool(&c.PProf, "PULSE_PPROF", false,
			"serve Go's profiles under /debug/pprof/ (they expose internals: keep off where the port is reachable)"),
		config.String(&c.AdminAddr, "PULSE_ADMIN_ADDR", "",
			"address of the admin listener: when set, /metrics and /debug/pprof/ are served only there, in plain HTTP and without credentials (keep it off public networks), and the main port answers 404 for them; /healthz and /readyz stay on the main port",
			optionalHostPort).DocDefault("unset: everything on PULSE_HTTP_ADDR"),
	)
}

// ConfigFromEnv reads the HTTP rows (Vars) through e, which collects bad values.
func ConfigFromEnv(e *config.Env, defAddr string) Config {
	var c Config
	e.Load(Vars(&c, defAddr)...)
	return c
}

// readyInterval is how old the probe /readyz answers from may be: however many
// requests come, the dependencies see at most one probe per interval.
const readyInterval = time.Second

// Server is a service's HTTP server. Register routes on Echo before calling Run.
type Server struct {
	Echo *echo.Echo

	cfg      Config
	logger   *slog.Logger
	failures *failureLog
	ready    *health.Prober
	srv      *http.Server
	ln       net.Listener
	admin    *adminListener // nil without AdminAddr
	draining atomic.Bool
	depUp    *prometheus.GaugeVec
	certs    *certReloader // nil without TLS
	// requests counts requests for the access log's sampling.
	requests atomic.Uint64
}

// New builds a server whose /readyz runs checks, and whose /metrics serves reg.
func New(cfg Config, logger *slog.Logger, reg *prometheus.Registry, checks ...health.Check) *Server {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	s := &Server{
		Echo:     e,
		cfg:      cfg,
		logger:   logger,
		failures: newFailureLog(logger),
		ready:    health.NewProber(checks, cfg.CheckTimeout, readyInterval, logger),
		depUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pulse_dependency_up",
			Help: "1 when the dependency answered the last readiness check, else 0.",
		}, []string{"dependency"}),
	}
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "pulse_http_request_duration_seconds",
		Help:    "HTTP request latency by route, method and status code.",
		Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"route", "method", "code"})
	reg.MustRegister(latency, s.depUp)
	if cfg.TLS.Enabled() {
		s.certs = newCertReloader(cfg.TLS.CertFile, cfg.TLS.KeyFile, logger)
		notAfter := prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pulse_tls_certificate_not_after_seconds",
			Help: "When the certificate the HTTP port serves expires, in Unix seconds.",
		})
		reg.MustRegister(notAfter)
		s.certs.loaded = func(c *tls.Certificate) { notAfter.Set(float64(c.Leaf.NotAfter.Unix())) }
	}

	e.HTTPErrorHandler = s.handleError
	e.Use(s.securityHeaders, s.recoverPanics, measure(latency), s.accessLog)
	// Before every middleware the services add, so a preflight never meets their guards.
	if mw := cors(cfg.CORS); mw != nil {
		e.Use(mw)
	}
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	if cfg.AdminAddr == "" {
		registerAdminRoutes(e, reg, cfg.PProf)
	} else {
		e.Pre(adminElsewhere)
		s.admin = s.newAdmin(reg, latency)
	}
	s.srv = s.httpServer(e)
	return s
}

// httpServer is net/http's server of h with the configured timeouts.
func (s *Server) httpServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
	}
}

// registerAdminRoutes puts /metrics and, when asked, Go's profiles on e.
func registerAdminRoutes(e *echo.Echo, reg *prometheus.Registry, pprof bool) {
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})))
	if pprof {
		e.GET("/debug/pprof/*", echo.WrapHandler(http.HandlerFunc(servePProf)))
	}
}

// Listen opens the listening socket, so callers learn the address (":0" in tests)
// before serving. With TLS it first loads the certificate: a pair that does not load
// stops the start.
func (s *Server) Listen() error {
	if err := s.cfg.TLS.Validate(); err != nil {
		return err
	}
	if s.certs != nil {
		if err := s.certs.load(); err != nil {
			return err
		}
		tc, err := newTLSConfig(s.cfg.TLS, s.certs)
		if err != nil {
			return err
		}
		s.srv.TLSConfig = tc
	}
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.cfg.Addr, err)
	}
	if s.admin != nil {
		if err := s.admin.listen(); err != nil {
			ln.Close()
			return err
		}
	}
	s.ln = ln
	return nil
}

// Addr is the address the server listens on, once Listen succeeded.
func (s *Server) Addr() net.Addr {
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Run serves until ctx ends, then stops taking new connections, reports not-ready,
// and waits up to the shutdown timeout for in-flight requests.
func (s *Server) Run(ctx context.Context) error {
	if s.ln == nil {
		if err := s.Listen(); err != nil {
			return err
		}
	}
	s.logger.Info("http server listening", "addr", s.ln.Addr().String(), "tls", s.certs != nil,
		"client_certificates", s.cfg.TLS.ClientCAFile != "")
	errc := make(chan error, 2)
	if s.admin != nil {
		go func() { errc <- s.admin.serve() }()
	}
	go func() {
		if s.certs == nil {
			errc <- s.srv.Serve(s.ln)
			return
		}
		// The certificate comes from TLSConfig.GetCertificate, so no file names here.
		// A plain HTTP request on this port gets net/http's 400 "Client sent an HTTP
		// request to an HTTPS server" and the connection closed: nothing is served.
		errc <- s.srv.ServeTLS(s.ln, "", "")
	}()
	serving := 1
	if s.admin != nil {
		serving = 2
	}
	var serveErr error
	select {
	case serveErr = <-errc:
		serving--
	case <-ctx.Done():
	}
	s.draining.Store(true)
	err := s.shutdown(ctx)
	for ; serving > 0; serving-- {
		<-errc
	}
	if serveErr != nil {
		return fmt.Errorf("serving http: %w", serveErr)
	}
	if err != nil {
		return err
	}
	s.logger.Info("http server stopped")
	return nil
}

// shutdown stops both listeners, waiting up to the shutdown timeout for the requests
// in flight. The admin listener closes last, so the metrics stay scrapable while the
// main port drains.
func (s *Server) shutdown(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	err := s.srv.Shutdown(sctx)
	if err != nil {
		err = fmt.Errorf("http shutdown: %w", err)
	}
	if s.admin != nil {
		if aerr := s.admin.srv.Shutdown(sctx); aerr != nil && err == nil {
			err = fmt.Errorf("admin listener shutdown: %w", aerr)
		}
	}
	return err
}

func (s *Server) healthz(c echo.Context) error {
	return JSON(c, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(c echo.Context) error {
	if s.draining.Load() {
		return JSON(c, http.StatusServiceUnavailable, health.Report{Ready: false, Checks: []health.Result{}})
	}
	rep := s.ready.Report(c.Request().Context())
	for _, r := range rep.Checks {
		up := 0.0
		if r.OK {
			up = 1
		}
		s.depUp.WithLabelValues(r.Name).Set(up)
	}
	status := http.StatusOK
	if !rep.Ready {
		status = http.StatusServiceUnavailable
	}
	return JSON(c, status, rep)
}

func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	apiErr := toError(err)
	if apiErr.Status >= 500 {
		s.failures.log(c.Request().Method, c.Path(), err)
	}
	if werr := writeError(c, apiErr); werr != nil {
		s.logger.Warn("writing error response", "err", werr)
	}
}

// hstsValue is the Strict-Transport-Security of a TLS port: a year, this host only
// (which other hosts of a domain speak TLS is not Pulse's to say).
const hstsValue = "max-age=31536000"

// securityHeaders marks every answer nosniff, so a browser never reads a JSON body
// (which may echo what a client sent) as HTML or script; and, on a port that speaks
// only TLS, tells browsers to keep to https (docs/design.md, Security).
func (s *Server) securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("X-Content-Type-Options", "nosniff")
		if s.certs != nil {
			h.Set("Strict-Transport-Security", hstsValue)
		}
		return next(c)
	}
}

// recoverPanics turns a handler panic into a 500 and a log line instead of a crash.
func (s *Server) recoverPanics(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				err = fmt.Errorf("panic in handler: %v", r)
			}
		}()
		return next(c)
	}
}

// measure records each request's latency under its route template, not its raw path,
// and its method as one of a fixed set, so neither user ids nor invented methods ever
// become label values: the series are bounded by the routes (docs/design.md, Security).
func measure(h *prometheus.HistogramVec) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			status := c.Response().Status
			if err != nil {
				status = toError(err).Status
			}
			h.WithLabelValues(routeLabel(c.Path()), MethodLabel(c.Request().Method), strconv.Itoa(status)).Observe(time.Since(start).Seconds())
			return err
		}
	}
}

// MethodLabel is method as a metric label: one of the methods Pulse's routes use,
// else "other". Any token is a valid HTTP method, so a client could otherwise make a
// new series with every request, without credentials.
func MethodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return method
	}
	return "other"
}

// routeLabel is a request's route template as a metric label. Echo sets c.Path() to
// the template of the route that matched ("/status/:userId"); a request no route
// matched has Echo's own "" or "/*" and is counted as "unmatched".
func routeLabel(path string) string {
	if path == "" || path == "/*" {
		return "unmatched"
	}
	return path
}
