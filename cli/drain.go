package cli

import (
	"fmt"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeup/nodeup/wire"
)

// nodeCommand is `nodeup node drain|eligibility` (issue 19), as Nomad's
// `node drain` and `node eligibility`.
func nodeCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "node",
		Usage: "drain a node or set whether it gets new work",
		Subcommands: []*ucli.Command{
			{
				Name:      "drain",
				Usage:     "stop placing work on a node and move its actors (those with restarts left) and placement-group bundles elsewhere; actors left after --deadline are stopped (admin)",
				ArgsUsage: "<node-name|node-id>",
				Flags: append(clientFlags(),
					&ucli.DurationFlag{Name: "deadline", Value: 10 * time.Minute, Usage: "after this, what is left on the node is stopped (0: never)"}),
				Action: func(c *ucli.Context) error {
					node, err := oneArg(c, "node drain", "a node name or ID (see nodeup nodes)")
					if err != nil {
						return err
					}
					if c.Duration("deadline") < 0 {
						return fmt.Errorf("--deadline %s: must not be negative (0: no deadline)", c.Duration("deadline"))
					}
					var nd wire.Node
					if err := call(c, wire.MethodNodeDrain, &wire.NodeDrainRequest{Node: node, DeadlineNanos: int64(c.Duration("deadline"))}, &nd); err != nil {
						return err
					}
					until := "no deadline"
					if nd.DrainDeadline != 0 {
						until = "deadline " + time.Unix(0, nd.DrainDeadline).Format(time.RFC3339)
					}
					fmt.Fprintf(c.App.Writer, "node %s (%s) draining, %s; 'nodeup node eligibility %s --enable' ends it\n", nd.Name, nd.ID, until, nd.Name)
					return nil
				},
			},
			{
				Name:      "eligibility",
				Usage:     "let a node get new work (--enable, which also ends a drain) or not (--disable; what runs there stays) (admin)",
				ArgsUsage: "<node-name|node-id>",
				Flags: append(clientFlags(),
					&ucli.BoolFlag{Name: "enable", Usage: "the node gets new work again"},
					&ucli.BoolFlag{Name: "disable", Usage: "the node gets no new work"}),
				Action: func(c *ucli.Context) error {
					node, err := oneArg(c, "node eligibility", "a node name or ID (see nodeup nodes)")
					if err != nil {
						return err
					}
					if c.Bool("enable") == c.Bool("disable") {
						return fmt.Errorf("nodeup node eligibility takes exactly one of --enable and --disable")
					}
					var nd wire.Node
					if err := call(c, wire.MethodNodeEligibility, &wire.NodeEligibilityRequest{Node: node, Eligible: c.Bool("enable")}, &nd); err != nil {
						return err
					}
					what := "eligible: it gets new work"
					if nd.Ineligible {
						what = "ineligible: it gets no new work"
					}
					fmt.Fprintf(c.App.Writer, "node %s (%s) %s\n", nd.Name, nd.ID, what)
					return nil
				},
			},
		},
	}
}
