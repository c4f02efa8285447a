package cli

import (
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeup/nodeup/cluster"
)

// reloadable are the start flags a SIGHUP takes again from the --config
// file: a node's custom resources and labels (cluster.Node.Reload).
var reloadable = []string{"resources", "labels"}

// settingsReloader re-reads reloadable from the --config file for a SIGHUP.
// A flag given on the command line or as NODEUP_* at start keeps its value,
// as at start (flag > environment > file).
type settingsReloader struct {
	path   string
	flags  map[string]ucli.Flag
	pinned map[string]string // flag name → its value set by flag or environment
	node   atomic.Pointer[cluster.Node]
}

// newSettingsReloader records c's --config path and which reloadable
// flags the command line or environment set (applyConfig's pinned).
func newSettingsReloader(c *ucli.Context) *settingsReloader {
	r := &settingsReloader{path: c.String("config"), flags: map[string]ucli.Flag{}, pinned: map[string]string{}}
	for _, f := range c.Command.Flags {
		r.flags[f.Names()[0]] = f
	}
	for _, name := range reloadable {
		if configPinned[name] {
			r.pinned[name] = c.String(name)
		}
	}
	return r
}

// configPinned names the flags the command line or environment had set
// when applyConfig ran (only those in reloadable are recorded).
var configPinned = map[string]bool{}

// values reads reloadable's current values: pinned ones as at start, the
// others from the config file ("" when it no longer names them).
func (r *settingsReloader) values() (map[string]string, error) {
	out := map[string]string{}
	for name, v := range r.pinned {
		out[name] = v
	}
	files, err := configFiles(r.path)
	if err != nil {
		return nil, err
	}
	for _, file := range files {
		attrs, err := readConfigFile(file)
		if err != nil {
			return nil, err
		}
		for _, name := range reloadable {
			a, ok := attrs[configKey(name)]
			if _, pinned := r.pinned[name]; !ok || pinned {
				continue
			}
			v, diags := a.Expr.Value(nil)
			if diags.HasErrors() {
				return nil, &ConfigError{File: file, Line: a.NameRange.Start.Line, Key: configKey(name), Err: errors.New(diagsText(diags))}
			}
			vals, err := configValues(v, r.flags[name])
			if err != nil {
				return nil, &ConfigError{File: file, Line: a.NameRange.Start.Line, Key: configKey(name), Err: err}
			}
			out[name] = strings.Join(vals, ",")
		}
	}
	return out, nil
}

// reload applies the config file's resources and labels to the running
// node and logs what changed, or why nothing did. Without --config it does
// nothing: flags are read only at start.
func (r *settingsReloader) reload(logger *slog.Logger) {
	n := r.node.Load()
	if n == nil || r.path == "" {
		return
	}
	fail := func(err error) {
		logger.Warn("SIGHUP received: resources and labels unchanged", "config", r.path, "err", err)
	}
	vals, err := r.values()
	if err != nil {
		fail(err)
		return
	}
	res, err := parseCustomResources(vals["resources"])
	if err != nil {
		fail(err)
		return
	}
	labels, err := parseLabels(vals["labels"])
	if err != nil {
		fail(err)
		return
	}
	changes, err := n.Reload(res, labels)
	switch {
	case err != nil:
		fail(err)
	case changes == "":
		logger.Info("SIGHUP received: resources and labels unchanged (as in the config file)", "config", r.path)
	default:
		logger.Warn("SIGHUP received: resources and labels reloaded", "config", r.path, "changes", strings.ReplaceAll(changes, "\n", "; "))
	}
}
