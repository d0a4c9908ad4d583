// Package openapi holds the OpenAPI document of Pulse's HTTP services, ingest and
// query: written by hand in openapi.json, embedded in the binaries, served by each at
// GET /openapi.json with only the operations it answers (For), and checked against
// the routes each service really registers (CheckRoutes), so the document and the
// code cannot drift apart unnoticed.
package openapi

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"
)

//go:embed openapi.json
var document []byte

// Path is where every service serves the document.
const Path = "/openapi.json"

// Document is the OpenAPI document, JSON-encoded. Callers must not modify it.
func Document() []byte { return document }

// For is the document as service serves it: the operations whose x-service names it,
// the paths that keep one, and everything else (info, components) as written. A
// client or fuzzer given a service's document then meets no operation that service
// would answer with 404 or 405.
func For(service string) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(document, &doc); err != nil {
		return nil, fmt.Errorf("parsing the OpenAPI document: %w", err)
	}
	var paths map[string]map[string]json.RawMessage
	if err := json.Unmarshal(doc["paths"], &paths); err != nil {
		return nil, fmt.Errorf("parsing the OpenAPI document's paths: %w", err)
	}
	for path, item := range paths {
		kept := false
		for key, raw := range item {
			if !slices.Contains(methods, key) {
				continue
			}
			services, err := servedBy(key, path, raw)
			if err != nil {
				return nil, err
			}
			if slices.Contains(services, service) {
				kept = true
			} else {
				delete(item, key)
			}
		}
		if !kept {
			delete(paths, path)
		}
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("the OpenAPI document has no operation for %q", service)
	}
	var err error
	if doc["paths"], err = json.Marshal(paths); err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

// Register serves service's document (For) at GET /openapi.json on e.
func Register(e *echo.Echo, service string) error {
	doc, err := For(service)
	if err != nil {
		return err
	}
	e.GET(Path, func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderCacheControl, "public, max-age=300")
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, doc)
	})
	return nil
}
