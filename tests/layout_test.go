package tests

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestContributingMapsEveryPackage: CONTRIBUTING.md's table of the packages in pkg/
// names every package `go list` finds there, and nothing else, so the map a newcomer
// reads is the tree.
func TestContributingMapsEveryPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "../pkg/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		pkgs = append(pkgs, strings.TrimPrefix(p, "github.com/pulse-presence/pulse/pkg/"))
	}
	doc, err := os.ReadFile("../CONTRIBUTING.md")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(doc), "The packages in `pkg/`")
	if i < 0 {
		t.Fatal("CONTRIBUTING.md has no table of the packages in pkg/")
	}
	var rows []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(string(doc[i:]), -1) {
		rows = append(rows, m[1])
	}
	for _, p := range pkgs {
		if !slices.Contains(rows, p) {
			t.Errorf("CONTRIBUTING.md does not map pkg/%s", p)
		}
	}
	for _, r := range rows {
		if !slices.Contains(pkgs, r) {
			t.Errorf("CONTRIBUTING.md maps pkg/%s, which go list does not find", r)
		}
	}
}
