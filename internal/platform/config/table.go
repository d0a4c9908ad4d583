package config

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// A service's configuration is a table of Vars: each row names an environment
// variable, its default, what it means and what it must be, and is bound to the field
// it fills. The same table loads the settings (Env.Load), prints `-help` (WriteHelp)
// and renders docs/configuration.md's tables (Markdown), so what a service reads,
// what it accepts and what is documented cannot drift apart. Shared settings (HTTP,
// Kafka, Redis, Cassandra, logging) contribute their rows from their own packages;
// checks that involve two variables stay in the service's Validate method.

// Var is one row of a configuration table, bound to the field it fills.
type Var struct {
	name   string
	usage  string
	group  string
	def    string // the default as people read it
	docDef string // replaces def in docs/configuration.md when set
	want   []string
	secret bool
	load   func(e *Env, v *Var)
}

// Name is the environment variable.
func (v *Var) Name() string { return v.name }

// Usage says what the variable means.
func (v *Var) Usage() string { return v.usage }

// Group is the heading the variable is listed under ("http", "query"…).
func (v *Var) Group() string { return v.group }

// Default is the value used when the variable is unset or empty, as text ("" for none).
func (v *Var) Default() string { return v.def }

// Want says what a valid value is, each rule's description joined ("" for any value).
func (v *Var) Want() string { return strings.Join(v.want, "; ") }

// IsSecret reports whether the value must never be printed.
func (v *Var) IsSecret() bool { return v.secret }

// Secret marks the variable as holding a secret: help, docs and errors never show its
// value.
func (v *Var) Secret() *Var {
	v.secret = true
	return v
}

// DocDefault makes docs/configuration.md show text as the default instead of the value, for a
// shared variable whose default depends on the service ("the service's port").
// -help still shows the service's own value.
func (v *Var) DocDefault(text string) *Var {
	v.docDef = text
	return v
}

// Group sets the heading of vars and returns them, so a package can contribute its
// rows as one slice: config.Group("redis", config.List(...), config.Duration(...)).
func Group(name string, vars ...*Var) []*Var {
	for _, v := range vars {
		v.group = name
	}
	return vars
}

// Load reads every variable of vars into its field and checks it against its rules.
// Values that cannot be parsed keep the default; every parse error and broken rule is
// remembered for Err, so one start-up failure names every bad variable.
func (e *Env) Load(vars ...*Var) {
	for _, v := range vars {
		v.load(e, v)
	}
}

// invalid is the error of a value that breaks a rule: NAME=value: want. Empty values
// and secrets are not shown.
func (v *Var) invalid(shown, want string) error {
	if v.secret || shown == "" || shown == `""` {
		return fmt.Errorf("%s: %s", v.name, want)
	}
	return fmt.Errorf("%s=%s: %s", v.name, shown, want)
}

// Rule is one check of a variable's value. want describes what the rule accepts, for
// error messages, -help and docs/configuration.md ("must be positive", "want
// 1..100"); it must not depend on v. ok reports whether v passes.
type Rule[T any] func(v T) (want string, ok bool)

// Want returns r described by text instead of its own description.
func (r Rule[T]) Want(text string) Rule[T] {
	return func(v T) (string, bool) {
		_, ok := r(v)
		return text, ok
	}
}

// bind builds a Var for a field of type T. read parses the variable (recording parse
// errors in the Env); show prints a value in errors; text prints the default.
func bind[T any](p *T, name string, def T, usage string, read func(*Env) T, show, text func(T) string, rules []Rule[T]) *Var {
	v := &Var{name: name, usage: usage, def: text(def)}
	var zero T
	for _, r := range rules {
		want, _ := r(zero)
		v.want = append(v.want, want)
	}
	v.load = func(e *Env, v *Var) {
		*p = read(e)
		for _, r := range rules {
			if want, ok := r(*p); !ok {
				e.errs = append(e.errs, v.invalid(show(*p), want))
			}
		}
	}
	return v
}

func quote(s string) string { return strconv.Quote(s) }
func plain(s string) string { return s }

// String binds a text variable; unset or empty means def.
func String(p *string, name, def, usage string, rules ...Rule[string]) *Var {
	return bind(p, name, def, usage, func(e *Env) string { return e.String(name, def) }, quote, plain, rules)
}

// Int binds an integer variable.
func Int(p *int, name string, def int, usage string, rules ...Rule[int]) *Var {
	return bind(p, name, def, usage, func(e *Env) int { return e.Int(name, def) }, strconv.Itoa, strconv.Itoa, rules)
}

// Int64 binds a 64-bit integer variable, such as a size in bytes.
func Int64(p *int64, name string, def int64, usage string, rules ...Rule[int64]) *Var {
	show := func(n int64) string { return strconv.FormatInt(n, 10) }
	return bind(p, name, def, usage, func(e *Env) int64 { return e.Int64(name, def) }, show, show, rules)
}

// Bool binds a boolean variable (true/false/1/0).
func Bool(p *bool, name string, def bool, usage string, rules ...Rule[bool]) *Var {
	return bind(p, name, def, usage, func(e *Env) bool { return e.Bool(name, def) }, strconv.FormatBool, strconv.FormatBool, rules)
}

// Duration binds a Go duration variable ("250ms", "5s").
func Duration(p *time.Duration, name string, def time.Duration, usage string, rules ...Rule[time.Duration]) *Var {
	return bind(p, name, def, usage, func(e *Env) time.Duration { return e.Duration(name, def) }, time.Duration.String, ShortDuration, rules)
}

// List binds a comma-separated variable; blanks between commas are dropped.
func List(p *[]string, name string, def []string, usage string, rules ...Rule[[]string]) *Var {
	join := func(l []string) string { return strings.Join(l, ",") }
	return bind(p, name, def, usage, func(e *Env) []string { return e.List(name, def) },
		func(l []string) string { return quote(join(l)) }, join, rules)
}

// CheckedList binds a comma-separated variable whose elements are checked one by one:
// check says why an element is wrong (nil: it is fine), and each error names the
// element, so the bad entry of a long list is plain. want describes a valid element,
// for -help and docs/configuration.md.
func CheckedList(p *[]string, name string, def []string, usage, want string, check func(string) error) *Var {
	v := List(p, name, def, usage)
	v.want = []string{want}
	v.load = func(e *Env, v *Var) {
		*p = e.List(name, def)
		for _, s := range *p {
			if err := check(s); err != nil {
				if v.secret {
					e.errs = append(e.errs, fmt.Errorf("%s: an element: %w", name, err))
					continue
				}
				e.errs = append(e.errs, fmt.Errorf("%s: %q: %w", name, s, err))
			}
		}
	}
	return v
}

// ShortDuration prints d without trailing zero units: "10m" rather than "10m0s".
func ShortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// number is what the ordering rules compare.
type number interface {
	~int | ~int64
}

// format prints a rule's bound as the docs read it.
func format[T number](n T) string {
	if d, ok := any(n).(time.Duration); ok {
		return ShortDuration(d)
	}
	return fmt.Sprint(n)
}

// Positive wants a value above zero.
func Positive[T number](v T) (string, bool) { return "must be positive", v > 0 }

// NotNegative wants zero or more.
func NotNegative[T number](v T) (string, bool) { return "must not be negative", v >= 0 }

// Between wants lo ≤ v ≤ hi.
func Between[T number](lo, hi T) Rule[T] {
	want := fmt.Sprintf("want %s..%s", format(lo), format(hi))
	return func(v T) (string, bool) { return want, lo <= v && v <= hi }
}

// AtLeast wants lo or more.
func AtLeast[T number](lo T) Rule[T] {
	want := "want at least " + format(lo)
	return func(v T) (string, bool) { return want, v >= lo }
}

// NotEmpty wants some text, or a list with at least one element.
func NotEmpty[T ~string | ~[]string](v T) (string, bool) { return "must not be empty", len(v) > 0 }

// OneOf wants one of values, compared without regard to case.
func OneOf(values ...string) Rule[string] {
	want := "want one of " + strings.Join(values, ", ")
	return func(v string) (string, bool) {
		for _, s := range values {
			if strings.EqualFold(v, s) {
				return want, true
			}
		}
		return want, false
	}
}

// HostPort wants a listen or dial address, "host:port" (the host may be empty).
func HostPort(v string) (string, bool) {
	_, _, err := net.SplitHostPort(v)
	return "want host:port", err == nil
}
