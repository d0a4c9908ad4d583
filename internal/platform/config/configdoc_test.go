package config_test

import (
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/pulse-presence/pulse/internal/api/auth"
	"github.com/pulse-presence/pulse/internal/platform/cassx"
	"github.com/pulse-presence/pulse/internal/platform/config/configtest"
	"github.com/pulse-presence/pulse/internal/platform/httpserver"
	"github.com/pulse-presence/pulse/internal/platform/kafkax"
	"github.com/pulse-presence/pulse/internal/platform/logging"
	"github.com/pulse-presence/pulse/internal/platform/ports"
	"github.com/pulse-presence/pulse/internal/platform/redisx"
)

const (
	root      = "../../.."
	configDoc = root + "/docs/configuration.md"
)

// The shared rows every service's table takes from pkg/ are documented once, in the
// blocks of docs/configuration.md this test owns; each service's own rows are its
// config test's.
func TestConfigDocDocumentsSharedVariables(t *testing.T) {
	var (
		lc logging.Config
		hc httpserver.Config
		kc kafkax.Config
		rc redisx.Config
		cc cassx.Config
		ac auth.Config
	)
	vars := logging.Vars(&lc)
	vars = append(vars, httpserver.Vars(&hc, ports.ListenAddr(ports.Ingest))...)
	vars = append(vars, httpserver.TLSVars(&hc.TLS)...)
	vars = append(vars, httpserver.CORSVars(&hc.CORS)...)
	vars = append(vars, kafkax.Vars(&kc, "pulse-ingest")...)
	vars = append(vars, redisx.Vars(&rc)...)
	vars = append(vars, cassx.Vars(&cc)...)
	vars = append(vars, auth.Vars(&ac)...)
	configtest.Table(t, vars)
	configtest.Doc(t, configDoc, vars, "logging", "http", "tls", "cors", "kafka", "redis", "cassandra", "auth")
}

// Every PULSE_ variable named in Go code (services, pkg, cmd, tests) or in the local
// stack's script and its table of topologies must be documented: in docs/configuration.md, whose generated tables
// hold what the services read and hand-written tables the stack's, the tests' and the
// benchmark's, or, for the cluster topology's PULSE_CLUSTER_* variables, in
// docs/cluster.md. Tests of the configuration machinery make variables up; those start
// with PULSE_TEST_.
func TestConfigDocDocumentsEveryVariableTheCodeNames(t *testing.T) {
	documented := map[string]bool{}
	for _, doc := range []string{configDoc, root + "/docs/cluster.md"} {
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range varRE.FindAllString(string(raw), -1) {
			if doc == configDoc || strings.HasPrefix(name, "PULSE_CLUSTER_") {
				documented[name] = true
			}
		}
	}
	named := map[string][]string{} // variable → the files naming it
	for _, dir := range []string{"services", "internal", "pkg", "cmd", "tests"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			names, err := goStringVars(path)
			for _, n := range names {
				if !slices.Contains(named[n], path) {
					named[n] = append(named[n], path)
				}
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, script := range []string{"deploy/local/stack.sh", "deploy/local/topologies"} {
		path := filepath.Join(root, script)
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range varNames(string(src)) {
			if !slices.Contains(named[n], path) {
				named[n] = append(named[n], path)
			}
		}
	}
	if len(named) < 50 {
		t.Fatalf("found only %d variables: is the scan looking in the right place (%s)?", len(named), root)
	}
	var missing []string
	for name, files := range named {
		if !documented[name] && !strings.HasPrefix(name, "PULSE_TEST_") {
			missing = append(missing, name+" (named in "+strings.Join(files, ", ")+")")
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("neither docs/configuration.md nor (for PULSE_CLUSTER_*) docs/cluster.md documents %s", m)
	}
}

// Every VAR=default cell of the local stack's table of topologies is documented with
// that default, as the services' variables are: the single topology's in
// docs/configuration.md, the others' in docs/cluster.md, in a row of a table whose
// first cells name the variables and their defaults ("| `PULSE_A`, `PULSE_B` | `1`,
// `2` | …"). The single topology's ports are in configuration.md's Ports table, which
// internal/platform/ports's test holds to its constants.
func TestConfigDocDocumentsTheTopologiesDefaults(t *testing.T) {
	src, err := os.ReadFile(root + "/deploy/local/topologies")
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]map[string]string{} // doc → variable → its documented default
	for _, doc := range []string{configDoc, root + "/docs/cluster.md"} {
		docs[doc] = docDefaults(t, doc)
	}
	var head []string
	checked := 0
	inTable := map[string]bool{}
	for _, line := range strings.Split(string(src), "\n") {
		line, _, _ = strings.Cut(line, "#")
		cells := strings.Fields(line)
		if len(cells) == 0 {
			continue
		}
		if head == nil {
			head = cells
			continue
		}
		if len(cells) != len(head) {
			t.Errorf("deploy/local/topologies: row %q has %d cells for %d columns", line, len(cells), len(head))
			continue
		}
		for i := 1; i < len(cells); i++ {
			name, def, ok := strings.Cut(cells[i], "=")
			if !ok || !strings.HasPrefix(name, "PULSE_") {
				continue
			}
			inTable[name] = true
			doc := root + "/docs/cluster.md"
			if head[i] == "single" {
				doc = configDoc
				if strings.HasSuffix(name, "_PORT") {
					continue
				}
			}
			def = strings.TrimPrefix(def, "{root}/")
			got, ok := docs[doc][name]
			switch {
			case !ok:
				t.Errorf("%s has no row giving %s's default (%s: %s)", doc, name, head[i], def)
			case got != def:
				t.Errorf("%s documents %s's default as %q; deploy/local/topologies (%s) has %q", doc, name, got, head[i], def)
			}
			checked++
		}
	}
	if checked < 10 {
		t.Fatalf("checked only %d defaults of deploy/local/topologies: is the table read right?", checked)
	}
	// And the other way: a PULSE_CLUSTER_* variable docs/cluster.md documents moves something.
	for name := range docs[root+"/docs/cluster.md"] {
		if strings.HasPrefix(name, "PULSE_CLUSTER_") && !inTable[name] {
			t.Errorf("docs/cluster.md documents %s, which deploy/local/topologies does not have", name)
		}
	}
}

// docDefaults reads the rows of doc's tables that pair variables with their defaults:
// "| `PULSE_A`, `PULSE_B` | `1`, `2` | …".
func docDefaults(t *testing.T, doc string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	name := regexp.MustCompile("`(PULSE_[A-Z0-9_]+)`")
	value := regexp.MustCompile("`([^`]*)`")
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 2 {
			continue
		}
		names := name.FindAllStringSubmatch(cells[0], -1)
		values := value.FindAllStringSubmatch(cells[1], -1)
		if len(names) == 0 || len(names) != len(values) {
			continue
		}
		for i, n := range names {
			if _, ok := out[n[1]]; !ok {
				out[n[1]] = values[i][1]
			}
		}
	}
	return out
}

var varRE = regexp.MustCompile(`PULSE_[A-Z0-9_]+`)

// varNames are the variable names in s; a name ending in "_" is a prefix ("PULSE_REDIS_*").
func varNames(s string) []string {
	var out []string
	for _, n := range varRE.FindAllString(s, -1) {
		if !strings.HasSuffix(n, "_") {
			out = append(out, n)
		}
	}
	return out
}

// goStringVars returns the variable names in the string literals of a Go file;
// comments do not count.
func goStringVars(path string) ([]string, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var (
		s   scanner.Scanner
		out []string
	)
	fset := token.NewFileSet()
	s.Init(fset.AddFile(path, -1, len(src)), src, nil, 0)
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok != token.STRING {
			continue
		}
		if v, err := strconv.Unquote(lit); err == nil {
			out = append(out, varNames(v)...)
		}
	}
	return out, nil
}

func TestGoStringVarsSkipsComments(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.go")
	src := "package x\n\n// PULSE_TEST_IN_COMMENT\nvar a = \"PULSE_TEST_A\"\nvar b = `raw PULSE_TEST_B and PULSE_TEST_PREFIX_*`\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := goStringVars(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, " ") != "PULSE_TEST_A PULSE_TEST_B" {
		t.Fatalf("goStringVars = %q, want [PULSE_TEST_A PULSE_TEST_B]", got)
	}
}
