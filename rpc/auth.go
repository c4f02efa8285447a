package rpc

import (
	"fmt"
	"net"
)

// CodePermissionDenied: the connection's principal may not call the
// method (Auth); the message names the method, the role it needs, the
// connection's principal and role, and what to do.
const CodePermissionDenied = "permission_denied"

// Grants is a set of roles as bits (which bit is which role is the
// Auth's business; nodeup's are in package wire). A call is allowed when
// the method's Requirement.Bit is in the connection's Principal.Grants, so
// the check at dispatch is one AND.
type Grants uint32

// Requirement is what a method needs: one role, as a name for refusals and
// as its bit.
type Requirement struct {
	Role string
	Bit  Grants
}

// Principal is who a connection is, decided once when it opens.
type Principal struct {
	// Name says who, for refusals and logs: "node", "local uid 1000",
	// "token 1a2b3c4d", "anonymous".
	Name string
	// Role names what the principal holds, for refusals ("read", "admin",
	// "none").
	Role string
	// Grants are the bits of the roles the principal may act as.
	Grants Grants
	// Note says why a credential the client presented was not accepted
	// ("token 1a2b3c4d: revoked"), so that a refusal can say it; "" when
	// none was refused.
	Note string
}

// Auth is how a Server authenticates connections and authorizes calls.
// Without one (the default) every call of a registered method is allowed.
type Auth struct {
	// Authenticate returns the principal of conn, which presented token
	// in its hello ("" for none). It runs once per connection, on the
	// connection's goroutine after the hello and before any request is
	// read, so it may take a lock or look a token up.
	Authenticate func(conn net.Conn, token string) Principal
	// Require returns the requirement of method, false when it has none:
	// every call of such a method is then refused, so nothing is open by
	// accident. It is consulted when a method is registered, not per call.
	Require func(method string) (Requirement, bool)
	// Hint ends every refusal: what the caller can do about it.
	Hint string
}

// SetAuth makes s authenticate every connection that opens from now on
// with a, and check each call against a.Require; nil turns checks off for
// new connections. Set it before Serve.
func (s *Server) SetAuth(a *Auth) {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	s.auth.Store(a)
	old := *s.handlers.Load()
	m := make(map[string]entry, len(old))
	for method, e := range old {
		m[method] = s.entryFor(method, e.h)
	}
	s.handlers.Store(&m)
}

// entryFor pairs h with method's requirement under the current Auth.
func (s *Server) entryFor(method string, h Handler) entry {
	e := entry{h: h}
	if a := s.auth.Load(); a != nil && a.Require != nil {
		e.need, e.known = a.Require(method)
	}
	return e
}

// Methods returns the names of the registered methods, in no order (for
// checks that every method has a role).
func (s *Server) Methods() []string {
	m := *s.handlers.Load()
	out := make([]string, 0, len(m))
	for method := range m {
		out = append(out, method)
	}
	return out
}

// entry is a registered method: its handler and what it requires.
type entry struct {
	h     Handler
	need  Requirement
	known bool // the Auth has a requirement for the method
}

// denied returns the error refusing a call of method (entry e) to p, or
// nil when p may call it. The allowed path costs one AND.
func denied(p *Principal, method string, e *entry, hint string) *Error {
	if p == nil || p.Grants&e.need.Bit != 0 {
		return nil
	}
	var msg string
	if !e.known {
		msg = fmt.Sprintf("%s has no role in the method table, so it is refused to everyone (a nodeup bug: report it)", method)
	} else {
		msg = fmt.Sprintf("%s needs role %s; this connection is %s with role %s", method, e.need.Role, p.Name, p.Role)
	}
	if p.Note != "" {
		msg += " (" + p.Note + ")"
	}
	if hint != "" {
		msg += ": " + hint
	}
	return &Error{Code: CodePermissionDenied, Message: msg}
}
