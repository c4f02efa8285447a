"""nodeup's wire protocol (docs/protocol.md; sources of truth: rpc/, wire/).

Frames: a 4-byte big-endian length, then a msgpack header array
``[seq, kind, method, error, code]`` and a msgpack body. A connection starts
with the preamble byte 0x01 and the hello ``NU`` + uint16 version.
"""

import struct
import threading

import msgpack

from . import _transport

PROTOCOL_VERSION = 3
PREAMBLE_RPC = b"\x01"
HELLO = b"NU" + struct.pack(">H", PROTOCOL_VERSION)
# MAX_TOKEN_SIZE bounds a token a client presents in its hello (rpc.MaxTokenSize).
MAX_TOKEN_SIZE = 1024
MAX_FRAME = 64 << 20
MAX_PENDING = 4096  # requests running per served connection (rpc.Limits.MaxPending); more: "overloaded"
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
    """The call was not delivered or its answer not received: the peer is gone."""


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


def _check_hello(peer_hello, peer):
    if peer_hello[:2] != b"NU":
        raise TransportError(f"peer {peer} sent no protocol hello")
    (v,) = struct.unpack(">H", peer_hello[2:4])
    if v != PROTOCOL_VERSION:
        raise TransportError(
            f"peer {peer} speaks nodeup protocol version {v}, this process speaks version "
            f"{PROTOCOL_VERSION}: run the same nodeup version on both sides")


class _Waiter:
    __slots__ = ("event", "result", "error")

    def __init__(self):
        self.event = threading.Event()
        self.result = None
        self.error = None


class Conn:
    """One client connection, multiplexing concurrent calls by sequence number."""

    def __init__(self, address, timeout=10.0):
        self.address = address
        try:
            self.sock = _transport.dial(address, timeout)
            self.sock.sendall(PREAMBLE_RPC + HELLO)
            _check_hello(_recv_exact(self.sock, 4), address)
        except (OSError, EOFError) as e:
            raise TransportError(f"dial {address}: {e}") from e
        self.lock = threading.Lock()
        self.pending = {}
        self.seq = 0
        self.closed = None
        t = threading.Thread(target=self._read_loop, name=f"nodeup-conn-{address}", daemon=True)
        t.start()

    def _read_loop(self):
        try:
            while True:
                seq, kind, _, error, code, body = _read_frame(self.sock)
                with self.lock:
                    w = self.pending.pop(seq, None)
                if w is None:
                    continue
                if kind == KIND_ERROR:
                    w.error = RpcError(code, error)
                elif kind == KIND_RESPONSE:
                    try:
                        w.result = unpack(body)
                    except Exception as e:  # malformed answer
                        w.error = TransportError(f"bad answer from {self.address}: {e}")
                else:
                    raise ValueError(f"frame kind {kind} sent to a client")
                w.event.set()
        except Exception as e:
            self._fail(e)

    def _fail(self, cause):
        with self.lock:
            if self.closed is None:
                self.closed = TransportError(f"connection to {self.address} lost: {cause}")
            pending, self.pending = self.pending, {}
        for w in pending.values():
            w.error = self.closed
            w.event.set()
        try:
            self.sock.close()
        except OSError:
            pass

    def call(self, method, req=None, timeout=None):
        """Calls method with req (a msgpack-able value) and returns the
        decoded answer; raises RpcError for an error response and
        TransportError when the connection fails or timeout (s) passes."""
        body = pack(req if req is not None else {})
        w = _Waiter()
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
        if not w.event.wait(timeout):
            with self.lock:
                self.pending.pop(seq, None)
            raise TransportError(f"{method} to {self.address}: no answer within {timeout} s")
        if w.error is not None:
            raise w.error
        return w.result

    def close(self):
        self._fail("closed")


class Pool:
    """One pooled connection per address, dialed again after it fails."""

    def __init__(self):
        self.lock = threading.Lock()
        self.conns = {}
        self.routes = {}  # address -> the address dialed for it (the node's Unix socket)

    def route(self, address, via):
        """Dials ``via`` (e.g. the node's ``unix://`` socket) for calls to
        ``address`` (its ``host:port`` name), as Go's rpc.Pool.SetRoute."""
        with self.lock:
            self.routes[address] = via

    def get(self, address):
        with self.lock:
            c = self.conns.get(address)
            if c is not None and c.closed is None:
                return c
            via = self.routes.get(address, address)
        c = Conn(via)
        with self.lock:
            old = self.conns.get(address)
            if old is not None and old.closed is None:
                c.close()
                return old
            self.conns[address] = c
        return c

    def call(self, address, method, req=None, timeout=None):
        return self.get(address).call(method, req, timeout)

    def close(self):
        with self.lock:
            conns, self.conns = list(self.conns.values()), {}
        for c in conns:
            c.close()


class Server:
    """Serves handlers {method: fn(request) -> reply} on bind_ip:0; each
    request runs on its own thread and is answered in completion order."""

    def __init__(self, bind_ip, handlers):
        self.handlers = handlers
        self.sock, self.address = _transport.listen(bind_ip)
        self.stopped = False
        threading.Thread(target=self._accept_loop, name="nodeup-server", daemon=True).start()

    def _accept_loop(self):
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), name="nodeup-serve", daemon=True).start()

    def _serve(self, c):
        wlock = threading.Lock()
        try:
            c.settimeout(30)
            if _recv_exact(c, 1) != PREAMBLE_RPC:
                return
            peer_hello = _recv_exact(c, 4)
            if peer_hello[:2] == b"NT" and peer_hello[2:] == HELLO[2:]:
                # A hello carrying a token (the node's calls present the
                # job's token): its length, then its bytes. Python workers
                # do not check it yet (docs/security.md).
                (n,) = struct.unpack(">H", _recv_exact(c, 2))
                if not 0 < n <= MAX_TOKEN_SIZE:
                    return
                _recv_exact(c, n)
                peer_hello = HELLO
            c.sendall(HELLO)
            if peer_hello != HELLO:
                return
            c.settimeout(None)
            running = [0]  # requests of this connection running now
            while True:
                seq, kind, method, _, _, body = _read_frame(c)
                if kind != KIND_REQUEST:
                    return
                with wlock:
                    over = running[0] >= MAX_PENDING
                    if over:
                        c.sendall(_frame(seq, KIND_ERROR, error=f"{MAX_PENDING} requests already run on this connection",
                                         code="overloaded"))
                        continue
                    running[0] += 1
                threading.Thread(target=self._run, args=(c, wlock, running, seq, method, body), daemon=True).start()
        except Exception:
            pass
        finally:
            try:
                c.close()
            except OSError:
                pass

    def _run(self, c, wlock, running, seq, method, body):
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
            with wlock:
                running[0] -= 1
                c.sendall(out)
        except OSError:
            pass

    def stop(self):
        self.stopped = True
        try:
            self.sock.close()
        except OSError:
            pass
