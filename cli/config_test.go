package cli

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/sched"
)

// parseStart runs `nodeup start args...` up to the node's Config: start's
// real flags, environment and --config, with an Action that stops before
// a node would start.
func parseStart(t *testing.T, args ...string) (cluster.Config, []string, error) {
	t.Helper()
	cmd := startCommand()
	var cfg cluster.Config
	var peers []string
	cmd.Action = func(c *ucli.Context) error {
		peers = c.StringSlice("join")
		var err error
		cfg, err = nodeConfig(c, c.Bool("head"), peers)
		return err
	}
	app := &ucli.App{Name: "nodeup", Commands: []*ucli.Command{cmd}}
	err := app.Run(append([]string{"nodeup", "start"}, args...))
	return cfg, peers, err
}

func writeFile(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConfigPrecedenceFlagEnvFileDefault(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, filepath.Join(dir, "nodeup.hcl"), `
node_name    = "from-file"
cluster_name = "file-cluster"
port         = 7000
http_port    = 7002
num_cpus     = 3
server       = false
join         = ["10.0.0.1", "10.0.0.2:7370"]
labels       = "zone=a"
`)
	t.Setenv("NODEUP_CLUSTER_NAME", "env-cluster")
	t.Setenv("NODEUP_HTTP_PORT", "8002")
	cfg, peers, err := parseStart(t, "--config", file, "--data-dir", dir, "--http-port", "9002", "--node-name", "from-flag")
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"node name (flag over file)", cfg.NodeName, "from-flag"},
		{"http port (flag over env and file)", cfg.HTTPPort, 9002},
		{"cluster name (env over file)", cfg.ClusterName, "env-cluster"},
		{"port (file over default)", cfg.Port, 7000},
		{"server (file over default true)", cfg.Server, false},
		{"num_cpus (a number for a string flag)", cfg.Resources[sched.CPU], sched.QuantityOf(3)},
		{"gossip port (default)", cfg.GossipPort, cluster.DefaultGossipPort},
		{"labels", cfg.Labels["zone"], "a"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.what, c.got, c.want)
		}
	}
	if !slices.Equal(peers, []string{"10.0.0.1", "10.0.0.2:7370"}) {
		t.Errorf("join from the file: got %q", peers)
	}
}

func TestConfigDirMergedInNameOrderJSONAndHCL(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "conf.d")
	if err := os.Mkdir(conf, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(conf, "10-base.hcl"), "node_name = \"base\"\nport = 7100\ngossip_port = 7101\n")
	writeFile(t, filepath.Join(conf, "20-site.json"), `{"node_name": "site", "object_spill_threshold": 0.5}`)
	writeFile(t, filepath.Join(conf, "README"), "not a config file: ignored")
	cfg, _, err := parseStart(t, "--config", conf, "--data-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeName != "site" || cfg.Port != 7100 || cfg.GossipPort != 7101 || cfg.ObjectSpillThreshold != 0.5 {
		t.Fatalf("merged config: name %q port %d gossip %d spill %v; want site 7100 7101 0.5 (20-site.json over 10-base.hcl)",
			cfg.NodeName, cfg.Port, cfg.GossipPort, cfg.ObjectSpillThreshold)
	}
}

func TestConfigEnvSetsEveryStartFlag(t *testing.T) {
	for _, f := range startCommand().Flags {
		name := f.Names()[0]
		if !slices.Contains(f.(ucli.DocGenerationFlag).GetEnvVars(), EnvVar(name)) {
			t.Errorf("--%s has no %s", name, EnvVar(name))
		}
	}
	for _, f := range joinCommand().Flags {
		if name := f.Names()[0]; !slices.Contains(f.(ucli.DocGenerationFlag).GetEnvVars(), EnvVar(name)) {
			t.Errorf("join --%s has no %s", name, EnvVar(name))
		}
	}
	t.Setenv("NODEUP_JOIN", "10.0.0.7,10.0.0.8")
	t.Setenv("NODEUP_NUM_CPUS", "1.5")
	cfg, peers, err := parseStart(t, "--data-dir", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want, _ := sched.ParseQuantity("1.5")
	if !slices.Equal(peers, []string{"10.0.0.7", "10.0.0.8"}) || cfg.Resources[sched.CPU] != want {
		t.Fatalf("from the environment: peers %q, CPU %v", peers, cfg.Resources[sched.CPU])
	}
}

func TestConfigErrorsNameKeyAndFile(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, text string
		want       []string
		unknown    bool
	}{
		{"unknown.hcl", "node_name = \"a\"\nbogus_key = 1\n", []string{"unknown.hcl:2", `"bogus_key"`, "unknown key", "accepted keys: "}, true},
		{"dash.hcl", "data-dir = \"/x\"\n", []string{"dash.hcl:1", `"data-dir"`, "did you mean data_dir"}, true},
		{"unknown.json", `{"num_cpus": 2, "nope": true}`, []string{"unknown.json:1", `"nope"`, "unknown key"}, true},
		{"type.hcl", "port = \"seven\"\n", []string{"type.hcl:1", `"port"`, `want a number, got the string "seven"`}, false},
		{"list.hcl", "join = { a = 1 }\n", []string{"list.hcl:1", `"join"`, "want a list of strings"}, false},
		{"block.hcl", "server {\n  enabled = true\n}\n", []string{"block.hcl:1", "blocks are not accepted"}, false},
		{"syntax.hcl", "port = \n", []string{"syntax.hcl:"}, false},
	}
	for _, tc := range cases {
		file := writeFile(t, filepath.Join(dir, tc.name), tc.text)
		_, _, err := parseStart(t, "--config", file, "--data-dir", dir)
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%s: got %v, want a *ConfigError", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", tc.name, err, w)
			}
		}
		if got := errors.Is(err, ErrUnknownConfigKey); got != tc.unknown {
			t.Errorf("%s: errors.Is(ErrUnknownConfigKey) = %v", tc.name, got)
		}
	}
	if _, _, err := parseStart(t, "--config", filepath.Join(dir, "missing.hcl")); err == nil || !strings.Contains(err.Error(), "missing.hcl") {
		t.Errorf("missing file: got %v, want an error naming it", err)
	}
}
