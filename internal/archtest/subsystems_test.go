package archtest

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/nodeup/nodeup/internal/testutil"
)

// The daemon's subsystem rules (issue 26): every package under cluster/
// (but the test harness cluster/clustertest) is a subsystem that imports
// neither the root package cluster nor another subsystem, and the
// node-local subsystems link none of the control plane's packages.

// harnesses are the packages under cluster/ that are not subsystems.
var harnesses = []string{"cluster/clustertest"}

// dataPlane are the subsystems that must not link the control plane:
// they run per task and per object, and docs/architecture.md promises
// that path never touches Raft.
var dataPlane = []string{"cluster/local", "cluster/objects"}

// controlPlane are the import paths (a trailing "*": every path starting
// so) a data-plane subsystem must not depend on, even indirectly.
var controlPlane = []string{module + "/store", module + "/store/*", "github.com/hashicorp/raft*", "github.com/hashicorp/memberlist*"}

// subsystem is the cluster/<name> a package belongs to, "" for one
// outside cluster/'s subpackages or a harness.
func subsystem(pkg string) string {
	rest, ok := strings.CutPrefix(pkg, "cluster/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	s := "cluster/" + name
	if slices.Contains(harnesses, s) {
		return ""
	}
	return s
}

// subsystemViolations lists each import of the root package or of another
// subsystem by a subsystem; graph is as violations takes it (relative
// paths, nodeup imports only).
func subsystemViolations(graph map[string][]string) []string {
	var out []string
	for pkg, imports := range graph {
		own := subsystem(pkg)
		if own == "" {
			continue
		}
		for _, imp := range imports {
			switch other := subsystem(imp); {
			case imp == ".", imp == "cluster":
				out = append(out, fmt.Sprintf("subsystem %s imports the root package %s: what it needs of the node goes in its host interface", pkg, imp))
			case other != "" && other != own:
				out = append(out, fmt.Sprintf("subsystem %s imports %s, of another subsystem (%s): wire them together in package cluster through host interfaces", pkg, imp, other))
			}
		}
	}
	slices.Sort(out)
	return out
}

// matchPath reports whether path is pattern, or starts with it when
// pattern ends in "*".
func matchPath(pattern, path string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(path, prefix)
	}
	return path == pattern
}

// depViolations lists, for each root present in deps, every package it
// depends on (directly or not) matching forbidden, with the chain of
// imports that reaches it; deps maps a full import path to its imports, as
// go list -deps gives them.
func depViolations(roots, forbidden []string, deps map[string][]string) []string {
	var out []string
	for _, root := range roots {
		if _, ok := deps[root]; !ok {
			continue
		}
		// Breadth first, so each forbidden package is reported by a
		// shortest chain.
		via := map[string]string{root: ""}
		queue := []string{root}
		for len(queue) > 0 {
			pkg := queue[0]
			queue = queue[1:]
			if pkg != root && slices.ContainsFunc(forbidden, func(f string) bool { return matchPath(f, pkg) }) {
				chain := []string{pkg}
				for p := via[pkg]; p != ""; p = via[p] {
					chain = append(chain, p)
				}
				slices.Reverse(chain)
				out = append(out, fmt.Sprintf("%s depends on %s (%s)", root, pkg, strings.Join(chain, " → ")))
				continue
			}
			for _, imp := range deps[pkg] {
				if _, seen := via[imp]; !seen {
					via[imp] = pkg
					queue = append(queue, imp)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// depGraph runs go list -deps on pkgs (relative paths) and maps each
// package they link to its imports.
func depGraph(t *testing.T, pkgs []string) map[string][]string {
	t.Helper()
	args := []string{"list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"}
	for _, p := range pkgs {
		args = append(args, "./"+p)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = testutil.RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		deps[fields[0]] = fields[1:]
	}
	return deps
}

func TestSubsystemsImportNeitherTheRootNorEachOther(t *testing.T) {
	graph := importGraph(t)
	n := 0
	for pkg := range graph {
		if subsystem(pkg) != "" {
			n++
		}
	}
	if n == 0 {
		t.Fatal("no subsystem package under cluster/: the rule checks nothing")
	}
	for _, v := range subsystemViolations(graph) {
		t.Error(v)
	}
}

func TestDataPlaneSubsystemsLinkNoControlPlane(t *testing.T) {
	graph := importGraph(t)
	var present, roots []string
	for _, p := range dataPlane {
		if _, ok := graph[p]; ok {
			present = append(present, p)
			roots = append(roots, module+"/"+p)
		}
	}
	if len(present) == 0 {
		t.Fatalf("none of %v exists: the rule checks nothing", dataPlane)
	}
	for _, v := range depViolations(roots, controlPlane, depGraph(t, present)) {
		t.Error(v)
	}
}

// The subsystem check flags a subsystem importing the root or a sibling,
// and lets a subsystem import its own subpackages, the lower packages, and
// the root and harness import anything.
func TestSubsystemViolationsFlagsRootAndSiblingImports(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		graph map[string][]string
		want  []string
	}{
		{"clean", map[string][]string{
			"cluster":               {"cluster/objects", "cluster/jobs", "store"},
			"cluster/objects":       {"objstore", "rpc", "wire", "cluster/objects/inner"},
			"cluster/objects/inner": {"wire"},
			"cluster/clustertest":   {"cluster", "cluster/objects"},
			"cli":                   {"cluster", "cluster/jobs"},
		}, nil},
		{"root", map[string][]string{"cluster/objects": {"cluster", "wire"}},
			[]string{"subsystem cluster/objects imports the root package cluster: what it needs of the node goes in its host interface"}},
		{"sibling", map[string][]string{"cluster/jobs": {"cluster/observe"}, "cluster/objects/inner": {"cluster/jobs/x"}}, []string{
			"subsystem cluster/jobs imports cluster/observe, of another subsystem (cluster/observe): wire them together in package cluster through host interfaces",
			"subsystem cluster/objects/inner imports cluster/jobs/x, of another subsystem (cluster/jobs): wire them together in package cluster through host interfaces",
		}},
	} {
		if got := subsystemViolations(c.graph); !slices.Equal(got, c.want) {
			t.Errorf("%s: violations = %q, want %q", c.name, got, c.want)
		}
	}
}

// The dependency check finds a forbidden package however deep, names the
// shortest chain (and stops there: store's own memberlist is not reported
// again), skips absent roots, and matches a pattern without "*" exactly.
func TestDepViolationsFollowsIndirectImports(t *testing.T) {
	t.Parallel()
	const m = module
	deps := map[string][]string{
		m + "/cluster/objects": {m + "/wire", "fmt"},
		m + "/wire":            {m + "/rpc"},
		m + "/rpc":             {"fmt"},
		"fmt":                  nil,
	}
	if got := depViolations([]string{m + "/cluster/objects", m + "/cluster/local"}, controlPlane, deps); len(got) != 0 {
		t.Fatalf("clean graph: %q", got)
	}
	deps[m+"/rpc"] = []string{"fmt", "github.com/hashicorp/raft-boltdb/v2"}
	deps[m+"/wire"] = []string{m + "/rpc", m + "/store"}
	deps[m+"/store"] = []string{"github.com/hashicorp/memberlist"}
	deps["github.com/hashicorp/raft-boltdb/v2"] = nil
	deps["github.com/hashicorp/memberlist"] = nil
	deps[m+"/storewise"] = nil // not store: an exact pattern
	deps[m+"/wire"] = append(deps[m+"/wire"], m+"/storewise")
	want := []string{
		m + "/cluster/objects depends on github.com/hashicorp/raft-boltdb/v2 (" + m + "/cluster/objects → " + m + "/wire → " + m + "/rpc → github.com/hashicorp/raft-boltdb/v2)",
		m + "/cluster/objects depends on " + m + "/store (" + m + "/cluster/objects → " + m + "/wire → " + m + "/store)",
	}
	if got := depViolations([]string{m + "/cluster/objects"}, controlPlane, deps); !slices.Equal(got, want) {
		t.Fatalf("violations =\n%q\nwant\n%q", got, want)
	}
}
