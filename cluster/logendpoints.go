package cluster

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/nodeup/nodeup/internal/fanout"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// logPeerTimeout bounds each peer's answer to a forwarded Logs call.
const logPeerTimeout = 10 * time.Second

// logEndpoints registers Logs.List and Logs.Read (wire/logs.go).
func (n *Node) logEndpoints() {
	rpc.Handle(n.rpcServer, wire.MethodLogsList, n.logsList)
	rpc.Handle(n.rpcServer, wire.MethodLogsRead, n.logsRead)
}

// logsList answers Logs.List: this node's files, or every alive node's.
func (n *Node) logsList(ctx context.Context, r *wire.LogsListRequest) (*wire.LogsList, error) {
	if r.Job != "" {
		if err := wire.CheckID("job", r.Job); err != nil {
			return nil, badInput("Logs.List: %v", err)
		}
	}
	if r.Actor != "" {
		if err := wire.CheckID("actor", r.Actor); err != nil {
			return nil, badInput("Logs.List: %v", err)
		}
	}
	if !r.Cluster {
		return n.localLogs(r.Job, r.Actor)
	}
	out := &wire.LogsList{}
	fanout.Ask(ctx, n.liveMemberTargets(), logPeerTimeout,
		func() (*wire.LogsList, error) { return n.localLogs(r.Job, r.Actor) },
		fanout.RemoteCall[wire.LogsList](n.callNode, wire.MethodLogsList, &wire.LogsListRequest{Job: r.Job, Actor: r.Actor}),
		func(t fanout.Target, l *wire.LogsList, err error) {
			if err != nil {
				out.Errors = append(out.Errors, wire.LogNodeError{NodeName: t.Name, Addr: t.Addr, Error: err.Error()})
				return
			}
			// A peer's answer is bounded by the frame size; the total by
			// MaxLogClusterList, whatever the peers say.
			take := min(len(l.Files), max(wire.MaxLogClusterList-len(out.Files), 0))
			out.Files = append(out.Files, l.Files[:take]...)
			out.LeftOut += l.LeftOut + len(l.Files) - take
		})
	slices.SortFunc(out.Files, func(a, b wire.LogFile) int {
		return cmp.Or(cmp.Compare(a.NodeName, b.NodeName), cmp.Compare(a.Name, b.Name))
	})
	slices.SortFunc(out.Errors, func(a, b wire.LogNodeError) int { return cmp.Compare(a.NodeName, b.NodeName) })
	return out, nil
}

// localLogs lists this node's worker log files matching job and actor.
func (n *Node) localLogs(job, actor string) (*wire.LogsList, error) {
	wl := n.workers.logs
	entries, err := wl.logFiles()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list worker logs in %s: %w", wl.dir, err)
	}
	out := &wire.LogsList{}
	for _, lf := range entries {
		e, name := lf.entry, lf.name
		f := wire.LogFile{NodeID: n.id.NodeID, NodeName: n.cfg.NodeName, Addr: n.rpcAddr, Name: e.Name(), Kind: name.kind,
			Worker: name.worker, PID: name.pid, Backup: name.backup}
		if name.kind == logKindWorker {
			f.Job = name.id
		} else {
			f.Actor = name.id
		}
		if m := wl.meta(name.base()); m != nil {
			f.Job, f.Class, f.Live = m.job, m.class, m.live && name.backup == 0
		}
		if job != "" && f.Job != job || actor != "" && f.Actor != actor {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // deleted meanwhile
		}
		f.Size, f.ModTime = info.Size(), info.ModTime().UnixNano()
		if len(out.Files) == wire.MaxLogList {
			out.LeftOut++
			continue
		}
		out.Files = append(out.Files, f)
	}
	return out, nil
}

// isSelf says whether node (a name, node ID or RPC address) is this node.
func (n *Node) isSelf(node string) bool {
	return node == "" || node == n.cfg.NodeName || node == n.id.NodeID || node == n.rpcAddr
}

// logsRead answers Logs.Read: here, or forwarded to the node named.
func (n *Node) logsRead(ctx context.Context, r *wire.LogsReadRequest) (*wire.LogsReadReply, error) {
	if _, err := parseLogName(r.Name); err != nil {
		return nil, badInput("Logs.Read: %v", err)
	}
	if r.Offset < 0 || r.Tail < 0 {
		return nil, badInput("Logs.Read: offset %d, tail %d: want 0 or more", r.Offset, r.Tail)
	}
	if !n.isSelf(r.Node) {
		for _, m := range n.members.snapshot() {
			if m.Status.Live() && (m.Name == r.Node || m.ID == r.Node || m.RPCAddr == r.Node) {
				fwd := *r
				fwd.Node = ""
				cctx, cancel := context.WithTimeout(ctx, logPeerTimeout)
				defer cancel()
				var out wire.LogsReadReply
				if err := n.callNode(cctx, m.RPCAddr, wire.MethodLogsRead, &fwd, &out); err != nil {
					return nil, err
				}
				return &out, nil
			}
		}
		return nil, &rpc.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("Logs.Read: node %q: no alive node has that name, ID or address", r.Node)}
	}
	limit := r.Limit
	if limit <= 0 || limit > wire.MaxLogRead {
		limit = wire.MaxLogRead
	}
	data, off, size, err := readLog(filepath.Join(n.workers.logs.dir, r.Name), r.Offset, limit, r.Tail)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &rpc.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("Logs.Read: no log file %s on node %s", r.Name, n.cfg.NodeName)}
	}
	if err != nil {
		return nil, fmt.Errorf("Logs.Read %s: %w", r.Name, err)
	}
	return &wire.LogsReadReply{NodeName: n.cfg.NodeName, Name: r.Name, Data: data, Offset: off, Next: off + int64(len(data)), Size: size}, nil
}

// readLog reads path (a regular file, never a link): without tail, at most
// limit bytes from offset, cut after the last line end when they hold one
// and more follows; with tail, the last tail whole lines within the last
// limit bytes. It returns the data, the offset it starts at and the size.
func readLog(path string, offset, limit int64, tail int) ([]byte, int64, int64, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, 0, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, 0, err
	}
	if !st.Mode().IsRegular() {
		return nil, 0, 0, fmt.Errorf("not a regular file")
	}
	size := st.Size()
	if tail > 0 {
		start := max(size-limit, 0)
		buf := make([]byte, size-start)
		m, err := f.ReadAt(buf, start)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, 0, 0, err
		}
		buf = buf[:m]
		if start > 0 { // drop the cut first line
			if i := bytes.IndexByte(buf, '\n'); i >= 0 && i < len(buf)-1 {
				buf, start = buf[i+1:], start+int64(i+1)
			}
		}
		// The last tail lines: skip back over tail line ends (the final
		// one ends the last line).
		end := len(buf)
		if end > 0 && buf[end-1] == '\n' {
			end--
		}
		cut, lines := 0, 0
		for i := end - 1; i >= 0; i-- {
			if buf[i] == '\n' {
				lines++
				if lines == tail {
					cut = i + 1
					break
				}
			}
		}
		return buf[cut:], start + int64(cut), size, nil
	}
	if offset >= size {
		return nil, offset, size, nil
	}
	buf := make([]byte, min(limit, size-offset))
	m, err := f.ReadAt(buf, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, 0, err
	}
	buf = buf[:m]
	if m > 0 && buf[m-1] != '\n' {
		if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
			buf = buf[:i+1]
		}
	}
	return buf, offset, size, nil
}
