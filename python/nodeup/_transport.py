"""The byte transport under nodeup's RPC: dialing and listening.

Kept to this one module so that the client can move from TCP to the node's
local Unix socket (``unix:///path``, issue 15) without touching the
protocol code: ``dial`` accepts ``host:port`` and ``unix://PATH``.
"""

import os
import select
import shutil
import socket
import ssl
import tempfile
import threading
import time

UNIX_PREFIX = "unix://"

# NODE_SERVER_NAME is the name in every node certificate (pki.NodeServerName):
# the name a caller verifies a node's port under.
NODE_SERVER_NAME = "node.nodeup"

# WORKER_SERVER_NAME is the name in every core worker certificate
# (pki.WorkerServerName): the name a core worker verifies another's port
# under. It differs from NODE_SERVER_NAME, so a worker certificate never
# passes for a node's.
WORKER_SERVER_NAME = "worker.nodeup"

# TLS_HANDSHAKE is the first byte of a TLS ClientHello (a handshake record);
# a port serving both TLS and plain RPC tells them apart by it, as Go's
# worker.sniffListener.
TLS_HANDSHAKE = 0x16


class Deadline(TimeoutError):
    """A read did not complete by its deadline (slowloris guard)."""


def worker_tls_contexts(cert_pem, key_pem, ca_pem):
    """The (server, client) ssl.SSLContexts of a core worker from its
    Worker.Certificate reply (PEM bytes), as Go's pki.WorkerServerConfig and
    WorkerTLS.ClientConfig: TLS 1.3 both; the server presents the
    certificate and asks callers for none (the job token authenticates
    them, inside TLS); the client verifies the callee against the CA under
    WORKER_SERVER_NAME and presents no certificate. ssl loads keys only
    from files, so the PEMs are written to a private (0700) temporary
    directory just long enough to load them. Raises ssl.SSLError or
    OSError for PEMs that do not load."""
    d = tempfile.mkdtemp(prefix="nodeup-wtls-")  # mode 0700
    try:
        paths = {}
        for name, data in (("cert.pem", cert_pem), ("key.pem", key_pem), ("ca.pem", ca_pem)):
            path = os.path.join(d, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            paths[name] = path
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.minimum_version = ssl.TLSVersion.TLSv1_3
        server.load_cert_chain(paths["cert.pem"], paths["key.pem"])
        client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the chain and the host name
        client.minimum_version = ssl.TLSVersion.TLSv1_3
        client.load_verify_locations(paths["ca.pem"])
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return server, client


def host_of(address):
    """The host of ``host:port`` (brackets of an IPv6 literal removed);
    "" for a Unix socket address or one without a port."""
    if address.startswith(UNIX_PREFIX):
        return ""
    host, sep, _ = address.rpartition(":")
    return host.strip("[]") if sep else ""


class TLSStream:
    """A TLS connection over a connected blocking socket that one thread may
    read while others write, which an ssl.SSLSocket does not allow (OpenSSL
    objects are not thread-safe). The TLS state is an ssl.SSLObject over
    memory buffers: every use of it holds a lock for a short, non-blocking
    step, and the socket I/O happens outside that lock, so a reader waiting
    for bytes never blocks a writer. Writes are serialized among themselves
    (ciphertext leaves in the order it was made). The socket's methods the
    protocol uses: recv_into, recv, sendall, close, fileno; reads take an
    optional deadline (time.monotonic()) and raise Deadline past it."""

    RECV_CHUNK = 64 << 10  # ciphertext read per socket read: bounds what waits undecrypted
    SEND_CHUNK = 256 << 10  # plaintext encrypted per step: bounds the ciphertext held at once

    def __init__(self, sock, ctx, server_side, server_hostname=None):
        self.sock = sock
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._obj = ctx.wrap_bio(self._in, self._out, server_side=server_side, server_hostname=server_hostname)
        self._lock = threading.Lock()  # the SSLObject and both buffers
        self._send_lock = threading.Lock()  # the socket's send side, taken before _lock
        self._eof = False  # the socket read its end (set under _lock)

    def handshake(self, deadline):
        """Runs the TLS handshake by deadline; raises ssl.SSLError (e.g. a
        certificate that does not verify), Deadline, or OSError. The peer
        gets our alert when we refuse it."""
        while True:
            with self._lock:
                try:
                    self._obj.do_handshake()
                    done = True
                except ssl.SSLWantReadError:
                    if self._eof:
                        raise ConnectionResetError("the peer closed the connection during the TLS handshake")
                    done = False
                except ssl.SSLError:
                    out = self._out.read()
                    if out:
                        try:
                            self.sock.sendall(out)
                        except OSError:
                            pass
                    raise
            self._flush()
            if done:
                return
            self._fill(deadline)

    def version(self):
        """The TLS version negotiated, e.g. "TLSv1.3"."""
        with self._lock:
            return self._obj.version()

    def _flush(self):
        """Sends the ciphertext the TLS state made, in the order made."""
        with self._send_lock:
            with self._lock:
                out = self._out.read()
            if out:
                self.sock.sendall(out)

    def _fill(self, deadline):
        """Reads ciphertext from the socket into the TLS state (EOF too)."""
        if deadline is not None:
            left = deadline - time.monotonic()
            p = select.poll()
            p.register(self.sock, select.POLLIN | select.POLLHUP | select.POLLERR)
            if left <= 0 or not p.poll(max(0, int(left * 1000) + 1)):
                raise Deadline("no TLS record by the deadline")
        data = self.sock.recv(self.RECV_CHUNK)
        with self._lock:
            if data:
                self._in.write(data)
            else:
                self._in.write_eof()
                self._eof = True

    def buffered(self):
        """Whether plaintext or ciphertext waits here (read it before
        polling the socket)."""
        with self._lock:
            return self._obj.pending() > 0 or self._in.pending > 0

    def recv_into(self, view, n, deadline=None):
        """Reads 1..n plaintext bytes into view, 0 at the end of the
        connection; waits for them until deadline (None: for ever)."""
        if n <= 0:
            return 0
        while True:
            with self._lock:
                try:
                    k = self._obj.read(n, view)
                except ssl.SSLWantReadError:
                    if self._eof:  # the peer left mid-record or without close_notify
                        return 0
                    k = None
                except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    return 0
                more = self._out.pending > 0  # e.g. an answer to a key update
            if more:
                self._flush()
            if k is not None:
                return k  # 0: the end (close_notify, or EOF as ssl's suppress_ragged_eofs)
            self._fill(deadline)

    def recv(self, n, deadline=None):
        buf = bytearray(n)
        k = self.recv_into(memoryview(buf), n, deadline)
        return bytes(buf[:k])

    def sendall(self, data):
        view = memoryview(data).cast("B")
        with self._send_lock:
            for off in range(0, len(view), self.SEND_CHUNK):
                chunk = view[off:off + self.SEND_CHUNK]
                with self._lock:
                    done = 0
                    while done < len(chunk):
                        done += self._obj.write(chunk[done:])
                    out = self._out.read()
                self.sock.sendall(out)

    def fileno(self):
        return self.sock.fileno()

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked reading
        except OSError:
            pass
        self.sock.close()


def node_tls_context(socket_address):
    """The TLS context for dialing other nodes' ports as the node whose Unix
    socket is ``socket_address`` (``unix://<data-dir>/nodeup.sock``), as Go's
    worker.nodeCredential: TLS 1.3, presenting that node's certificate from
    ``<data-dir>/tls/{node.pem,node-key.pem}`` and verifying the peer against
    ``ca.pem`` under NODE_SERVER_NAME. None when there is no such socket, or
    the files are missing or unreadable (an --insecure node, or a process of
    another user): other nodes are then dialed plainly. Read at each call, as
    the node renews its certificate."""
    if not socket_address or not socket_address.startswith(UNIX_PREFIX):
        return None
    d = os.path.join(os.path.dirname(socket_address[len(UNIX_PREFIX):]), "tls")
    try:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.load_cert_chain(os.path.join(d, "node.pem"), os.path.join(d, "node-key.pem"))
        ctx.load_verify_locations(os.path.join(d, "ca.pem"))
    except (OSError, ssl.SSLError):
        return None
    return ctx


def dial(address, timeout=10.0, tls=None, server_hostname=NODE_SERVER_NAME):
    """Returns a connected stream socket to ``address`` (``host:port`` or
    ``unix://PATH``), over TLS with the ssl.SSLContext ``tls`` (verifying
    ``server_hostname``) when one is given; raises OSError (e.g.
    ConnectionRefusedError, ssl.SSLError)."""
    if address.startswith(UNIX_PREFIX):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(address[len(UNIX_PREFIX):])
    else:
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"node address {address!r}: want host:port or unix://PATH")
        s = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            try:
                s = tls.wrap_socket(s, server_hostname=server_hostname)
            except BaseException:
                s.close()
                raise
    s.settimeout(None)
    return s


def listen(bind_ip):
    """Returns a listening TCP socket on ``bind_ip`` and a free port, and its
    ``host:port`` address as peers dial it."""
    family = socket.AF_INET6 if ":" in bind_ip else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.bind((bind_ip, 0))
    s.listen(128)
    host, port = s.getsockname()[:2]
    addr = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
    return s, addr
