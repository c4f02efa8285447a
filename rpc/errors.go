package rpc

import (
	"errors"
	"fmt"
)

// Error codes set by this package. Handlers may use their own codes too.
const (
	// CodeUnknownMethod: no handler is registered for the method.
	CodeUnknownMethod = "unknown_method"
	// CodeBadRequest: the request body did not decode into the handler's
	// argument type.
	CodeBadRequest = "bad_request"
	// CodeInternal: the handler panicked, or its result could not be
	// encoded or sent.
	CodeInternal = "internal"
	// CodeOverloaded: the request was not run because its connection
	// already had Limits.MaxPending requests running, or their bodies and
	// its own would exceed Limits.MaxPendingBytes. It may be retried.
	CodeOverloaded = "overloaded"
	// CodeTimeout: the handler gave up at a deadline of its own: it
	// returned an error wrapping context.DeadlineExceeded and no code.
	CodeTimeout = "timeout"
	// CodeCancelled: the handler's work was cancelled before it finished:
	// it returned an error wrapping context.Canceled and no code.
	CodeCancelled = "cancelled"
)

// Error is an error returned by the remote handler. Its Code and Message
// cross the wire unchanged: a handler that returns *Error (possibly wrapped)
// has its code preserved, any other handler error arrives with CodeTimeout or
// CodeCancelled when it wraps the context's error, else with an empty Code
// and the error's text as Message. Client.Call returns *Error unwrapped.
type Error struct {
	// Code is a machine-readable category such as "unknown_method"
	// (nodeup's are enumerated in package wire); may be empty.
	Code string
	// Message is the human-readable description.
	Message string
	// Err is the local cause, for errors.Is and errors.As on the side that
	// made the error; it never crosses the wire (a peer sees Code and
	// Message only).
	Err error
}

// Error returns "code: message", or just the message when Code is empty.
func (e *Error) Error() string {
	if e.Code == "" {
		return e.Message
	}
	return e.Code + ": " + e.Message
}

// Unwrap returns the local cause, nil for an error that came off the wire.
func (e *Error) Unwrap() error { return e.Err }

// ErrorCode returns Code.
func (e *Error) ErrorCode() string { return e.Code }

// Is reports whether target stands for e's code: a non-empty code equal to
// the one target's ErrorCode method returns. So errors.Is(err, sentinel)
// holds for every error of a code, whatever its message (the Go SDK's
// worker.ErrNotFound and the like are such sentinels).
func (e *Error) Is(target error) bool {
	t, ok := target.(interface{ ErrorCode() string })
	return ok && e.Code != "" && t.ErrorCode() == e.Code
}

// ErrClosed reports that the connection or client is closed. Transport
// errors caused by a lost connection wrap both ErrClosed and the underlying
// cause; Server.Serve returns it after Server.Close.
var ErrClosed = errors.New("connection closed")

// callError is a local failure of a call: a transport failure, a context
// cancellation or a local encoding problem. It names the method and peer.
type callError struct {
	method    string // empty for a dial
	addr      string
	err       error
	transport bool
}

func (e *callError) Error() string {
	if e.method == "" {
		return fmt.Sprintf("rpc dial %s: %v", e.addr, e.err)
	}
	return fmt.Sprintf("rpc call %s to %s: %v", e.method, e.addr, e.err)
}

func (e *callError) Unwrap() error { return e.err }

// IsTransport reports whether err is a failure to deliver a call or receive
// its answer: dial failure, write failure, lost or closed connection, or a
// malformed response. It is false for remote errors (*Error), context
// cancellation and deadlines, and local encoding errors. A call that failed
// with a transport error may or may not have run on the server.
func IsTransport(err error) bool {
	var ce *callError
	return errors.As(err, &ce) && ce.transport
}
