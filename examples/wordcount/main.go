// Command wordcount is nodeup's main job: it counts words across a directory
// of real files (by default every .go file of the Go standard library) with
// map tasks spread round-robin over the nodes through per-node custom
// resources (node0, node1, ... exactly as Ray's round-robin example), reduce
// tasks that merge partial counts, and a check against a single-process
// count of the same files. It exits non-zero on any mismatch.
//
//	go run ./examples/wordcount                          # embedded single node
//	NODEUP_ADDRESS=127.0.0.1:7370 bin/wordcount -dir ~/data -pattern '*.txt'
//
// The directory must be readable at the same path on every node (a shared or
// copied data set), as with any Ray job reading local files.
package main

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode"

	_ "github.com/nodeup/nodeup/embedded" // starts a node in this program when none is running
	"github.com/nodeup/nodeup/worker"
)

// Counts maps a word to its number of occurrences.
type Counts map[string]int64

// countFiles is the map task: it reads a batch of files and counts their words.
var countFiles = worker.Register1(func(ctx context.Context, paths []string) (Counts, error) {
	return count(paths)
})

// count reads files and counts their words: the map task's work, and the
// single-process check when given every file.
func count(paths []string) (Counts, error) {
	c := Counts{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		addWords(c, string(b))
	}
	return c, nil
}

// merge is the reduce task: it sums partial counts, fetching each from
// wherever it lives (the refs arrive as refs, nested in the slice).
var merge = worker.Register1(func(ctx context.Context, parts []worker.Ref[Counts]) (Counts, error) {
	out := Counts{}
	for _, r := range parts {
		c, err := r.Get(ctx)
		if err != nil {
			return nil, err
		}
		for w, n := range c {
			out[w] += n
		}
	}
	return out, nil
})

// addWords counts maximal runs of letters, digits and underscores.
func addWords(c Counts, text string) {
	start := -1
	for i, r := range text {
		word := unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_'
		switch {
		case word && start < 0:
			start = i
		case !word && start >= 0:
			c[text[start:i]]++
			start = -1
		}
	}
	if start >= 0 {
		c[text[start:]]++
	}
}

// goroot is `go env GOROOT`, or "" when no go command is installed (then
// -dir must be given).
func goroot() string {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func main() {
	defaultDir := ""
	if root := goroot(); root != "" {
		defaultDir = filepath.Join(root, "src")
	}
	dir := flag.String("dir", defaultDir, "directory to count words in (default: the Go standard library's sources)")
	pattern := flag.String("pattern", "*.go", "file name pattern (filepath.Match)")
	batch := flag.Int("batch", 64, "files per map task")
	top := flag.Int("top", 20, "how many of the most frequent words to print")
	flag.Parse()
	ctx := context.Background()
	if err := worker.Init(ctx); err != nil {
		log.Fatal(err)
	}
	code := run(ctx, *dir, *pattern, *batch, *top)
	worker.Shutdown()
	os.Exit(code)
}

func run(ctx context.Context, dir, pattern string, batch, top int) int {
	if dir == "" {
		fmt.Fprintln(os.Stderr, "wordcount: no go command to find the standard library: pass -dir")
		return 1
	}
	files, err := listFiles(dir, pattern)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wordcount:", err)
		return 1
	}
	if len(files) == 0 {
		fmt.Fprintf(os.Stderr, "wordcount: no file under %s matches %q\n", dir, pattern)
		return 1
	}
	if batch < 1 {
		fmt.Fprintf(os.Stderr, "wordcount: -batch %d: must be at least 1\n", batch)
		return 1
	}
	nodes, err := worker.Nodes(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wordcount:", err)
		return 1
	}
	// Seed 001's pattern: node i offers a custom resource "node<i>".
	numNodes := 0
	for {
		found := false
		for _, n := range nodes {
			if n.Alive && n.Total[fmt.Sprintf("node%d", numNodes)] > 0 {
				found = true
			}
		}
		if !found {
			break
		}
		numNodes++
	}
	fmt.Printf("wordcount: %d files under %s (%q) in batches of %d; %d alive nodes", len(files), dir, pattern, batch, len(nodes))
	if numNodes > 0 {
		fmt.Printf(", round-robin over node0..node%d\n", numNodes-1)
	} else {
		fmt.Println(" (no node<i> resources: default scheduling)")
	}

	start := time.Now()
	var parts []worker.Ref[Counts]
	for i := 0; i*batch < len(files); i++ {
		f := countFiles
		if numNodes > 0 {
			f = worker.Must(f.Options(worker.Resources(map[string]float64{fmt.Sprintf("node%d", i%numNodes): 1})))
		}
		parts = append(parts, worker.Must(f.Options(worker.Name(fmt.Sprintf("count-%d", i)))).Remote(ctx, files[i*batch:min((i+1)*batch, len(files))]))
	}
	reducers := max(numNodes, 1)
	var merged []worker.Ref[Counts]
	for r := 0; r < reducers; r++ {
		var group []worker.Ref[Counts]
		for i := r; i < len(parts); i += reducers {
			group = append(group, parts[i])
		}
		m := worker.Must(merge.Options(worker.Name(fmt.Sprintf("merge-%d", r))))
		if numNodes > 0 {
			m = worker.Must(m.Options(worker.Resources(map[string]float64{fmt.Sprintf("node%d", r): 1})))
		}
		merged = append(merged, m.Remote(ctx, group))
	}
	total, err := worker.Must(merge.Options(worker.Name("merge-final"))).Remote(ctx, merged).Get(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wordcount:", err)
		return 1
	}
	distributed := time.Since(start)

	start = time.Now()
	want, err := count(files)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wordcount:", err)
		return 1
	}
	single := time.Since(start)

	var words int64
	for _, n := range total {
		words += n
	}
	fmt.Printf("total words: %d\ndistinct words: %d\n", words, len(total))
	fmt.Printf("top %d:\n", top)
	for _, wc := range topN(total, top) {
		fmt.Printf("  %-16s %d\n", wc.w, wc.n)
	}
	fmt.Printf("distributed: %d map + %d reduce tasks in %s; single-process check: %s\n",
		len(parts), reducers+1, distributed.Round(time.Millisecond), single.Round(time.Millisecond))
	if diff := compare(total, want); diff != "" {
		fmt.Fprintln(os.Stderr, "wordcount: MISMATCH with the single-process count:", diff)
		return 1
	}
	fmt.Println("check: distributed counts equal the single-process count")
	return 0
}

func listFiles(dir, pattern string) ([]string, error) {
	if _, err := filepath.Match(pattern, ""); err != nil {
		return nil, fmt.Errorf("-pattern %q: %w", pattern, err)
	}
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ok, _ := filepath.Match(pattern, d.Name()); ok && d.Type().IsRegular() {
			abs, err := filepath.Abs(p)
			if err != nil {
				return err
			}
			files = append(files, abs)
		}
		return nil
	})
	return files, err
}

type wordCount struct {
	w string
	n int64
}

func topN(c Counts, n int) []wordCount {
	all := make([]wordCount, 0, len(c))
	for w, k := range c {
		all = append(all, wordCount{w, k})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n || all[i].n == all[j].n && all[i].w < all[j].w })
	return all[:min(n, len(all))]
}

func compare(got, want Counts) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d distinct words, want %d", len(got), len(want))
	}
	for w, n := range want {
		if got[w] != n {
			return fmt.Sprintf("word %q counted %d times, want %d", w, got[w], n)
		}
	}
	return ""
}
