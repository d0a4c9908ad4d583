package httpserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/pulse-presence/pulse/pkg/config"
)

const testToken = "0123456789abcdef-operator"

func TestOperatorAccess(t *testing.T) {
	tests := []struct {
		name, token, auth, query string
		status                   int
		body                     string
		cacheControl             string
	}{
		{"public by default", testToken, "", "", 200, "public", ""},
		{"explicit public", testToken, "", "?view=public", 200, "public", ""},
		{"token without view stays public", testToken, "Bearer " + testToken, "", 200, "public operator-capable", ""},
		{"operator view with token", testToken, "Bearer " + testToken, "?view=operator", 200, "operator operator-capable", "private, no-store"},
		{"scheme is case-insensitive", testToken, "bearer " + testToken, "?view=operator", 200, "operator operator-capable", "private, no-store"},
		{"operator view without token", testToken, "", "?view=operator", 403, `{"error":{"code":"forbidden","message":"view=operator needs a valid operator token: Authorization: Bearer \u003ctoken\u003e"}}`, ""},
		{"wrong token", testToken, "Bearer " + testToken + "x", "?view=operator", 403, `"code":"forbidden"`, ""},
		{"token prefix", testToken, "Bearer " + testToken[:10], "?view=operator", 403, `"code":"forbidden"`, ""},
		{"basic scheme", testToken, "Basic " + testToken, "?view=operator", 403, `"code":"forbidden"`, ""},
		{"empty bearer", testToken, "Bearer ", "?view=operator", 403, `"code":"forbidden"`, ""},
		{"access disabled", "", "Bearer ", "?view=operator", 403, `"code":"forbidden"`, ""},
		{"access disabled ignores any token", "", "Bearer anything", "?view=operator", 403, `"code":"forbidden"`, ""},
		{"unknown view", testToken, "Bearer " + testToken, "?view=admin", 400, `{"error":{"code":"invalid_request","message":"must be public or operator, got \"admin\"","field":"view"}}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t)
			InstallOperator(s.Echo, tt.token)
			s.Echo.GET("/x", func(c echo.Context) error {
				out := "public"
				if OperatorView(c) {
					out = "operator"
				}
				if IsOperator(c) {
					out += " operator-capable"
				}
				return c.String(http.StatusOK, out)
			})
			req := httptest.NewRequest(http.MethodGet, "/x"+tt.query, nil)
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			rec := httptest.NewRecorder()
			s.Echo.ServeHTTP(rec, req)
			body := strings.TrimSpace(rec.Body.String())
			if rec.Code != tt.status || (tt.status == 200 && body != tt.body) || (tt.status != 200 && !strings.Contains(body, tt.body)) {
				t.Fatalf("GET /x%s = %d %s, want %d %s", tt.query, rec.Code, body, tt.status, tt.body)
			}
			if got := rec.Header().Get("Cache-Control"); got != tt.cacheControl {
				t.Errorf("Cache-Control = %q, want %q", got, tt.cacheControl)
			}
		})
	}
}

// Without the middleware nobody is an operator, whatever they send.
func TestOperatorViewNeedsTheMiddleware(t *testing.T) {
	e := echo.New()
	req := httptest.NewRequest(http.MethodGet, "/x?view=operator", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	c := e.NewContext(req, httptest.NewRecorder())
	if IsOperator(c) || OperatorView(c) {
		t.Fatal("a request is an operator's without the Operator middleware")
	}
}

func TestOperatorTokenConfig(t *testing.T) {
	env := config.NewEnv(config.MapLookup(map[string]string{OperatorTokenEnv: "  short  "}))
	tok := OperatorTokenFromEnv(env)
	if tok != "short" {
		t.Fatalf("token = %q", tok)
	}
	if err := ValidateOperatorToken(tok); err == nil || !strings.Contains(err.Error(), "PULSE_OPERATOR_TOKEN: must be at least 16 characters, got 5") {
		t.Fatalf("ValidateOperatorToken(short) = %v", err)
	}
	for _, ok := range []string{"", testToken} {
		if err := ValidateOperatorToken(ok); err != nil {
			t.Errorf("ValidateOperatorToken(%q) = %v", ok, err)
		}
	}
	if tok := OperatorTokenFromEnv(config.NewEnv(config.MapLookup(nil))); tok != "" {
		t.Errorf("default token = %q, want none", tok)
	}
}
