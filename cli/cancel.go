package cli

import (
	"fmt"

	ucli "github.com/urfave/cli/v2"

	"github.com/nodeup/nodeup/wire"
)

// cancelCommand is Ray's `ray.cancel` from the command line: it finds the
// task in the cluster's task record (TaskEvents.List) and asks its owner,
// the process that submitted it, to cancel it (Owner.CancelTask).
func cancelCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "cancel",
		Usage:     "cancel a task by its ID (from nodeup list tasks): its owner cancels it as worker.Cancel would",
		ArgsUsage: "<task-id>",
		Flags: append(clientFlags(),
			&ucli.BoolFlag{Name: "force", Usage: "end a running task's worker process at once (as Ray's force=True; its other tasks are retried)"},
		),
		Action: func(c *ucli.Context) error {
			if c.NArg() != 1 {
				return fmt.Errorf("nodeup cancel takes one task ID (from nodeup list tasks), got %d arguments", c.NArg())
			}
			id := c.Args().First()
			if err := wire.CheckID("task ID", id); err != nil {
				return err
			}
			var list wire.TaskEventsList
			if err := call(c, wire.MethodTaskEventsList, &wire.TaskEventsListRequest{TaskID: id}, &list); err != nil {
				return err
			}
			if len(list.Tasks) == 0 {
				return fmt.Errorf("task %s is not in the cluster's task record (nodeup list tasks)", id)
			}
			t := list.Tasks[0]
			if wire.TaskStateTerminal(t.State) {
				fmt.Fprintf(c.App.Writer, "task %s (%s) already %s: nothing to cancel\n", id, t.Name, t.State)
				return nil
			}
			if t.Owner == "" {
				return fmt.Errorf("task %s (%s): its owner's address is not known yet (its owner has not reported it); try again", id, t.Name)
			}
			// The owner takes its job's token, which the node gives to an
			// admin (a local client on its socket, or an admin token), as
			// nodeup memory asks owners.
			owners := &ownerCaller{c: c, tokens: map[string]string{}}
			if err := owners.call(t.Owner, t.JobID, c.Duration("timeout"), wire.MethodOwnerCancel, &wire.TaskCancelRequest{TaskID: id, Force: c.Bool("force")}, &wire.Empty{}); err != nil {
				return fmt.Errorf("cancel task %s (%s) at its owner: %w", id, t.Name, err)
			}
			fmt.Fprintf(c.App.Writer, "cancelled task %s (%s); its owner at %s fails its result with TaskCancelledError\n", id, t.Name, t.Owner)
			return nil
		},
	}
}
