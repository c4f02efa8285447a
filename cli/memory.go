package cli

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// refKindsNote says where the reference kinds come from, in the output
// and docs: owners count them, and each is asked once, briefly.
var refKindsNote = fmt.Sprintf("reference kinds are counted by each object's owner, asked with Object.Refs (at most %d owners, %v each): LOCAL_REFERENCE (Refs in the owner), USED_BY_PENDING_TASK, BORROWED (other processes), CAPTURED_IN_OBJECT (nested in another object), PINNED_UNTIL_JOB_END", maxRefOwners, refOwnerTimeout)

// Bounds on asking owners for reference kinds: how many owners (those with
// the most objects first), how long each may take, and how many are asked
// at once.
const (
	maxRefOwners     = 64
	refOwnerTimeout  = 2 * time.Second
	refOwnerParallel = 8
	refStateOK       = "ok"
	refStateNotHeld  = "not_held_by_owner"
	refStateNoAnswer = "owner_unanswered"
	refStateNotAsked = "owner_not_asked"
	refStateNoOwner  = "no_owner"
)

// memoryCommand is Ray's `ray memory`: every object in every node's store,
// with its owner and copies, and per node totals. It asks the node it
// reaches for the cluster view, then each node for its store (Obj.List),
// and merges by object.
func memoryCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "memory",
		Usage: "list the objects in every node's object store: ID, size, owner, copies; per node used, pinned, objects",
		Flags: append(clientFlags(),
			&ucli.BoolFlag{Name: "json", Usage: "print JSON"},
			&ucli.StringFlag{Name: "group-by", Usage: "group objects by node or owner (text output: one section per group; JSON: a summary per group)"},
			&ucli.StringFlag{Name: "sort", Value: "id", Usage: "order objects by id or size (largest first)"},
			&ucli.IntFlag{Name: "limit", Value: 100_000, Usage: fmt.Sprintf("most objects each node lists (1 to %d); the output says how many were left out", wire.MaxObjectList)},
		),
		Action: memoryAction,
	}
}

// memoryJSON is `nodeup memory --json`.
type memoryJSON struct {
	Nodes   []memNodeJSON `json:"nodes"`
	Objects []memObjJSON  `json:"objects"`
	// LeftOut is how many store entries, summed over nodes, the per-node
	// limit kept out of Objects.
	LeftOut int            `json:"left_out"`
	Groups  []memGroupJSON `json:"groups,omitempty"`
	// OwnersUnanswered are the owners asked for reference kinds that did
	// not answer; OwnersNotAsked how many owners maxRefOwners left out.
	OwnersUnanswered []memOwnerJSON `json:"owners_unanswered,omitempty"`
	OwnersNotAsked   int            `json:"owners_not_asked"`
	Note             string         `json:"note"`
}

type memOwnerJSON struct {
	Address string `json:"address"`
	Objects int    `json:"objects"`
	Error   string `json:"error"`
}

type memNodeJSON struct {
	NodeID         string `json:"node_id"`
	NodeName       string `json:"node_name"`
	Address        string `json:"address"`
	CapacityBytes  int64  `json:"capacity_bytes"`
	UsedBytes      int64  `json:"used_bytes"`
	PinnedBytes    int64  `json:"pinned_bytes"`
	PrimaryBytes   int64  `json:"primary_bytes"`
	SecondaryBytes int64  `json:"secondary_bytes"`
	Objects        int    `json:"objects"`
	LeftOut        int    `json:"left_out"`
	// Spilled objects and bytes on disk now; bytes spilled and restored
	// since the node started.
	SpilledObjects     int    `json:"spilled_objects"`
	SpilledBytes       int64  `json:"spilled_bytes"`
	SpilledTotalBytes  int64  `json:"spilled_total_bytes"`
	RestoredTotalBytes int64  `json:"restored_total_bytes"`
	Error              string `json:"error,omitempty"`
}

type memObjJSON struct {
	ObjectID  string        `json:"object_id"`
	JobID     string        `json:"job_id"`
	SizeBytes int64         `json:"size_bytes"`
	Owner     string        `json:"owner_address"`
	OwnerNode string        `json:"owner_node"`
	CallSite  string        `json:"call_site"`
	Copies    []memCopyJSON `json:"copies"`
	// References counts the references holding the object by Ray's kind
	// names, as its owner said; RefState says whether it did: ok,
	// not_held_by_owner (freed, its delete on its way), owner_unanswered,
	// owner_not_asked, no_owner.
	References map[string]int `json:"references,omitempty"`
	RefState   string         `json:"references_state"`
}

type memCopyJSON struct {
	NodeID   string `json:"node_id"`
	NodeName string `json:"node_name"`
	Primary  bool   `json:"primary"`
	Pinned   bool   `json:"pinned"`
	Sealed   bool   `json:"sealed"`
	Spilled  bool   `json:"spilled"`
	Readers  int    `json:"readers"`
}

type memGroupJSON struct {
	Group     string `json:"group"`
	Objects   int    `json:"objects"`
	SizeBytes int64  `json:"size_bytes"`
}

func memoryAction(c *ucli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("nodeup memory takes no arguments, got %q", c.Args().First())
	}
	groupBy, sortBy := c.String("group-by"), c.String("sort")
	if groupBy != "" && groupBy != "node" && groupBy != "owner" {
		return fmt.Errorf("--group-by %q: use node or owner", groupBy)
	}
	if sortBy != "id" && sortBy != "size" {
		return fmt.Errorf("--sort %q: use id or size", sortBy)
	}
	limit := c.Int("limit")
	if limit < 1 || limit > wire.MaxObjectList {
		return fmt.Errorf("--limit %d: must be 1 to %d", limit, wire.MaxObjectList)
	}
	lists, failed := gatherObjectLists(c, limit)
	out := mergeObjectLists(lists, failed)
	owners := &ownerCaller{c: c, tokens: map[string]string{}}
	addReferenceKinds(out, owners.ask)
	var err error
	sortMemory(out, groupBy, sortBy)
	if c.Bool("json") {
		err = writeJSONOut(c.App.Writer, out)
	} else {
		err = writeMemoryText(c, out, groupBy, limit)
	}
	if err == nil && len(failed) > 0 {
		err = fmt.Errorf("%d node(s) did not answer; their objects are missing from the listing", len(failed))
	}
	return err
}

// gatherObjectLists asks the node the CLI reaches, then every other alive
// node of its cluster view, for its store listing; a node that fails is
// returned in failed (by address) with its error.
func gatherObjectLists(c *ucli.Context, limit int) (lists []*wire.ObjectList, failed []memNodeJSON) {
	req := &wire.ObjectListRequest{Limit: limit}
	first := &wire.ObjectList{}
	if err := call(c, wire.MethodObjectList, req, first); err != nil {
		return nil, []memNodeJSON{{Address: c.String("address"), Error: err.Error()}}
	}
	lists = append(lists, first)
	var view wire.ClusterView
	if err := call(c, wire.MethodClusterView, &wire.Empty{}, &view); err != nil {
		return lists, []memNodeJSON{{Error: "cluster view: " + err.Error()}}
	}
	for _, n := range view.Nodes {
		if n.NodeID == first.NodeID || !n.Alive {
			continue
		}
		l := &wire.ObjectList{}
		if err := callNode(c, n.Addr, wire.MethodObjectList, req, l); err != nil {
			failed = append(failed, memNodeJSON{NodeID: n.NodeID, NodeName: n.NodeName, Address: n.Addr, Error: err.Error()})
			continue
		}
		lists = append(lists, l)
	}
	return lists, failed
}

// callNode is call to the node at addr instead of the resolved one: it
// points --address at addr for the one call, so dialing, tokens and
// timeouts stay the shared client helper's.
func callNode(c *ucli.Context, addr, method string, req, resp any) error {
	prev := c.String("address")
	if err := c.Set("address", addr); err != nil {
		return err
	}
	defer func() { _ = c.Set("address", prev) }()
	return call(c, method, req, resp)
}

// mergeObjectLists joins the nodes' listings by object key: one row per
// object with a copy per node holding it.
func mergeObjectLists(lists []*wire.ObjectList, failed []memNodeJSON) *memoryJSON {
	out := &memoryJSON{Note: refKindsNote, Objects: []memObjJSON{}}
	byKey := map[string]int{}
	hostNodes := map[string][]string{} // IP → node names, to place owners
	for _, l := range lists {
		if h, _, err := net.SplitHostPort(l.Addr); err == nil {
			hostNodes[h] = append(hostNodes[h], l.NodeName)
		}
	}
	for _, l := range lists {
		out.Nodes = append(out.Nodes, memNodeJSON{NodeID: l.NodeID, NodeName: l.NodeName, Address: l.Addr,
			CapacityBytes: l.Capacity, UsedBytes: l.Used, PinnedBytes: l.Pinned, PrimaryBytes: l.Primary,
			SecondaryBytes: l.Secondary, Objects: l.Objects, LeftOut: l.LeftOut, SpilledObjects: l.SpilledObjects,
			SpilledBytes: l.SpilledBytes, SpilledTotalBytes: l.SpilledTotal, RestoredTotalBytes: l.RestoredTotal})
		out.LeftOut += l.LeftOut
		for _, e := range l.Entries {
			i, ok := byKey[e.Key]
			if !ok {
				job, id, found := strings.Cut(e.Key, "/")
				if !found {
					job, id = "", e.Key
				}
				i = len(out.Objects)
				byKey[e.Key] = i
				out.Objects = append(out.Objects, memObjJSON{ObjectID: id, JobID: job, SizeBytes: e.Size})
			}
			o := &out.Objects[i]
			o.Copies = append(o.Copies, memCopyJSON{NodeID: l.NodeID, NodeName: l.NodeName, Primary: !e.Secondary,
				Pinned: e.Pins > 0, Sealed: e.Sealed, Spilled: e.Spilled, Readers: e.Readers})
			if !e.Secondary && e.Owner != "" {
				o.Owner, o.CallSite = e.Owner, e.CallSite
				// A put or a large task argument is created by its owner
				// on the owner's node; a task's result by the worker that
				// ran it, so its owner is placed by address, when only one
				// node listens on the owner's IP.
				if e.CallSite == "put" || strings.HasPrefix(e.CallSite, "argument of ") {
					o.OwnerNode = l.NodeName
				} else if h, _, err := net.SplitHostPort(e.Owner); err == nil && len(hostNodes[h]) == 1 {
					o.OwnerNode = hostNodes[h][0]
				}
			}
		}
	}
	out.Nodes = append(out.Nodes, failed...)
	return out
}

// sortMemory orders objects by group, then by ID or size (largest first),
// and sums the groups.
func sortMemory(out *memoryJSON, groupBy, sortBy string) {
	slices.SortFunc(out.Nodes, func(a, b memNodeJSON) int { return cmp.Compare(a.NodeName, b.NodeName) })
	for i := range out.Objects {
		slices.SortFunc(out.Objects[i].Copies, func(a, b memCopyJSON) int {
			if a.Primary != b.Primary {
				if a.Primary {
					return -1
				}
				return 1
			}
			return cmp.Compare(a.NodeName, b.NodeName)
		})
	}
	slices.SortFunc(out.Objects, func(a, b memObjJSON) int {
		if sortBy == "size" {
			if c := cmp.Compare(b.SizeBytes, a.SizeBytes); c != 0 {
				return c
			}
		}
		if c := cmp.Compare(a.JobID, b.JobID); c != 0 {
			return c
		}
		return cmp.Compare(a.ObjectID, b.ObjectID)
	})
	if groupBy == "" {
		return
	}
	sums := map[string]*memGroupJSON{}
	for _, o := range out.Objects {
		for _, g := range memGroups(o, groupBy) {
			s := sums[g]
			if s == nil {
				s = &memGroupJSON{Group: g}
				sums[g] = s
			}
			s.Objects++
			s.SizeBytes += o.SizeBytes
		}
	}
	for _, s := range sums {
		out.Groups = append(out.Groups, *s)
	}
	slices.SortFunc(out.Groups, func(a, b memGroupJSON) int { return cmp.Compare(a.Group, b.Group) })
}

// memGroups is the groups o belongs to: each node holding a copy, or its
// owner ("unknown" when no primary copy said).
func memGroups(o memObjJSON, groupBy string) []string {
	if groupBy == "owner" {
		if o.Owner == "" {
			return []string{"unknown"}
		}
		return []string{o.Owner}
	}
	gs := make([]string, 0, len(o.Copies))
	for _, cp := range o.Copies {
		gs = append(gs, cp.NodeName)
	}
	return gs
}

func writeMemoryText(c *ucli.Context, out *memoryJSON, groupBy string, limit int) error {
	w := c.App.Writer
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDRESS\tUSED\tCAPACITY\tPINNED\tPRIMARY\tSECONDARY\tSPILLED\tOBJECTS\tLEFT OUT")
	for _, n := range out.Nodes {
		if n.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\tERROR: %s\n", dash(n.NodeName), dash(n.Address), n.Error)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s (%d)\t%d\t%d\n", n.NodeName, n.Address, formatBytes(float64(n.UsedBytes)),
			formatBytes(float64(n.CapacityBytes)), formatBytes(float64(n.PinnedBytes)), formatBytes(float64(n.PrimaryBytes)),
			formatBytes(float64(n.SecondaryBytes)), formatBytes(float64(n.SpilledBytes)), n.SpilledObjects, n.Objects, n.LeftOut)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	groups := []string{""}
	if groupBy != "" {
		groups = groups[:0]
		for _, g := range out.Groups {
			groups = append(groups, g.Group)
		}
	}
	for gi, g := range groups {
		fmt.Fprintln(w)
		if groupBy != "" {
			fmt.Fprintf(w, "--- %s %s: %d objects, %s ---\n", groupBy, g, out.Groups[gi].Objects, formatBytes(float64(out.Groups[gi].SizeBytes)))
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "OBJECT ID\tJOB\tSIZE\tOWNER\tOWNER NODE\tCALL SITE\tREFERENCES\tCOPIES")
		for _, o := range out.Objects {
			if groupBy != "" && !slices.Contains(memGroups(o, groupBy), g) {
				continue
			}
			copies := make([]string, 0, len(o.Copies))
			for _, cp := range o.Copies {
				s := cp.NodeName
				if cp.Primary {
					s += "(primary"
				} else {
					s += "(secondary"
				}
				if cp.Pinned {
					s += ",pinned"
				}
				if cp.Spilled {
					s += ",spilled"
				}
				if !cp.Sealed {
					s += ",unsealed"
				}
				copies = append(copies, s+")")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", o.ObjectID, dash(o.JobID), formatBytes(float64(o.SizeBytes)),
				dash(o.Owner), dash(o.OwnerNode), dash(o.CallSite), refsText(o), strings.Join(copies, " "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	if out.LeftOut > 0 {
		fmt.Fprintf(w, "%d objects left out: each node lists at most %d (--limit)\n", out.LeftOut, limit)
	}
	for _, ow := range out.OwnersUnanswered {
		fmt.Fprintf(w, "owner %s (%d objects) did not answer for reference kinds: %s\n", ow.Address, ow.Objects, ow.Error)
	}
	if out.OwnersNotAsked > 0 {
		fmt.Fprintf(w, "%d owners not asked for reference kinds: at most %d are\n", out.OwnersNotAsked, maxRefOwners)
	}
	fmt.Fprintln(w, "Note:", refKindsNote+".")
	return nil
}

// refKindOrder is the order reference kinds are printed in.
var refKindOrder = []string{"LOCAL_REFERENCE", "USED_BY_PENDING_TASK", "BORROWED", "CAPTURED_IN_OBJECT", "PINNED_UNTIL_JOB_END"}

// refsText is the REFERENCES column: KIND:count,... or the state.
func refsText(o memObjJSON) string {
	if o.RefState != refStateOK {
		return dash(o.RefState)
	}
	var parts []string
	for _, k := range refKindOrder {
		if n := o.References[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s:%d", k, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// addReferenceKinds asks the owners of out's objects (at most
// maxRefOwners, those with the most objects first, refOwnerParallel at a
// time) which references hold them, and records the answers; an owner that
// fails is listed in out.OwnersUnanswered, never silently dropped.
func addReferenceKinds(out *memoryJSON, ask func(owner, job string, req *wire.ObjectRefsRequest, rep *wire.ObjectRefsReply) error) {
	byOwner := map[string][]int{}
	for i := range out.Objects {
		o := &out.Objects[i]
		if o.Owner == "" {
			o.RefState = refStateNoOwner
			continue
		}
		o.RefState = refStateNotAsked
		byOwner[o.Owner] = append(byOwner[o.Owner], i)
	}
	owners := make([]string, 0, len(byOwner))
	for ow := range byOwner {
		owners = append(owners, ow)
	}
	slices.SortFunc(owners, func(a, b string) int {
		if c := cmp.Compare(len(byOwner[b]), len(byOwner[a])); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	if len(owners) > maxRefOwners {
		out.OwnersNotAsked = len(owners) - maxRefOwners
		owners = owners[:maxRefOwners]
	}
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, refOwnerParallel)
	)
	for _, ow := range owners {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			idx := byOwner[ow]
			for start := 0; start < len(idx); start += wire.MaxObjectRefs {
				part := idx[start:min(start+wire.MaxObjectRefs, len(idx))]
				req := &wire.ObjectRefsRequest{IDs: make([]string, len(part))}
				for k, i := range part {
					req.IDs[k] = out.Objects[i].ObjectID // each goroutine reads and writes its own rows
				}
				var rep wire.ObjectRefsReply
				err := ask(ow, out.Objects[part[0]].JobID, req, &rep)
				if err == nil && (len(rep.Known) != len(part) || len(rep.Local) != len(part) || len(rep.Submitted) != len(part) ||
					len(rep.Borrowed) != len(part) || len(rep.Captured) != len(part) || len(rep.Pinned) != len(part)) {
					err = fmt.Errorf("answer for %d objects does not match the %d asked", len(rep.Known), len(part))
				}
				if err != nil {
					for _, i := range part {
						out.Objects[i].RefState = refStateNoAnswer
					}
					mu.Lock()
					out.OwnersUnanswered = append(out.OwnersUnanswered, memOwnerJSON{Address: ow, Objects: len(idx), Error: err.Error()})
					mu.Unlock()
					return
				}
				for k, i := range part {
					o := &out.Objects[i]
					if !rep.Known[k] {
						o.RefState = refStateNotHeld
						continue
					}
					o.RefState, o.References = refStateOK, map[string]int{}
					for kind, n := range map[string]int32{"LOCAL_REFERENCE": rep.Local[k], "USED_BY_PENDING_TASK": rep.Submitted[k],
						"BORROWED": rep.Borrowed[k], "CAPTURED_IN_OBJECT": rep.Captured[k]} {
						if n > 0 {
							o.References[kind] = int(n)
						}
					}
					if rep.Pinned[k] {
						o.References["PINNED_UNTIL_JOB_END"] = 1
					}
				}
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(out.OwnersUnanswered, func(a, b memOwnerJSON) int { return cmp.Compare(a.Address, b.Address) })
}

// ownerCaller asks owners (core worker ports) for reference kinds. A core
// worker takes connections presenting its job's token, which travels
// there in clear like all core worker traffic (docs/security.md), so the
// CLI never sends its own token there: it asks its node for the owner's
// job token (Job.TokenOf, admin: a local client on the node's socket, or
// an admin token) and presents that.
type ownerCaller struct {
	c      *ucli.Context
	mu     sync.Mutex
	tokens map[string]string // job ID → its token ("" on an --insecure cluster)
}

func (o *ownerCaller) jobToken(job string) (string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if tok, ok := o.tokens[job]; ok {
		return tok, nil
	}
	var rep wire.JobTokenOfReply
	if err := call(o.c, wire.MethodJobTokenOf, &wire.JobTokenOfRequest{Job: job}, &rep); err != nil {
		return "", fmt.Errorf("job %s's token, to ask its processes: %w", job, err)
	}
	o.tokens[job] = rep.Token
	return rep.Token, nil
}

func (o *ownerCaller) ask(owner, job string, req *wire.ObjectRefsRequest, rep *wire.ObjectRefsReply) error {
	return o.call(owner, job, refOwnerTimeout, wire.MethodObjectRefs, req, rep)
}

// call calls method on the core worker at owner, a process of job, with
// job's token, within timeout.
func (o *ownerCaller) call(owner, job string, timeout time.Duration, method string, req, rep any) error {
	tok, err := o.jobToken(job)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(o.c.Context, timeout)
	defer cancel()
	cl, err := rpc.Dial(ctx, "tcp", owner, []byte{wire.PreambleRPC}, wire.ProtocolVersion, rpc.WithToken(tok))
	if err != nil {
		return fmt.Errorf("cannot reach owner %s: %w", owner, err)
	}
	defer cl.Close()
	if err := cl.Call(ctx, method, req, rep); err != nil {
		return fmt.Errorf("%s at %s: %w", method, owner, err)
	}
	return nil
}
