package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
)

// atParam's refusals come before any charge or read, so an api with only its
// retention set answers them.
func TestAtParamRefusesWhatNamesNoInstant(t *testing.T) {
	a := &api{atRetention: 30 * 24 * time.Hour}
	for _, c := range []struct {
		query string
		want  string // "" for "absent: the live state"
	}{
		{"", ""},
		{"?view=operator", ""},
		{"?at=", "must not be empty"},
		{"?at=&at=2026-11-22T20:13:07Z", "must not be empty"},
		{"?at=yesterday", "must be an RFC 3339 time"},
		{"?at=" + time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "is in the future"},
		{"?at=1960-01-01T00:00:00Z", "older than"},
	} {
		c2 := echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/v1/online/count"+c.query, nil), httptest.NewRecorder())
		_, past, err := a.atParam(c2)
		if c.want == "" {
			if err != nil || past {
				t.Errorf("%q: past=%v err=%v, want the live state", c.query, past, err)
			}
			continue
		}
		var he *httpserver.Error
		if !errors.As(err, &he) || he.Status != http.StatusBadRequest || he.Field != "at" || !strings.Contains(he.Message, c.want) {
			t.Errorf("%q: err = %v, want a 400 saying %q", c.query, err, c.want)
		}
	}
}

// A parameter given with no value is a 400 naming it, before the handler runs; only
// an empty cursor passes (the first page).
func TestEmptyParamsAreRefused(t *testing.T) {
	reached := 0
	h := refuseEmptyParams(func(c echo.Context) error { reached++; return nil })
	for _, c := range []struct{ query, field string }{
		{"?view=", "view"},
		{"?to=&from=2026-11-22", "to"},
		{"?limit=", "limit"},
		{"?status=online&status=", "status"},
		{"?cursor=", ""},
		{"?cursor=&limit=10", ""},
		{"", ""},
	} {
		before := reached
		err := h(echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/v1/online"+c.query, nil), httptest.NewRecorder()))
		if c.field == "" {
			if err != nil || reached != before+1 {
				t.Errorf("%q: err=%v, reached the handler %d times; want it passed on", c.query, err, reached-before)
			}
			continue
		}
		var he *httpserver.Error
		if !errors.As(err, &he) || he.Status != http.StatusBadRequest || he.Field != c.field || reached != before {
			t.Errorf("%q: err = %v, want a 400 naming %s before the handler", c.query, err, c.field)
		}
	}
}
