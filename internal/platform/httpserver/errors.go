package httpserver

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// Error is an API error as clients see it:
//
//	{"error": {"code": "invalid_field", "message": "...", "field": "status"}}
//
// Handlers return it; the server's error handler writes it.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field names the input field at fault, for 400s.
	Field string `json:"field,omitempty"`
	// RetryAfter, when set, is sent as the Retry-After header (503, 429).
	RetryAfter time.Duration `json:"-"`
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%d %s: %s: %s", e.Status, e.Code, e.Field, e.Message)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// BadRequest is a 400 naming the field at fault and why.
func BadRequest(field, message string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: "invalid_request", Field: field, Message: message}
}

// Unavailable is a 503 telling the client when to retry.
func Unavailable(message string, retryAfter time.Duration) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: message, RetryAfter: retryAfter}
}

type errorBody struct {
	Error *Error `json:"error"`
}

// codeFor turns an HTTP status into the error code clients switch on.
func codeFor(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request"
	case http.StatusUnauthorized:
		return "unauthorized"
	case http.StatusForbidden:
		return "forbidden"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusMethodNotAllowed:
		return "method_not_allowed"
	case http.StatusRequestEntityTooLarge:
		return "too_large"
	case http.StatusUnsupportedMediaType:
		return "unsupported_media_type"
	case http.StatusTooManyRequests:
		return "rate_limited"
	case http.StatusServiceUnavailable:
		return "unavailable"
	}
	if status >= 500 {
		return "internal"
	}
	return strings.ReplaceAll(strings.ToLower(http.StatusText(status)), " ", "_")
}

// toError maps whatever a handler or Echo returned onto an *Error. Internal errors
// keep their detail out of the response; the server logs it instead.
func toError(err error) *Error {
	var apiErr *Error
	if errors.As(err, &apiErr) {
		return apiErr
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		msg := http.StatusText(he.Code)
		if s, ok := he.Message.(string); ok && he.Code < 500 {
			msg = s
		}
		return &Error{Status: he.Code, Code: codeFor(he.Code), Message: msg}
	}
	return &Error{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error"}
}

func writeError(c echo.Context, e *Error) error {
	if e.RetryAfter > 0 {
		secs := int((e.RetryAfter + time.Second - 1) / time.Second)
		c.Response().Header().Set("Retry-After", strconv.Itoa(secs))
	}
	if c.Request().Method == http.MethodHead {
		return c.NoContent(e.Status)
	}
	return JSON(c, e.Status, errorBody{Error: e})
}
