package cli

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeup/nodeup/gpu"
	"github.com/nodeup/nodeup/sched"
	"github.com/nodeup/nodeup/store"
	"github.com/nodeup/nodeup/wire"
)

func statusCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "status",
		Usage: "show the cluster: leader, Raft voters, nodes and their resources",
		Flags: append(clientFlags(), &ucli.BoolFlag{Name: "json", Usage: "print JSON"},
			&ucli.BoolFlag{Name: "gpus", Usage: "show each node's GPUs: health, reservations and telemetry"},
			&ucli.IntFlag{Name: "wait", Usage: "first wait until this many nodes are alive under a leader (a node still starting, or none yet, is waited for), for up to --wait-timeout"},
			&ucli.DurationFlag{Name: "wait-timeout", Value: 60 * time.Second, Usage: "how long --wait waits"}),
		Action: func(c *ucli.Context) error {
			var st wire.StatusResponse
			if err := statusWait(c, c.Int("wait"), c.Duration("wait-timeout"), &st); err != nil {
				return err
			}
			if c.Bool("json") {
				return writeJSONOut(c.App.Writer, statusJSON(&st))
			}
			if c.Bool("gpus") {
				printGPUs(c.App.Writer, &st)
				return nil
			}
			printStatus(c.App.Writer, &st)
			return nil
		},
	}
}

func nodesCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "nodes",
		Usage: "list the node table (the fields of Ray's ray.nodes())",
		Flags: append(append(clientFlags(), &ucli.BoolFlag{Name: "json", Usage: "print JSON"}), rowFlags[nodeJSON]()...),
		Action: func(c *ucli.Context) error {
			var st wire.StatusResponse
			if err := call(c, wire.MethodStatus, &wire.Empty{}, &st); err != nil {
				return err
			}
			rows := make([]nodeJSON, 0, len(st.Nodes))
			for _, nv := range st.Nodes {
				rows = append(rows, toNodeJSON(nv))
			}
			idx, total, err := selectIndices(c, rows)
			if err != nil {
				return err
			}
			defer printLeftOut(c, "nodes", len(idx), total)
			if c.Bool("json") {
				kept := make([]nodeJSON, 0, len(idx))
				for _, i := range idx {
					kept = append(kept, rows[i])
				}
				return writeJSONOut(c.App.Writer, kept)
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE\tNODE ID\tSTATE\tADDRESS\tRAFT\tINC\tRESOURCES")
			for _, i := range idx {
				nv := st.Nodes[i]
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", nv.Name, nv.ID, nv.Status, nv.Address,
					dash(nv.RaftSuffrage), nv.Incarnation, formatResources(nil, nv.Resources))
			}
			return tw.Flush()
		},
	}
}

// nodeJSON is one row of `nodeup nodes --json`, named as Ray's ray.nodes().
type nodeJSON struct {
	NodeID             string             `json:"NodeID"`
	NodeName           string             `json:"NodeName"`
	Alive              bool               `json:"Alive"`
	State              string             `json:"State"`
	NodeManagerAddress string             `json:"NodeManagerAddress"`
	NodeManagerPort    int                `json:"NodeManagerPort"`
	GossipPort         int                `json:"GossipPort"`
	HTTPPort           int                `json:"HTTPPort,omitempty"`
	Resources          map[string]float64 `json:"Resources"`
	Available          map[string]float64 `json:"AvailableResources"`
	Labels             map[string]string  `json:"Labels"`
	Incarnation        uint64             `json:"Incarnation"`
	RaftSuffrage       string             `json:"RaftSuffrage,omitempty"`
	Version            string             `json:"Version"`
	// GPUs is the node's GPU status (devices, health, reservations,
	// telemetry); absent for a node without GPUs.
	GPUs *gpu.Status `json:"GPUs,omitempty"`
}

func toNodeJSON(nv wire.NodeView) nodeJSON {
	host, port := splitPort(nv.Address)
	_, gport := splitPort(nv.GossipAddress)
	_, hport := splitPort(nv.HTTPAddress)
	return nodeJSON{NodeID: nv.ID, NodeName: nv.Name, Alive: nv.Status == store.NodeAlive || nv.Status == store.NodeSuspect,
		State: string(nv.Status), NodeManagerAddress: host, NodeManagerPort: port, GossipPort: gport, HTTPPort: hport,
		Resources: nv.Resources.Floats(), Available: nv.Available.Floats(), Labels: nv.Labels, Incarnation: nv.Incarnation,
		RaftSuffrage: nv.RaftSuffrage, Version: nv.Version, GPUs: nv.GPUs}
}

func splitPort(addr string) (string, int) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, 0
	}
	n, _ := strconv.Atoi(p)
	return h, n
}

// statusOut is `nodeup status --json`.
type statusOut struct {
	ClusterName string             `json:"cluster_name"`
	ClusterID   string             `json:"cluster_id"`
	Leader      leaderOut          `json:"leader"`
	Voters      []wire.RaftServer  `json:"raft_servers"`
	Nodes       []nodeJSON         `json:"nodes"`
	Total       map[string]float64 `json:"total_resources"`
	Available   map[string]float64 `json:"available_resources"`
	Pending     []pendingOut       `json:"pending_demands"`
	Insecure    bool               `json:"insecure"`
	CAHash      string             `json:"ca_hash,omitempty"`
}

// pendingOut is work waiting for resources; Reason names what is missing.
type pendingOut struct {
	Resources map[string]float64 `json:"resources"`
	Count     int                `json:"count"`
	Reason    string             `json:"reason"`
	TaskName  string             `json:"task_name,omitempty"`
}

type leaderOut struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Address string `json:"address"`
}

func statusJSON(st *wire.StatusResponse) statusOut {
	out := statusOut{ClusterName: st.ClusterName, ClusterID: st.ClusterID,
		Leader: leaderOut{ID: st.LeaderID, Name: st.LeaderName, Address: st.LeaderAddr},
		Voters: st.Servers, Total: st.Total.Floats(), Available: st.Available.Floats(), Nodes: []nodeJSON{},
		Insecure: st.Insecure, CAHash: st.CAHash}
	for _, nv := range st.Nodes {
		out.Nodes = append(out.Nodes, toNodeJSON(nv))
	}
	out.Pending = []pendingOut{}
	for _, d := range st.Pending {
		out.Pending = append(out.Pending, pendingOut{Resources: d.Resources.Floats(), Count: d.Count, Reason: d.Reason, TaskName: d.TaskName})
	}
	return out
}

func printStatus(w io.Writer, st *wire.StatusResponse) {
	fmt.Fprintf(w, "Cluster %s (%s)\n", st.ClusterName, shortID(st.ClusterID))
	fmt.Fprintf(w, "Leader  %s (%s, %s)\n", st.LeaderName, shortID(st.LeaderID), st.LeaderAddr)
	if st.Insecure {
		fmt.Fprintf(w, "Security INSECURE (--insecure: plaintext between nodes, no CA, no tokens)\n")
	} else {
		fmt.Fprintf(w, "Security mutual TLS between nodes, encrypted gossip (CA %s)\n", st.CAHash)
	}
	var voters []string
	for _, s := range st.Servers {
		name := s.Name
		if name == "" {
			name = shortID(s.ID)
		}
		if s.Suffrage != "voter" {
			name += " (" + s.Suffrage + ")"
		}
		voters = append(voters, name)
	}
	fmt.Fprintf(w, "Raft    %s\n\n", strings.Join(voters, ", "))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tID\tADDRESS\tSTATE\tRAFT\tRESOURCES (available/total)")
	for _, nv := range st.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", nv.Name, shortID(nv.ID), nv.Address, nv.Status, dash(nv.RaftSuffrage),
			formatResources(nv.Available, nv.Resources))
	}
	tw.Flush()
	fmt.Fprintln(w, "\nResources")
	fmt.Fprintln(w, "---------------------------------------------------------------")
	fmt.Fprintln(w, "Usage:")
	for _, name := range st.Total.Names() {
		if strings.HasPrefix(name, sched.NodeResourcePrefix) {
			continue
		}
		total, avail := st.Total[name], st.Available[name]
		fmt.Fprintf(w, " %s/%s %s\n", formatQuantity(name, total-avail), formatQuantity(name, total), name)
	}
	fmt.Fprintln(w, "Demands:")
	if len(st.Pending) == 0 {
		fmt.Fprintln(w, " (no resource demands)")
	}
	for _, d := range st.Pending {
		task := ""
		if d.TaskName != "" {
			task = " e.g. " + d.TaskName
		}
		fmt.Fprintf(w, " {%s}: %d+ pending%s: %s\n", d.Resources.String(), d.Count, task, d.Reason)
	}
}

// formatResources prints "CPU 2/2, memory 1.0GiB/1.0GiB" (available/total),
// or just totals when avail is nil; node:<id> entries are left out.
func formatResources(avail, total sched.ResourceSet) string {
	var parts []string
	for _, name := range total.Names() {
		if strings.HasPrefix(name, sched.NodeResourcePrefix) {
			continue
		}
		if avail == nil {
			parts = append(parts, name+" "+formatQuantity(name, total[name]))
		} else {
			parts = append(parts, name+" "+formatQuantity(name, avail[name])+"/"+formatQuantity(name, total[name]))
		}
	}
	return strings.Join(parts, ", ")
}

func formatQuantity(name string, q sched.Quantity) string {
	if name == sched.Memory || name == sched.ObjectStoreMemory || strings.HasSuffix(name, "_memory") {
		return formatBytes(float64(q / sched.Unit))
	}
	return q.String()
}

func formatBytes(b float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for b >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0fB", b)
	}
	return fmt.Sprintf("%.1f%s", b, units[i])
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// statusWait fills st from the cluster, first waiting (up to within, polling
// every 250 ms) until want nodes are alive and a leader is known when want
// is over 0; a call that fails meanwhile (no node found yet, no leader) is
// tried again. The error names how far it got.
func statusWait(c *ucli.Context, want int, within time.Duration, st *wire.StatusResponse) error {
	if want < 0 {
		return fmt.Errorf("--wait %d: want a number of nodes, 1 or more", want)
	}
	deadline := time.Now().Add(within)
	for {
		*st = wire.StatusResponse{}
		err := call(c, wire.MethodStatus, &wire.Empty{}, st)
		if want == 0 {
			return err
		}
		alive := 0
		for _, nd := range st.Nodes {
			if nd.Status == store.NodeAlive {
				alive++
			}
		}
		if err == nil && alive >= want && st.LeaderID != "" {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("--wait %d: no answer within %s: %w", want, within, err)
			}
			return fmt.Errorf("--wait %d: %d nodes alive (leader %q) after %s", want, alive, st.LeaderName, within)
		}
		select {
		case <-c.Context.Done():
			return c.Context.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
