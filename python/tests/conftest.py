"""A real nodeup node (bin/nodeup start --head) for the Python SDK's tests."""

import contextlib
import os
import random
import socket
import subprocess
import sys
import tempfile
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYDIR = os.path.join(REPO, "python")
NODEUP = os.environ.get("NODEUP_BIN", os.path.join(REPO, "bin", "nodeup"))

if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)

import nodeup  # noqa: E402
from nodeup import _localnode  # noqa: E402


_handed = set()


def _port_range():
    """Ports from 10000 to the start of the kernel's ephemeral range (or
    above its end, when that leaves more)."""
    first, last = 32768, 60999
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            first, last = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        pass
    below, above = first - 10000, 65536 - (last + 1)
    if below >= above and below > 0:
        return 10000, first
    return last + 1, 65536


def free_port():
    """A port on 127.0.0.1 free for TCP and UDP now, outside the ephemeral
    range: a port inside it can become the local port of an outgoing
    connection before the node binds it (as testutil.FreePort in Go)."""
    lo, hi = _port_range()
    for _ in range(200):
        port = random.randrange(lo, hi)
        if port in _handed:
            continue
        _handed.add(port)
        try:
            with socket.socket() as s, socket.socket(type=socket.SOCK_DGRAM) as u:
                s.bind(("127.0.0.1", port))
                u.bind(("127.0.0.1", port))
        except OSError:
            continue
        return port
    raise AssertionError(f"no port in [{lo}, {hi}) free for TCP and UDP in 200 tries")


def until(what, cond, within=30.0):
    """Polls cond until it returns a true value, at most within seconds."""
    deadline = time.monotonic() + within
    last = None
    while time.monotonic() < deadline:
        try:
            v = cond()
            if v:
                return v
        except Exception as e:  # not up yet
            last = e
        time.sleep(0.05)
    raise AssertionError(f"{what} within {within} s (last error: {last})")


class Node:
    """A node process in ``tmp``: a head, or with ``join`` (a head Node) a
    node joining it with the head's first join token."""

    def __init__(self, tmp, cpus=2, extra=(), join=None, tmpdir=None):
        if not os.access(NODEUP, os.X_OK):
            pytest.fail(f"{NODEUP} is missing: run `make build` first")
        self.tmp = tmp
        self.data = os.path.join(tmp, "data")
        self.port = free_port()
        # TMPDIR keeps the node's current-address file (wire.CurrentAddressFile)
        # inside the test's directory (or tmpdir, to share one between
        # nodes), away from any node of the machine's user.
        self.env = dict(os.environ, TMPDIR=tmpdir or tmp)
        self.env.pop("NODEUP_ADDRESS", None)
        self.log = open(os.path.join(tmp, "node.log"), "wb")
        self.proc = subprocess.Popen(
            [NODEUP, *(("join", join.address, "--token-file", os.path.join(join.data, "tls", "initial-join-token"))
                       if join else ("start", "--head")), "--bind", "127.0.0.1", "--port", str(self.port),
             "--gossip-port", str(free_port()), "--http-port", "-1", "--data-dir", self.data,
             "--num-cpus", str(cpus), "--python", sys.executable, *extra],
            env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        self.address = f"127.0.0.1:{self.port}"
        # A secure node (no --insecure) answers local clients on its Unix
        # socket; plaintext TCP may call only Cluster.Hello.
        self.socket = "unix://" + os.path.join(self.data, "nodeup.sock")
        until("node serves a cluster view holding itself alive", self._ready)

    def _ready(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"node exited with {self.proc.returncode}; see {self.log.name}")
        return _localnode.node_alive(self.socket)

    def stop(self):
        _localnode.stop_process(self.proc)
        self.log.close()


@contextlib.contextmanager
def two_nodes(prefix, far_extra):
    """A secure head and a second node joining it, started with far_extra
    (its flags), each in a temporary directory named with prefix; yields
    (head, far) and stops both."""
    with tempfile.TemporaryDirectory(prefix=prefix) as t0, tempfile.TemporaryDirectory(prefix=prefix) as t1:
        head = Node(t0)
        far = None
        try:
            far = Node(t1, extra=far_extra, join=head)
            yield head, far
        finally:
            if far is not None:
                far.stop()
            head.stop()


@pytest.fixture(scope="session")
def node():
    with tempfile.TemporaryDirectory(prefix="nodeup-pytest-") as tmp:
        n = Node(tmp)
        try:
            yield n
        finally:
            n.stop()


@pytest.fixture
def ray(node):
    nodeup.init(address=node.socket)
    try:
        yield nodeup
    finally:
        nodeup.shutdown()
