package httpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
)

// ReadBody checks the content type and reads the body, at most maxBody bytes. The
// whole body is read before decoding so the decoder sees a complete document, which
// keeps the decoding functions pure (and fuzzable).
func ReadBody(c echo.Context, maxBody int64) ([]byte, error) {
	req := c.Request()
	ct := req.Header.Get(echo.HeaderContentType)
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != echo.MIMEApplicationJSON {
		return nil, &Error{
			Status:  http.StatusUnsupportedMediaType,
			Code:    "unsupported_media_type",
			Message: fmt.Sprintf("Content-Type must be application/json, got %q", ct),
		}
	}
	if req.ContentLength > maxBody {
		return nil, tooLarge(maxBody)
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), req.Body, maxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, tooLarge(maxBody)
		}
		return nil, BadRequest("body", fmt.Sprintf("reading the body: %v", err))
	}
	return body, nil
}

func tooLarge(maxBody int64) *Error {
	return &Error{
		Status:  http.StatusRequestEntityTooLarge,
		Code:    "too_large",
		Message: fmt.Sprintf("the body must be at most %d bytes", maxBody),
	}
}

// DecodeObject decodes data, which must hold exactly one JSON object, into v, a
// pointer to a struct. Unknown fields, trailing data and wrong types are refused with
// a 400 naming the field; path prefixes the field names ("events[3]"), "" at the top.
func DecodeObject(data []byte, v any, path string) error {
	whole := OrBody(path)
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	switch {
	case len(trimmed) == 0:
		return BadRequest(whole, "is empty; want a JSON object")
	case trimmed[0] != '{' && json.Valid(trimmed):
		return BadRequest(whole, "must be a JSON object, got "+jsonKind(trimmed[0]))
	}

	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, path)
	}
	if _, err := dec.Token(); err != io.EOF {
		return BadRequest("body", "unexpected data after the JSON object")
	}
	return nil
}

// decodeError turns what encoding/json reports into a 400 naming the field at fault.
func decodeError(err error, path string) error {
	if e, ok := errors.AsType[*json.SyntaxError](err); ok {
		return BadRequest("body", fmt.Sprintf("malformed JSON at byte %d: %v", e.Offset, e))
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return BadRequest("body", "malformed JSON: unexpected end of input")
	}
	if e, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		return BadRequest(OrBody(FieldPath(path, e.Field)), fmt.Sprintf("must be %s, got %s", goKind(e.Type), e.Value))
	}
	// encoding/json has no typed error for unknown fields, only this message.
	if quoted, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name, uerr := strconv.Unquote(quoted)
		if uerr != nil {
			name = quoted
		}
		return BadRequest(OrBody(FieldPath(path, name)), fmt.Sprintf("unknown field %q", name))
	}
	return BadRequest(OrBody(path), err.Error())
}

// OrBody names the whole body when no field is at fault.
func OrBody(field string) string {
	if field == "" {
		return "body"
	}
	return field
}

// FieldPath joins a path prefix and a field name as clients see them.
func FieldPath(path, name string) string {
	switch {
	case path == "":
		return name
	case name == "":
		return path
	}
	return path + "." + name
}

// jsonKind names the JSON value that starts with c (a valid document's first byte).
func jsonKind(c byte) string {
	switch c {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// goKind names, in JSON terms, what a Go target type accepts.
func goKind(t reflect.Type) string {
	if t == nil {
		return "a different type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "a " + t.Kind().String()
}
