package tests

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/pulse-presence/pulse/"

// TestContributingMapsEveryPackage: the tree in CONTRIBUTING.md names every package
// `go list ./...` finds, once, and nothing else, so the map a newcomer reads is the
// tree.
func TestContributingMapsEveryPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		pkgs = append(pkgs, strings.TrimPrefix(p, module))
	}
	doc, err := os.ReadFile("../CONTRIBUTING.md")
	if err != nil {
		t.Fatal(err)
	}
	tree := regexp.MustCompile("(?s)## Where things live.*?```text\n(.*?)```").FindSubmatch(doc)
	if tree == nil {
		t.Fatal("CONTRIBUTING.md has no tree under \"Where things live\"")
	}
	var rows []string
	for _, line := range strings.Split(string(tree[1]), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasSuffix(f[0], "/") { // a group's heading
			continue
		}
		if slices.Contains(rows, f[0]) {
			t.Errorf("CONTRIBUTING.md maps %s twice", f[0])
		}
		rows = append(rows, f[0])
	}
	for _, p := range pkgs {
		if !slices.Contains(rows, p) {
			t.Errorf("CONTRIBUTING.md does not map %s", p)
		}
	}
	for _, r := range rows {
		if !slices.Contains(pkgs, r) {
			t.Errorf("CONTRIBUTING.md maps %s, which go list does not find", r)
		}
	}
}

// TestImportsGoDownTheLayers: internal/platform imports nothing else of Pulse's,
// internal/domain only the platform and the record schema, stores and api not each
// other, examples only pkg, nothing shared imports a service or a command, and no
// service imports another — the rule CONTRIBUTING.md states.
func TestImportsGoDownTheLayers(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	// may lists, for each group, the groups its packages may import (besides their own).
	may := map[string][]string{
		"internal/platform": {},
		"internal/domain":   {"internal/platform", "pkg/pb"},
		"internal/stores":   {"internal/platform", "internal/domain", "pkg/pb"},
		"internal/api":      {"internal/platform", "internal/domain", "pkg/pb"},
		"pkg/pb":            {},
		// Examples are copied out of the tree: Pulse's public packages only.
		"examples": {"pkg/pb"},
	}
	group := func(p string) string {
		for _, g := range []string{"internal/platform", "internal/domain", "internal/stores", "internal/api", "pkg/pb", "cmd", "examples"} {
			if strings.HasPrefix(p, g+"/") || p == g {
				return g
			}
		}
		if f := strings.Split(p, "/"); f[0] == "services" && len(f) > 1 {
			return "services/" + f[1]
		}
		return p
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		from := strings.TrimPrefix(f[0], module)
		g := group(from)
		for _, imp := range f[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			to := group(strings.TrimPrefix(imp, module))
			checked++
			switch allowed, shared := may[g]; {
			case to == g:
			case shared && !slices.Contains(allowed, to):
				t.Errorf("%s imports %s: %s may import only %v", from, strings.TrimPrefix(imp, module), g, allowed)
			case strings.HasPrefix(g, "services/") && strings.HasPrefix(to, "services/"):
				t.Errorf("%s imports another service's package %s", from, strings.TrimPrefix(imp, module))
			case to == "cmd" && g != "cmd":
				t.Errorf("%s imports a command's package %s", from, strings.TrimPrefix(imp, module))
			}
		}
	}
	if checked < 100 {
		t.Fatalf("checked only %d imports: is go list's output read right?", checked)
	}
}
