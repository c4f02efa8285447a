package cli

import (
	"fmt"
	"text/tabwriter"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeup/nodeup/cluster"
	"github.com/nodeup/nodeup/wire"
)

// operatorCommand is `nodeup operator raft|snapshot` (issue 19), as
// Consul's and Nomad's `operator` commands.
func operatorCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "operator",
		Usage: "Raft peers and whole-cluster snapshots (docs/operations.md)",
		Subcommands: []*ucli.Command{
			{
				Name:  "raft",
				Usage: "inspect and change the Raft configuration",
				Subcommands: []*ucli.Command{
					{
						Name:      "list-peers",
						Usage:     "list the Raft servers: ID, name, address, state (leader or follower), voter",
						ArgsUsage: " ",
						Flags:     append(clientFlags(), &ucli.BoolFlag{Name: "json", Usage: "print JSON"}),
						Action:    raftListPeers,
					},
					{
						Name:      "remove-peer",
						Usage:     "take a server out of the Raft configuration by node ID or Raft address (admin; never the last voter)",
						ArgsUsage: "<node-id|address>",
						Flags:     clientFlags(),
						Action: func(c *ucli.Context) error {
							peer, err := oneArg(c, "operator raft remove-peer", "a Raft server's node ID or address (see nodeup operator raft list-peers)")
							if err != nil {
								return err
							}
							var s wire.RaftServer
							if err := call(c, wire.MethodRaftRemovePeer, &wire.RaftRemovePeerRequest{Peer: peer}, &s); err != nil {
								return err
							}
							fmt.Fprintf(c.App.Writer, "removed Raft server %s (%s, %s)\n", s.ID, s.Name, s.Address)
							return nil
						},
					},
				},
			},
			{
				Name:  "snapshot",
				Usage: "save or restore the whole cluster state (Raft's FSM)",
				Subcommands: []*ucli.Command{
					{
						Name:      "save",
						Usage:     "write a snapshot of the cluster state to FILE (admin; mode 0600: it holds token hashes)",
						ArgsUsage: "FILE",
						Flags:     clientFlags(),
						Action: func(c *ucli.Context) error {
							path, err := oneArg(c, "operator snapshot save", "a file to write")
							if err != nil {
								return err
							}
							var s wire.Snapshot
							if err := call(c, wire.MethodSnapshotSave, &wire.Empty{}, &s); err != nil {
								return err
							}
							if err := cluster.WriteSnapshotFile(path, &s); err != nil {
								return err
							}
							fmt.Fprintf(c.App.Writer, "saved snapshot at Raft index %d (%d bytes) to %s\n", s.Index, len(s.Data), path)
							return nil
						},
					},
					{
						Name:      "restore",
						Usage:     "replace the whole cluster state with FILE's (admin; the file is checked first)",
						ArgsUsage: "FILE",
						Flags:     clientFlags(),
						Action: func(c *ucli.Context) error {
							path, err := oneArg(c, "operator snapshot restore", "a snapshot file")
							if err != nil {
								return err
							}
							s, err := cluster.ReadSnapshotFile(path)
							if err != nil {
								return err
							}
							if err := call(c, wire.MethodSnapshotRestore, s, &wire.Empty{}); err != nil {
								return fmt.Errorf("restore %s: %w", path, err)
							}
							fmt.Fprintf(c.App.Writer, "restored the cluster state from %s (Raft index %d when saved)\n", path, s.Index)
							return nil
						},
					},
				},
			},
		},
	}
}

// raftPeerOut is one server in `nodeup operator raft list-peers --json`.
type raftPeerOut struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Address string `json:"address"`
	State   string `json:"state"`
	Voter   bool   `json:"voter"`
}

func raftListPeers(c *ucli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("nodeup operator raft list-peers takes no arguments (got %q)", c.Args().First())
	}
	var resp wire.RaftPeersResponse
	if err := call(c, wire.MethodRaftPeers, &wire.Empty{}, &resp); err != nil {
		return err
	}
	out := []raftPeerOut{}
	for _, s := range resp.Servers {
		state := "follower"
		if s.Leader {
			state = "leader"
		}
		out = append(out, raftPeerOut{ID: s.ID, Name: s.Name, Address: s.Address, State: state, Voter: s.Suffrage == "voter"})
	}
	if c.Bool("json") {
		return writeJSONOut(c.App.Writer, out)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tID\tADDRESS\tSTATE\tVOTER")
	for _, p := range out {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\n", p.Name, p.ID, p.Address, p.State, p.Voter)
	}
	return tw.Flush()
}
