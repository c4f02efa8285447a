// Package logfollow reads worker and actor logs through a node's Logs.List
// and Logs.Read (wire/logs.go), keeping an offset per file: what
// `nodeup logs -f` and a Go driver's log_to_driver (as Ray's) poll with.
package logfollow

import (
	"bytes"
	"context"
	"fmt"

	"github.com/nodeup/nodeup/wire"
)

// Caller makes one RPC to the node the follower reads through.
type Caller func(ctx context.Context, method string, req, resp any) error

// maxReadsPerPoll bounds the Logs.Read calls one file gets in one poll
// (each at most wire.MaxLogRead bytes), so a busy file cannot starve the
// others.
const maxReadsPerPoll = 8

// Prefix is what each line of f is printed after, as Ray's log_to_driver:
// "(<actor class, or task> pid=<pid> node=<node name>) ".
func Prefix(f wire.LogFile) string {
	who := "task"
	if f.Kind == "actor" {
		who = f.Class
		if who == "" {
			who = "actor " + f.Actor
		}
	}
	return fmt.Sprintf("(%s pid=%d node=%s) ", who, f.PID, f.NodeName)
}

// Follower follows the current files (not rotated backups) of a listing
// through Call. Not safe for concurrent use.
type Follower struct {
	Call Caller
	// List filters the files (Cluster: every alive node).
	List wire.LogsListRequest
	// Node keeps only the files of this node (name, ID or RPC address;
	// "": every node).
	Node string
	// Tail, when > 0, starts a file first seen by the first Poll at its
	// last Tail lines instead of its start. Files that appear later are
	// read from their start.
	Tail int
	// Line receives every whole line (without its '\n') of f.
	Line func(f wire.LogFile, line []byte)

	offsets map[string]int64 // by node address + "/" + name
	polled  bool
}

// Files lists the files the follower follows now: the current ones
// matching List and Node. It also returns the listing's node errors.
func (fl *Follower) Files(ctx context.Context) ([]wire.LogFile, []wire.LogNodeError, error) {
	var l wire.LogsList
	if err := fl.Call(ctx, wire.MethodLogsList, &fl.List, &l); err != nil {
		return nil, nil, err
	}
	var out []wire.LogFile
	for _, f := range l.Files {
		if f.Backup != 0 || fl.Node != "" && fl.Node != f.NodeName && fl.Node != f.NodeID && fl.Node != f.Addr {
			continue
		}
		out = append(out, f)
	}
	return out, l.Errors, nil
}

// Poll lists the files and reads what each gained since the last Poll,
// handing the lines to Line. A file whose size dropped below its offset
// was rotated: it is read again from its start.
func (fl *Follower) Poll(ctx context.Context) error {
	files, _, err := fl.Files(ctx)
	if err != nil {
		return err
	}
	if fl.offsets == nil {
		fl.offsets = map[string]int64{}
	}
	seen := make(map[string]bool, len(files))
	first := !fl.polled
	fl.polled = true
	for _, f := range files {
		key := f.Addr + "/" + f.Name
		seen[key] = true
		off, known := fl.offsets[key]
		if !known && first && fl.Tail > 0 {
			var r wire.LogsReadReply
			if err := fl.Call(ctx, wire.MethodLogsRead, &wire.LogsReadRequest{Node: f.Addr, Name: f.Name, Tail: fl.Tail}, &r); err != nil {
				continue // gone meanwhile; the next listing tells
			}
			fl.offsets[key] = fl.emit(f, r.Offset, r.Size, r.Data)
			continue
		}
		if f.Size < off {
			fl.readRotated(ctx, f, off)
			off = 0
		}
		for range maxReadsPerPoll {
			if known && f.Size == off {
				break
			}
			var r wire.LogsReadReply
			if err := fl.Call(ctx, wire.MethodLogsRead, &wire.LogsReadRequest{Node: f.Addr, Name: f.Name, Offset: off}, &r); err != nil {
				break
			}
			if r.Size < off { // rotated since the listing
				fl.readRotated(ctx, f, off)
				off = 0
				continue
			}
			next := fl.emit(f, r.Offset, r.Size, r.Data)
			if next == off {
				break
			}
			off = next
			if off >= r.Size {
				break
			}
		}
		fl.offsets[key] = off
	}
	for key := range fl.offsets {
		if !seen[key] {
			delete(fl.offsets, key)
		}
	}
	return nil
}

// readRotated reads, best effort, what f held past off when it was
// rotated: the rest of its newest backup, <name>.1 (once rotated since the
// last read; output of further rotations in between is not read).
func (fl *Follower) readRotated(ctx context.Context, f wire.LogFile, off int64) {
	for range maxReadsPerPoll {
		var r wire.LogsReadReply
		if err := fl.Call(ctx, wire.MethodLogsRead, &wire.LogsReadRequest{Node: f.Addr, Name: f.Name + ".1", Offset: off}, &r); err != nil || r.Size < off {
			return
		}
		next := fl.emit(f, r.Offset, r.Size, r.Data)
		if next == off || next >= r.Size {
			return
		}
		off = next
	}
}

// emit hands the whole lines of data (which starts at offset start, in a
// file of size bytes) to Line and returns the offset after the last one.
// A trailing part line stays for the next read; data without a line end
// is handed over whole when more of the file follows (a line longer than
// a read), else it is a line still being written and waits.
func (fl *Follower) emit(f wire.LogFile, start, size int64, data []byte) int64 {
	end := bytes.LastIndexByte(data, '\n') + 1
	if end == 0 && start+int64(len(data)) < size {
		end = len(data)
	}
	for _, line := range bytes.SplitAfter(data[:end], []byte{'\n'}) {
		if len(line) == 0 {
			continue
		}
		fl.Line(f, bytes.TrimSuffix(line, []byte{'\n'}))
	}
	return start + int64(end)
}
