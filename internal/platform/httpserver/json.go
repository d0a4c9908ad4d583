package httpserver

import (
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"
)

// JSON answers v as JSON with status code: the one way Pulse's handlers write a JSON
// body. Echo's own c.JSON first parses the request's query string to look for
// ?pretty, which Pulse does not offer; on the hot single-event and status paths that
// parse (and the empty map it makes) took about a tenth of the CPU samples of ingest's
// BenchmarkPostStatus.
func JSON(c echo.Context, code int, v any) error {
	// Set directly: the key is canonical already.
	c.Response().Header()[echo.HeaderContentType] = []string{echo.MIMEApplicationJSON}
	c.Response().WriteHeader(code)
	if err := json.NewEncoder(c.Response()).Encode(v); err != nil {
		// The status line is gone already; the error reaches the log, and the client
		// a truncated body.
		return echo.NewHTTPError(http.StatusInternalServerError, "encoding the answer").SetInternal(err)
	}
	return nil
}
