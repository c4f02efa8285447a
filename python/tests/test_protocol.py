"""The wire format as docs/protocol.md shows it, byte for byte, and a
core worker's server against hostile peers."""

import socket
import struct
import threading
import time

import pytest

from nodeup import _protocol as P


def test_frame_matches_the_documented_example():
    # docs/protocol.md: Sched.Blocked {"LeaseID": 7} as call 1 (Go writes the
    # uint64 as 0xcf + 8 bytes; msgpack-python the shortest form: both are read).
    body = bytes.fromhex("81a74c656173654944cf0000000000000007")
    frame = P._frame(1, P.KIND_REQUEST, "Sched.Blocked", body=body)
    assert frame[:4] == bytes.fromhex("00000025")
    assert frame[4:] == bytes.fromhex("950100ad53636865642e426c6f636b6564a0a0") + body
    assert P.PREAMBLE_RPC + P.HELLO == bytes.fromhex("014e550003")


def test_error_response_decodes_to_rpc_error():
    a, b = socket.socketpair()
    try:
        a.sendall(bytes.fromhex("00000011950102a0a26e6fa96e6f745f666f756e64"))
        seq, kind, method, error, code, rest = P._read_frame(b)
        assert (seq, kind, method, error, code, rest) == (1, P.KIND_ERROR, "", "no", "not_found", b"")
    finally:
        a.close()
        b.close()


def _serve(handlers):
    return P.Server("127.0.0.1", handlers)


def test_server_answers_calls_and_refuses_another_version():
    srv = _serve({"Echo.Back": lambda req: {"Got": req}})
    try:
        c = P.Conn(srv.address)
        assert c.call("Echo.Back", {"X": 1}) == {"Got": {"X": 1}}
        with pytest.raises(P.RpcError) as info:
            c.call("No.Such", {})
        assert info.value.code == "unknown_method"
        c.close()
        # A peer of protocol version 2 gets our hello, then the connection closes.
        s = socket.create_connection(("127.0.0.1", int(srv.address.rsplit(":", 1)[1])))
        s.sendall(b"\x01NU\x00\x02")
        assert P._recv_exact(s, 4) == P.HELLO
        s.settimeout(5)
        assert s.recv(1) == b""
        s.close()
    finally:
        srv.stop()


@pytest.mark.parametrize("junk", [
    b"\x02" + b"x" * 10,                                     # another protocol's preamble
    b"\x01NU\x00\x03" + struct.pack(">I", (64 << 20) + 1),   # a length over 64 MiB
    b"\x01NU\x00\x03" + struct.pack(">I", 3) + b"\x93\x01\x00",  # a 3-element header
    b"\x01NU\x00\x03" + struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1",  # not msgpack
])
def test_server_survives_hostile_frames(junk):
    srv = _serve({"Echo.Back": lambda req: req})
    try:
        s = socket.create_connection(("127.0.0.1", int(srv.address.rsplit(":", 1)[1])))
        s.sendall(junk)
        s.settimeout(5)
        data = b""
        while True:  # the server closes the connection (after its hello, if it got ours)
            try:
                chunk = s.recv(64)
            except ConnectionResetError:  # closed with our junk unread
                break
            if not chunk:
                break
            data += chunk
        assert data in (b"", P.HELLO)
        s.close()
        # and still serves others
        c = P.Conn(srv.address)
        assert c.call("Echo.Back", [1, 2]) == [1, 2]
        c.close()
    finally:
        srv.stop()


def test_client_fails_pending_calls_when_the_peer_goes_away():
    srv = _serve({"Slow.Call": lambda req: time.sleep(30)})
    c = P.Conn(srv.address)
    try:
        errs = []
        t = threading.Thread(target=lambda: errs.append(pytest.raises(P.TransportError, c.call, "Slow.Call", {})))
        t.start()
        # Sent or not yet, the call fails with a transport error.
        c.sock.shutdown(socket.SHUT_RDWR)
        t.join(10)
        assert not t.is_alive() and errs
    finally:
        c.close()
        srv.stop()


def test_server_answers_overloaded_past_its_running_requests(monkeypatch):
    monkeypatch.setattr(P, "MAX_PENDING", 2)
    release = threading.Event()
    started = threading.Semaphore(0)

    def block(req):
        started.release()
        release.wait(30)
        return req

    srv = _serve({"Block.Here": block})
    c = P.Conn(srv.address)
    try:
        results = []
        ts = [threading.Thread(target=lambda i=i: results.append(c.call("Block.Here", i))) for i in range(2)]
        for t in ts:
            t.start()
        for _ in ts:
            assert started.acquire(timeout=10)
        with pytest.raises(P.RpcError) as info:
            c.call("Block.Here", 3, timeout=10)
        assert info.value.code == "overloaded"
        release.set()
        for t in ts:
            t.join(10)
        assert sorted(results) == [0, 1]
    finally:
        release.set()
        c.close()
        srv.stop()


def test_call_async_answers_a_pipeline_without_a_thread_per_call():
    """call_async sends at once and hands each answer to its callback on
    the connection's one reader thread; sync calls from other threads on
    the same connection still get theirs meanwhile."""
    srv = _serve({"Echo.Back": lambda req: req})
    c = P.Conn(srv.address)
    try:
        before = threading.active_count()
        got, lock, done = {}, threading.Lock(), threading.Event()
        n = 500

        def answered(i):
            def cb(result, error):
                with lock:
                    got[i] = (result, error)
                    if len(got) == n:
                        done.set()
            return cb

        sync = []
        callers = [threading.Thread(target=lambda k=k: sync.append(c.call("Echo.Back", {"Sync": k}, timeout=30)))
                   for k in range(4)]
        for i in range(n):
            c.call_async("Echo.Back", {"I": i}, answered(i))
            if i == n // 2:
                for t in callers:
                    t.start()
        # Every answer arrives; the client added its reader and no more
        # (the sync callers' four threads end when answered).
        assert done.wait(30), f"{len(got)} of {n} answers"
        assert threading.active_count() <= before + 1 + len(callers)
        for t in callers:
            t.join(30)
        assert sorted(r["Sync"] for r in sync) == [0, 1, 2, 3]
        assert all(got[i] == ({"I": i}, None) for i in range(n))
        assert c.call("Echo.Back", [7], timeout=10) == [7]
    finally:
        c.close()
        srv.stop()


def test_call_async_fails_pending_calls_when_the_peer_goes_away():
    srv = _serve({"Slow.Call": lambda req: time.sleep(30)})
    c = P.Conn(srv.address)
    try:
        errs, done = [], threading.Event()

        def cb(result, error):
            errs.append((result, error))
            if len(errs) == 3:
                done.set()
        for _ in range(3):
            c.call_async("Slow.Call", {}, cb)
        c.sock.shutdown(socket.SHUT_RDWR)
        assert done.wait(10), errs
        assert all(r is None and isinstance(e, P.TransportError) for r, e in errs)
        with pytest.raises(P.TransportError):
            c.call_async("Slow.Call", {}, cb)
    finally:
        c.close()
        srv.stop()


@pytest.mark.parametrize("garbage", [
    struct.pack(">I", 3) + b"\x93\x01\x02",              # a 3-element header
    struct.pack(">I", (64 << 20) + 1),                   # a length over 64 MiB
    struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1",      # not msgpack
    struct.pack(">I", 6) + P.pack([1, 0, "", "", ""]),   # kind 0 (a request) for the call's sequence
])
def test_call_async_fails_its_callbacks_when_the_peer_answers_garbage(garbage):
    """A peer that answers a call_async with garbage ends the connection:
    every callback still out gets a TransportError, none hangs."""
    ln = socket.socket()
    ln.bind(("127.0.0.1", 0))
    ln.listen(1)
    release = threading.Event()

    def peer():
        c, _ = ln.accept()
        P._recv_exact(c, len(P.PREAMBLE_RPC) + len(P.hello_bytes()))
        c.sendall(P.HELLO)
        P._read_frame(c)  # the call
        c.sendall(garbage)
        release.wait(30)  # holds the connection open: only the garbage can end it
        c.close()
    threading.Thread(target=peer, daemon=True).start()
    c = P.Conn("127.0.0.1:%d" % ln.getsockname()[1])
    try:
        got, done = [], threading.Event()

        def cb(result, error):
            got.append((result, error))
            done.set()
        c.call_async("Echo.Back", {"X": 1}, cb)
        assert done.wait(10), "the callback never came"
        assert got[0][0] is None and isinstance(got[0][1], P.TransportError), got
        assert c.closed is not None
    finally:
        release.set()
        c.close()
        ln.close()
