// Package openapi holds the OpenAPI document of Pulse's HTTP services, ingest and
// query: written by hand in openapi.json, embedded in the binaries, served by each at
// GET /openapi.json, and checked against the routes each service really registers
// (CheckRoutes), so the document and the code cannot drift apart unnoticed.
package openapi

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

//go:embed openapi.json
var document []byte

// Path is where every service serves the document.
const Path = "/openapi.json"

// Document is the OpenAPI document, JSON-encoded. Callers must not modify it.
func Document() []byte { return document }

// Register serves the document at GET /openapi.json on e.
func Register(e *echo.Echo) {
	e.GET(Path, func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderCacheControl, "public, max-age=300")
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, document)
	})
}
