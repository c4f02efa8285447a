// Package cli is nodeup's command line: urfave/cli/v2 commands, flag parsing
// and output formatting (tables, or JSON with --json).
package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	ucli "github.com/urfave/cli/v2"
)

// Version is the nodeup version; `make build` sets it from git describe.
var Version = "0.1.0-dev"

// Run runs the command line in args (os.Args) and returns the process exit
// code: 0 on success, 1 with one line on stderr naming the problem otherwise.
func Run(args []string) int {
	app := App()
	completing := len(args) > 1 && args[len(args)-1] == completeFlag
	if name := commandName(app, args); !completing && name != "" && name != "help" && name != "h" && findCommand(app.Commands, name) == nil {
		fmt.Fprintf(os.Stderr, "nodeup: unknown command %q (see 'nodeup --help')\n", name)
		return 1
	}
	if !completing { // reordering would put the completion flag before "--"
		args = reorderArgs(app, args)
	}
	if err := app.Run(args); err != nil {
		var ec *exitCodeError
		if errors.As(err, &ec) {
			if ec.msg != "" {
				fmt.Fprintln(os.Stderr, "nodeup: "+oneLine(ec.msg))
			}
			return ec.code
		}
		fmt.Fprintln(os.Stderr, "nodeup: "+oneLine(err.Error()))
		return 1
	}
	return 0
}

// App returns the nodeup command line application.
func App() *ucli.App {
	app := &ucli.App{
		Name:                 "nodeup",
		Usage:                "Ray's programming model as one static binary: tasks, actors, objects, placement groups",
		Version:              Version,
		HideVersion:          true,
		EnableBashCompletion: true, // nodeup completion bash|zsh

		OnUsageError: usageError,
		Flags: []ucli.Flag{
			// Our own flag, not urfave's VersionFlag, so that it prints what
			// `nodeup version` prints without changing urfave's globals.
			&ucli.BoolFlag{Name: "version", Aliases: []string{"v"}, Usage: "print the nodeup version and exit"},
			&ucli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error, then optionally per component: info,raft=warn,gossip=error (components: " + strings.Join(logComponents, ", ") + ")", EnvVars: []string{"NODEUP_LOG_LEVEL"}},
			&ucli.StringFlag{Name: "log-format", Value: "text", Usage: "text or json", EnvVars: []string{"NODEUP_LOG_FORMAT"}},
		},
		Before: func(c *ucli.Context) error {
			return setupLogging(c.String("log-level"), c.String("log-format"), os.Stderr)
		},
		Action: func(c *ucli.Context) error {
			if c.Bool("version") {
				printVersion(c)
				return nil
			}
			return ucli.ShowAppHelp(c)
		},
		Commands: []*ucli.Command{
			startCommand(),
			joinCommand(),
			stopCommand(),
			statusCommand(),
			nodesCommand(),
			kvCommand(),
			tokenCommand(),
			keyringCommand(),
			listCommand(),
			memoryCommand(),
			logsCommand(),
			summaryCommand(),
			cancelCommand(),
			versionCommand(),
			benchCommand(),
			pythonCommand(),
			jobCommand(),
			killCommand(),
			removeCommand(),
			completionCommand(),
			operatorCommand(),
			nodeCommand(),
		},
	}
	for _, cmd := range app.Commands {
		setUsageError(cmd)
	}
	return app
}

func setUsageError(cmd *ucli.Command) {
	cmd.OnUsageError = usageError
	for _, sub := range cmd.Subcommands {
		setUsageError(sub)
	}
}

// usageError turns urfave's multi-line usage dump into one clear line.
func usageError(c *ucli.Context, err error, isSubcommand bool) error {
	if c.Command == nil || c.Command.Name == "" || c.Command.Name == c.App.Name {
		// A global flag: Run already prefixes "nodeup: ".
		return fmt.Errorf("%v (see 'nodeup --help')", err)
	}
	name := "nodeup " + c.Command.FullName()
	return fmt.Errorf("%s: %v (see '%s --help')", name, err, name)
}

// setupLogging makes the process's default logger: level is
// parseLogLevels' spec ("info", "info,raft=warn"), format text or json.
func setupLogging(level, format string, w io.Writer) error {
	base, byComp, err := parseLogLevels(level)
	if err != nil {
		return fmt.Errorf("--log-level: %v", err)
	}
	procLevels.set(base, byComp)
	// The inner handler passes everything: levelHandler decides.
	opts := &slog.HandlerOptions{Level: slog.LevelDebug - 8}
	var inner slog.Handler
	switch format {
	case "text":
		inner = slog.NewTextHandler(w, opts)
	case "json":
		inner = slog.NewJSONHandler(w, opts)
	default:
		return fmt.Errorf("--log-format %q: use text or json", format)
	}
	slog.SetDefault(slog.New(&levelHandler{inner: inner, levels: procLevels}))
	return nil
}

func versionCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "version",
		Usage: "print the nodeup version",
		Action: func(c *ucli.Context) error {
			printVersion(c)
			return nil
		},
	}
}

// printVersion writes "nodeup <Version>" for `nodeup version` and
// `nodeup --version`.
func printVersion(c *ucli.Context) {
	fmt.Fprintf(c.App.Writer, "nodeup %s\n", Version)
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}
