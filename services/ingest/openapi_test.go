package main

import (
	"testing"

	"github.com/pulse-presence/pulse/internal/api/openapi"
)

// The OpenAPI document lists exactly the routes ingest serves.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	h := newHarness(t, nil)
	if err := openapi.CheckRoutes("ingest", h.srv.Echo.Routes()); err != nil {
		t.Fatal(err)
	}
}
