package logfollow

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nodeup/nodeup/wire"
)

// fakeNode serves Logs.List and Logs.Read over in-memory files, reading
// at most limit bytes a call.
type fakeNode struct {
	files map[string]string
	limit int
}

func (n *fakeNode) call(_ context.Context, method string, req, resp any) error {
	switch method {
	case wire.MethodLogsList:
		out := resp.(*wire.LogsList)
		for name, data := range n.files {
			backup := 0
			if strings.HasSuffix(name, ".1") {
				backup = 1
			}
			out.Files = append(out.Files, wire.LogFile{NodeName: "n1", Addr: "a1", Name: name, Kind: "worker", PID: 7, Size: int64(len(data)), Backup: backup})
		}
		return nil
	case wire.MethodLogsRead:
		r, out := req.(*wire.LogsReadRequest), resp.(*wire.LogsReadReply)
		data, ok := n.files[r.Name]
		if !ok {
			return fmt.Errorf("no file %s", r.Name)
		}
		out.Size = int64(len(data))
		if r.Tail > 0 {
			lines := strings.SplitAfter(data, "\n")
			if lines[len(lines)-1] == "" {
				lines = lines[:len(lines)-1]
			}
			keep := strings.Join(lines[max(len(lines)-r.Tail, 0):], "")
			out.Offset, out.Data = int64(len(data)-len(keep)), []byte(keep)
			return nil
		}
		end := min(int(r.Offset)+n.limit, len(data))
		if int(r.Offset) <= len(data) {
			out.Data = []byte(data[r.Offset:end])
			// As a node: cut after the last line end, if any.
			if i := strings.LastIndexByte(string(out.Data), '\n'); i >= 0 && end < len(data) {
				out.Data = out.Data[:i+1]
			}
		}
		out.Offset = r.Offset
		return nil
	}
	return fmt.Errorf("method %s", method)
}

// The follower starts at the last Tail lines, then prints each new line
// once, whole lines only across short reads, and reads the rest of a file
// that rotated from its backup before its new start.
func TestFollowerTailFollowRotate(t *testing.T) {
	node := &fakeNode{files: map[string]string{"w.log": "a\nb\nc\n"}, limit: 4}
	var got []string
	fl := &Follower{Call: node.call, Tail: 2, Line: func(f wire.LogFile, line []byte) { got = append(got, Prefix(f)+string(line)) }}
	poll := func(want ...string) {
		t.Helper()
		got = nil
		if err := fl.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("lines %q; want %q", got, want)
		}
	}
	poll("(task pid=7 node=n1) b", "(task pid=7 node=n1) c")
	poll()
	node.files["w.log"] += "dd\neee\n"
	poll("(task pid=7 node=n1) dd", "(task pid=7 node=n1) eee")
	// A line still being written waits for its end; one longer than a
	// read comes in pieces.
	node.files["w.log"] += "hh"
	poll()
	node.files["w.log"] += "h\niiiiiiiii\n"
	poll("(task pid=7 node=n1) hhh", "(task pid=7 node=n1) iiii", "(task pid=7 node=n1) iiii", "(task pid=7 node=n1) i")
	// Rotated: the old file, with a line not read yet, is now w.log.1.
	node.files["w.log.1"] = node.files["w.log"] + "f\n"
	node.files["w.log"] = "g\n"
	poll("(task pid=7 node=n1) f", "(task pid=7 node=n1) g")
	// A new file is read from its start, not its tail.
	node.files["x.log"] = "1\n2\n3\n"
	got = nil
	if err := fl.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("new file's lines %q; want all 3", got)
	}
}

// An actor's lines carry its class, or its ID when the class is unknown.
func TestPrefix(t *testing.T) {
	for f, want := range map[wire.LogFile]string{
		{Kind: "actor", Class: "Counter", PID: 3, NodeName: "n2"}: "(Counter pid=3 node=n2) ",
		{Kind: "actor", Actor: "ab12", PID: 3, NodeName: "n2"}:    "(actor ab12 pid=3 node=n2) ",
		{Kind: "worker", Job: "j", PID: 9, NodeName: "n0"}:        "(task pid=9 node=n0) ",
	} {
		if got := Prefix(f); got != want {
			t.Errorf("Prefix(%+v) = %q; want %q", f, got, want)
		}
	}
}
