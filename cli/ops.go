package cli

import (
	"errors"
	"fmt"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// Operator verbs (issue 17): end an actor or a placement group from the
// command line, by name or ID, over the methods the SDK uses (Actor.Kill,
// as ray.kill; PG.Remove, as remove_placement_group).

// defaultNamespace is where named actors and groups live when their driver
// set none (worker.DefaultNamespace).
const defaultNamespace = "default"

func namespaceFlag() ucli.Flag {
	return &ucli.StringFlag{Name: "namespace", Value: defaultNamespace, Usage: "namespace a name is looked up in"}
}

func killCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "kill",
		Usage: "end an actor (as ray.kill)",
		Subcommands: []*ucli.Command{{
			Name:      "actor",
			Usage:     "kill an actor by name or ID: its worker process stops and it is DEAD (with --restart it restarts if it has restarts left)",
			ArgsUsage: "<name|actor-id>",
			Flags: append(clientFlags(), namespaceFlag(),
				&ucli.BoolFlag{Name: "restart", Usage: "let it restart if it has restarts left (Ray's no_restart=False)"}),
			Action: func(c *ucli.Context) error {
				arg, err := oneArg(c, "kill actor", "an actor name or ID")
				if err != nil {
					return err
				}
				info, err := lookUp(c, arg, "actor", func(byID bool, out *wire.ActorInfo) error {
					req := &wire.ActorGetRequest{ActorID: arg, NotIncarnation: -1}
					if !byID {
						req = &wire.ActorGetRequest{Namespace: c.String("namespace"), Name: arg, NotIncarnation: -1}
					}
					return call(c, wire.MethodActorGet, req, out)
				})
				if err != nil {
					return err
				}
				if err := call(c, wire.MethodActorKill, &wire.ActorKillRequest{ActorID: info.ActorID, NoRestart: !c.Bool("restart")}, &wire.Empty{}); err != nil {
					return err
				}
				what := "killed"
				if c.Bool("restart") {
					what = "killed; it restarts if it has restarts left"
				}
				fmt.Fprintf(c.App.Writer, "actor %s (%s%s) %s\n", info.ActorID, info.Class, nameSuffix(info.Name), what)
				return nil
			},
		}},
	}
}

func removeCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "remove",
		Usage: "remove a placement group (as remove_placement_group)",
		Subcommands: []*ucli.Command{{
			Name:      "placement-group",
			Usage:     "remove a placement group by name or ID: its bundles' resources go back to their nodes",
			ArgsUsage: "<name|placement-group-id>",
			Flags:     append(clientFlags(), namespaceFlag()),
			Action: func(c *ucli.Context) error {
				arg, err := oneArg(c, "remove placement-group", "a placement group name or ID")
				if err != nil {
					return err
				}
				info, err := lookUp(c, arg, "placement group", func(byID bool, out *wire.PGInfo) error {
					req := &wire.PGGetRequest{ID: arg}
					if !byID {
						req = &wire.PGGetRequest{Namespace: c.String("namespace"), Name: arg}
					}
					return call(c, wire.MethodPGGet, req, out)
				})
				if err != nil {
					return err
				}
				if err := call(c, wire.MethodPGRemove, &wire.PGRemoveRequest{ID: info.ID}, &wire.Empty{}); err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "placement group %s%s removed\n", info.ID, nameSuffix(info.Name))
				return nil
			},
		}},
	}
}

func oneArg(c *ucli.Context, verb, what string) (string, error) {
	if c.NArg() != 1 {
		return "", fmt.Errorf("nodeup %s takes %s, got %d arguments", verb, what, c.NArg())
	}
	return c.Args().First(), nil
}

func nameSuffix(name string) string {
	if name == "" {
		return ""
	}
	return " " + name
}

// lookUp finds what arg names: by ID first when it looks like one (hex),
// then by name in --namespace; get fills the answer.
func lookUp[T any](c *ucli.Context, arg, kind string, get func(byID bool, out *T) error) (*T, error) {
	out := new(T)
	if wire.IsHexID(arg) {
		err := get(true, out)
		var re *rpc.Error
		if err == nil || !errors.As(err, &re) || re.Code != wire.CodeNotFound {
			return out, err
		}
	}
	if err := get(false, out); err != nil {
		return nil, fmt.Errorf("no %s with ID or name %q in namespace %q: %w", kind, arg, c.String("namespace"), err)
	}
	return out, nil
}
