package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/nodeup/nodeup/internal/testutil"
)

// browser is the path of a Chromium to drive, "" if none is installed.
func browser() string {
	for _, name := range []string{"chromium", "chromium-browser", "chromium-headless-shell", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestDashboardShowsNodesLive loads the dashboard of a 3-node cluster in a
// real headless browser: it shows the three nodes alive, and, without a
// reload, shows a killed node dead. NODEUP_DASHBOARD_SCREENSHOT=<file.png>
// saves what the page looked like at the end.
func TestDashboardShowsNodesLive(t *testing.T) {
	exe := browser()
	if exe == "" {
		if os.Getenv("NODEUP_REQUIRE_BROWSER") == "1" {
			t.Fatal("no Chromium found (NODEUP_REQUIRE_BROWSER=1): apt-get install chromium")
		}
		t.Skip("no Chromium found: apt-get install chromium to run the dashboard's browser test")
	}
	procs := startThreeNodes(t)
	out, errOut, code := nodeup(t, nil, "token", "create", "--role", "read", "--address", procs[0].addr())
	if code != 0 {
		t.Fatalf("token create --role read: exit %d: %s", code, errOut)
	}
	read := strings.TrimSpace(out)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 3*time.Minute)
	defer cancelT()
	url := fmt.Sprintf("http://127.0.0.1:%d/#token=%s", procs[0].httpPort, read)
	if _, err := chromedp.Run(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("load %s: %v", url, err)
	}
	nodes := func() (string, error) {
		rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#nodes tbody tr[data-node]")).map(r => r.dataset.node + "=" + r.dataset.state)`))
		sort.Strings(rows)
		return strings.Join(rows, " "), err
	}
	text := func(sel string) string {
		s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector(`+"`"+sel+"`"+`) || {}).textContent || ""`))
		return s
	}
	testutil.Until(t, 30*time.Second, "the page shows n0, n1 and n2 alive", func() error {
		got, err := nodes()
		if err != nil {
			return err
		}
		if got != "n0=alive n1=alive n2=alive" {
			return fmt.Errorf("nodes on the page: %q; error line %q", got, text("#error"))
		}
		return nil
	})
	if s := text("#security"); !strings.Contains(s, "mutual TLS") {
		t.Errorf("security line %q, want mutual TLS", s)
	}
	if s := text("#leader"); !strings.Contains(s, "n0") {
		t.Errorf("leader line %q, want n0", s)
	}

	// A job's tasks and its workers' logs appear (from /v1/tasks and
	// /v1/logs), and a log's tail opens below the table.
	bin := buildExamples(t, "options")
	cmd := exec.Command(filepath.Join(bin, "options"))
	cmd.Env = append(os.Environ(), "NODEUP_ADDRESS="+procs[0].sock())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("options: %v\n%s", err, out)
	}
	testutil.Until(t, 30*time.Second, "the page shows finished tasks and worker logs", func() error {
		finished, err := chromedp.Run(ctx, chromedp.Evaluate[int](`Array.from(document.querySelectorAll("#task-summary tbody tr")).reduce((s, r) => s + (+(r.cells[3] || {}).textContent || 0), 0)`))
		if err != nil {
			return err
		}
		logs, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#logs tbody tr button").length`))
		if err != nil {
			return err
		}
		if finished == 0 || logs == 0 {
			return fmt.Errorf("%d finished tasks, %d log files on the page; tasks line %q, logs line %q, error %q",
				finished, logs, text("#task-counts"), text("#log-counts"), text("#error"))
		}
		return nil
	})
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector("#logs tbody tr button").click(), true`)); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 15*time.Second, "a log's tail shows below the table", func() error {
		if s := text("#log-tail"); !strings.Contains(s, "last 200 lines") {
			return fmt.Errorf("tail area %q", s)
		}
		return nil
	})

	if err := procs[2].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	took := testutil.Until(t, 90*time.Second, "the page shows n2 dead without a reload", func() error {
		got, err := nodes()
		if err != nil {
			return err
		}
		if got != "n0=alive n1=alive n2=dead" {
			return fmt.Errorf("nodes on the page: %q", got)
		}
		return nil
	})
	t.Logf("the page showed n2 dead %s after its kill", took.Round(100*time.Millisecond))
	if path := os.Getenv("NODEUP_DASHBOARD_SCREENSHOT"); path != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
