"""TLS between Python core workers (issue 15 item 4, issue 18), as Go's
worker/workertls.go: a core worker's port takes TLS 1.3 (sniffed by its
first byte) and plain RPC; core workers on another IP are dialed over TLS,
the callee verified against the cluster CA under ``worker.nodeup``; the job
token still authenticates callers inside TLS; hostile-input limits hold on
the TLS path.

The unit tests make a CA and worker certificates with the openssl command;
the cluster test runs a second secure node on 127.0.0.2 (Linux routes all
of 127/8 to loopback), so the driver's and the far worker's ports are on
different IPs."""

import os
import shutil
import socket
import ssl
import struct
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import two_nodes, until

import nodeup
from nodeup import _protocol as P
from nodeup import _state
from nodeup import _transport

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca_and_worker(d, name="ca"):
    """PEMs (cert, key, ca) of a worker certificate for worker.nodeup from a
    fresh CA, made in directory d."""
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}-key.pem", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign", cwd=d)
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}-w-key.pem", "-out", f"{name}-w.csr", "-subj", "/CN=job j1", cwd=d)
    with open(os.path.join(d, f"{name}-ext.cnf"), "w") as f:
        f.write("subjectAltName=DNS:worker.nodeup\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature\n")
    _openssl("x509", "-req", "-in", f"{name}-w.csr", "-CA", f"{name}.pem", "-CAkey", f"{name}-key.pem",
             "-CAcreateserial", "-out", f"{name}-w.pem", "-days", "1", "-extfile", f"{name}-ext.cnf", cwd=d)

    def read(n):
        with open(os.path.join(d, n), "rb") as f:
            return f.read()
    return read(f"{name}-w.pem"), read(f"{name}-w-key.pem"), read(f"{name}.pem")


@pytest.fixture(scope="module")
def creds():
    """(server, client) contexts of one CA, and those of another."""
    with tempfile.TemporaryDirectory(prefix="nodeup-wtls-test-") as d:
        ours = _transport.worker_tls_contexts(*_ca_and_worker(d, "ca"))
        theirs = _transport.worker_tls_contexts(*_ca_and_worker(d, "other"))
        yield ours, theirs


def _echo_server(server_ctx, **limits):
    handlers = {"Echo": lambda req: req, "Slow": lambda req: (time.sleep(req["s"]), req)[1]}
    return P.Server("127.0.0.1", handlers, limits=P.Limits(**limits) if limits else None, tls=server_ctx)


@needs_openssl
def test_contexts_load_and_leave_no_files(creds, monkeypatch):
    made = []
    real = tempfile.mkdtemp

    def spy(*a, **k):
        d = real(*a, **k)
        made.append((d, os.stat(d).st_mode & 0o777))
        return d
    with tempfile.TemporaryDirectory() as d:
        pems = _ca_and_worker(d)
    monkeypatch.setattr(tempfile, "mkdtemp", spy)
    _transport.worker_tls_contexts(*pems)
    assert len(made) == 1 and made[0][1] == 0o700
    assert not os.path.exists(made[0][0])
    with pytest.raises(ssl.SSLError):
        _transport.worker_tls_contexts(b"not a pem", b"x", b"y")


@needs_openssl
def test_tls_and_plain_on_one_port_with_concurrent_calls(creds):
    (server_ctx, client_ctx), _ = creds
    srv = _echo_server(server_ctx)
    try:
        c = P.Conn(srv.address, tls=client_ctx)
        assert c.sock.version() == "TLSv1.3"
        # Many threads write while the reader thread reads: one SSLObject,
        # never touched by two at once. Bodies span several TLS records.
        errors = []

        def caller(i):
            try:
                for j in range(20):
                    body = bytes([i]) * (1000 + 7919 * j)
                    assert c.call("Echo", {"b": body, "i": i}, timeout=30) == {"b": body, "i": i}
            except Exception as e:  # reported below
                errors.append(e)
        ts = [threading.Thread(target=caller, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        assert not errors, errors[:3]
        big = os.urandom(5 << 20)  # 5 MiB: chunked encryption, many records
        assert c.call("Echo", {"b": big}, timeout=60) == {"b": big}
        # Answers in completion order on a TLS connection too.
        done = []
        slow = threading.Thread(target=lambda: done.append(c.call("Slow", {"s": 0.5}, timeout=30)))
        slow.start()
        assert c.call("Echo", {"x": 1}, timeout=30) == {"x": 1}
        assert not done
        slow.join(30)
        assert done == [{"s": 0.5}]
        plain = P.Conn(srv.address)
        assert plain.call("Echo", {"p": 1}, timeout=10) == {"p": 1}
        assert (srv.tls_accepts, srv.plain_accepts) == (1, 1)
        c.close()
        plain.close()
    finally:
        srv.stop()


@needs_openssl
def test_callee_of_another_ca_fails_the_handshake(creds):
    (server_ctx, client_ctx), (other_server, other_client) = creds
    stranger = _echo_server(other_server)
    ours = _echo_server(server_ctx)
    try:
        # A port presenting a certificate of another CA is refused by our
        # client, before any byte of the hello (and the job token) leaves.
        with pytest.raises(P.TransportError) as e:
            P.Conn(stranger.address, tls=client_ctx, token="secret")
        assert "CERTIFICATE_VERIFY_FAILED" in str(e.value) and e.value.unsent
        # A client trusting another CA refuses ours the same way.
        with pytest.raises(P.TransportError):
            P.Conn(ours.address, tls=other_client)
        # A node certificate's name is not a worker's: a context checking
        # node.nodeup refuses a worker certificate.
        host, port = ours.address.rsplit(":", 1)
        raw = socket.create_connection((host, int(port)))
        with pytest.raises(ssl.SSLCertVerificationError):
            _transport.TLSStream(raw, client_ctx, False, _transport.NODE_SERVER_NAME).handshake(
                time.monotonic() + 10)
        raw.close()
    finally:
        stranger.stop()
        ours.stop()


def _closed_within(sock, seconds):
    """True when the peer closes sock within seconds."""
    sock.settimeout(seconds)
    try:
        while True:
            if not sock.recv(4096):
                return True
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True


@needs_openssl
def test_hostile_peers_on_the_tls_path(creds):
    (server_ctx, client_ctx), _ = creds
    srv = _echo_server(server_ctx, frame_timeout=0.5, idle_timeout=1.0, max_pending=2)
    host, port = srv.address.rsplit(":", 1)
    try:
        # A ClientHello's first byte, then silence: closed by the deadline.
        s = socket.create_connection((host, int(port)))
        s.sendall(b"\x16\x03\x01")
        assert _closed_within(s, 5)
        s.close()
        # A handshake record of garbage: refused at once.
        s = socket.create_connection((host, int(port)))
        s.sendall(b"\x16\x03\x01\x00\x20" + os.urandom(32))
        s.settimeout(5)
        assert s.recv(1) == b"\x15"  # a TLS alert, not the deadline's silent close
        assert _closed_within(s, 5)
        s.close()
        # After the handshake, no hello: closed by the hello deadline.
        raw = socket.create_connection((host, int(port)))
        t = _transport.TLSStream(raw, client_ctx, False, _transport.WORKER_SERVER_NAME)
        t.handshake(time.monotonic() + 5)
        assert t.recv(1, time.monotonic() + 5) == b""
        t.close()

        def tls_hello():
            raw = socket.create_connection((host, int(port)))
            t = _transport.TLSStream(raw, client_ctx, False, _transport.WORKER_SERVER_NAME)
            t.handshake(time.monotonic() + 5)
            t.sendall(P.PREAMBLE_RPC + P.HELLO)
            assert P._recv_exact(t, 4) == P.HELLO
            return t
        # A length prefix over the frame cap closes the connection unread.
        t = tls_hello()
        t.sendall(struct.pack(">I", P.MAX_FRAME + 1))
        assert t.recv(1, time.monotonic() + 5) == b""
        t.close()
        # Half a frame, then silence: closed by the frame deadline.
        t = tls_hello()
        t.sendall(struct.pack(">I", 100) + b"\x95")
        assert t.recv(1, time.monotonic() + 5) == b""
        t.close()
        # More running requests than max_pending: "overloaded".
        t = tls_hello()
        for seq in (1, 2, 3):
            t.sendall(P._frame(seq, P.KIND_REQUEST, "Slow", body=P.pack({"s": 1.0})))
        seq, kind, _, _, code, _ = P._read_frame(t)
        assert (seq, kind, code) == (3, P.KIND_ERROR, "overloaded")
        t.close()
        # The port still serves well-behaved callers.
        c = P.Conn(srv.address, tls=client_ctx)
        assert c.call("Echo", {"ok": 1}, timeout=10) == {"ok": 1}
        c.close()
    finally:
        srv.stop()


@needs_openssl
def test_pool_dials_tls_only_off_its_own_ip(creds):
    (server_ctx, client_ctx), _ = creds
    srv = _echo_server(server_ctx)
    try:
        pool = P.Pool()
        pool.set_worker_tls(client_ctx, "127.0.0.2:1")  # another IP than the server's
        assert pool.call(srv.address, "Echo", {"a": 1}) == {"a": 1}
        assert pool.get(srv.address).tls and srv.tls_accepts == 1
        pool.close()
        same = P.Pool()
        same.set_worker_tls(client_ctx, "127.0.0.1:1")  # the server's IP: the same machine
        assert same.call(srv.address, "Echo", {"a": 2}) == {"a": 2}
        assert not same.get(srv.address).tls and srv.plain_accepts == 1
        same.close()
    finally:
        srv.stop()


# ---- on a secure cluster of two nodes on two IPs


@pytest.fixture(scope="module")
def two_ips():
    with two_nodes("nodeup-pytest-tls-", ("--bind", "127.0.0.2", "--resources", "far=2")) as nodes:
        yield nodes


def test_core_workers_on_two_ips_talk_tls(two_ips):
    head, _ = two_ips

    def _counters():  # defined here: pickled by value into the far worker
        from nodeup import _state
        core = _state.get_core()
        return core.address, core.server.tls_accepts, core.server.plain_accepts
    nodeup.init(address=head.socket)
    try:
        until("the second node's resources in the cluster",
              lambda: nodeup.cluster_resources().get("far") == 2, within=30)
        core = _state.get_core()
        assert core.server.tls is not None and core.pool.worker_tls is not None

        @nodeup.remote(resources={"far": 1})
        def on_far(refs):
            # The ref inside a list is fetched from its owner, the driver.
            return nodeup.get(refs[0]), _counters()

        value, (far_addr, tls_n, _) = nodeup.get(on_far.remote([nodeup.put(41)]), timeout=60)
        assert value == 41 and far_addr.startswith("127.0.0.2:")
        assert tls_n >= 1, "the driver's Task.Push reached the far worker plainly"
        # The far worker asked the driver for the object over TLS, and
        # nothing reached the driver's port plainly.
        assert core.server.tls_accepts >= 1 and core.server.plain_accepts == 0, (
            core.server.tls_accepts, core.server.plain_accepts)
        assert core.pool.get(far_addr).tls and core.pool.get(far_addr).sock.version() == "TLSv1.3"

        @nodeup.remote(resources={"far": 1})
        class Far:
            def __init__(self):
                self.n = 0

            def incr(self):
                self.n += 1
                return self.n, _counters()

        a = Far.remote()
        got = nodeup.get([a.incr.remote() for _ in range(3)], timeout=60)
        n, (actor_addr, actor_tls, _) = got[-1]
        assert n == 3 and actor_addr.startswith("127.0.0.2:") and actor_tls >= 1
        assert core.pool.get(actor_addr).tls

        # A plain-TCP stranger without the token is still refused, and so
        # is one inside TLS.
        host, port = actor_addr.rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=10)
        s.sendall(P.PREAMBLE_RPC + P.HELLO)
        assert P._recv_exact(s, 4) == P.HELLO
        s.sendall(P._frame(1, P.KIND_REQUEST, "Actor.Call", body=P.pack({})))
        _, kind, _, error, code, _ = P._read_frame(s)
        assert kind == P.KIND_ERROR and code == P.CODE_PERMISSION_DENIED, error
        s.close()
        stranger = P.Conn(actor_addr, tls=core.pool.worker_tls)  # TLS, no token
        with pytest.raises(P.RpcError) as e:
            stranger.call("Actor.Call", {}, timeout=10)
        assert e.value.code == P.CODE_PERMISSION_DENIED
        stranger.close()
    finally:
        nodeup.shutdown()
