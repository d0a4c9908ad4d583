// Package configtest checks configuration tables (internal/platform/config) in unit tests: a table is
// sound, and docs/configuration.md documents every row of it exactly as the table
// renders it.
//
// docs/configuration.md holds one generated block per group of variables, between the
// lines <!-- config:GROUP:begin --> and <!-- config:GROUP:end -->. The test owning a
// group compares its block with the table; run with -update-docs (make config-doc) it
// rewrites the block instead.
package configtest

import (
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pulse-presence/pulse/internal/platform/config"
)

var update = flag.Bool("update-docs", false, "rewrite docs/configuration.md's generated configuration blocks from the tables")

var nameRE = regexp.MustCompile(`^PULSE_[A-Z0-9_]*[A-Z0-9]$`)

// Table fails t unless every variable of vars has a PULSE_ name, a meaning and a group,
// appears once, and its default passes its own rules.
func Table(t testing.TB, vars []*config.Var) {
	t.Helper()
	seen := map[string]bool{}
	for _, v := range vars {
		if !nameRE.MatchString(v.Name()) {
			t.Errorf("variable %q: want PULSE_ and upper-case words joined by _", v.Name())
		}
		if seen[v.Name()] {
			t.Errorf("%s: listed twice", v.Name())
		}
		seen[v.Name()] = true
		if strings.TrimSpace(v.Usage()) == "" {
			t.Errorf("%s: no meaning", v.Name())
		}
		if v.Group() == "" {
			t.Errorf("%s: no group", v.Name())
		}
	}
	env := config.NewEnv(config.MapLookup(nil))
	env.Load(vars...)
	if err := env.Err(); err != nil {
		t.Errorf("the defaults break the table's own rules: %v", err)
	}
}

// Doc checks the configuration document at path against vars: the block of each of
// groups holds exactly the rows of vars in that group, and every row of vars appears in
// the document (a shared row in the block its package owns). With -update-docs the
// blocks of groups are rewritten instead, and only their rows checked.
func Doc(t testing.TB, path string, vars []*config.Var, groups ...string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	for _, g := range groups {
		var rows []*config.Var
		for _, v := range vars {
			if v.Group() == g {
				rows = append(rows, v)
			}
		}
		if len(rows) == 0 {
			t.Errorf("no variable of group %q to document", g)
			continue
		}
		want := config.Markdown(rows)
		if *update {
			if doc, err = config.ReplaceBlock(doc, g, want); err != nil {
				t.Fatalf("%s: block %s: %v", path, g, err)
			}
			continue
		}
		got, err := config.Block(doc, g)
		if err != nil {
			t.Errorf("%s: block %s: %v", path, g, err)
			continue
		}
		if got != want {
			t.Errorf("%s: the %s table differs from the code's; run make config-doc.\ngot:\n%s\nwant:\n%s", path, g, got, want)
		}
	}
	if *update && doc != string(raw) {
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range vars {
		if *update && !slices.Contains(groups, v.Group()) {
			continue // another package's block, perhaps not rewritten yet
		}
		if row := config.MarkdownRow(v); !strings.Contains(doc, "\n"+row+"\n") {
			t.Errorf("%s lacks the row of %s (block %s; make config-doc):\n%s", path, v.Name(), v.Group(), row)
		}
	}
}

// Help checks a service's -help text: every variable of the service (vars) and of the
// process frame (PULSE_LOG_LEVEL, PULSE_LOG_FORMAT) is listed exactly once, nothing
// else is, and each of want appears as a whole line (e.g. "PULSE_X (default 10s)").
func Help(t testing.TB, help string, vars []*config.Var, want ...string) {
	t.Helper()
	names := []string{"PULSE_LOG_LEVEL", "PULSE_LOG_FORMAT"}
	for _, v := range vars {
		names = append(names, v.Name())
	}
	for _, name := range names {
		if n := strings.Count(help, "\n  "+name+" ("); n != 1 {
			t.Errorf("help lists %s %d times, want once", name, n)
		}
	}
	if got := strings.Count(help, "\n  PULSE_"); got != len(names) {
		t.Errorf("help lists %d variables, want %d", got, len(names))
	}
	for _, line := range want {
		if !strings.Contains(help, "\n  "+line+"\n") {
			t.Errorf("help lacks %q:\n%s", line, help)
		}
	}
}
