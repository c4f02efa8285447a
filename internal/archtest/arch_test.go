package archtest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nodeup/nodeup/internal/testutil"
)

const module = "github.com/nodeup/nodeup"

// tableHeader opens the package table in docs/architecture.md; its last
// column lists, in backquotes, the nodeup packages a row's package may
// import.
const tableHeader = "| package | job | may import |"

var backquoted = regexp.MustCompile("`([^`]+)`")

// rule is one row of the table: pattern names a package (relative to the
// module; "." for the root, a trailing "/*" for every package below).
type rule struct {
	pattern string
	allowed []string
}

func (r rule) matches(pkg string) bool {
	if prefix, ok := strings.CutSuffix(r.pattern, "/*"); ok {
		return strings.HasPrefix(pkg, prefix+"/")
	}
	return pkg == r.pattern
}

// readRules parses the package table from the architecture document.
func readRules(t *testing.T, path string) []rule {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rules []rule
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == tableHeader:
			in = true
		case !in || strings.HasPrefix(line, "| ---"):
		case !strings.HasPrefix(line, "|"):
			in = false
		default:
			rules = append(rules, parseRow(t, line))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rules) == 0 {
		t.Fatalf("%s has no table opening with %q", path, tableHeader)
	}
	return rules
}

// parseRow reads "| `pkg/` | job | `a`, `b` |"; the package "main.go"
// is the module root.
func parseRow(t *testing.T, line string) rule {
	t.Helper()
	cells := strings.Split(strings.Trim(line, "|"), "|")
	if len(cells) < 3 {
		t.Fatalf("table row %q has %d cells, want 3", line, len(cells))
	}
	name := backquoted.FindStringSubmatch(cells[0])
	if name == nil {
		t.Fatalf("table row %q names no package in backquotes", line)
	}
	r := rule{pattern: strings.TrimSuffix(name[1], "/")}
	if r.pattern == "main.go" {
		r.pattern = "."
	}
	for _, m := range backquoted.FindAllStringSubmatch(cells[len(cells)-1], -1) {
		r.allowed = append(r.allowed, strings.TrimSuffix(m[1], "/"))
	}
	return r
}

// violations lists each package with no row, and each nodeup import a
// package's row does not allow; graph maps a package (relative to the
// module) to the nodeup packages it imports.
func violations(rules []rule, graph map[string][]string) []string {
	var out []string
	for pkg, imports := range graph {
		i := slices.IndexFunc(rules, func(r rule) bool { return r.matches(pkg) })
		if i < 0 {
			out = append(out, fmt.Sprintf("%s has no row in the package table", pkg))
			continue
		}
		for _, imp := range imports {
			if !slices.Contains(rules[i].allowed, imp) {
				out = append(out, fmt.Sprintf("%s imports %s; its row (%s) allows only %v", pkg, imp, rules[i].pattern, rules[i].allowed))
			}
		}
	}
	slices.Sort(out)
	return out
}

// importGraph runs go list on the module's packages (test files left out:
// the rules are about what the binaries link).
func importGraph(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Dir = testutil.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	graph := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		pkg := relative(fields[0])
		graph[pkg] = nil
		for _, imp := range fields[1:] {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				graph[pkg] = append(graph[pkg], relative(imp))
			}
		}
	}
	return graph
}

func relative(pkg string) string {
	if pkg == module {
		return "."
	}
	return strings.TrimPrefix(pkg, module+"/")
}

func TestImportsFollowThePackageTable(t *testing.T) {
	rules := readRules(t, filepath.Join(testutil.RepoRoot(), "docs", "architecture.md"))
	for _, v := range violations(rules, importGraph(t)) {
		t.Error(v)
	}
}

// The checker itself flags a forbidden edge and a package with no row.
func TestViolationsFlagsForbiddenImports(t *testing.T) {
	t.Parallel()
	rules := []rule{{pattern: "sched"}, {pattern: "worker", allowed: []string{"sched"}}, {pattern: "examples/*", allowed: []string{"worker"}}}
	graph := map[string][]string{
		"sched": nil, "worker": {"sched", "cluster"}, "examples/x": {"worker"}, "newpkg": nil,
	}
	want := []string{
		"newpkg has no row in the package table",
		"worker imports cluster; its row (worker) allows only [sched]",
	}
	if got := violations(rules, graph); !slices.Equal(got, want) {
		t.Fatalf("violations = %q, want %q", got, want)
	}
}
