package httpserver

import (
	"math"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
)

func TestJSONAnswersWithoutLookingAtTheQuery(t *testing.T) {
	e := echo.New()
	// ?pretty changes nothing: Pulse's answers are compact.
	req := httptest.NewRequest(http.MethodGet, "/x?pretty", nil)
	rec := httptest.NewRecorder()
	c := e.NewContext(req, rec)
	if err := JSON(c, http.StatusAccepted, map[string]any{"a": 1, "b": []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusAccepted {
		t.Errorf("status %d", rec.Code)
	}
	if got := rec.Header().Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type %q", got)
	}
	if got, want := rec.Body.String(), `{"a":1,"b":["x"]}`+"\n"; got != want {
		t.Errorf("body %q, want %q", got, want)
	}
	// Each answer has a value of its own: changing one changes no other.
	rec.Header()["Content-Type"][0] = "text/plain"
	rec2 := httptest.NewRecorder()
	if err := JSON(e.NewContext(httptest.NewRequest(http.MethodGet, "/", nil), rec2), http.StatusOK, 1); err != nil {
		t.Fatal(err)
	}
	if got := rec2.Header().Get("Content-Type"); got != "application/json" {
		t.Errorf("second answer's Content-Type %q", got)
	}
}

func TestJSONReportsWhatDoesNotEncode(t *testing.T) {
	rec := httptest.NewRecorder()
	c := echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/", nil), rec)
	if err := JSON(c, http.StatusOK, math.Inf(1)); err == nil {
		t.Fatal("encoding +Inf succeeded")
	}
}
