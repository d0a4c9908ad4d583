package report

import (
	"flag"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

var updateKeys = flag.Bool("update-keys", false, "rewrite testdata/results-keys.txt from the result types")

// TestResultsKeys pins results.json's keys: runs are compared by them, so a key may be
// added (and testdata/results-keys.txt with it) but never renamed or dropped by
// accident. `go test -run TestResultsKeys ./cmd/bench/internal/report -args -update-keys`
// rewrites the file.
func TestResultsKeys(t *testing.T) {
	var got []string
	walkKeys(reflect.TypeOf(Results{}), "", &got)
	slices.Sort(got)
	text := strings.Join(got, "\n") + "\n"
	const file = "testdata/results-keys.txt"
	if *updateKeys {
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if text != string(want) {
		w := strings.Split(string(want), "\n")
		for _, k := range got {
			if !slices.Contains(w, k) {
				t.Errorf("new key %s", k)
			}
		}
		for _, k := range w {
			if k != "" && !slices.Contains(got, k) {
				t.Errorf("key %s is gone", k)
			}
		}
	}
}

// walkKeys appends the JSON path of every field under t: "a.b", "a[]" for a list's
// elements, "a.*" for a map's.
func walkKeys(t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice:
		walkKeys(t.Elem(), prefix+"[]", out)
		return
	case reflect.Map:
		*out = append(*out, prefix+".*")
		walkKeys(t.Elem(), prefix+".*", out)
		return
	case reflect.Struct:
		if t.PkgPath() == "time" {
			return
		}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			p := strings.TrimPrefix(prefix+"."+name, ".")
			*out = append(*out, p)
			walkKeys(f.Type, p, out)
		}
	}
}
