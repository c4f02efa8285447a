package cli

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

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
				Usage:     "write the package as DIR/nodeup (default DIR: the interpreter's user site-packages, so that `import nodeup` just works)",
				ArgsUsage: " ",
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "target", Usage: "directory to write the nodeup package into (then PYTHONPATH=DIR)"},
					&ucli.StringFlag{Name: "python", Usage: "interpreter whose user site-packages is the default target (default: /usr/bin/python3, else python3)"},
				},
				Action: func(c *ucli.Context) error {
					if c.NArg() > 0 {
						return fmt.Errorf("nodeup python install takes no arguments (got %q); use --target DIR", c.Args().First())
					}
					dir := c.String("target")
					if dir == "" {
						var err error
						if dir, err = userSite(c.String("python")); err != nil {
							return err
						}
					}
					if err := pyembed.Install(dir); err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "installed the nodeup Python package into %s\n", dir)
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

// interpreter is py, or for "" /usr/bin/python3 when present (Debian's,
// where python3-msgpack installs), else python3.
func interpreter(py string) string {
	if py != "" {
		return py
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return "python3"
}

// userSite is py's user site-packages directory (PEP 370), where the
// interpreter finds packages without PYTHONPATH; py "" is /usr/bin/python3
// when present (Debian's, where python3-msgpack installs), else python3.
func userSite(py string) (string, error) {
	py = interpreter(py)
	out, err := exec.Command(py, "-c", "import site; print(site.getusersitepackages())").Output()
	if err != nil {
		return "", fmt.Errorf("find the user site-packages of %s (give --target DIR instead): %w", py, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("%s has no user site-packages: give --target DIR", py)
	}
	return dir, nil
}
