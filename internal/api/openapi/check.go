package openapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"
)

// Operation is one method on one path, as the document writes paths:
// "/v1/users/{userId}/status".
type Operation struct {
	Method string
	Path   string
}

func (o Operation) String() string { return o.Method + " " + o.Path }

// methods are the operation keys of an OpenAPI path item.
var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// Operations lists the document's operations whose x-service names service, sorted.
func Operations(service string) ([]Operation, error) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(document, &doc); err != nil {
		return nil, fmt.Errorf("parsing the OpenAPI document: %w", err)
	}
	var out []Operation
	for path, item := range doc.Paths {
		for method, raw := range item {
			if !slices.Contains(methods, method) {
				continue
			}
			services, err := servedBy(method, path, raw)
			if err != nil {
				return nil, err
			}
			if slices.Contains(services, service) {
				out = append(out, Operation{Method: strings.ToUpper(method), Path: path})
			}
		}
	}
	slices.SortFunc(out, func(a, b Operation) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// servedBy reads the x-service of the operation method on path: the services that
// serve it, at least one.
func servedBy(method, path string, op json.RawMessage) ([]string, error) {
	var o struct {
		Services []string `json:"x-service"`
	}
	if err := json.Unmarshal(op, &o); err != nil {
		return nil, fmt.Errorf("%s %s: x-service: %w", strings.ToUpper(method), path, err)
	}
	if len(o.Services) == 0 {
		return nil, fmt.Errorf("%s %s: no x-service names the service that serves it", strings.ToUpper(method), path)
	}
	return o.Services, nil
}

// EchoPath writes an Echo route path the way OpenAPI does: ":userId" -> "{userId}".
func EchoPath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if name, ok := strings.CutPrefix(s, ":"); ok {
			parts[i] = "{" + name + "}"
		}
	}
	return strings.Join(parts, "/")
}

// CheckRoutes compares the routes a service registered on its Echo with the
// document's operations for that service, and names every route the document lacks
// and every operation the service lacks.
func CheckRoutes(service string, routes []*echo.Route) error {
	ops, err := Operations(service)
	if err != nil {
		return err
	}
	documented := make(map[Operation]bool, len(ops))
	for _, o := range ops {
		documented[o] = true
	}
	served := make(map[Operation]bool, len(routes))
	var errs []error
	for _, r := range routes {
		o := Operation{Method: r.Method, Path: EchoPath(r.Path)}
		if served[o] {
			continue
		}
		served[o] = true
		if !documented[o] {
			errs = append(errs, fmt.Errorf("%s serves %s, which the OpenAPI document lacks", service, o))
		}
	}
	for _, o := range ops {
		if !served[o] {
			errs = append(errs, fmt.Errorf("the OpenAPI document has %s for %s, which does not serve it", o, service))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}
