// Package dashboard is the live dashboard page the query service serves at
// /dashboard/: HTML, CSS and JavaScript embedded in the binary, which read the same
// API every other client reads (counts, the change feed, history, point in time) with
// the credential the person at the browser pastes into the page. The page's files
// hold no data and no secret, so they are served without credentials; every request
// the page makes for data carries the pasted credential.
//
// The package also serves GET /v1/dashboard/pipeline, the operator's view of the
// pipeline's health: it scrapes the /metrics endpoints of the other services
// (PULSE_QUERY_PEER_METRICS) and of this one, and answers with the figures the page
// shows — consumer lag, freshness, dead letters, rebuilds, and with the notifier among
// the peers each webhook endpoint's health.
package dashboard

import (
	"embed"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/pulse-presence/pulse/internal/platform/httpserver"
)

//go:embed static
var files embed.FS

// Prefix is where the page is served.
const Prefix = "/dashboard/"

// static is the embedded folder, rooted at its files.
var static = func() fs.FS {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic(err)
	}
	return sub
}()

// Mount serves the page on e and registers the pipeline route (p answers it; nil:
// 503). The page's files are served before routing, and so before the credential
// guard: a browser that navigates to a page sends no Authorization header. / and
// /dashboard redirect to /dashboard/.
func Mount(e *echo.Echo, p *Pipeline) {
	e.Pre(servePage)
	e.GET(PipelinePath, p.serve)
}

// servePage answers GET and HEAD requests for the page's paths; everything else goes
// on to the router.
func servePage(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return next(c)
		}
		switch p := r.URL.Path; {
		case p == "/" || p == strings.TrimSuffix(Prefix, "/"):
			return c.Redirect(http.StatusFound, Prefix)
		case strings.HasPrefix(p, Prefix):
			return serveFile(c, strings.TrimPrefix(p, Prefix))
		}
		return next(c)
	}
}

// serveFile writes one embedded file; the empty name is the page itself.
func serveFile(c echo.Context, name string) error {
	if name == "" {
		name = "index.html"
	}
	name = path.Clean(name)
	b, err := fs.ReadFile(static, name)
	if err != nil {
		return httpserver.JSON(c, http.StatusNotFound, map[string]any{"error": map[string]string{
			"code": "not_found", "message": "the dashboard has no file " + name}})
	}
	h := c.Response().Header()
	ctype := mime.TypeByExtension(path.Ext(name))
	if ctype == "" {
		ctype = http.DetectContentType(b)
	}
	h.Set(echo.HeaderContentType, ctype)
	// The files change with the binary: a reload after an upgrade must see the new
	// ones. They are small, and embedded, so serving them again costs little.
	h.Set(echo.HeaderCacheControl, "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	if c.Request().Method == http.MethodHead {
		return c.NoContent(http.StatusOK)
	}
	return c.Blob(http.StatusOK, ctype, b)
}

// contentSecurityPolicy keeps the page to its own origin: its scripts and styles are
// the embedded files, and it talks only to the service that served it.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; " +
	"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
