package worker

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/internal/testutil"
)

// TestMetricsSeries scrapes a node's /metrics as Prometheus does (with a
// token, the node being secure): Raft's and memberlist's series (through
// the go-metrics sink), Go's collector, and ray_resources with the node's
// CPU total must be there, and running an actor must raise
// ray_actors{State="ALIVE"} by one, killing it lower it again.
func TestMetricsSeries(t *testing.T) {
	nodes := startClusterInit(t, 1, func(i int, cfg *cluster.Config) { cfg.HTTPPort = 0 })
	nd := nodes[0]
	token, err := cluster.ReadInitialToken(nd.DataDir())
	if err != nil {
		t.Fatal(err)
	}
	scrape := func() (string, error) {
		req, err := http.NewRequest("GET", "http://"+nd.HTTPAddr()+"/metrics", nil)
		if err != nil {
			return "", err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("/metrics: %d %s", resp.StatusCode, b)
		}
		return string(b), err
	}
	testutil.Until(t, 20*time.Second, "Raft, memberlist, Go and resource series", func() error {
		body, err := scrape()
		if err != nil {
			return err
		}
		for _, want := range []string{"\nnodeup_raft_", "\nnodeup_memberlist_", "\ngo_goroutines ", "\nprocess_resident_memory_bytes ",
			"\nray_resources{Name=\"CPU\",State=\"TOTAL\"} 2\n", "\nnodeup_autopilot_healthy "} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("no %q in /metrics", strings.TrimSpace(want))
			}
		}
		return nil
	})
	alive := func() (float64, error) {
		body, err := scrape()
		if err != nil {
			return 0, err
		}
		m := regexp.MustCompile(`(?m)^ray_actors\{State="ALIVE"\} (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			return 0, fmt.Errorf("no ray_actors{State=\"ALIVE\"} in /metrics")
		}
		return strconv.ParseFloat(m[1], 64)
	}
	before, err := alive()
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	h, err := logActorClass.Remote(ctx, "start")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := entriesCall.Remote(ctx, h).Get(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 10*time.Second, "ray_actors ALIVE up by one", func() error {
		if v, err := alive(); err != nil || v != before+1 {
			return fmt.Errorf("ray_actors{State=\"ALIVE\"} %v (before %v), %v", v, before, err)
		}
		return nil
	})
	if err := Kill(ctx, h, true); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, 10*time.Second, "ray_actors ALIVE back down", func() error {
		if v, err := alive(); err != nil || v != before {
			return fmt.Errorf("ray_actors{State=\"ALIVE\"} %v (before %v), %v", v, before, err)
		}
		return nil
	})
}
