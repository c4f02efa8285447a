package cli

import (
	"strings"

	ucli "github.com/urfave/cli/v2"
)

// reorderArgs moves a command's flags in front of its positional arguments,
// because urfave/cli stops parsing flags at the first positional one and
// users type `nodeup join 10.0.0.1 --resources TPU-v3=2` as the docs show.
func reorderArgs(app *ucli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	i := commandIndex(app, args)
	if i >= len(args) {
		return args
	}
	cmd := findCommand(app.Commands, args[i])
	if cmd == nil {
		return args
	}
	i++
	if len(cmd.Subcommands) > 0 && i < len(args) {
		if sub := findCommand(cmd.Subcommands, args[i]); sub != nil {
			cmd = sub
			i++
		}
	}
	var flags, pos []string
	for j := i; j < len(args); j++ {
		a := args[j]
		if a == "--" {
			pos = append(pos, args[j+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		if valueArgs(cmd.Flags, a) == 1 && j+1 < len(args) {
			j++
			flags = append(flags, args[j])
		}
	}
	out := append([]string{}, args[:i]...)
	out = append(out, flags...)
	if len(pos) > 0 {
		out = append(out, "--")
		out = append(out, pos...)
	}
	return out
}

// commandIndex is the index in args of the command name, after global flags.
func commandIndex(app *ucli.App, args []string) int {
	i := 1
	for i < len(args) && strings.HasPrefix(args[i], "-") {
		i += 1 + valueArgs(app.Flags, args[i])
	}
	return i
}

// commandName is the command named in args, or "" when there is none.
func commandName(app *ucli.App, args []string) string {
	if i := commandIndex(app, args); i < len(args) {
		return args[i]
	}
	return ""
}

// valueArgs is 1 when flag arg (like "--port") takes the next argument as its value.
func valueArgs(flags []ucli.Flag, arg string) int {
	name := strings.TrimLeft(arg, "-")
	if strings.Contains(name, "=") {
		return 0
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				if _, ok := f.(*ucli.BoolFlag); ok {
					return 0
				}
				return 1
			}
		}
	}
	return 0
}

func findCommand(cmds []*ucli.Command, name string) *ucli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}
