package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// The worker pool's cache of job binaries, content-addressed by sha256:
// a driver's own executable is copied in (cacheLocal), another node's is
// fetched from it in chunks (fetch), each verified against its hash.

func (p *workerPool) binDir() string { return p.cfg.binDir }

// binPath is where the binary of hash lives in the cache; a hash that is
// not one (wire.CheckHash) is an error, so no name from a peer can reach a
// file outside the cache.
func (p *workerPool) binPath(hash string) (string, error) {
	if err := wire.CheckHash("binary hash", hash); err != nil {
		return "", err
	}
	return filepath.Join(p.binDir(), hash), nil
}

// checkJobAndHash refuses, with bad_input naming the value, a job ID or a
// binary hash that could not safely name a file on this node.
func checkJobAndHash(job, hash string) error { return checkJob(job, wire.LanguageGo, hash) }

// checkJob is checkJobAndHash for a job of language lang
// (wire.CheckLanguage: a Python job has no binary hash).
func checkJob(job, lang, hash string) error {
	if err := wire.CheckID("job ID", job); err != nil {
		return badInputErr(err)
	}
	if err := wire.CheckLanguage(lang, hash); err != nil {
		return badInputErr(fmt.Errorf("job %s: %w", job, err))
	}
	return nil
}

// badInputErr is err as a bad_input answer.
func badInputErr(err error) *rpc.Error {
	return &rpc.Error{Code: wire.CodeBadInput, Message: err.Error(), Err: err}
}

// haveBinary reports whether the cache holds hash; an error is a hash
// that names no cache file (binPath's).
func (p *workerPool) haveBinary(hash string) (bool, error) {
	dst, err := p.binPath(hash)
	if err != nil {
		return false, err
	}
	_, err = os.Stat(dst)
	return err == nil, nil
}

// cacheLocal copies a driver's executable into the content-addressed cache,
// checking its hash.
func (p *workerPool) cacheLocal(path, hash string) error {
	p.binMu.Lock()
	defer p.binMu.Unlock()
	if have, err := p.haveBinary(hash); have || err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read job binary: %w", err)
	}
	defer f.Close()
	return p.store(f, hash)
}

// store writes r to the cache as hash, verifying it.
func (p *workerPool) store(r io.Reader, hash string) error {
	dst, err := p.binPath(hash)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(p.binDir(), 0o750); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(p.binDir(), "tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), r); err != nil {
		tmp.Close()
		return fmt.Errorf("copy job binary: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != hash {
		return fmt.Errorf("job binary hash is %s, want %s", got, hash)
	}
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// maxBinarySize bounds a job binary fetched from a peer, in bytes: the
// hash is checked only once every byte has arrived, so a hostile peer
// could otherwise stream without end into the cache directory (a variable
// for tests).
var maxBinarySize int64 = 2 << 30

// fetch pulls a binary from another node in chunks.
func (p *workerPool) fetch(ctx context.Context, from, hash string) error {
	p.binMu.Lock()
	defer p.binMu.Unlock()
	if have, err := p.haveBinary(hash); have || err != nil {
		return err
	}
	pr, pw := io.Pipe()
	started := p.host.goFunc("binary-fetch", func() {
		var off int64
		for {
			var rep wire.BinaryFetchReply
			if err := p.host.callNode(ctx, from, wire.MethodBinaryFetch, &wire.BinaryFetchRequest{Hash: hash, Offset: off, Length: 4 << 20}, &rep); err != nil {
				pw.CloseWithError(fmt.Errorf("fetch job binary %s from %s: %w", hash[:12], from, err))
				return
			}
			if rep.Size > maxBinarySize || off+int64(len(rep.Data)) > maxBinarySize {
				pw.CloseWithError(fmt.Errorf("fetch job binary %s from %s: the peer sends %d bytes or more (declares %d); at most %d are accepted",
					hash[:12], from, off+int64(len(rep.Data)), rep.Size, maxBinarySize))
				return
			}
			if _, err := pw.Write(rep.Data); err != nil {
				return
			}
			off += int64(len(rep.Data))
			if off >= rep.Size || len(rep.Data) == 0 {
				pw.Close()
				return
			}
		}
	})
	if !started {
		return fmt.Errorf("fetch job binary %s from %s: node stopping", hash[:12], from)
	}
	err := p.store(pr, hash)
	pr.Close()
	return err
}

// ensureBinary makes sure the job's binary is in the cache, fetching it from
// the node that has it.
func (p *workerPool) ensureBinary(ctx context.Context, job, hash, from string) error {
	if have, err := p.haveBinary(hash); err != nil {
		return fmt.Errorf("job %s: %w", job, err)
	} else if have {
		return nil
	}
	if from == "" || from == p.cfg.selfAddr {
		return fmt.Errorf("job %s binary %s is not on this node", job, hash)
	}
	return p.fetch(ctx, from, hash)
}
