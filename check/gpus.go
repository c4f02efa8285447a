package check

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
)

// checkGPUs checks what each task and actor saw in worker.GPUIDs:
//   - the count: GPU g ≥ 1 gets g distinct devices, 0 < g < 1 one, and no
//     GPU demand none; each device exists on the node;
//   - bundles: work in a bundle uses only the bundle's devices (known, or
//     inferred as the union of what its work saw, which must not exceed
//     the bundle's GPU count);
//   - sharing: at every start, the GPU shares on each device of a node
//     (a fraction g, or 1 for whole GPUs; a bundle's devices count as the
//     bundle's for its whole life) sum to at most 1.
func checkGPUs(m *model, cfg Config) []Violation {
	out := gpuCounts(m, cfg)
	out = append(out, bundleGPUs(m)...)
	return append(out, gpuSharing(m, cfg)...)
}

// wantGPUs is how many distinct devices a GPU demand g gets.
func wantGPUs(g float64) int {
	switch {
	case g <= eps:
		return 0
	case g < 1:
		return 1
	}
	return int(math.Round(g))
}

// gpuShare is what a demand of g takes of each of its devices.
func gpuShare(g float64) float64 { return min(g, 1) }

func gpuCounts(m *model, cfg Config) []Violation {
	var out []Violation
	for _, hd := range m.holders {
		g := hd.demand["GPU"]
		want := wantGPUs(g)
		distinct := len(uniqueInts(hd.gpus))
		where := ""
		if hd.group != "" {
			where = fmt.Sprintf(" in bundle %d of group %s", hd.bundle, hd.group)
		}
		if distinct != want || distinct != len(hd.gpus) {
			out = append(out, Violation{Invariant: InvGPU, At: ns(hd.from), Node: hd.node, Tasks: []string{hd.name()},
				Detail: fmt.Sprintf("%s%s asked for GPU %g and saw GPU IDs %v: want %d distinct device(s)", hd.name(), where, g, hd.gpus, want)})
			continue
		}
		n, ok := cfg.node(hd.node)
		for _, id := range hd.gpus {
			if ok && float64(id) >= n.Total["GPU"]-eps {
				out = append(out, Violation{Invariant: InvGPU, At: ns(hd.from), Node: hd.node, Tasks: []string{hd.name()},
					Detail: fmt.Sprintf("%s saw GPU ID %d but node %s has %g GPU(s)", hd.name(), id, hd.node, n.Total["GPU"])})
			}
		}
	}
	return out
}

// bundleDevices is what the model knows of one group's GPUs on one node:
// the bundles there, the devices their work used and the devices known to
// be reserved.
type bundleDevices struct {
	group, node string
	gpus        float64       // sum of the bundles' GPU amounts here
	known       []int         // devices the API said the bundles hold
	used        map[int]bool  // devices the work in them saw
	byBundle    map[int][]int // bundle index -> devices its pinned work saw
	g           *group
}

// groupDevices collects, per ready group and node, the bundles' GPUs and
// the devices their work saw.
func groupDevices(m *model) []*bundleDevices {
	byKey := map[string]*bundleDevices{}
	var out []*bundleDevices
	for _, id := range sortedGroups(m) {
		g := m.groups[id]
		if g.ready == 0 {
			continue
		}
		for _, b := range g.bundles {
			k := id + "@" + b.Node
			bd := byKey[k]
			if bd == nil {
				bd = &bundleDevices{group: id, node: b.Node, used: map[int]bool{}, byBundle: map[int][]int{}, g: g}
				byKey[k] = bd
				out = append(out, bd)
			}
			bd.gpus += b.Demand["GPU"]
			bd.known = append(bd.known, b.GPUIDs...)
		}
	}
	for _, hd := range m.holders {
		bd := byKey[hd.group+"@"+hd.node]
		if hd.group == "" || bd == nil {
			continue
		}
		for _, id := range hd.gpus {
			bd.used[id] = true
			if hd.bundle >= 0 {
				bd.byBundle[hd.bundle] = uniqueInts(append(bd.byBundle[hd.bundle], id))
			}
		}
	}
	return out
}

// devices returns the group's devices on the node: the known ones, else
// those its work used.
func (bd *bundleDevices) devices() []int {
	if len(bd.known) > 0 {
		return uniqueInts(bd.known)
	}
	var ids []int
	for id := range bd.used {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

func bundleGPUs(m *model) []Violation {
	var out []Violation
	for _, bd := range groupDevices(m) {
		out = append(out, bd.check(m)...)
	}
	return out
}

// check reports work outside the known devices, and more devices used
// than the bundles reserve (per bundle, and for the group on the node).
func (bd *bundleDevices) check(m *model) []Violation {
	var out []Violation
	at := ns(bd.g.ready)
	if len(bd.known) > 0 {
		for _, hd := range m.holders {
			if hd.group != bd.group || hd.node != bd.node {
				continue
			}
			for _, id := range hd.gpus {
				if !slices.Contains(bd.known, id) {
					out = append(out, Violation{Invariant: InvGPU, At: ns(hd.from), Node: hd.node, Tasks: []string{hd.name()},
						Detail: fmt.Sprintf("%s in group %s saw GPU %d, not one of the bundles' devices %v", hd.name(), bd.group, id, uniqueInts(bd.known))})
				}
			}
		}
		return out
	}
	if used := bd.devices(); len(used) > int(math.Ceil(bd.gpus-eps)) {
		out = append(out, Violation{Invariant: InvGPU, At: at, Node: bd.node,
			Detail: fmt.Sprintf("group %s reserves GPU %g on node %s but its work used devices %v", bd.group, bd.gpus, bd.node, used)})
	}
	for _, b := range bd.g.bundles {
		if b.Node != bd.node {
			continue
		}
		if used := bd.byBundle[b.Index]; len(used) > int(math.Ceil(b.Demand["GPU"]-eps)) {
			out = append(out, Violation{Invariant: InvGPU, At: at, Node: bd.node,
				Detail: fmt.Sprintf("bundle %d of group %s reserves GPU %g but work pinned to it used devices %v", b.Index, bd.group, b.Demand["GPU"], used)})
		}
	}
	return out
}

// gpuSharing runs the capacity sweep over per-device shares: each node's
// devices (outside work plus each group's devices there), and each group's
// devices on a node (the work inside it).
func gpuSharing(m *model, cfg Config) []Violation {
	nodes := map[string]*scope{}
	var all []*scope
	for _, n := range cfg.Nodes {
		s := &scope{desc: "GPU devices of node " + n.Name, node: n.Name, cap: map[string]float64{}}
		for i := 0; i < int(math.Round(n.Total["GPU"])); i++ {
			s.cap[deviceKey(i)] = 1
		}
		nodes[n.Name] = s
		all = append(all, s)
	}
	groups := map[string]*scope{}
	for _, bd := range groupDevices(m) {
		share := gpuShare(bd.gpus)
		gs := &scope{desc: fmt.Sprintf("GPU devices of group %s on node %s", bd.group, bd.node), node: bd.node, cap: map[string]float64{}}
		for id := range bd.used { // work off the known devices is bundleGPUs' to report
			gs.cap[deviceKey(id)] = share
		}
		dem := map[string]float64{}
		for _, id := range bd.devices() {
			gs.cap[deviceKey(id)] = share
			dem[deviceKey(id)] = share
		}
		groups[bd.group+"@"+bd.node] = gs
		all = append(all, gs)
		if s := nodes[bd.node]; s != nil && len(dem) > 0 {
			s.items = append(s.items, item{name: "group " + bd.group, from: bd.g.ready, to: bd.g.removing, demand: dem})
		}
	}
	for _, hd := range m.holders {
		if len(hd.gpus) == 0 {
			continue
		}
		dem := map[string]float64{}
		for _, id := range uniqueInts(hd.gpus) {
			dem[deviceKey(id)] = gpuShare(hd.demand["GPU"])
		}
		it := item{name: hd.name(), from: hd.from, to: hd.to, demand: dem, h: hd}
		s := nodes[hd.node]
		if hd.group != "" {
			s = groups[hd.group+"@"+hd.node]
		}
		if s != nil {
			s.items = append(s.items, it)
		}
	}
	var out []Violation
	for _, s := range all {
		for _, v := range s.check(cfg) {
			v.Invariant = InvGPU
			out = append(out, v)
		}
	}
	return out
}

func deviceKey(id int) string { return "GPU device " + strconv.Itoa(id) }

// uniqueInts returns the distinct values of ids, sorted.
func uniqueInts(ids []int) []int {
	out := slices.Clone(ids)
	sort.Ints(out)
	return slices.Compact(out)
}
