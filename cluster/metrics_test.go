package cluster

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestGrafanaDashboardSeries: docs/grafana-dashboard.json is valid JSON and
// every ray_* and nodeup_* series its queries use is one the node describes
// (or Raft's and memberlist's own, nodeup_raft_* and nodeup_memberlist_*),
// so a renamed metric cannot leave the dashboard silently empty.
func TestGrafanaDashboardSeries(t *testing.T) {
	b, err := os.ReadFile("../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	described := map[string]bool{}
	ch := make(chan *prometheus.Desc, 100)
	(&rayCollector{}).Describe(ch)
	(&nodeCollector{}).Describe(ch)
	close(ch)
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		if m := fq.FindStringSubmatch(d.String()); m != nil {
			described[m[1]] = true
		}
	}
	name := regexp.MustCompile(`\b(?:ray|nodeup)_[A-Za-z_]+`)
	used := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, n := range name.FindAllString(tg.Expr, -1) {
				used++
				if described[n] {
					continue
				}
				if n != "nodeup_raft_leader" && (strings.HasPrefix(n, "nodeup_raft_") || strings.HasPrefix(n, "nodeup_memberlist_")) {
					continue
				}
				t.Errorf("panel %q uses %s, which no collector describes", p.Title, n)
			}
		}
	}
	if used == 0 || !described["ray_actors"] {
		t.Fatalf("found %d series in the dashboard, described %v", used, described)
	}
}
