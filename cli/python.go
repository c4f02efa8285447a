package cli

import (
	"fmt"

	pyembed "github.com/nodeup/nodeup/python"
	ucli "github.com/urfave/cli/v2"
)

// pythonCommand writes out the nodeup Python package this binary carries
// (docs/python.md), for machines without PyPI.
func pythonCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "python",
		Usage: "the nodeup Python package inside this binary (install it, or print a PYTHONPATH directory)",
		Subcommands: []*ucli.Command{
			{
				Name:      "install",
				Usage:     "write the package as DIR/nodeup (then PYTHONPATH=DIR python3 -c 'import nodeup')",
				ArgsUsage: " ",
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "target", Required: true, Usage: "directory to write the nodeup package into"},
				},
				Action: func(c *ucli.Context) error {
					if c.NArg() > 0 {
						return fmt.Errorf("nodeup python install takes no arguments (got %q); use --target DIR", c.Args().First())
					}
					if err := pyembed.Install(c.String("target")); err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "installed the nodeup Python package into %s (PYTHONPATH=%s)\n", c.String("target"), c.String("target"))
					return nil
				},
			},
			{
				Name:      "path",
				Usage:     "print a directory holding the package, extracted into the user's cache, for PYTHONPATH",
				ArgsUsage: " ",
				Action: func(c *ucli.Context) error {
					dir, err := pyembed.Path()
					if err != nil {
						return err
					}
					fmt.Fprintln(c.App.Writer, dir)
					return nil
				},
			},
		},
	}
}
