package openapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/pulse-presence/pulse/internal/domain/presence"
)

// doc is the document as generic JSON.
func doc(t *testing.T) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(document))
	dec.UseNumber()
	var d map[string]any
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("openapi.json does not parse: %v", err)
	}
	return d
}

// resolve follows a local JSON pointer ("#/components/schemas/Error").
func resolve(root map[string]any, ref string) (any, error) {
	p, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, fmt.Errorf("%q is not a local reference", ref)
	}
	var cur any = root
	for _, tok := range strings.Split(p, "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%q: %q is not inside an object", ref, tok)
		}
		if cur, ok = m[tok]; !ok {
			return nil, fmt.Errorf("%q: no %q", ref, tok)
		}
	}
	return cur, nil
}

// deref resolves v while it is a {"$ref": ...} object.
func deref(t *testing.T, root map[string]any, v any) map[string]any {
	t.Helper()
	for range 10 {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%v is not an object", v)
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		var err error
		if v, err = resolve(root, ref); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("reference chain too long at %v", v)
	return nil
}

func TestEveryReferenceResolves(t *testing.T) {
	root := doc(t)
	n := 0
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && k == "$ref" {
					n++
					if _, err := resolve(root, s); err != nil {
						t.Errorf("%s: %v", path, err)
					}
					continue
				}
				walk(path+"/"+k, x)
			}
		case []any:
			for i, x := range v {
				walk(fmt.Sprintf("%s/%d", path, i), x)
			}
		}
	}
	walk("#", root)
	if n < 50 {
		t.Errorf("only %d references: the document is expected to share its parts", n)
	}
}

var templateParam = regexp.MustCompile(`\{([^}]+)\}`)

// Every operation is complete: an id, a known tag and service, path parameters that
// match its template, examples for every body, the error shape for every error, and
// the errors its inputs can cause.
func TestOperationsAreComplete(t *testing.T) {
	root := doc(t)
	if v, _ := root["openapi"].(string); !strings.HasPrefix(v, "3.0.") {
		t.Errorf("openapi = %q, want 3.0.x", v)
	}
	tags := map[string]bool{}
	for _, tg := range root["tags"].([]any) {
		tags[tg.(map[string]any)["name"].(string)] = true
	}
	errorSchema := "#/components/schemas/Error"
	ids := map[string]string{}
	paths := root["paths"].(map[string]any)
	if len(paths) < 15 {
		t.Errorf("%d paths, want every route of ingest and query", len(paths))
	}
	for path, rawItem := range paths {
		item := rawItem.(map[string]any)
		want := map[string]bool{}
		for _, m := range templateParam.FindAllStringSubmatch(path, -1) {
			want[m[1]] = true
		}
		for method, rawOp := range item {
			if !slices.Contains(methods, method) {
				continue
			}
			name := strings.ToUpper(method) + " " + path
			op := rawOp.(map[string]any)
			id, _ := op["operationId"].(string)
			if id == "" || ids[id] != "" {
				t.Errorf("%s: operationId %q missing or also used by %s", name, id, ids[id])
			}
			ids[id] = name
			if s, _ := op["summary"].(string); s == "" {
				t.Errorf("%s: no summary", name)
			}
			opTags, _ := op["tags"].([]any)
			if len(opTags) == 0 {
				t.Errorf("%s: no tags", name)
			}
			for _, tg := range opTags {
				if !tags[tg.(string)] {
					t.Errorf("%s: tag %v is not declared", name, tg)
				}
			}
			services, _ := op["x-service"].([]any)
			if len(services) == 0 {
				t.Errorf("%s: no x-service", name)
			}
			for _, s := range services {
				if s != "ingest" && s != "query" {
					t.Errorf("%s: x-service %v, want ingest or query", name, s)
				}
			}

			// Parameters: path ones exactly the template's, all with a schema and an
			// example, or an x-no-example saying why none can be given (a signed cursor,
			// an instant whose validity moves with the clock): every example must work
			// against any installation at any time.
			got := map[string]bool{}
			hasView := false
			params, _ := op["parameters"].([]any)
			for _, rp := range params {
				p := deref(t, root, rp)
				pname, in := p["name"].(string), p["in"].(string)
				why, _ := p["x-no-example"].(string)
				switch {
				case p["schema"] == nil:
					t.Errorf("%s: parameter %s lacks a schema", name, pname)
				case p["example"] == nil && why == "":
					t.Errorf("%s: parameter %s has neither an example nor an x-no-example", name, pname)
				case p["example"] != nil && why != "":
					t.Errorf("%s: parameter %s has both an example and an x-no-example", name, pname)
				}
				if in == "path" {
					got[pname] = true
					if p["required"] != true {
						t.Errorf("%s: path parameter %s is not required", name, pname)
					}
				}
				hasView = hasView || (in == "query" && pname == "view")
			}
			for p := range want {
				if !got[p] {
					t.Errorf("%s: path parameter %s is not declared", name, p)
				}
			}
			for p := range got {
				if !want[p] {
					t.Errorf("%s: declares path parameter %s, which the path lacks", name, p)
				}
			}

			// Request bodies: JSON with a schema and an example, and the errors
			// reading a body can cause.
			responses := op["responses"].(map[string]any)
			if rb, ok := op["requestBody"]; ok {
				body := deref(t, root, rb)
				mt, ok := body["content"].(map[string]any)["application/json"].(map[string]any)
				if !ok || mt["schema"] == nil || (mt["example"] == nil && mt["examples"] == nil) {
					t.Errorf("%s: request body lacks a JSON schema or example", name)
				}
				for _, code := range []string{"400", "413", "415"} {
					if responses[code] == nil {
						t.Errorf("%s: takes a body but documents no %s", name, code)
					}
				}
			}
			if hasView && responses["403"] == nil {
				t.Errorf("%s: takes view=operator but documents no 403", name)
			}
			// /readyz answers its 503 with the readiness report; the other operations
			// endpoints have no errors of their own.
			ops := slices.Contains(opTags, any("operations"))
			if !ops && responses["503"] == nil {
				t.Errorf("%s: depends on Kafka or Redis but documents no 503", name)
			}

			for code, rr := range responses {
				r := deref(t, root, rr)
				if d, _ := r["description"].(string); d == "" {
					t.Errorf("%s %s: no description", name, code)
				}
				content, _ := r["content"].(map[string]any)
				if code != "101" && len(content) == 0 {
					t.Errorf("%s %s: no content", name, code)
				}
				for ct, rm := range content {
					mt := rm.(map[string]any)
					if mt["schema"] == nil || (mt["example"] == nil && mt["examples"] == nil) {
						t.Errorf("%s %s %s: lacks a schema or an example", name, code, ct)
					}
					if code[0] >= '4' && !ops {
						ref, _ := mt["schema"].(map[string]any)["$ref"].(string)
						if ct != "application/json" || ref != errorSchema {
							t.Errorf("%s %s: error response is %s %q, want application/json %s", name, code, ct, ref, errorSchema)
						}
					}
				}
				if code == "503" && !ops {
					if h, _ := r["headers"].(map[string]any); h["Retry-After"] == nil {
						t.Errorf("%s 503: no Retry-After header", name)
					}
				}
			}
		}
	}
}

// Every example matches its schema, so the document never shows a shape the
// services do not send.
func TestExamplesMatchTheirSchemas(t *testing.T) {
	root := doc(t)
	n := 0
	check := func(where string, schema any, example any) {
		n++
		if err := validate(t, root, schema, example, ""); err != nil {
			t.Errorf("%s: example does not match the schema: %v", where, err)
		}
	}
	for name, rs := range root["components"].(map[string]any)["schemas"].(map[string]any) {
		s := rs.(map[string]any)
		if ex, ok := s["example"]; ok {
			check("schema "+name, s, ex)
		}
	}
	media := func(where string, content map[string]any) {
		for ct, rm := range content {
			mt := rm.(map[string]any)
			if ex, ok := mt["example"]; ok {
				check(where+" "+ct, mt["schema"], ex)
			}
			exs, _ := mt["examples"].(map[string]any)
			for k, e := range exs {
				check(where+" "+ct+" "+k, mt["schema"], deref(t, root, e)["value"])
			}
		}
	}
	for name, rr := range root["components"].(map[string]any)["responses"].(map[string]any) {
		media("response "+name, deref(t, root, rr)["content"].(map[string]any))
	}
	for path, rawItem := range root["paths"].(map[string]any) {
		for method, rawOp := range rawItem.(map[string]any) {
			if !slices.Contains(methods, method) {
				continue
			}
			op := rawOp.(map[string]any)
			where := strings.ToUpper(method) + " " + path
			if rb, ok := op["requestBody"]; ok {
				media(where+" request", deref(t, root, rb)["content"].(map[string]any))
			}
			for code, rr := range op["responses"].(map[string]any) {
				if r := deref(t, root, rr); r["$ref"] == nil {
					if c, ok := r["content"].(map[string]any); ok {
						media(where+" "+code, c)
					}
				}
			}
			params, _ := op["parameters"].([]any)
			for _, rp := range params {
				p := deref(t, root, rp)
				if ex, ok := p["example"]; ok {
					check(where+" parameter "+p["name"].(string), p["schema"], ex)
				}
			}
		}
	}
	if n < 60 {
		t.Errorf("checked only %d examples", n)
	}
}

// validate checks v against the subset of JSON Schema the document uses.
func validate(t *testing.T, root map[string]any, rs any, v any, at string) error {
	s := deref(t, root, rs)
	if v == nil {
		if s["nullable"] == true {
			return nil
		}
		return fmt.Errorf("%s: null, and the schema is not nullable", at)
	}
	if enum, ok := s["enum"].([]any); ok && !slices.Contains(enum, v) {
		return fmt.Errorf("%s: %v is not one of %v", at, v, enum)
	}
	switch s["type"] {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %v is not an object", at, v)
		}
		req, _ := s["required"].([]any)
		for _, r := range req {
			if _, ok := m[r.(string)]; !ok {
				return fmt.Errorf("%s: lacks required %s", at, r)
			}
		}
		props, _ := s["properties"].(map[string]any)
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ps, ok := props[k]
			if !ok {
				if len(props) > 0 && s["additionalProperties"] != true {
					return fmt.Errorf("%s: property %s is not in the schema", at, k)
				}
				continue
			}
			if err := validate(t, root, ps, m[k], at+"."+k); err != nil {
				return err
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: %v is not an array", at, v)
		}
		for i, x := range a {
			if err := validate(t, root, s["items"], x, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: %v is not a string", at, v)
		}
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(str) {
			return fmt.Errorf("%s: %q does not match the schema's pattern", at, str)
		}
	case "integer":
		n, ok := v.(json.Number)
		if _, err := n.Int64(); !ok || err != nil {
			return fmt.Errorf("%s: %v is not an integer", at, v)
		}
	case "number":
		if _, ok := v.(json.Number); !ok {
			return fmt.Errorf("%s: %v is not a number", at, v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: %v is not a boolean", at, v)
		}
	}
	return nil
}

// Each service serves the document with its own operations only: exactly those
// Operations lists for it, every path kept has one, and the rest of the document
// (info, components) is the embedded one's.
func TestRegisterServesEachServiceItsOperations(t *testing.T) {
	full := doc(t)
	for _, service := range []string{"ingest", "query"} {
		e := echo.New()
		if err := Register(e, service); err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
		if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
			t.Fatalf("%s: GET /openapi.json = %d %s", service, rec.Code, rec.Header().Get("Content-Type"))
		}
		dec := json.NewDecoder(rec.Body)
		dec.UseNumber()
		var served map[string]any
		if err := dec.Decode(&served); err != nil {
			t.Fatalf("%s: the served document does not parse: %v", service, err)
		}
		var got []Operation
		for path, item := range served["paths"].(map[string]any) {
			n := 0
			for method := range item.(map[string]any) {
				if slices.Contains(methods, method) {
					got = append(got, Operation{Method: strings.ToUpper(method), Path: path})
					n++
				}
			}
			if n == 0 {
				t.Errorf("%s: path %s is served without an operation", service, path)
			}
		}
		sort.Slice(got, func(i, j int) bool { return got[i].String() < got[j].String() })
		want, err := Operations(service)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s serves operations %v, want %v", service, got, want)
		}
		for key, v := range full {
			if key == "paths" {
				continue
			}
			a, _ := json.Marshal(v)
			b, _ := json.Marshal(served[key])
			if !bytes.Equal(a, b) {
				t.Errorf("%s: the served document's %q differs from the embedded one's", service, key)
			}
		}
	}
	if _, err := For("history"); err == nil {
		t.Error(`For("history") = nil error, want one: no operation names history`)
	}
}

func TestCheckRoutesNamesEveryDifference(t *testing.T) {
	e := echo.New()
	if err := Register(e, "query"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		e.GET(p, echo.NotFoundHandler)
	}
	e.GET("/status/:userId", echo.NotFoundHandler)
	e.POST("/statuses", echo.NotFoundHandler)
	e.GET("/v1/users/:userId/status", echo.NotFoundHandler)
	e.POST("/v1/statuses", echo.NotFoundHandler)
	e.GET("/v1/online/count", echo.NotFoundHandler)
	e.GET("/v1/online", echo.NotFoundHandler)
	e.POST("/v1/online/filter", echo.NotFoundHandler)
	e.GET("/v1/watch", echo.NotFoundHandler)
	e.GET("/v1/watch/sse", echo.NotFoundHandler)
	e.POST("/v1/watch/tickets", echo.NotFoundHandler)
	e.PUT("/v1/groups/:groupId/members", echo.NotFoundHandler)
	e.PATCH("/v1/groups/:groupId/members", echo.NotFoundHandler)
	e.DELETE("/v1/groups/:groupId/members", echo.NotFoundHandler)
	e.GET("/v1/groups/:groupId/members", echo.NotFoundHandler)
	e.GET("/v1/groups/:groupId/online/count", echo.NotFoundHandler)
	e.GET("/v1/groups/:groupId/online", echo.NotFoundHandler)
	for _, p := range []string{"/v1/users/:userId/timeline", "/v1/users/:userId/sessions", "/v1/users/:userId/daily", "/v1/users/:userId/export",
		"/v1/stats/concurrency", "/v1/stats/uniques", "/v1/stats/daily", "/v1/dashboard/pipeline"} {
		e.GET(p, echo.NotFoundHandler)
	}
	e.DELETE("/v1/users/:userId", echo.NotFoundHandler)
	if err := CheckRoutes("query", e.Routes()); err != nil {
		t.Fatalf("CheckRoutes(query) = %v", err)
	}
	e.DELETE("/v1/users/:userId/status", echo.NotFoundHandler)
	err := CheckRoutes("ingest", e.Routes())
	if err == nil {
		t.Fatal("CheckRoutes(ingest) accepted query's routes")
	}
	for _, want := range []string{
		"ingest serves DELETE /v1/users/{userId}/status, which the OpenAPI document lacks",
		"ingest serves GET /v1/online, which the OpenAPI document lacks",
		"the OpenAPI document has POST /v1/events for ingest, which does not serve it",
		"the OpenAPI document has POST /status for ingest, which does not serve it",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("CheckRoutes error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "/healthz") || strings.Contains(err.Error(), "/openapi.json") {
		t.Errorf("routes every service shares are reported:\n%v", err)
	}
}

func TestEchoPath(t *testing.T) {
	for in, want := range map[string]string{
		"/status/:userId":          "/status/{userId}",
		"/v1/users/:userId/status": "/v1/users/{userId}/status",
		"/v1/online":               "/v1/online",
	} {
		if got := EchoPath(in); got != want {
			t.Errorf("EchoPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// Every operation says who may call it: the probes, metrics and this document need
// nothing (security []); every other one an API key or user token, with its scope
// in x-scope, and documents the 401 and 403 of the guard.
func TestOperationsDeclareSecurity(t *testing.T) {
	root := doc(t)
	schemes := root["components"].(map[string]any)["securitySchemes"].(map[string]any)
	for path, rawItem := range root["paths"].(map[string]any) {
		for method, rawOp := range rawItem.(map[string]any) {
			if !slices.Contains(methods, method) {
				continue
			}
			name := strings.ToUpper(method) + " " + path
			op := rawOp.(map[string]any)
			sec, ok := op["security"].([]any)
			if !ok {
				t.Errorf("%s: no security", name)
				continue
			}
			open := slices.Contains([]string{"/healthz", "/readyz", "/metrics", "/openapi.json"}, path)
			if open != (len(sec) == 0) {
				t.Errorf("%s: security %v; want [] exactly for the open operations", name, sec)
			}
			for _, req := range sec {
				for s := range req.(map[string]any) {
					if schemes[s] == nil {
						t.Errorf("%s: security scheme %s is not declared", name, s)
					}
				}
			}
			if open {
				continue
			}
			if scope, _ := op["x-scope"].(string); !slices.Contains([]string{"write", "read", "operator"}, scope) {
				t.Errorf("%s: x-scope %q, want write, read or operator", name, scope)
			}
			responses := op["responses"].(map[string]any)
			for _, code := range []string{"401", "403"} {
				if responses[code] == nil {
					t.Errorf("%s: documents no %s", name, code)
				}
			}
		}
	}
}

// Every id of a request states presence.ValidateID's rule on characters as its
// pattern, and the pattern accepts exactly the characters the validator accepts.
func TestIDPatternsAreTheValidatorsRule(t *testing.T) {
	root := doc(t)
	schemas := root["components"].(map[string]any)["schemas"].(map[string]any)
	ids := map[string]map[string]any{"UserId": schemas["UserId"].(map[string]any)}
	for _, name := range []string{"Event", "Heartbeat"} {
		props := schemas[name].(map[string]any)["properties"].(map[string]any)
		for _, f := range []string{"eventId", "deviceId"} {
			ids[name+"."+f] = props[f].(map[string]any)
		}
	}
	// A custom status's text refuses the same characters.
	ids["CustomStatus.text"] = schemas["CustomStatus"].(map[string]any)["properties"].(map[string]any)["text"].(map[string]any)
	want := presence.IDPattern()
	for name, s := range ids {
		if s["pattern"] != want {
			t.Errorf("%s: pattern %q, want presence.IDPattern() %q", name, s["pattern"], want)
		}
	}
	re := regexp.MustCompile(want)
	check := func(r rune) {
		id := "a" + string(r) + "b"
		if valid, matches := presence.ValidateID(id, presence.MaxUserIDLen) == nil, re.MatchString(id); valid != matches {
			t.Errorf("%U: ValidateID accepts %v, the pattern %v", r, valid, matches)
		}
	}
	for r := rune(0); r < 0x30000; r++ {
		if r < 0xd800 || r > 0xdfff { // surrogates are not characters of UTF-8
			check(r)
		}
	}
	for r := rune(0xe0000); r <= 0x10ffff; r += 7 {
		check(r)
	}
	check(0xe0001)
	check(0xe007f)
}
