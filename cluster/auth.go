package cluster

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/nodeup/nodeup/internal/pki"
	"github.com/nodeup/nodeup/rpc"
	"github.com/nodeup/nodeup/wire"
)

// tokenAuthority resolves a presented token (pki token string) to its
// role, or an error naming the token ID and why (unknown, expired,
// revoked) — never the secret. The issue-15 contract: the Raft-backed one
// is serverTokens (cluster/tokens.go); tests use a map.
type tokenAuthority interface {
	RoleOf(token string, now time.Time) (pki.Role, error)
}

// authHint ends every refusal of a call: what the caller can do.
const authHint = "pass a token whose role allows it (--token, --token-file or NODEUP_TOKEN; nodeup token create --role ROLE), " +
	"or run the client on the node's machine as the node's user, root or a member of its --socket-group"

// Principals every connection is one of, besides a token's.
var (
	principalNode = rpc.Principal{Name: "node (cluster certificate)", Role: "node", Grants: wire.GrantAll}
)

// authenticator decides who a connection to the node is (rpc.Auth's
// Authenticate): a TLS peer with a verified cluster certificate is a node;
// a plaintext TCP peer of a secure node is anonymous (requireTLS);
// a Unix-socket peer whose credentials (SO_PEERCRED) are the node's user,
// root or a member of the socket group is local; else the token it
// presented decides; else it is anonymous, which may call nothing.
type authenticator struct {
	tokens tokenAuthority
	// requireTLS (a secure node): a plaintext TCP connection is anonymous
	// whatever token it sent, and its refusals say to use TLS.
	requireTLS bool
	uid        int // the node's user
	gid        int // the --socket-group's ID, -1 for none
	// peerCred reads a Unix connection's peer credentials (unix.GetsockoptUcred).
	peerCred func(*net.UnixConn) (peerCreds, error)
	// groupsOf lists a process's supplementary group IDs (/proc/<pid>/status).
	groupsOf func(pid int32) ([]int, error)
}

// peerCreds are a Unix socket peer's process, user and group (SO_PEERCRED).
type peerCreds struct {
	PID      int32
	UID, GID int
}

func newAuthenticator(tokens tokenAuthority, socketGroup int, requireTLS bool) *authenticator {
	return &authenticator{tokens: tokens, requireTLS: requireTLS, uid: os.Getuid(), gid: socketGroup, peerCred: unixPeerCred, groupsOf: procGroups}
}

// auth returns the rpc.Auth enforcing wire.MethodRoles with a.
func (a *authenticator) auth() *rpc.Auth {
	return &rpc.Auth{Authenticate: a.authenticate, Require: wire.MethodRequirement, Hint: authHint}
}

// noteNeedsTLS says why a plaintext TCP connection to a secure node may
// call nothing but the open methods, and what to do instead.
const noteNeedsTLS = "this node requires TLS: on this machine use the Unix socket (the CLI and SDK do by default); from elsewhere pass a token (--token / NODEUP_TOKEN)"

// anonymous is the principal of a connection with no accepted credential:
// it may call the open methods (wire.RoleOpen) only.
func anonymous(note string) rpc.Principal {
	return rpc.Principal{Name: "anonymous", Role: "none", Grants: wire.GrantOpen, Note: note}
}

func (a *authenticator) authenticate(conn net.Conn, token string) rpc.Principal {
	isTLS := false
	switch tc := conn.(type) {
	case interface{ NodePrincipal() (string, bool) }: // the mux's accepted TLS connection
		isTLS = true
		if id, ok := tc.NodePrincipal(); ok {
			return rpc.Principal{Name: "node " + short(id) + " (cluster certificate)", Role: principalNode.Role, Grants: principalNode.Grants}
		}
	case interface{ ConnectionState() tls.ConnectionState }:
		isTLS = true
		if len(tc.ConnectionState().VerifiedChains) > 0 {
			return principalNode
		}
	}
	if _, unix := conn.(*net.UnixConn); !unix && !isTLS && a.requireTLS {
		return anonymous(noteNeedsTLS)
	}
	var notes []string
	if uc, ok := conn.(*net.UnixConn); ok {
		p, err := a.local(uc)
		if err == nil {
			return p
		}
		notes = append(notes, err.Error())
	}
	if token != "" {
		p, err := a.token(token)
		if err == nil {
			return p
		}
		notes = append(notes, err.Error())
	}
	return anonymous(strings.Join(notes, "; "))
}

// local checks a Unix-socket peer: the node's user, root, or in the
// socket group (its primary group, or a supplementary one) is the local
// principal, holding every role; else the error says who it is and what
// is accepted, in one line.
func (a *authenticator) local(uc *net.UnixConn) (rpc.Principal, error) {
	cred, err := a.peerCred(uc)
	if err != nil {
		return rpc.Principal{}, fmt.Errorf("unix socket peer credentials: %w", err)
	}
	name := "local uid " + strconv.Itoa(cred.UID)
	if cred.UID == a.uid || cred.UID == 0 {
		return rpc.Principal{Name: name, Role: "local", Grants: wire.GrantAll}, nil
	}
	if a.gid >= 0 {
		if cred.GID == a.gid {
			return rpc.Principal{Name: name, Role: "local", Grants: wire.GrantAll}, nil
		}
		if groups, err := a.groupsOf(cred.PID); err == nil {
			for _, g := range groups {
				if g == a.gid {
					return rpc.Principal{Name: name, Role: "local", Grants: wire.GrantAll}, nil
				}
			}
		}
		return rpc.Principal{}, fmt.Errorf("unix socket peer uid %d (pid %d) is not the node's uid %d, root, or in group %d (--socket-group)",
			cred.UID, cred.PID, a.uid, a.gid)
	}
	return rpc.Principal{}, fmt.Errorf("unix socket peer uid %d (pid %d) is not the node's uid %d or root (no --socket-group set)",
		cred.UID, cred.PID, a.uid)
}

// token resolves a presented token through the authority. Errors name the
// token's ID at most, never its secret.
func (a *authenticator) token(s string) (rpc.Principal, error) {
	t, err := pki.ParseToken(s)
	if err != nil {
		return rpc.Principal{}, err
	}
	if a.tokens == nil {
		return rpc.Principal{}, fmt.Errorf("token %s: this node has no token authority", t.ID)
	}
	role, err := a.tokens.RoleOf(s, time.Now())
	if err != nil {
		return rpc.Principal{}, err
	}
	return rpc.Principal{Name: "token " + t.ID, Role: string(role), Grants: wire.GrantsOf(role)}, nil
}

// procGroups reads a process's supplementary groups from /proc (Linux);
// the read is bounded to the status file's first 64 KiB.
func procGroups(pid int32) ([]int, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(int(pid)) + "/status")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 4096), 64<<10)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Groups:"); ok {
			var out []int
			for _, f := range strings.Fields(rest) {
				if g, err := strconv.Atoi(f); err == nil {
					out = append(out, g)
				}
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("pid %d: no Groups line in /proc status", pid)
}

// lookupGroup resolves --socket-group, a group name or numeric ID; ""
// gives -1 (none).
func lookupGroup(s string) (int, error) {
	if s == "" {
		return -1, nil
	}
	if gid, err := strconv.Atoi(s); err == nil && gid >= 0 {
		return gid, nil
	}
	g, err := user.LookupGroup(s)
	if err != nil {
		return -1, fmt.Errorf("--socket-group %q: %w (want a group name or numeric ID)", s, err)
	}
	return strconv.Atoi(g.Gid)
}

// SetTokenAuthority turns role enforcement on (wire.MethodRoles) with
// resolve as the token authority: it returns a presented token's role, or
// an error naming the token's ID and why it is refused. For tests of
// other packages and for embedding; a node of a secure cluster uses the
// tokens kept in Raft (issue 15). nil turns enforcement off.
func (c *Config) SetTokenAuthority(resolve func(token string, now time.Time) (pki.Role, error)) {
	if resolve == nil {
		c.tokens = nil
		return
	}
	c.tokens = tokenFunc(resolve)
}

// tokenFunc is a tokenAuthority of a function.
type tokenFunc func(token string, now time.Time) (pki.Role, error)

func (f tokenFunc) RoleOf(token string, now time.Time) (pki.Role, error) { return f(token, now) }
