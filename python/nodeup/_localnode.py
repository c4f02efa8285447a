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
                if addr:
                    c = P.Conn(addr, timeout=1)
                    try:
                        nodes = c.call("Sched.ClusterView", {}, timeout=2).get("Nodes") or []
                    finally:
                        c.close()
                    if any(n.get("Alive") for n in nodes):
                        self.address = addr
                        return
            except (OSError, P.TransportError, P.RpcError) as e:
                last = e
            time.sleep(0.05)
        self.stop()
        raise ConnectionError(f"nodeup.init: the local node ({binary} start --head) did not come up within "
                              f"{timeout} s (exit status {self.proc.returncode}, last error {last}); see {self.log.name}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
