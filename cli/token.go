package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeup/nodeup/wire"
)

// tokenCommand is `nodeup token create|list|revoke`: the cluster's tokens,
// kept hashed in Raft (docs/security.md), as Nomad's `nomad acl token`.
func tokenCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "token",
		Usage: "make, list and revoke the cluster's tokens (join nodes, submit work, read)",
		Subcommands: []*ucli.Command{
			{
				Name:      "create",
				Usage:     "make a token and print it once (it is stored only as a hash)",
				ArgsUsage: " ",
				Flags: append(clientFlags(),
					&ucli.StringFlag{Name: "role", Value: "join", Usage: "read, submit, join or admin"},
					&ucli.DurationFlag{Name: "ttl", Value: 24 * time.Hour, Usage: "how long the token works (0: for ever)"},
					&ucli.StringFlag{Name: "namespace", Usage: "limit the token to one namespace (default: all)"},
					&ucli.BoolFlag{Name: "json", Usage: "print JSON"},
				),
				Action: func(c *ucli.Context) error {
					if c.NArg() > 0 {
						return fmt.Errorf("nodeup token create takes no arguments (got %q); the role is --role", c.Args().First())
					}
					if c.Duration("ttl") < 0 {
						return fmt.Errorf("--ttl %s: must not be negative (0: never expires)", c.Duration("ttl"))
					}
					var resp wire.TokenCreateResponse
					req := &wire.TokenCreateRequest{Role: c.String("role"), TTLNanos: int64(c.Duration("ttl")), Namespace: c.String("namespace")}
					if err := call(c, wire.MethodTokenCreate, req, &resp); err != nil {
						return err
					}
					if c.Bool("json") {
						return writeJSONOut(c.App.Writer, struct {
							Token string   `json:"token"`
							Info  tokenOut `json:"info"`
						}{resp.Token, toTokenOut(resp.Record)})
					}
					fmt.Fprintln(c.App.Writer, resp.Token)
					return nil
				},
			},
			{
				Name:      "list",
				Usage:     "list the tokens: ID, role, namespace, expiry, revoked (never the secret)",
				ArgsUsage: " ",
				Flags:     append(clientFlags(), &ucli.BoolFlag{Name: "json", Usage: "print JSON"}),
				Action: func(c *ucli.Context) error {
					var resp wire.TokenListResponse
					if err := call(c, wire.MethodTokenList, &wire.Empty{}, &resp); err != nil {
						return err
					}
					out := []tokenOut{}
					for _, r := range resp.Tokens {
						out = append(out, toTokenOut(r))
					}
					if c.Bool("json") {
						return writeJSONOut(c.App.Writer, out)
					}
					printTokens(c.App.Writer, out, time.Now())
					return nil
				},
			},
			{
				Name:      "revoke",
				Usage:     "revoke a token by its ID: it stops working at once, everywhere",
				ArgsUsage: "<id>",
				Flags:     clientFlags(),
				Action: func(c *ucli.Context) error {
					if c.NArg() != 1 {
						return fmt.Errorf("nodeup token revoke takes one token ID (see nodeup token list), got %d arguments", c.NArg())
					}
					return call(c, wire.MethodTokenRevoke, &wire.TokenRevokeRequest{ID: c.Args().First()}, &wire.Empty{})
				},
			},
		},
	}
}

// tokenOut is one token in `nodeup token list --json`.
type tokenOut struct {
	ID        string     `json:"id"`
	Role      string     `json:"role"`
	Namespace string     `json:"namespace,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	Expires   *time.Time `json:"expires,omitempty"`
	Revoked   bool       `json:"revoked"`
}

func toTokenOut(r wire.TokenRecord) tokenOut {
	o := tokenOut{ID: r.ID, Role: r.Role, Namespace: r.Namespace, CreatedAt: time.Unix(0, r.CreatedAt).UTC(), Revoked: r.Revoked}
	if r.Expires != 0 {
		e := time.Unix(0, r.Expires).UTC()
		o.Expires = &e
	}
	return o
}

func printTokens(w io.Writer, toks []tokenOut, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tROLE\tNAMESPACE\tCREATED\tEXPIRES\tSTATE")
	for _, t := range toks {
		exp, state := "never", "valid"
		if t.Expires != nil {
			exp = t.Expires.Format(time.RFC3339)
			if !now.Before(*t.Expires) {
				state = "expired"
			}
		}
		if t.Revoked {
			state = "revoked"
		}
		ns := t.Namespace
		if ns == "" {
			ns = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Role, ns, t.CreatedAt.Format(time.RFC3339), exp, state)
	}
	_ = tw.Flush()
}

// keyringCommand is `nodeup keyring rotate`, as `consul keyring`.
func keyringCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "keyring",
		Usage: "manage the gossip encryption key",
		Subcommands: []*ucli.Command{{
			Name:      "rotate",
			Usage:     "install a new gossip key on every live node, switch to it, and remove the old one",
			ArgsUsage: " ",
			Flags:     clientFlags(),
			Action: func(c *ucli.Context) error {
				if c.NArg() > 0 {
					return fmt.Errorf("nodeup keyring rotate takes no arguments (got %q)", c.Args().First())
				}
				var resp wire.KeyringRotateResponse
				if err := call(c, wire.MethodKeyringRotate, &wire.Empty{}, &resp); err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "rotated the gossip key on %d nodes: %v\n", len(resp.Nodes), resp.Nodes)
				return nil
			},
		}},
	}
}
