"""A node of this driver's own, started by init() when none runs, as
ray.init() starts a local Ray instance; stopped at shutdown()."""

import os
import shutil
import subprocess
import sys
import tempfile
import time

from . import _protocol as P


def find_binary():
    """The nodeup binary: $NODEUP_BIN, else `nodeup` on PATH, else None."""
    b = os.environ.get("NODEUP_BIN")
    if b:
        return b
    return shutil.which("nodeup")


def node_alive(address, timeout=2.0):
    """True when the node at ``address`` (``host:port`` or ``unix://PATH``)
    serves a cluster view holding an alive node; raises OSError,
    P.TransportError or P.RpcError while it does not answer."""
    c = P.Conn(address, timeout=min(timeout, 1.0))
    try:
        nodes = c.call("Sched.ClusterView", {}, timeout=timeout).get("Nodes") or []
    finally:
        c.close()
    return any(n.get("Alive") for n in nodes)


def stop_process(proc, grace=30.0):
    """Ends a node process: SIGTERM, then SIGKILL after ``grace`` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class LocalNode:
    """`nodeup start --head` on 127.0.0.1 with free ports and a temporary
    data dir. Its TMPDIR is that dir too, so the address it records stays
    there and never replaces the machine's current node."""

    def __init__(self, binary, timeout=30.0):
        self.dir = tempfile.mkdtemp(prefix="nodeup-local-")
        env = dict(os.environ, TMPDIR=self.dir)
        self.log = open(os.path.join(self.dir, "node.log"), "wb")
        self.proc = subprocess.Popen(
            [binary, "start", "--head", "--bind", "127.0.0.1", "--port", "0", "--gossip-port", "0",
             "--http-port", "-1", "--data-dir", os.path.join(self.dir, "data"), "--python", sys.executable],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        current = os.path.join(self.dir, f"nodeup-{os.getuid()}", "current")
        deadline = time.monotonic() + timeout
        self.address = None
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with open(current) as f:
                    # wire.CurrentAddress, then wire.CurrentSocket: the
                    # socket, as a secure node refuses plaintext TCP.
                    lines = f.read().split()
                addr = lines[-1] if lines else ""
                if addr and node_alive(addr):
                    self.address = addr
                    return
            except (OSError, P.TransportError, P.RpcError) as e:
                last = e
            time.sleep(0.05)
        self.stop()
        raise ConnectionError(f"nodeup.init: the local node ({binary} start --head) did not come up within "
                              f"{timeout} s (exit status {self.proc.returncode}, last error {last}); see {self.log.name}")

    def stop(self):
        stop_process(self.proc)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
