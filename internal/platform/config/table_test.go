package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// sample is a configuration with a field of every type the table binds.
type sample struct {
	Name    string
	Token   string
	Workers int
	Bytes   int64
	Debug   bool
	Timeout time.Duration
	Hosts   []string
}

func (s *sample) vars() []*Var {
	return append(
		Group("sample",
			String(&s.Name, "PULSE_TEST_NAME", "pulse", "a name", OneOf("pulse", "other")),
			String(&s.Token, "PULSE_TEST_TOKEN", "", "a secret", Rule[string](func(v string) (string, bool) {
				return "want empty or at least 4 characters", v == "" || len(v) >= 4
			})).Secret(),
			Int(&s.Workers, "PULSE_TEST_WORKERS", 8, "workers", Between(1, 64)),
			Int64(&s.Bytes, "PULSE_TEST_BYTES", 1<<20, "bytes", AtLeast[int64](1024)),
		),
		Group("more",
			Bool(&s.Debug, "PULSE_TEST_DEBUG", false, "debug"),
			Duration(&s.Timeout, "PULSE_TEST_TIMEOUT", 10*time.Minute, "a timeout", Positive),
			List(&s.Hosts, "PULSE_TEST_HOSTS", []string{"a", "b"}, "hosts", NotEmpty),
		)...)
}

func load(env map[string]string) (sample, error) {
	var s sample
	e := NewEnv(MapLookup(env))
	e.Load(s.vars()...)
	return s, e.Err()
}

func TestLoadDefaults(t *testing.T) {
	got, err := load(nil)
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	want := sample{Name: "pulse", Workers: 8, Bytes: 1 << 20, Timeout: 10 * time.Minute, Hosts: []string{"a", "b"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("defaults = %+v, want %+v", got, want)
	}
}

func TestLoadReadsEveryType(t *testing.T) {
	got, err := load(map[string]string{
		"PULSE_TEST_NAME":    " other ",
		"PULSE_TEST_TOKEN":   "s3cret",
		"PULSE_TEST_WORKERS": "64",
		"PULSE_TEST_BYTES":   "8589934592",
		"PULSE_TEST_DEBUG":   "1",
		"PULSE_TEST_TIMEOUT": "250ms",
		"PULSE_TEST_HOSTS":   "x, ,y",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := sample{Name: "other", Token: "s3cret", Workers: 64, Bytes: 8 << 30, Debug: true, Timeout: 250 * time.Millisecond, Hosts: []string{"x", "y"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("loaded %+v, want %+v", got, want)
	}
}

// Every variable that cannot be parsed keeps its default and is named with its value
// and the type wanted, all in one error.
func TestLoadNamesEveryParseError(t *testing.T) {
	got, err := load(map[string]string{
		"PULSE_TEST_WORKERS": "many",
		"PULSE_TEST_BYTES":   "1MB",
		"PULSE_TEST_DEBUG":   "maybe",
		"PULSE_TEST_TIMEOUT": "5",
	})
	if err == nil {
		t.Fatal("no error for four unparsable values")
	}
	want := []string{
		`PULSE_TEST_WORKERS="many": want an integer`,
		`PULSE_TEST_BYTES="1MB": want an integer`,
		`PULSE_TEST_DEBUG="maybe": want true or false`,
		`PULSE_TEST_TIMEOUT="5": want a duration such as "500ms" or "5s"`,
	}
	if gotLines := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(gotLines, want) {
		t.Fatalf("error lines =\n%s\nwant\n%s", strings.Join(gotLines, "\n"), strings.Join(want, "\n"))
	}
	if got.Workers != 8 || got.Bytes != 1<<20 || got.Debug || got.Timeout != 10*time.Minute {
		t.Fatalf("unparsable values did not keep their defaults: %+v", got)
	}
}

// Values that parse but break a rule are named with the rule's description; text
// values are quoted, empty values and secrets are not shown.
func TestLoadNamesEveryBrokenRule(t *testing.T) {
	_, err := load(map[string]string{
		"PULSE_TEST_NAME":    "third",
		"PULSE_TEST_TOKEN":   "abc",
		"PULSE_TEST_WORKERS": "0",
		"PULSE_TEST_BYTES":   "100",
		"PULSE_TEST_TIMEOUT": "-1s",
		"PULSE_TEST_HOSTS":   " , ",
	})
	want := []string{
		`PULSE_TEST_NAME="third": want one of pulse, other`,
		`PULSE_TEST_TOKEN: want empty or at least 4 characters`,
		`PULSE_TEST_WORKERS=0: want 1..64`,
		`PULSE_TEST_BYTES=100: want at least 1024`,
		`PULSE_TEST_TIMEOUT=-1s: must be positive`,
		`PULSE_TEST_HOSTS: must not be empty`,
	}
	if err == nil {
		t.Fatal("no error for six values breaking their rules")
	}
	if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, want) {
		t.Fatalf("error lines =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if strings.Contains(err.Error(), "abc") {
		t.Errorf("error %q shows the secret", err)
	}
}

func TestRules(t *testing.T) {
	for _, tt := range []struct {
		name string
		want string
		ok   bool
		rule func() (string, bool)
	}{
		{"positive 1", "must be positive", true, func() (string, bool) { return Positive(1) }},
		{"positive 0", "must be positive", false, func() (string, bool) { return Positive(0) }},
		{"not negative 0", "must not be negative", true, func() (string, bool) { return NotNegative(time.Duration(0)) }},
		{"not negative -1", "must not be negative", false, func() (string, bool) { return NotNegative(-1) }},
		{"between lo", "want 1s..10m", true, func() (string, bool) { return Between(time.Second, 10*time.Minute)(time.Second) }},
		{"between hi", "want 1s..10m", true, func() (string, bool) { return Between(time.Second, 10*time.Minute)(10 * time.Minute) }},
		{"between above", "want 1s..10m", false, func() (string, bool) { return Between(time.Second, 10*time.Minute)(11 * time.Minute) }},
		{"between below", "want 0..5", false, func() (string, bool) { return Between(0, 5)(-1) }},
		{"at least", "want at least 100ms", false, func() (string, bool) { return AtLeast(100 * time.Millisecond)(99 * time.Millisecond) }},
		{"not empty text", "must not be empty", false, func() (string, bool) { return NotEmpty("") }},
		{"not empty list", "must not be empty", true, func() (string, bool) { return NotEmpty([]string{"a"}) }},
		{"one of, any case", "want one of json, text", true, func() (string, bool) { return OneOf("json", "text")("TEXT") }},
		{"one of, other", "want one of json, text", false, func() (string, bool) { return OneOf("json", "text")("yaml") }},
		{"host:port", "want host:port", true, func() (string, bool) { return HostPort(":18080") }},
		{"no port", "want host:port", false, func() (string, bool) { return HostPort("nonsense") }},
		{"re-described", "must be at least 1024 bytes", false, func() (string, bool) {
			return AtLeast[int64](1024).Want("must be at least 1024 bytes")(100)
		}},
	} {
		if want, ok := tt.rule(); want != tt.want || ok != tt.ok {
			t.Errorf("%s: (%q, %v), want (%q, %v)", tt.name, want, ok, tt.want, tt.ok)
		}
	}
}

func TestVarDescribesItself(t *testing.T) {
	var s sample
	vars := s.vars()
	v := vars[0]
	if v.Name() != "PULSE_TEST_NAME" || v.Default() != "pulse" || v.Usage() != "a name" || v.Group() != "sample" ||
		v.Want() != "want one of pulse, other" || v.IsSecret() {
		t.Errorf("PULSE_TEST_NAME describes itself as %q %q %q %q %q %v", v.Name(), v.Default(), v.Usage(), v.Group(), v.Want(), v.IsSecret())
	}
	if !vars[1].IsSecret() {
		t.Error("PULSE_TEST_TOKEN is not secret")
	}
	for name, want := range map[int]string{2: "8", 3: "1048576", 4: "false", 5: "10m", 6: "a,b"} {
		if got := vars[name].Default(); got != want {
			t.Errorf("%s default = %q, want %q", vars[name].Name(), got, want)
		}
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 20 * time.Millisecond: "20ms", 90 * time.Second: "1m30s", 10 * time.Minute: "10m",
		time.Hour: "1h", 90 * time.Minute: "1h30m", time.Hour + time.Second: "1h0m1s",
	} {
		if got := ShortDuration(d); got != want {
			t.Errorf("ShortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestHelpListsEveryVariable(t *testing.T) {
	var s sample
	var b strings.Builder
	if err := WriteHelp(&b, "pulse-t", s.vars()); err != nil {
		t.Fatal(err)
	}
	want := `Usage: pulse-t [-help]

pulse-t takes no arguments: it reads the environment variables below. An unset or
empty variable takes its default; a bad value stops the start with every bad variable named.

sample:
  PULSE_TEST_NAME (default pulse)
      a name; want one of pulse, other
  PULSE_TEST_TOKEN (secret, no default)
      a secret; want empty or at least 4 characters
  PULSE_TEST_WORKERS (default 8)
      workers; want 1..64
  PULSE_TEST_BYTES (default 1048576)
      bytes; want at least 1024

more:
  PULSE_TEST_DEBUG (default false)
      debug
  PULSE_TEST_TIMEOUT (default 10m)
      a timeout; must be positive
  PULSE_TEST_HOSTS (default a,b)
      hosts; must not be empty
`
	if b.String() != want {
		t.Fatalf("help =\n%s\nwant\n%s", b.String(), want)
	}
}

// A secret's default is masked wherever it is printed.
func TestSecretDefaultIsMasked(t *testing.T) {
	var tok string
	v := String(&tok, "PULSE_TEST_TOKEN", "default-secret", "a secret").Secret()
	var b strings.Builder
	if err := WriteHelp(&b, "pulse-t", []*Var{v}); err != nil {
		t.Fatal(err)
	}
	for what, out := range map[string]string{"help": b.String(), "markdown": Markdown([]*Var{v})} {
		if strings.Contains(out, "default-secret") || !strings.Contains(out, "***") {
			t.Errorf("%s shows the secret default or does not mask it:\n%s", what, out)
		}
	}
}

func TestMarkdown(t *testing.T) {
	var s sample
	vars := s.vars()
	var addr string
	vars = append(vars, String(&addr, "PULSE_TEST_ADDR", ":1", "listen | serve", HostPort).DocDefault("the service's port"))
	want := "| variable | default | meaning | valid values |\n|---|---|---|---|\n" +
		"| `PULSE_TEST_NAME` | `pulse` | a name | want one of pulse, other |\n" +
		"| `PULSE_TEST_TOKEN` (secret) | none | a secret | want empty or at least 4 characters |\n" +
		"| `PULSE_TEST_WORKERS` | `8` | workers | want 1..64 |\n" +
		"| `PULSE_TEST_BYTES` | `1048576` | bytes | want at least 1024 |\n" +
		"| `PULSE_TEST_DEBUG` | `false` | debug |  |\n" +
		"| `PULSE_TEST_TIMEOUT` | `10m` | a timeout | must be positive |\n" +
		"| `PULSE_TEST_HOSTS` | `a,b` | hosts | must not be empty |\n" +
		"| `PULSE_TEST_ADDR` | the service's port | listen \\| serve | want host:port |\n"
	if got := Markdown(vars); got != want {
		t.Fatalf("Markdown =\n%s\nwant\n%s", got, want)
	}
}

func TestBlocks(t *testing.T) {
	doc := "intro\n<!-- config:a:begin -->\nold\n<!-- config:a:end -->\nmiddle\n<!-- config:b:begin -->\n<!-- config:b:end -->\n"
	if got, err := Block(doc, "a"); err != nil || got != "old\n" {
		t.Fatalf("Block(a) = %q, %v", got, err)
	}
	got, err := ReplaceBlock(doc, "b", "new\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "intro\n<!-- config:a:begin -->\nold\n<!-- config:a:end -->\nmiddle\n<!-- config:b:begin -->\nnew\n<!-- config:b:end -->\n"; got != want {
		t.Fatalf("ReplaceBlock =\n%s\nwant\n%s", got, want)
	}
	for _, bad := range []string{
		"no markers",
		"<!-- config:a:begin -->\nno end",
		"<!-- config:a:begin -->\n<!-- config:a:end -->\n<!-- config:a:begin -->\n<!-- config:a:end -->\n",
	} {
		if _, err := Block(bad, "a"); err == nil {
			t.Errorf("Block(%q) found a block", bad)
		}
	}
}

// A table's errors join the Env's other errors, so one Err names them all.
func TestLoadJoinsWithEnvErrors(t *testing.T) {
	e := NewEnv(MapLookup(map[string]string{"PULSE_TEST_WORKERS": "100", "OTHER": "x"}))
	e.Int("OTHER", 0)
	var s sample
	e.Load(s.vars()...)
	err := e.Err()
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 2 {
		t.Fatalf("Err = %v, want the two errors joined", err)
	}
}

// A checked list names each bad element with its reason, and describes a valid element
// for -help and the docs.
func TestCheckedListNamesEachBadElement(t *testing.T) {
	var got []string
	v := CheckedList(&got, "PULSE_TEST_ITEMS", nil, "items", "want lower-case words", func(s string) error {
		if strings.ToLower(s) != s {
			return errors.New("has upper case")
		}
		return nil
	})
	if v.Want() != "want lower-case words" {
		t.Errorf("Want = %q", v.Want())
	}
	env := NewEnv(MapLookup(map[string]string{"PULSE_TEST_ITEMS": "a, B ,c,D"}))
	env.Load(v)
	want := "PULSE_TEST_ITEMS: \"B\": has upper case\nPULSE_TEST_ITEMS: \"D\": has upper case"
	if env.Err() == nil || env.Err().Error() != want {
		t.Errorf("Err = %v, want %q", env.Err(), want)
	}
	if !reflect.DeepEqual(got, []string{"a", "B", "c", "D"}) {
		t.Errorf("loaded %q", got)
	}
	env = NewEnv(MapLookup(nil))
	env.Load(v)
	if env.Err() != nil || got != nil {
		t.Errorf("unset: %q, %v; want none and no error", got, env.Err())
	}
}
