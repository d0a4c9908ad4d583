package httpserver

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/pulse-presence/pulse/internal/platform/config"
)

// CORSOriginsEnv lists the web origins whose pages may call the API (CORSVars).
const CORSOriginsEnv = "PULSE_CORS_ORIGINS"

// CORSConfig is which web pages of other origins may call the API from a browser.
// Empty: none, and no CORS header is ever sent.
type CORSConfig struct {
	// Origins are exact origins, "https://chat.example.com", as browsers send them in
	// the Origin header; checkOrigin says what else is refused.
	Origins []string
}

// The CORS answers (docs/security.md, CORS): what the routes use and what clients
// need to read. No credentials mode: Pulse's credentials are bearer tokens in the
// Authorization header, never cookies, so Access-Control-Allow-Credentials is not sent.
var (
	corsMethods = []string{http.MethodGet, http.MethodPost}
	// Last-Event-ID is the resume header of GET /v1/watch/sse.
	corsRequestHeaders = []string{echo.HeaderAuthorization, echo.HeaderContentType, "Last-Event-ID"}
	// Retry-After comes with every 429 and 503, WWW-Authenticate with every 401.
	corsExposedHeaders = []string{echo.HeaderRetryAfter, echo.HeaderWWWAuthenticate}
)

// corsMaxAge is how long, in seconds, a browser may keep a preflight's answer.
const corsMaxAge = 600

// CORSVars are the CORS row of the table of a service that faces browsers (ingest,
// query).
func CORSVars(c *CORSConfig) []*config.Var {
	return config.Group("cors",
		config.CheckedList(&c.Origins, CORSOriginsEnv, nil,
			"web origins whose pages may call the API from a browser, comma-separated: a request from one gets Access-Control-Allow-Origin, and its preflight an answer without a key; other origins get no CORS header; empty: CORS off",
			"exact origins as browsers send them: http:// or https://, a lower-case host, a port only if not the scheme's default; no wildcard, path, query or trailing slash",
			checkOrigin).DocDefault("none: no CORS headers"),
	)
}

// checkOrigin says why s cannot be an entry of PULSE_CORS_ORIGINS: each entry is
// compared with the Origin header byte for byte, so one that no browser sends would
// never match, and a wildcard would open the API to every site.
func checkOrigin(s string) error {
	if s == "*" {
		return errors.New("a wildcard lets every site's pages call the API; list each origin, such as https://chat.example.com")
	}
	if strings.Contains(s, "*") {
		return errors.New("wildcards are not supported: list each origin")
	}
	if s == "null" {
		return errors.New("null is the origin of sandboxed and file: pages, which any site can make; list real origins")
	}
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("not an origin: want scheme://host[:port], such as https://chat.example.com")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errors.New("the scheme must be http or https, the only ones a page calling the API can have")
	}
	if u.Opaque != "" || u.Host == "" {
		return errors.New("no host: want scheme://host[:port], such as https://chat.example.com")
	}
	if u.User != nil {
		return errors.New("user information is not part of an origin")
	}
	host := u.Scheme + "://" + u.Host
	// Reported in the order a reader finds them, so the suggested origin is whole.
	switch {
	case u.RawQuery != "" || u.ForceQuery:
		return errors.New("a query is not part of an origin; write " + suggest(u))
	case u.Fragment != "" || strings.Contains(s, "#"):
		return errors.New("a fragment is not part of an origin; write " + suggest(u))
	case u.Path == "/":
		return errors.New("an origin has no trailing slash (browsers send none); write " + suggest(u))
	case u.Path != "":
		return errors.New("a path is not part of an origin; write " + suggest(u))
	}
	if strings.ToLower(s) != s {
		return errors.New("browsers send the scheme and host in lower case; write " + suggest(u))
	}
	if s != host {
		return errors.New("not an origin: want scheme://host[:port], such as https://chat.example.com")
	}
	for _, r := range u.Hostname() {
		if r > 127 {
			return errors.New("browsers send an international domain name in its xn-- (punycode) form")
		}
	}
	if port := u.Port(); port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return errors.New("the port must be 1..65535")
		}
		if (u.Scheme == "http" && n == 80) || (u.Scheme == "https" && n == 443) {
			return errors.New("browsers leave out the scheme's default port; write " + suggest(u))
		}
	}
	return nil
}

// suggest is the origin of u as a browser writes it.
func suggest(u *url.URL) string {
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	scheme := strings.ToLower(u.Scheme)
	if p := u.Port(); p != "" && !(scheme == "http" && p == "80") && !(scheme == "https" && p == "443") {
		host += ":" + p
	}
	return scheme + "://" + host
}

// cors is Echo's CORS middleware held to the configured origins, matched exactly (no
// patterns, no subdomains); nil without origins. It answers a preflight (OPTIONS with
// Access-Control-Request-Method) from an allowed origin itself, 204 before the
// services' guards, since browsers send preflights without credentials. Everything
// else passes through as without CORS: a preflight from another origin meets the
// guard like any request, and a WebSocket handshake keeps to PULSE_FEED_ORIGINS only.
func cors(c CORSConfig) echo.MiddlewareFunc {
	if len(c.Origins) == 0 {
		return nil
	}
	allowed := make(map[string]bool, len(c.Origins))
	for _, o := range c.Origins {
		allowed[o] = true
	}
	return middleware.CORSWithConfig(middleware.CORSConfig{
		Skipper: func(c echo.Context) bool {
			r := c.Request()
			if strings.EqualFold(r.Header.Get(echo.HeaderUpgrade), "websocket") {
				return true
			}
			// Echo takes every OPTIONS for a preflight; only a real one from an
			// allowed origin is answered here.
			return r.Method == http.MethodOptions &&
				(r.Header.Get(echo.HeaderAccessControlRequestMethod) == "" || !allowed[r.Header.Get(echo.HeaderOrigin)])
		},
		AllowOriginFunc: func(origin string) (bool, error) { return allowed[origin], nil },
		AllowMethods:    corsMethods,
		AllowHeaders:    corsRequestHeaders,
		ExposeHeaders:   corsExposedHeaders,
		MaxAge:          corsMaxAge,
	})
}
