// Package rpc is nodeup's multiplexed request/response protocol: msgpack
// frames over any stream net.Conn (TCP or Unix sockets). One connection
// carries any number of concurrent calls; responses are matched to calls by
// sequence number and may arrive in any order.
//
// # Wire format
//
// A connection is a sequence of frames in both directions. A client that
// dials a nodeup node port first sends a one-byte preamble (0x01 for RPC),
// which the node uses to multiplex the port; the preamble is not part of
// the frame stream. Then comes the hello (HelloSize; a client's may carry a
// token, AppendHelloToken), once per connection: a server with an Auth
// decides the connection's Principal from it and the connection, and
// refuses calls the principal may not make (CodePermissionDenied). Each
// frame is:
//
//	+----------------------+---------------------------------------------+
//	| length: uint32, BE   | payload: length bytes                       |
//	+----------------------+---------------------------------------------+
//
//	payload = header || body
//	header  = msgpack array of exactly 5 elements:
//	            [0] seq    uint   call sequence number, chosen by the client
//	            [1] kind   uint   0 = request, 1 = response, 2 = error response
//	            [2] method str    "Service.Method"; empty in responses
//	            [3] error  str    error message; error responses only
//	            [4] code   str    machine-readable error code; error responses only
//	body    = the remaining payload bytes: one msgpack value (the request
//	          argument or the result; nil is 0xc0), or empty in error responses
//
// length counts payload bytes only (not the 4 prefix bytes) and must be in
// 1..MaxFrameSize (64 MiB); a larger prefix is a protocol error and the
// connection is closed without allocating. Integers in the header may use any
// msgpack unsigned (or non-negative signed) integer encoding, strings any
// msgpack str encoding or nil (meaning ""). Writers emit the shortest forms.
//
// A request with seq N is answered by exactly one response or error response
// with seq N, unless the connection fails first. A peer that receives a
// malformed frame, or a frame of the wrong kind (a request sent to a
// client, a response sent to a server), closes the connection; every call
// still pending on it fails with a transport error. A server also counts
// as malformed a request body that is not one msgpack value, or whose
// value declares a string, bin, array or map longer than the bytes that
// follow, or nests arrays and maps over 100 deep (internal/mpsafe).
//
// # Limits
//
// Every byte a server reads is treated as hostile; Limits (DefaultLimits)
// bound what one peer can make it hold. A server closes a connection,
// logging one warning per second at most for all peers together, when a
// request's length prefix exceeds Limits.MaxRequestSize (64 MiB), when a
// frame is malformed, and when a frame does not arrive within
// Limits.FrameTimeout (30 s) of its first byte plus a second per MiB of
// payload. It closes a connection that starts no frame for
// Limits.IdleTimeout (5 min) while none of its requests runs, and refuses
// connections beyond Limits.MaxConns (4096). It answers a request with an
// error of code "overloaded", skipping its body unread, when the
// connection already runs Limits.MaxPending (4096) requests or their
// bodies and this one's would exceed Limits.MaxPendingBytes (64 MiB); it
// keeps reading meanwhile, so that it sees a peer go away and cancels its
// handlers. A payload is read into a buffer that starts at 64 KiB and
// doubles only as bytes arrive; the body of a request for an unknown
// method is skipped, not stored. An idle connection holds a 4 KiB read
// buffer and no write buffer. Pool closes clients idle for
// PoolIdleTimeout (2 min), before servers would.
//
// Error responses carry a code and a message. Codes defined by this package
// are "unknown_method", "bad_request", "internal" and "overloaded";
// handlers may return any code via *Error. An empty code means an
// uncategorised handler error.
//
// # Bulk results
//
// Bulk bytes (object chunks) travel as an ordinary response whose body is
// one msgpack bin; nothing on the wire marks them. Only the Go code treats
// them specially, to avoid copies: a handler returning *Bulk has its bytes
// written to the connection straight from its memory, and Client.CallInto
// has the client's reader copy the bin from the connection straight into
// the caller's buffer, after decoding the frame header from the read buffer
// without reading the payload first. A body that is not a single bin, or
// does not fit the buffer, is skipped by its frame length and reported to
// that caller alone; a frame that ends early breaks the connection as any
// truncated frame does.
//
// # Errors seen by callers
//
// Client.Call returns *Error, unwrapped, for an error response, so callers
// branch with errors.As. Any failure to deliver the call or receive the
// answer (dial, write, connection lost, client closed) is a transport error:
// IsTransport reports true and the message names the method and peer, as in
// "rpc call Node.Register to 127.0.0.1:7370: connection closed: EOF". A
// context cancellation or deadline is wrapped the same way, matches
// context.Canceled or context.DeadlineExceeded with errors.Is, and is not a
// transport error: the call may still run on the server.
package rpc
