package cluster

import (
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"

	"github.com/nodeup/nodeup/sched"
)

// settings are what a node may change while it runs (Reload): its custom
// resources and labels. The rest of Config is read only at start.
type settings struct {
	mu        sync.RWMutex
	resources sched.ResourceSet // Config.Resources: CPU, memory and the custom ones
	labels    map[string]string
}

func (s *settings) get() (sched.ResourceSet, map[string]string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.resources.Clone(), maps.Clone(s.labels)
}

// fixedResources are the names in Config.Resources a reload never
// changes: the machine's CPUs and memory (flags read at start).
var fixedResources = map[string]bool{sched.CPU: true, sched.Memory: true}

// customOf is res without the fixed resources.
func customOf(res sched.ResourceSet) sched.ResourceSet {
	out := sched.ResourceSet{}
	for name, q := range res {
		if !fixedResources[name] {
			out[name] = q
		}
	}
	return out
}

// ErrReloadInUse means a reload would take a custom resource below what
// leases on the node hold now; nothing was changed.
var ErrReloadInUse = fmt.Errorf("resources in use")

// Reload replaces this node's custom resources (every resource of
// Config.Resources but CPU and memory) with custom and its labels with
// labels, as a SIGHUP after the config file changed (Nomad reloads its
// client meta the same way). The local scheduler's totals and free pool
// move by the difference, queued work that now fits starts, and the node
// registers its new record with the leader, so placement elsewhere sees
// it within a heartbeat. It returns what changed, one "name: old → new" per
// line ("" when nothing did). A custom resource may not drop below what
// running work holds (ErrReloadInUse, naming it); names must pass
// sched.ValidateResourceName and may not be CPU or memory. Nothing changes
// on an error.
func (n *Node) Reload(custom sched.ResourceSet, labels map[string]string) (string, error) {
	for name := range custom {
		if fixedResources[name] {
			return "", fmt.Errorf("reload: %s is not a custom resource (set at start with --num-cpus/--memory)", name)
		}
		if err := sched.ValidateResourceName(name); err != nil {
			return "", fmt.Errorf("reload: %w", err)
		}
	}
	n.settings.mu.Lock()
	oldCustom := customOf(n.settings.resources)
	delta := sched.ResourceSet{}
	for name, q := range custom {
		if d := q - oldCustom[name]; d != 0 {
			delta[name] = d
		}
	}
	for name, q := range oldCustom {
		if _, kept := custom[name]; !kept {
			delta[name] = -q
		}
	}
	if err := n.local.resize(delta); err != nil {
		n.settings.mu.Unlock()
		return "", err
	}
	var changes []string
	for name, d := range delta {
		changes = append(changes, fmt.Sprintf("resource %s: %s → %s", name, oldCustom[name], oldCustom[name]+d))
	}
	next := n.settings.resources.Clone()
	for name, d := range delta {
		next[name] += d
		if next[name] == 0 {
			delete(next, name)
		}
	}
	n.settings.resources = next
	if !maps.Equal(n.settings.labels, labels) {
		changes = append(changes, fmt.Sprintf("labels: %v → %v", n.settings.labels, labels))
		n.settings.labels = maps.Clone(labels)
	}
	n.settings.mu.Unlock()
	sort.Strings(changes)
	if len(changes) == 0 {
		return "", nil
	}
	n.group.goFunc("register-again", n.registerAgain)
	return strings.Join(changes, "\n"), nil
}

// resize adds delta to the total and the free pool (negative entries
// shrink them), refusing the whole change when a resource's free amount
// would go below zero, and starts queued work that now fits.
func (s *localSched) resize(delta sched.ResourceSet) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, d := range delta {
		if s.avail[name]+d < 0 {
			return fmt.Errorf("%w: %s would go from %s to %s, but %s of it is held by running work; stop that work first",
				ErrReloadInUse, name, s.total[name], s.total[name]+d, s.total[name]-s.avail[name])
		}
	}
	for name, d := range delta {
		s.total[name] += d
		s.avail[name] += d
		if s.total[name] == 0 {
			delete(s.total, name)
			delete(s.avail, name)
		}
	}
	s.dispatchLocked()
	return nil
}
