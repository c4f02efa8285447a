"""A core worker's port against hostile peers (issue 15): the job token
checked as Go's worker/jobauth.go does, frame sizes capped before any
allocation, and silent connections closed."""

import socket
import struct
import time
import tracemalloc

import pytest

from conftest import until
from nodeup import _jobauth
from nodeup import _protocol as P


def _raw(address, token=b""):
    """A raw connection that has sent preamble and hello (with token, raw
    bytes, when given) and read the server's hello."""
    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    hello = b"NU" + struct.pack(">H", P.PROTOCOL_VERSION)
    if token:
        hello = b"NT" + struct.pack(">HH", P.PROTOCOL_VERSION, len(token)) + token
    s.sendall(P.PREAMBLE_RPC + hello)
    assert P._recv_exact(s, 4) == P.HELLO
    return s


def _call(s, method, req, seq=1):
    s.sendall(P._frame(seq, P.KIND_REQUEST, method, body=P.pack(req)))
    got, kind, _, error, code, body = P._read_frame(s)
    assert got == seq
    return kind, error, code, P.unpack(body)


def _closed(s):
    """True once the peer closed s (reads EOF or a reset)."""
    s.settimeout(0.05)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True


def _checker(tokens):
    """An Auth.Check stand-in: tokens maps token -> AuthCheckReply; any
    other is refused as the node refuses an unknown one."""
    def check(tok):
        if tok in tokens:
            return tokens[tok]
        raise P.RpcError(P.CODE_PERMISSION_DENIED, "token 00000000: unknown token")
    return check


def _auth_server(**limits):
    auth = _jobauth.JobAuth("own-secret", _checker({
        "own-secret": {"TokenID": "aaaa", "Role": "submit", "Job": "j1"},
        "other-job": {"TokenID": "bbbb", "Role": "submit", "Job": "j2"},
        "admin": {"TokenID": "cccc", "Role": "admin", "Job": ""},
        "reader": {"TokenID": "dddd", "Role": "read", "Job": ""}}))
    return P.Server("127.0.0.1", {"Task.Push": lambda r: {"Ran": True}, "Actor.Call": lambda r: {"Called": True},
                                  "Object.Get": lambda r: {"Value": b"v"}},
                    auth=auth.auth(), limits=P.Limits(**limits))


def test_job_token_decides_what_a_connection_may_call():
    srv = _auth_server()
    try:
        # No token: every method refused, in Go's words.
        s = _raw(srv.address)
        kind, error, code, _ = _call(s, "Task.Push", {})
        assert (kind, code) == (P.KIND_ERROR, "permission_denied")
        assert error == ("Task.Push needs role this job's token; this connection is anonymous with role none "
                         "(no token presented): " + _jobauth.HINT)
        kind, error, code, _ = _call(s, "Object.Get", {}, seq=2)
        assert code == "permission_denied" and error.startswith("Object.Get needs role read; this connection is anonymous")
        s.close()
        # A garbage token: refused, naming the node's reason.
        s = _raw(srv.address, b"garbage")
        kind, error, code, _ = _call(s, "Task.Push", {})
        assert code == "permission_denied"
        assert "this connection is anonymous with role none (token 00000000: unknown token)" in error
        s.close()
        # A token that is no job's: refused.
        s = _raw(srv.address, b"reader")
        _, error, code, _ = _call(s, "Object.Get", {})
        assert code == "permission_denied" and "(token dddd (role read) is not a job token)" in error
        s.close()
        # Another job's token: actor calls and object reads, not Task.Push.
        s = _raw(srv.address, b"other-job")
        assert _call(s, "Actor.Call", {})[3] == {"Called": True}
        assert _call(s, "Object.Get", {}, seq=2)[3] == {"Value": b"v"}
        _, error, code, _ = _call(s, "Task.Push", {}, seq=3)
        assert code == "permission_denied"
        assert error.startswith("Task.Push needs role this job's token; this connection is token bbbb of job j2 "
                                "with role submit (another job): ")
        s.close()
        # Its own job's token and an admin token: everything.
        for tok in (b"own-secret", b"admin"):
            s = _raw(srv.address, tok)
            assert _call(s, "Task.Push", {})[3] == {"Ran": True}
            s.close()
        # A method without a role is refused to everyone, the own job too.
        s = _raw(srv.address, b"own-secret")
        _, error, code, _ = _call(s, "Debug.Anything", {})
        assert code == "permission_denied" and "has no role in the method table" in error
        s.close()
    finally:
        srv.stop()


def test_a_node_that_cannot_answer_leaves_the_connection_anonymous_and_uncached():
    calls = []

    def down(tok):
        calls.append(tok)
        raise P.TransportError("node gone")

    a = _jobauth.JobAuth("own", down)
    for _ in range(2):
        p = a.authenticate("own")
        assert p.grants == frozenset() and "could not be checked with this process's node" in p.note
    assert calls == ["own", "own"]  # not remembered: asked again


def test_oversized_frame_header_closes_without_allocating():
    srv = _auth_server()
    try:
        s = _raw(srv.address, b"own-secret")
        tracemalloc.start()
        try:
            s.sendall(struct.pack(">I", 0xFFFFFFF0))  # a 4 GiB frame announced
            until("the server closes the connection", lambda: _closed(s), within=10)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 8 << 20, f"{peak} bytes allocated for a refused frame"
        s.close()
        # The server still serves others.
        c = P.Conn(srv.address, token="own-secret")
        assert c.call("Task.Push", {}) == {"Ran": True}
        c.close()
    finally:
        srv.stop()


def test_silent_connection_is_closed_after_the_idle_timeout():
    srv = _auth_server(idle_timeout=0.3)
    try:
        s = _raw(srv.address, b"own-secret")
        start = time.monotonic()
        until("the silent connection is closed", lambda: _closed(s), within=10)
        assert time.monotonic() - start >= 0.25
        s.close()
        # Before the hello, a peer gets frame_timeout (here too, not forever).
        srv2 = _auth_server(frame_timeout=0.3)
        try:
            host, port = srv2.address.rsplit(":", 1)
            s = socket.create_connection((host, int(port)), timeout=10)
            s.sendall(P.PREAMBLE_RPC + b"N")  # and then nothing
            until("the half-hello connection is closed", lambda: _closed(s), within=10)
            s.close()
        finally:
            srv2.stop()
    finally:
        srv.stop()


def test_a_running_request_keeps_its_connection_open_past_the_idle_timeout():
    import threading
    release = threading.Event()
    srv = P.Server("127.0.0.1", {"Slow.Call": lambda r: release.wait(5) and {"Done": True}},
                   limits=P.Limits(idle_timeout=0.2))
    try:
        c = P.Conn(srv.address)
        out = []
        t = threading.Thread(target=lambda: out.append(c.call("Slow.Call", {}, timeout=10)))
        t.start()
        time.sleep(0.6)  # three idle timeouts pass while the call runs (the thing under test)
        release.set()
        t.join(10)
        assert out == [{"Done": True}]
        c.close()
    finally:
        release.set()
        srv.stop()


def test_python_worker_refuses_a_garbage_token(ray):
    # A real Python worker of a secure node: its address from a task it runs.
    @ray.remote
    def where():
        from nodeup import _state
        return _state.get_core().address

    addr = ray.get(where.remote(), timeout=60)
    for token in (b"nodeup1.garbage", b""):
        s = _raw(addr, token)
        _, error, code, _ = _call(s, "Task.Push", {"LeaseID": 1, "Spec": {}})
        assert code == "permission_denied", error
        assert error.startswith("Task.Push needs role this job's token; this connection is anonymous with role none")
        s.close()
    # The driver's port too: its objects are not for anonymous readers.
    from nodeup import _state
    s = _raw(_state.get_core().address, b"nodeup1.garbage")
    _, error, code, _ = _call(s, "Object.Get", {"ID": "x"})
    assert code == "permission_denied" and "Object.Get needs role read" in error
    s.close()
