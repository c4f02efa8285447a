"""nodeup's wire protocol (docs/protocol.md; sources of truth: rpc/, wire/).

Frames: a 4-byte big-endian length, then a msgpack header array
``[seq, kind, method, error, code]`` and a msgpack body. A connection starts
with the preamble byte 0x01 and the hello ``NU`` + uint16 version.
"""

import queue
import select
import socket
import struct
import threading
import time

import msgpack

from . import _transport

PROTOCOL_VERSION = 3
PREAMBLE_RPC = b"\x01"
HELLO = b"NU" + struct.pack(">H", PROTOCOL_VERSION)
# MAX_TOKEN_SIZE bounds a token a client presents in its hello (rpc.MaxTokenSize).
MAX_TOKEN_SIZE = 1024
MAX_FRAME = 64 << 20  # rpc.MaxFrameSize: a longer length prefix closes the connection unread
MAX_PENDING = 4096  # requests running per served connection (rpc.Limits.MaxPending); more: "overloaded"
CODE_PERMISSION_DENIED = "permission_denied"  # rpc.CodePermissionDenied
INLINE_MAX = 100 << 10  # wire.InlineMax: larger values go to the object store
UNIT = 10000  # sched.Unit: resource amounts are fixed-point 1/10000
LANGUAGE = "python"  # wire.LanguagePython

KIND_REQUEST, KIND_RESPONSE, KIND_ERROR = 0, 1, 2


class RpcError(Exception):
    """An error response: ``code`` is one of wire/codes.go's codes."""

    def __init__(self, code, message):
        super().__init__(f"{code or 'error'}: {message}")
        self.code = code
        self.message = message


class TransportError(ConnectionError):
    """The call was not delivered or its answer not received: the peer is
    gone. ``unsent`` is True when the connection could not even be opened,
    so the call surely did not run."""

    def __init__(self, message, unsent=False):
        super().__init__(message)
        self.unsent = unsent


def pack(value):
    return msgpack.packb(value, use_bin_type=True)


def unpack(body):
    if not body:
        return None
    return msgpack.unpackb(body, raw=False, strict_map_key=False)


def _recv_exact(sock, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError("connection closed")
        got += k
    return bytes(buf)


def _read_frame(sock):
    (n,) = struct.unpack(">I", _recv_exact(sock, 4))
    if n < 1 or n > MAX_FRAME:
        raise ValueError(f"frame length {n} outside 1..{MAX_FRAME}")
    payload = _recv_exact(sock, n)
    u = msgpack.Unpacker(raw=False, max_buffer_size=n)
    u.feed(payload)
    header = u.unpack()
    if not isinstance(header, list) or len(header) != 5:
        raise ValueError("frame header is not a 5-element array")
    seq, kind, method, error, code = header
    return seq, kind, method or "", error or "", code or "", payload[u.tell():]


def _frame(seq, kind, method="", error="", code="", body=b""):
    payload = pack([seq, kind, method, error, code]) + body
    if len(payload) > MAX_FRAME:
        raise ValueError(f"frame of {len(payload)} bytes exceeds {MAX_FRAME}")
    return struct.pack(">I", len(payload)) + payload


def hello_bytes(token=""):
    """A client's hello (rpc.AppendHelloToken): ``NU`` + version, or with a
    token ``NT`` + version + uint16 length + the token's bytes. Raises
    ValueError for a token over MAX_TOKEN_SIZE bytes."""
    if not token:
        return HELLO
    b = token.encode()
    if len(b) > MAX_TOKEN_SIZE:
        raise ValueError(f"token of {len(b)} bytes: the most a hello carries is {MAX_TOKEN_SIZE}")
    return b"NT" + struct.pack(">HH", PROTOCOL_VERSION, len(b)) + b


def _check_hello(peer_hello, peer):
    if peer_hello[:2] != b"NU":
        raise TransportError(f"peer {peer} sent no protocol hello")
    (v,) = struct.unpack(">H", peer_hello[2:4])
    if v != PROTOCOL_VERSION:
        raise TransportError(
            f"peer {peer} speaks nodeup protocol version {v}, this process speaks version "
            f"{PROTOCOL_VERSION}: run the same nodeup version on both sides")


class _Waiter:
    __slots__ = ("event", "result", "error", "done", "cb")

    def __init__(self, cb=None):
        # Only a blocking caller waits on event: a callback's waiter (one
        # per task push and actor call) needs none.
        self.event = threading.Event() if cb is None else None
        self.result = None
        self.error = None
        self.done = False  # result or error is in (event may also be a leader's nudge)
        self.cb = cb  # call_async's callback, called instead of setting event

    def finish(self):
        """Hands the answer (or error) in: to the callback, else to the
        caller waiting on event."""
        self.done = True
        if self.cb is None:
            self.event.set()
            return
        try:
            self.cb(self.result, self.error)
        except Exception:  # a callback's own failure must not stop the reader
            pass


class Conn:
    """One client connection, multiplexing concurrent calls by sequence
    number; ``token`` ("" for none) is presented in its hello, as Go's
    rpc.WithToken. With ``tls`` (an ssl.SSLContext) the connection is TLS,
    the callee verified as a core worker (WORKER_SERVER_NAME), as Go's
    nodeDialer for core workers; its reader thread and the callers share it
    through a _transport.TLSStream.

    A plain connection has no reader thread until the first call_async
    (then one reads for good): a waiting caller reads the
    answers itself (the leader, holding ``rlock``), handing each to its
    caller, and when its own has come it nudges another waiting caller to
    lead. Handing an answer from a reader thread to its caller costs about
    100 µs of thread wake-ups here (a Python round trip over a socketpair:
    68 µs read directly, 162 µs through a reader thread)."""

    def __init__(self, address, timeout=10.0, token="", tls=None):
        self.address = address
        self.tls = tls is not None
        hello = hello_bytes(token)
        try:
            self.sock = _transport.dial(address, timeout)
            if tls is not None:
                raw, self.sock = self.sock, _transport.TLSStream(self.sock, tls, False,
                                                                 _transport.WORKER_SERVER_NAME)
                try:
                    self.sock.handshake(time.monotonic() + timeout)
                except BaseException:
                    raw.close()
                    raise
            self.sock.sendall(PREAMBLE_RPC + hello)
            _check_hello(_recv_exact(self.sock, 4), address)
        except (OSError, EOFError) as e:
            raise TransportError(f"dial {address}: {e}", unsent=True) from e
        self.lock = threading.Lock()
        self.rlock = threading.Lock()  # held by the caller reading answers (plain connections)
        self.pending = {}
        self.seq = 0
        self.closed = None
        self.reader = self.tls  # a thread reads every answer
        if self.tls:
            t = threading.Thread(target=self._read_loop, name=f"nodeup-conn-{address}", daemon=True)
            t.start()

    def _read_loop(self):
        try:
            while True:
                self._read_one()
        except Exception as e:
            self._fail(e)

    def _plain_read_loop(self):
        # Leads for good once the caller leading now (if any) is done.
        with self.rlock:
            self._read_loop()

    def _read_one(self):
        """Reads one answer and hands it to its caller."""
        seq, kind, _, error, code, body = _read_frame(self.sock)
        if kind not in (KIND_RESPONSE, KIND_ERROR):
            # Before taking its waiter: failing the connection then fails
            # that caller too, instead of leaving it waiting forever.
            raise ValueError(f"frame kind {kind} sent to a client")
        with self.lock:
            w = self.pending.pop(seq, None)
        if w is None:
            return
        if kind == KIND_ERROR:
            w.error = RpcError(code, error)
        else:
            try:
                w.result = unpack(body)
            except Exception as e:  # malformed answer
                w.error = TransportError(f"bad answer from {self.address}: {e}")
        w.finish()

    def stale(self):
        """True when a plain connection with no call out has something to
        read: the peer closed it (an idle timeout, a restart), as a reader
        thread would have noticed; it is then failed."""
        if self.reader or self.closed is not None:
            return self.closed is not None
        # Under self.lock no call can be sent, so with none out nothing but
        # an end of file (or garbage) can be there to read.
        with self.lock:
            if self.pending:
                return False
            try:
                r, _, _ = select.select([self.sock], [], [], 0)
                cause = "the peer closed it while idle"
            except (OSError, ValueError) as e:
                r, cause = True, e
        if r:
            self._fail(cause)
        return bool(r)

    def _fail(self, cause):
        with self.lock:
            if self.closed is None:
                self.closed = TransportError(f"connection to {self.address} lost: {cause}")
            pending, self.pending = self.pending, {}
        for w in pending.values():
            w.error = self.closed
            w.finish()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes a caller reading in select
        except (OSError, AttributeError):
            pass
        try:
            self.sock.close()
        except OSError:
            pass

    def _send(self, method, req, w):
        body = pack(req if req is not None else {})
        with self.lock:
            if self.closed is not None:
                raise self.closed
            self.seq += 1
            seq = self.seq
            self.pending[seq] = w
            try:
                self.sock.sendall(_frame(seq, KIND_REQUEST, method, body=body))
            except OSError as e:
                self.pending.pop(seq, None)
                raise TransportError(f"send {method} to {self.address}: {e}") from e
        return seq

    def call_async(self, method, req, cb):
        """Sends method with req and returns at once; cb(result, error) is
        called with the decoded answer (error None) or with the RpcError or
        TransportError (result None), on the thread that reads the answer,
        so it must not block. Raises TransportError when the request cannot
        be sent. Calls sent this way need no thread each: a pipeline of
        actor calls (as Ray's core worker keeps) costs one reader."""
        with self.lock:
            start = not self.reader and self.closed is None
            self.reader = True
        if start:
            threading.Thread(target=self._plain_read_loop, name=f"nodeup-conn-{self.address}", daemon=True).start()
        self._send(method, req, _Waiter(cb))

    def call(self, method, req=None, timeout=None):
        """Calls method with req (a msgpack-able value) and returns the
        decoded answer; raises RpcError for an error response and
        TransportError when the connection fails or timeout (s) passes."""
        w = _Waiter()
        seq = self._send(method, req, w)
        if self.reader:
            if not w.event.wait(timeout):
                with self.lock:
                    self.pending.pop(seq, None)
                raise TransportError(f"{method} to {self.address}: no answer within {timeout} s")
        elif not self._await(w, None if timeout is None else time.monotonic() + timeout):
            with self.lock:
                self.pending.pop(seq, None)
            if not w.done:
                raise TransportError(f"{method} to {self.address}: no answer within {timeout} s")
        if w.error is not None:
            raise w.error
        return w.result

    def _await(self, w, deadline):
        """Waits for w's answer on a plain connection, reading answers
        itself while no other caller does; False past deadline."""
        while not w.done:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            if not self.rlock.acquire(blocking=False):
                w.event.wait(left)
                if not w.done:
                    w.event.clear()  # a nudge: the leader left; try to lead
                continue
            try:
                while not w.done:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    try:
                        r, _, _ = select.select([self.sock], [], [], left)
                    except (OSError, ValueError) as e:
                        self._fail(e)
                        break
                    if not r:
                        continue
                    try:
                        self._read_one()
                    except Exception as e:
                        self._fail(e)
            finally:
                self.rlock.release()
                self._nudge()
        return True

    def _nudge(self):
        """Wakes one caller still waiting, to read for them all."""
        with self.lock:
            w = next((x for x in self.pending.values() if not x.done and x.cb is None), None)
        if w is not None:
            w.event.set()

    def close(self):
        self._fail("closed")


class Pool:
    """One pooled connection per address, dialed again after it fails.
    ``token`` (the job token, "" for none) is presented on every TCP
    connection; a Unix-socket route presents none, as the node trusts the
    socket's local user (Go's coreWorker.useJobToken)."""

    def __init__(self, token=""):
        self.lock = threading.Lock()
        self.conns = {}
        self.routes = {}  # address -> the address dialed for it (the node's Unix socket)
        self.token = token
        # Other nodes' ports, dialed over TLS with node_tls() when it gives
        # a context (set_node_tls); idle such connections by address.
        self.nodes = set()
        self.node_tls = None
        self.node_token = None
        self.idle_tls = {}
        # Other core workers' ports off this process's IP, dialed over TLS
        # with this context when set (set_worker_tls).
        self.worker_tls = None
        self.self_host = None

    def set_worker_tls(self, ctx, self_address):
        """Dials core workers' ports over TLS with ``ctx`` (an
        ssl.SSLContext verifying WORKER_SERVER_NAME), except those on the
        IP of ``self_address`` (this process's own host:port: the same
        machine, whose bytes never leave it), Unix sockets and nodes' ports,
        as Go's nodeDialer."""
        with self.lock:
            self.worker_tls = ctx
            self.self_host = _transport.host_of(self_address)

    def _tls_for(self, address, via):
        """The TLS context to dial ``address`` (through ``via``) with, None
        for plainly; holds self.lock."""
        if self.worker_tls is None or via.startswith(_transport.UNIX_PREFIX) or address in self.nodes:
            return None
        if _transport.host_of(via) == self.self_host:
            return None
        return self.worker_tls

    def set_node_tls(self, context_fn, token_fn=None):
        """Dials nodes' ports (mark_node) over TLS with the ssl.SSLContext
        ``context_fn()`` returns (None: plainly), as Go's nodeDialer,
        presenting the token ``token_fn(address)`` gives in the hello (a
        driver on another machine, whose context pins the cluster CA); with
        no token_fn, none (the context's node certificate says who we are)."""
        self.node_tls = context_fn
        self.node_token = token_fn

    def mark_node(self, address):
        """Records ``address`` (host:port) as a node's port."""
        if address and not address.startswith(_transport.UNIX_PREFIX):
            with self.lock:
                self.nodes.add(address)

    def route(self, address, via):
        """Dials ``via`` (e.g. the node's ``unix://`` socket) for calls to
        ``address`` (its ``host:port`` name), as Go's rpc.Pool.SetRoute."""
        with self.lock:
            self.routes[address] = via

    def get(self, address):
        with self.lock:
            c = self.conns.get(address)
        if c is not None and not c.stale():
            return c
        with self.lock:
            via = self.routes.get(address, address)
            tls = self._tls_for(address, via)
        c = Conn(via, token="" if via.startswith(_transport.UNIX_PREFIX) else self.token, tls=tls)
        with self.lock:
            old = self.conns.get(address)
            if old is not None and old.closed is None:
                c.close()
                return old
            self.conns[address] = c
        return c

    def _tls_node_route(self, address):
        """The address to dial over TLS for a call to node ``address``
        (its route, if not a Unix socket), None when it is not dialed so."""
        with self.lock:
            via = self.routes.get(address, address)
            if self.node_tls is None or address not in self.nodes or via.startswith(_transport.UNIX_PREFIX):
                return None
            return via

    def call(self, address, method, req=None, timeout=None):
        via = self._tls_node_route(address)
        if via is not None:
            ctx = self.node_tls()
            if ctx is not None:
                return self._call_tls(address, via, ctx, method, req, timeout)
        return self.get(address).call(method, req, timeout)

    def call_async(self, address, method, req, cb):
        """Conn.call_async on the pooled connection to address (a core
        worker's: node addresses, which want TLS calls one at a time, are
        not accepted). Raises TransportError (unsent) when it cannot dial."""
        if self._tls_node_route(address) is not None:
            raise ValueError(f"call_async to node {address}: only core workers are called this way")
        self.get(address).call_async(method, req, cb)

    def _call_tls(self, address, via, ctx, method, req, timeout):
        """One call to a node over TLS on a connection used by one call at
        a time (an SSLSocket must not be read and written by two threads at
        once); the connection is kept for the next call when it ends well."""
        with self.lock:
            idle = self.idle_tls.get(address) or []
            sock = idle.pop() if idle else None
        fresh = sock is None
        try:
            if fresh:
                sock = _transport.dial(via, 10.0, tls=ctx)
                sock.settimeout(30.0)
                # A node's certificate says who we are; a driver elsewhere presents its token.
                token = self.node_token(address) if self.node_token is not None else ""
                sock.sendall(PREAMBLE_RPC + hello_bytes(token))
                _check_hello(_recv_exact(sock, 4), address)
            sock.settimeout(timeout if timeout is not None else 300.0)
            sock.sendall(_frame(1, KIND_REQUEST, method, body=pack(req if req is not None else {})))
            seq, kind, _, error, code, body = _read_frame(sock)
            if seq != 1 or kind not in (KIND_RESPONSE, KIND_ERROR):
                raise ValueError(f"answer with sequence {seq}, kind {kind}")
        except (OSError, EOFError, ValueError) as e:
            try:
                sock.close()
            except (OSError, AttributeError):
                pass
            raise TransportError(f"{method} to {address} over TLS: {e}", unsent=fresh and isinstance(e, OSError)) from e
        sock.settimeout(None)
        with self.lock:
            self.idle_tls.setdefault(address, []).append(sock)
        if kind == KIND_ERROR:
            raise RpcError(code, error)
        return unpack(body)

    def close(self):
        with self.lock:
            conns, self.conns = list(self.conns.values()), {}
            idle, self.idle_tls = [c for cs in self.idle_tls.values() for c in cs], {}
        for c in conns:
            c.close()
        for c in idle:
            try:
                c.close()
            except OSError:
                pass


class Limits:
    """What one peer can make a Server hold, as Go's rpc.Limits: at most
    ``max_conns`` connections; ``max_pending`` running requests and
    ``max_pending_bytes`` bytes of their bodies per connection (more:
    ``overloaded``); a connection that starts no frame for ``idle_timeout``
    seconds while none of its requests runs is closed; a frame (and the
    hello) must arrive within ``frame_timeout`` seconds of its first byte,
    plus one second per MiB of payload."""

    def __init__(self, max_conns=4096, max_pending=None, max_pending_bytes=64 << 20, idle_timeout=300.0,
                 frame_timeout=30.0):
        self.max_conns = max_conns
        self.max_pending = max_pending  # None: MAX_PENDING when the connection opens
        self.max_pending_bytes = max_pending_bytes
        self.idle_timeout = idle_timeout
        self.frame_timeout = frame_timeout


MIN_FRAME_RATE = 1 << 20  # bytes/s a large frame may take once frame_timeout is used up (rpc.minFrameRate)


class Principal:
    """Who a served connection is, decided once at its hello (rpc.Principal):
    ``name`` and ``role`` for refusals, ``grants`` a set of role names it may
    act as, ``note`` why a presented token was not accepted ("" if none)."""

    __slots__ = ("name", "role", "grants", "note")

    def __init__(self, name, role, grants=frozenset(), note=""):
        self.name, self.role, self.grants, self.note = name, role, frozenset(grants), note


class Auth:
    """How a Server authenticates connections and authorizes calls (Go's
    rpc.Auth): ``authenticate(token) -> Principal`` runs once per
    connection after the hello ("" when none was presented);
    ``require(method) -> role name or None`` is a method's requirement (None:
    refused to everyone); ``hint`` ends every refusal."""

    def __init__(self, authenticate, require, hint=""):
        self.authenticate, self.require, self.hint = authenticate, require, hint

    def denied(self, p, method):
        """The refusal message for p calling method, None when allowed; the
        shape of Go's rpc.denied."""
        need = self.require(method)
        if need is not None and need in p.grants:
            return None
        if need is None:
            msg = f"{method} has no role in the method table, so it is refused to everyone (a nodeup bug: report it)"
        else:
            msg = f"{method} needs role {need}; this connection is {p.name} with role {p.role}"
        if p.note:
            msg += f" ({p.note})"
        if self.hint:
            msg += f": {self.hint}"
        return msg


_Deadline = _transport.Deadline


def _readable(sock, seconds):
    """Whether sock has bytes (or EOF) to read within seconds. Polling
    leaves the socket blocking, so that replies written by other threads
    never meet a read timeout mid-frame. A TLSStream with bytes buffered
    is readable at once."""
    if isinstance(sock, _transport.TLSStream) and sock.buffered():
        return True
    p = select.poll()
    p.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
    return bool(p.poll(max(0, int(seconds * 1000) + 1)))


def _recv_until(sock, n, deadline):
    """Reads exactly n bytes by deadline (time.monotonic()); raises EOFError
    or _Deadline. A peer dribbling bytes cannot stretch it (slowloris)."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    tls = isinstance(sock, _transport.TLSStream)
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0 or not _readable(sock, left):
            raise _Deadline()
        # A TLS record may arrive in parts: its reads keep to the deadline.
        k = sock.recv_into(view[got:], n - got, deadline) if tls else sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError("connection closed")
        got += k
    return bytes(buf)


class _Runner:
    """Runs calls on reused threads: an idle one when there is one, else a
    new one, so a call never waits behind a busy one (a long Task.Push must
    not hold up the Task.Cancel for it). At most ``idle_max`` threads wait
    for work; the rest end. Handing a call to an idle thread costs about
    half of starting one."""

    def __init__(self, idle_max=64):
        self.lock = threading.Lock()
        self.idle = []  # SimpleQueues of the threads waiting for work
        self.idle_max = idle_max

    def run(self, fn, *args):
        with self.lock:
            q = self.idle.pop() if self.idle else None
        if q is None:
            threading.Thread(target=self._loop, args=(fn, args), daemon=True, name="nodeup-call").start()
        else:
            q.put((fn, args))

    def _loop(self, fn, args):
        q = queue.SimpleQueue()
        while True:
            try:
                fn(*args)
            except BaseException:  # a handler's failure is answered by fn itself
                pass
            fn = args = None
            with self.lock:
                if len(self.idle) >= self.idle_max:
                    return
                self.idle.append(q)
            fn, args = q.get()


class Server:
    """Serves handlers {method: fn(request) -> reply} on bind_ip:0; each
    request runs on a thread of its own (reused from a pool of idle ones)
    and is answered in completion order.
    Every byte read is treated as hostile: ``limits`` (Limits) bound
    memory and time, and ``auth`` (Auth, None: every call allowed) checks
    each call against the connection's principal, refusing it with
    ``permission_denied`` as Go's rpc.Server. With ``tls`` (a server
    ssl.SSLContext; replaceable while serving, for a renewed certificate)
    the port also takes TLS, told apart by the first byte as Go's
    worker.sniffListener; ``tls_accepts`` and ``plain_accepts`` count the
    connections accepted each way."""

    def __init__(self, bind_ip, handlers, auth=None, limits=None, tls=None):
        self.handlers = handlers
        self.auth = auth
        self.limits = limits or Limits()
        self.tls = tls
        self.tls_accepts = 0
        self.plain_accepts = 0
        self.runner = _Runner()
        self.sock, self.address = _transport.listen(bind_ip)
        self.stopped = False
        self.clock = threading.Lock()
        self.conns = 0
        threading.Thread(target=self._accept_loop, name="nodeup-server", daemon=True).start()

    def _accept_loop(self):
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.clock:
                over = self.conns >= self.limits.max_conns
                if not over:
                    self.conns += 1
            if over:  # as rpc.ErrTooManyConns: closed at once
                c.close()
                continue
            threading.Thread(target=self._serve, args=(c,), name="nodeup-serve", daemon=True).start()

    def _hello(self, c):
        """Reads preamble and hello within frame_timeout and answers ours;
        returns the token presented ("" for none), None to close."""
        deadline = time.monotonic() + self.limits.frame_timeout
        if _recv_until(c, 1, deadline) != PREAMBLE_RPC:
            return None
        peer_hello = _recv_until(c, 4, deadline)
        token = ""
        if peer_hello[:2] == b"NT" and peer_hello[2:] == HELLO[2:]:
            (n,) = struct.unpack(">H", _recv_until(c, 2, deadline))
            if not 0 < n <= MAX_TOKEN_SIZE:
                return None
            try:
                token = _recv_until(c, n, deadline).decode()
            except UnicodeDecodeError:
                token = "\ufffd"  # no token of ours: refused by its check
            peer_hello = HELLO
        c.sendall(HELLO)
        if peer_hello != HELLO:
            return None
        return token

    def _sniff(self, c):
        """c, or c in a TLSStream after a TLS handshake when its first byte
        (peeked within frame_timeout) starts one and this server has a TLS
        context; None to close (silence, EOF)."""
        tls = self.tls
        if tls is not None:
            deadline = time.monotonic() + self.limits.frame_timeout
            if not _readable(c, self.limits.frame_timeout):
                return None
            first = c.recv(1, socket.MSG_PEEK)
            if not first:
                return None
            if first[0] == _transport.TLS_HANDSHAKE:
                with self.clock:
                    self.tls_accepts += 1
                s = _transport.TLSStream(c, tls, True)
                s.handshake(deadline)  # raises: _serve closes c
                return s
        with self.clock:
            self.plain_accepts += 1
        return c

    def _next_frame(self, c, state):
        """The next frame, or None when the connection idled out: waits for
        its first byte while idle (no request running) for at most
        idle_timeout since the last activity, then reads the rest within
        frame_timeout plus a second per MiB."""
        lim = self.limits
        while True:
            with state.lock:
                busy = state.running > 0
                since = state.last
            wait = lim.idle_timeout if busy else since + lim.idle_timeout - time.monotonic()
            if wait <= 0:
                return None
            if not _readable(c, wait):
                continue  # busy then, or more activity since: look again
            break
        deadline = time.monotonic() + lim.frame_timeout
        if isinstance(c, _transport.TLSStream):
            first = _recv_until(c, 1, deadline)  # readable may be part of a record only
        else:
            first = c.recv(1)
            if not first:
                raise EOFError("connection closed")
        (n,) = struct.unpack(">I", first + _recv_until(c, 3, deadline))
        if n < 1 or n > MAX_FRAME:  # before anything is allocated for it
            raise ValueError(f"frame length {n} outside 1..{MAX_FRAME}")
        payload = _recv_until(c, n, deadline + n / MIN_FRAME_RATE)
        with state.lock:
            state.last = time.monotonic()
        u = msgpack.Unpacker(raw=False, max_buffer_size=n)
        u.feed(payload)
        header = u.unpack()
        if not isinstance(header, list) or len(header) != 5:
            raise ValueError("frame header is not a 5-element array")
        seq, kind, method = header[0], header[1], header[2] or ""
        if not isinstance(method, str):
            raise ValueError("frame method is not a string")
        return seq, kind, method, payload[u.tell():]

    def _serve(self, c):
        state = _ConnState()
        try:
            c.settimeout(None)
            s = self._sniff(c)
            if s is None:
                return self._closed(c)
            c = s
            token = self._hello(c)
            if token is None:
                return self._closed(c)
            principal = self.auth.authenticate(token) if self.auth is not None else None
            max_pending = self.limits.max_pending or MAX_PENDING
            with state.lock:
                state.last = time.monotonic()
        except Exception:
            return self._closed(c)
        self._read(c, state, principal, max_pending)

    def _read(self, c, state, principal, max_pending):
        """Reads c's requests until one is to run, then hands the reading on
        to another thread and runs that request on this one: the request
        starts without waiting for a thread to wake (the next read does).
        Closes c when its reading ends."""
        try:
            while True:
                frame = self._next_frame(c, state)
                if frame is None:
                    break  # idle: closed, as rpc's errIdle
                seq, kind, method, body = frame
                if kind != KIND_REQUEST:
                    break
                if principal is not None:
                    msg = self.auth.denied(principal, method)
                    if msg is not None:
                        with state.lock:
                            c.sendall(_frame(seq, KIND_ERROR, error=msg, code=CODE_PERMISSION_DENIED))
                        continue
                with state.lock:
                    over = state.running >= max_pending or (
                        state.running > 0 and state.bytes + len(body) > self.limits.max_pending_bytes)
                    if over:
                        c.sendall(_frame(seq, KIND_ERROR, error=f"{state.running} requests ({state.bytes} bytes) "
                                         f"already run on this connection", code="overloaded"))
                        continue
                    state.running += 1
                    state.bytes += len(body)
                self.runner.run(self._read, c, state, principal, max_pending)
                return self._run(c, state, seq, method, body)
        except Exception:
            pass
        self._closed(c)

    def _closed(self, c):
        with self.clock:
            self.conns -= 1
        try:
            c.close()
        except OSError:
            pass

    def _run(self, c, state, seq, method, body):
        h = self.handlers.get(method)
        try:
            if h is None:
                raise RpcError("unknown_method", f"no handler for {method!r}")
            reply = h(unpack(body))
            out = _frame(seq, KIND_RESPONSE, body=pack(reply if reply is not None else {}))
        except RpcError as e:
            out = _frame(seq, KIND_ERROR, error=e.message, code=e.code)
        except Exception as e:
            out = _frame(seq, KIND_ERROR, error=f"{type(e).__name__}: {e}", code="internal")
        try:
            with state.lock:
                state.running -= 1
                state.bytes -= len(body)
                state.last = time.monotonic()
                c.sendall(out)
        except OSError:
            pass

    def stop(self):
        self.stopped = True
        try:
            self.sock.close()
        except OSError:
            pass


class _ConnState:
    """A served connection's requests running now, their body bytes, and
    when it last did anything (monotonic s); lock also serializes writes."""

    __slots__ = ("lock", "running", "bytes", "last")

    def __init__(self):
        self.lock = threading.Lock()
        self.running = 0
        self.bytes = 0
        self.last = 0.0
