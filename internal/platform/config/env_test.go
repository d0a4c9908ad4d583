package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestEnvTypedValues(t *testing.T) {
	e := NewEnv(MapLookup(map[string]string{
		"S":     " value ",
		"I":     "42",
		"B":     "true",
		"D":     "250ms",
		"L":     "a, b,,c ",
		"EMPTY": "  ",
	}))
	if got := e.String("S", "def"); got != "value" {
		t.Errorf("String = %q, want %q", got, "value")
	}
	if got := e.String("EMPTY", "def"); got != "def" {
		t.Errorf("String(empty) = %q, want default", got)
	}
	if got := e.Int("I", 1); got != 42 {
		t.Errorf("Int = %d, want 42", got)
	}
	if got := e.Bool("B", false); !got {
		t.Errorf("Bool = false, want true")
	}
	if got := e.Duration("D", time.Second); got != 250*time.Millisecond {
		t.Errorf("Duration = %v, want 250ms", got)
	}
	if got := e.List("L", nil); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("List = %q, want [a b c]", got)
	}
	if got := e.Int("MISSING", 7); got != 7 {
		t.Errorf("Int(missing) = %d, want 7", got)
	}
	if err := e.Err(); err != nil {
		t.Fatalf("Err = %v, want nil", err)
	}
}

func TestEnvCollectsEveryBadValue(t *testing.T) {
	e := NewEnv(MapLookup(map[string]string{"I": "x", "D": "5", "B": "maybe"}))
	if got := e.Int("I", 3); got != 3 {
		t.Errorf("Int(bad) = %d, want default 3", got)
	}
	e.Duration("D", time.Second)
	e.Bool("B", false)
	err := e.Err()
	if err == nil {
		t.Fatal("Err = nil, want the three bad values")
	}
	for _, want := range []string{`I="x": want an integer`, `D="5": want a duration`, `B="maybe": want true or false`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Err = %q, missing %q", err, want)
		}
	}
}
