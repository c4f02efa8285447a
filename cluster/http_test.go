package cluster

import (
	"bytes"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestWriteGauges checks the text format byte for byte (sorted families and
// samples, escaping, special values) and that Prometheus's own parser reads
// it back.
func TestWriteGauges(t *testing.T) {
	var b bytes.Buffer
	writeGauges(&b, []gauge{
		{name: "z_total", help: "Last family.", label: "resource", values: map[string]float64{"memory": 17692355788, "CPU": 2, "custom": 1.5, `a"b\c` + "\n": math.Inf(1)}},
		{name: "a_leader", help: `One \ two` + "\nlines.", values: map[string]float64{"": 1}},
		{name: "m_empty", help: "Not exposed.", label: "x", values: map[string]float64{}},
		{name: "n_nan", help: "NaN and -Inf.", label: "k", values: map[string]float64{"a": math.NaN(), "b": math.Inf(-1), "c": 0}},
	})
	want := `# HELP a_leader One \\ two\nlines.
# TYPE a_leader gauge
a_leader 1
# HELP n_nan NaN and -Inf.
# TYPE n_nan gauge
n_nan{k="a"} NaN
n_nan{k="b"} -Inf
n_nan{k="c"} 0
# HELP z_total Last family.
# TYPE z_total gauge
z_total{resource="CPU"} 2
z_total{resource="a\"b\\c\n"} +Inf
z_total{resource="custom"} 1.5
z_total{resource="memory"} 1.7692355788e+10
`
	if b.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("Prometheus's parser: %v", err)
	}
	if len(fams) != 3 || len(fams["z_total"].GetMetric()) != 4 || fams["a_leader"].GetHelp() != "One \\ two\nlines." {
		t.Errorf("parsed back: %v", fams)
	}
	for _, m := range fams["z_total"].GetMetric() {
		if l := m.GetLabel()[0]; l.GetValue() == "a\"b\\c\n" && !math.IsInf(m.GetGauge().GetValue(), 1) {
			t.Errorf("escaped label parsed back as %v", m)
		}
	}
}

// TestMetricsEndpoint scrapes a running node's /metrics.
func TestMetricsEndpoint(t *testing.T) {
	nodes := testCluster(t, 1, nil)
	waitFormed(t, nodes, 1, 1)
	resp, err := http.Get("http://" + nodes[0].HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("%s, Content-Type %q:\n%s", resp.Status, ct, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("Prometheus's parser: %v\n%s", err, body)
	}
	for _, line := range []string{
		`nodeup_gossip_members{status="alive"} 1`,
		`nodeup_gossip_members{status="dead"} 0`,
		"nodeup_raft_leader 1",
		`nodeup_node_resource_total{resource="CPU"} 2`,
		`nodeup_node_resource_total{resource="memory"} 1.073741824e+09`,
	} {
		if !strings.Contains(string(body), line+"\n") {
			t.Errorf("no line %q in:\n%s", line, body)
		}
	}
	if len(fams) != 3 {
		t.Errorf("%d metric families:\n%s", len(fams), body)
	}
}
