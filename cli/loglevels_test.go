package cli

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestParseLogLevels(t *testing.T) {
	base, byComp, err := parseLogLevels("warn,raft=debug, gossip=error")
	if err != nil || base != slog.LevelWarn || byComp["raft"] != slog.LevelDebug || byComp["gossip"] != slog.LevelError || len(byComp) != 2 {
		t.Fatalf("parse: %v %v %v", base, byComp, err)
	}
	if base, byComp, err := parseLogLevels("raft=warn"); err != nil || base != slog.LevelInfo || byComp["raft"] != slog.LevelWarn {
		t.Fatalf("only an override: %v %v %v", base, byComp, err)
	}
	for spec, want := range map[string]string{
		"":                    "want a level",
		"loud":                `"loud" is not a level`,
		"info+2":              `"info+2" is not a level`,
		"info,debug":          "two base levels",
		"info,scheduler=warn": `unknown component "scheduler": use one of autopilot, fsm, gossip, gpu, raft, rpc`,
		"info,raft=":          `"" is not a level`,
	} {
		if _, _, err := parseLogLevels(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseLogLevels(%q) = %v, want an error with %q", spec, err, want)
		}
	}
}

// A component's level overrides the base one for loggers made With that
// component, and a reload changes loggers made before it.
func TestComponentLogLevels(t *testing.T) {
	var buf bytes.Buffer
	defer func(l *slog.Logger) { slog.SetDefault(l) }(slog.Default())
	if err := setupLogging("info,raft=warn,rpc=debug", "text", &buf); err != nil {
		t.Fatal(err)
	}
	node := slog.Default().With("node", "n0")
	raft := node.With("component", "raft")
	rpc := node.With("component", "rpc")
	node.Info("node info")
	node.Debug("node debug")
	raft.Info("raft info")
	raft.Warn("raft warn")
	rpc.Debug("rpc debug")
	out := buf.String()
	for _, want := range []string{"node info", "raft warn", "rpc debug"} {
		if !strings.Contains(out, want) {
			t.Errorf("%q missing from the log:\n%s", want, out)
		}
	}
	for _, not := range []string{"node debug", "raft info"} {
		if strings.Contains(out, not) {
			t.Errorf("%q logged, below its level:\n%s", not, out)
		}
	}
	base, byComp, _ := parseLogLevels("error,raft=info")
	procLevels.set(base, byComp)
	buf.Reset()
	raft.Info("raft info after reload")
	node.Warn("node warn after reload")
	if out := buf.String(); !strings.Contains(out, "raft info after reload") || strings.Contains(out, "node warn after reload") {
		t.Errorf("after a reload to error,raft=info:\n%s", out)
	}
	if err := setupLogging("info", "yaml", &buf); err == nil || !strings.Contains(err.Error(), `--log-format "yaml"`) {
		t.Errorf("bad format: %v", err)
	}
}
