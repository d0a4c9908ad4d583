// Package config reads typed settings from environment variables. Each service owns
// one Config struct and a table of Vars bound to its fields (table.go); an Env loads
// the table and collects every bad value, so a start-up failure names all of them at
// once instead of one per attempt. The same table prints the service's -help and the
// configuration tables of docs/configuration.md (doc.go).
package config

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Lookup finds an environment variable; os.LookupEnv in production, a map in tests.
type Lookup func(key string) (string, bool)

// Env reads typed values through a Lookup and remembers the ones it could not parse.
type Env struct {
	lookup Lookup
	errs   []error
}

// NewEnv returns an Env reading through lookup; nil means the process environment.
func NewEnv(lookup Lookup) *Env {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	return &Env{lookup: lookup}
}

// MapLookup is a Lookup over a fixed map, for tests and tools.
func MapLookup(m map[string]string) Lookup {
	return func(key string) (string, bool) {
		v, ok := m[key]
		return v, ok
	}
}

func (e *Env) get(key string) (string, bool) {
	v, ok := e.lookup(key)
	if !ok {
		return "", false
	}
	v = strings.TrimSpace(v)
	return v, v != ""
}

func (e *Env) fail(key, value, want string) {
	e.errs = append(e.errs, fmt.Errorf("%s=%q: want %s", key, value, want))
}

// String returns the variable's value, or def when it is unset or empty.
func (e *Env) String(key, def string) string {
	if v, ok := e.get(key); ok {
		return v
	}
	return def
}

// Int returns the variable as an integer, or def when it is unset.
func (e *Env) Int(key string, def int) int {
	v, ok := e.get(key)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		e.fail(key, v, "an integer")
		return def
	}
	return n
}

// Int64 returns the variable as a 64-bit integer, or def when it is unset.
func (e *Env) Int64(key string, def int64) int64 {
	v, ok := e.get(key)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		e.fail(key, v, "an integer")
		return def
	}
	return n
}

// Bool returns the variable as a boolean (true/false/1/0), or def when it is unset.
func (e *Env) Bool(key string, def bool) bool {
	v, ok := e.get(key)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.fail(key, v, "true or false")
		return def
	}
	return b
}

// Duration returns the variable as a Go duration ("250ms", "5s"), or def when unset.
func (e *Env) Duration(key string, def time.Duration) time.Duration {
	v, ok := e.get(key)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		e.fail(key, v, `a duration such as "500ms" or "5s"`)
		return def
	}
	return d
}

// List returns the variable split on commas with blanks dropped, or def when unset.
func (e *Env) List(key string, def []string) []string {
	v, ok := e.get(key)
	if !ok {
		return def
	}
	var out []string
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// Err reports every variable that could not be parsed.
func (e *Env) Err() error {
	return errors.Join(e.errs...)
}

// Mask hides a secret in logs while showing whether it is set.
func Mask(secret string) string {
	if secret == "" {
		return ""
	}
	return "***"
}
