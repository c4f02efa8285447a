package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// A runtime env's working dir (wire.EnvWorkingDir, Ray's runtime_env
// working_dir): before a worker process of a task or actor that has one
// starts here, the node gets the working dir's manifest and the chunks it
// lacks from the holder the ref names, else from any other node of the
// cluster, checks every byte as a peer's (each chunk against its sha256,
// the archive with unpackJobArchive), unpacks it once into
// <data-dir>/jobs/wd/<manifest hash> (the job supervisor's cache, shared
// with submitted jobs' entrypoints), and starts the process there. Each
// process pins the dir; when the last pin goes and no job's entrypoint
// runs in it (the job ended, its workers with it), the dir is removed.

// errNoHolder means every node asked answered that it lacks a chunk of a
// working dir (or sent a bad one); errHolderUnreachable that some could
// not be reached, so it may yet come.
var (
	errNoHolder          = errors.New("no node has it")
	errHolderUnreachable = errors.New("no node reached has it")
)

// errRuntimeEnvSetup marks a worker start that failed for good on its
// runtime env (wire.CodeRuntimeEnvSetupFailed): retrying cannot help.
var errRuntimeEnvSetup = errors.New("runtime env setup failed")

// runtimeEnvRefused reports whether err, from workingDir, is permanent: a
// malformed ref, a refused archive or manifest, a dir over the cap, or a
// chunk every node lacks.
func runtimeEnvRefused(err error) bool {
	var re *rpc.Error
	return errors.Is(err, ErrJobArchive) || errors.Is(err, ErrWorkingDirTooLarge) || errors.Is(err, errNoHolder) ||
		errors.Is(err, errBadRef) || (errors.As(err, &re) && re.Code == wire.CodeBadInput)
}

// isCode reports whether err is an *rpc.Error with code.
func isCode(err error, code string) bool {
	var re *rpc.Error
	return errors.As(err, &re) && re.Code == code
}

// errBadRef wraps a malformed working dir ref.
var errBadRef = errors.New("bad working dir ref")

// workingDir returns the dir the working dir ref unpacks to here, pinned
// until release is called (once). Errors name the ref's part that failed:
// a malformed ref, a manifest or chunk no node gives, a manifest over
// --max-working-dir, an archive refused (ErrJobArchive).
func (n *Node) workingDir(ctx context.Context, ref string) (string, func(), error) {
	hash, holder, err := wire.ParseWorkingDirRef(ref)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %v", errBadRef, err)
	}
	if dir := n.jobs.pinUnpacked(hash); dir != "" {
		return dir, func() { n.jobs.releaseDir(dir) }, nil // a lease of a running job: no file is read
	}
	srcs := n.chunkSources(holder)
	if err := n.fetchChunk(ctx, srcs, hash); err != nil {
		return "", nil, fmt.Errorf("manifest %s: %w", hash, err)
	}
	b, err := n.jobs.chunks.get(hash)
	if err != nil {
		return "", nil, fmt.Errorf("manifest %s: %w", hash, err)
	}
	m, err := wire.ParseJobManifest(b)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %v", ErrJobArchive, err)
	}
	if err := checkManifest(m, n.cfg.MaxWorkingDirBytes); err != nil {
		return "", nil, err
	}
	for _, h := range m.Chunks {
		if err := n.fetchChunk(ctx, srcs, h); err != nil {
			return "", nil, fmt.Errorf("chunk %s of working dir %s: %w", h, hash, err)
		}
	}
	dir, err := n.jobs.unpack(m)
	if err != nil {
		return "", nil, err
	}
	return dir, func() { n.jobs.releaseDir(dir) }, nil
}

// chunkSources lists the RPC addresses to ask for a working dir's chunks:
// holder first when it is a member of the cluster (an address that is not
// is never dialed), then every other member; never this node.
func (n *Node) chunkSources(holder string) []string {
	peers := n.peerAddrs()
	var out []string
	if slices.Contains(peers, holder) && holder != n.rpcAddr {
		out = append(out, holder)
	}
	for _, a := range peers {
		if a != holder && a != n.rpcAddr {
			out = append(out, a)
		}
	}
	return out
}

// fetchChunk puts chunk h in this node's cache unless it is there,
// asking srcs in turn; a source's answer is kept only when its sha256 is
// h (jobChunks.put). The error wraps errNoHolder and says how many nodes
// were asked and what the last one answered.
func (n *Node) fetchChunk(ctx context.Context, srcs []string, h string) error {
	if n.jobs.chunks.has(h) {
		return nil
	}
	if len(srcs) == 0 {
		return fmt.Errorf("%w: no other node to ask", errNoHolder)
	}
	var last error
	missing := errNoHolder
	for _, src := range srcs {
		var resp wire.JobChunkResponse
		if err := n.pool.Call(ctx, src, wire.MethodJobChunk, &wire.JobChunkRequest{Hash: h}, &resp); err != nil {
			if rpc.IsTransport(err) {
				missing = errHolderUnreachable
			}
			last = fmt.Errorf("%s: %w", src, err)
			continue
		}
		if err := n.jobs.chunks.put(h, resp.Data); err != nil {
			n.logger.Warn("a node sent a bad working dir chunk", "node", src, "chunk", h, "err", err)
			last = fmt.Errorf("%s sent a bad one: %w", src, err)
			continue
		}
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w: asked %d node(s), the last answered %v", missing, len(srcs), last)
}

// keepManifest stores m, encoded, in the chunk cache under its hash, so
// the workers of the job it belongs to can fetch it from this node by the
// job's working dir ref (wire.EnvWorkingDir). A manifest over a chunk's
// size is not kept: its workers' nodes then get it from another holder.
func (s *jobSupervisor) keepManifest(m *wire.JobManifest) error {
	enc := m.Encode()
	if len(enc) > wire.MaxJobChunkBytes {
		return nil
	}
	return s.chunks.put(m.Hash(), enc)
}

// pinUnpacked pins and returns the dir the working dir of manifest hash h
// is unpacked to here, "" when it is not (unpack renames a dir into place
// only once it is whole).
func (s *jobSupervisor) pinUnpacked(h string) string {
	s.unpackMu.Lock()
	defer s.unpackMu.Unlock()
	dst := s.wdPath(h)
	if _, err := os.Stat(dst); err != nil {
		return ""
	}
	s.pin(dst, 1)
	return dst
}

// releaseDir drops a worker process's pin on the unpacked working dir wd
// and removes wd once nothing holds it: no pin and no job's entrypoint.
func (s *jobSupervisor) releaseDir(wd string) {
	s.unpackMu.Lock()
	defer s.unpackMu.Unlock()
	s.pin(wd, -1)
	s.mu.Lock()
	used := s.inUse()[wd]
	s.mu.Unlock()
	if used {
		return
	}
	if err := os.RemoveAll(wd); err != nil {
		s.n.logger.Warn("remove a working dir no worker uses", "dir", wd, "err", err)
		return
	}
	s.n.logger.Debug("removed a working dir no worker uses", "dir", wd)
}
