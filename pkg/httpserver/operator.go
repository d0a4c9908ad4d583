package httpserver

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/pulse-presence/pulse/pkg/config"
)

// Operator access. Readers see invisible users as offline (docs/design.md, Event model); operators —
// support staff, moderation tools — may ask for the real state with ?view=operator,
// proving who they are with the shared secret PULSE_OPERATOR_TOKEN:
//
//	Authorization: Bearer <PULSE_OPERATOR_TOKEN>
//
// An empty token disables operator access altogether: no request is an operator's.

// OperatorTokenEnv names the variable holding the operator token.
const OperatorTokenEnv = "PULSE_OPERATOR_TOKEN"

// minOperatorToken is the shortest token accepted: a bearer secret sent on every
// operator request must not be guessable.
const minOperatorToken = 16

// Views a request may ask for with ?view=.
const (
	ViewPublic   = "public"
	ViewOperator = "operator"
)

// OperatorTokenVar is the operator token's row of a configuration table; "" (the
// default) means no operator access at all.
func OperatorTokenVar(token *string) *config.Var {
	return config.String(token, OperatorTokenEnv, "",
		"bearer token granting ?view=operator (invisible users shown as they are); empty: nobody",
		validOperatorToken).Secret()
}

// OperatorTokenFromEnv reads PULSE_OPERATOR_TOKEN through e, which collects a bad value.
func OperatorTokenFromEnv(e *config.Env) string {
	var token string
	e.Load(OperatorTokenVar(&token))
	return token
}

func validOperatorToken(token string) (string, bool) {
	return fmt.Sprintf("want empty or at least %d characters", minOperatorToken), ValidateOperatorToken(token) == nil
}

// ValidateOperatorToken refuses a token too short to be a secret.
func ValidateOperatorToken(token string) error {
	if token != "" && len(token) < minOperatorToken {
		return fmt.Errorf("%s: must be at least %d characters, got %d", OperatorTokenEnv, minOperatorToken, len(token))
	}
	return nil
}

// operatorKey marks, in the Echo context, a request that carried the operator token.
const operatorKey = "pulse.operator"

// InstallOperator makes every route of e aware of operator access with token (see
// Operator).
func InstallOperator(e *echo.Echo, token string) {
	e.Use(Operator(token))
}

// Operator is the middleware behind InstallOperator. It marks requests carrying
// "Authorization: Bearer <token>" as an operator's (IsOperator), and checks ?view=:
// absent or "public" is everyone's view, "operator" without the token is a 403
// forbidden, anything else a 400 naming view. Handlers then only ask OperatorView.
func Operator(token string) echo.MiddlewareFunc {
	enabled := token != ""
	// Comparing digests keeps the comparison's time independent of both the
	// content and the length of the token.
	want := sha256.Sum256([]byte(token))
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			ok := false
			if enabled {
				if got, found := bearer(c.Request().Header.Get(echo.HeaderAuthorization)); found {
					sum := sha256.Sum256([]byte(got))
					ok = subtle.ConstantTimeCompare(sum[:], want[:]) == 1
				}
			}
			if ok {
				c.Set(operatorKey, true)
			}
			switch c.QueryParam("view") {
			case "", ViewPublic:
			case ViewOperator:
				if !ok {
					return &Error{Status: http.StatusForbidden, Code: "forbidden",
						Message: "view=operator needs a valid operator token: Authorization: Bearer <token>"}
				}
				// Operator answers show what users hide; no cache may keep them.
				c.Response().Header().Set(echo.HeaderCacheControl, "private, no-store")
			default:
				return BadRequest("view", fmt.Sprintf("must be %s or %s, got %q", ViewPublic, ViewOperator, c.QueryParam("view")))
			}
			return next(c)
		}
	}
}

// bearer extracts the credentials of an "Authorization: Bearer <credentials>" header.
func bearer(h string) (string, bool) {
	scheme, cred, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	cred = strings.TrimSpace(cred)
	return cred, cred != ""
}

// IsOperator reports whether the request carried the operator token. It is false on
// servers without the Operator middleware.
func IsOperator(c echo.Context) bool {
	ok, _ := c.Get(operatorKey).(bool)
	return ok
}

// OperatorView reports whether the request asked for, and may have, the operator
// view: invisible users shown as invisible, with their devices and times.
func OperatorView(c echo.Context) bool {
	return IsOperator(c) && c.QueryParam("view") == ViewOperator
}
