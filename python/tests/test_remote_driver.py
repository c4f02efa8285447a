"""A driver on another machine than its node (issue 25): ``init(address=
"host:port", token=...)`` reaches a secure node over TLS pinned to the
cluster CA the token carries (as ``nodeup --token`` and the Go SDK do) and
then runs tasks and actors, moves large objects through the node when it
cannot map the node's store, and prints its workers' output; a missing,
unknown or foreign token is refused in one line."""

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap

import pytest

import nodeup
from conftest import NODEUP, PYDIR
from nodeup import _token

DRIVER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    import nodeup as ray

    ray.init(address=sys.argv[2], token_file=sys.argv[3])

    @ray.remote
    def double(x):
        print("remote-driver task ran", flush=True)
        return x * 2

    @ray.remote
    def ones(n):
        return np.ones(n, dtype=np.uint8)

    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def inc(self):
            self.n += 1
            return self.n

    assert ray.get(double.remote(21)) == 42
    c = Counter.remote()
    assert ray.get([c.inc.remote() for _ in range(3)]) == [1, 2, 3]
    arr = np.arange(200_000, dtype=np.int64)  # 1.6 MB: the node's store
    ref = ray.put(arr)
    assert (ray.get(ref) == arr).all()
    assert (ray.get(double.remote(ref)) == arr * 2).all()
    big = ray.get(ones.remote(3_000_000))
    assert big.nbytes == 3_000_000 and int(big.sum()) == 3_000_000
    print("maps arena:", ray._core_or_raise().maps_arena(), flush=True)
    ray.shutdown()
    print("remote driver: ok", flush=True)
""")


def make_token(node, role="submit"):
    out = subprocess.run([NODEUP, "token", "create", "--role", role, "--ttl", "10m", "--address", node.socket],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_a_driver_elsewhere_runs_work_over_tls_with_a_token(node):
    """Run as another user (when root: nobody), with a TMPDIR of its own, the
    driver can use neither the node's Unix socket nor its store file, as on
    another machine: everything goes over TCP, TLS and the token."""
    tmp = tempfile.mkdtemp(prefix="nodeup-remote-")
    try:
        os.chmod(tmp, 0o777)
        script, tokfile = os.path.join(tmp, "driver.py"), os.path.join(tmp, "token")
        with open(script, "w") as f:
            f.write(DRIVER)
        with open(tokfile, "w") as f:
            f.write(make_token(node) + "\n")
        for p in (script, tokfile):
            os.chmod(p, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        other_user = os.getuid() == 0 and shutil.which("setpriv")
        cmd = [sys.executable, script, PYDIR, node.address, tokfile]
        if other_user:
            cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] + cmd
        env = {k: v for k, v in os.environ.items() if not k.startswith("NODEUP_")}
        env.update(TMPDIR=tmp, HOME=tmp)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "remote driver: ok" in out.stdout
        assert "remote-driver task ran" in out.stdout and "pid=" in out.stdout, out.stdout  # log_to_driver
        if other_user:
            assert "maps arena: False" in out.stdout  # objects went through the node
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_large_objects_go_through_the_node_without_its_store(ray, monkeypatch):
    """A process that cannot map the node's store file puts and reads large
    objects with Obj.Create/Obj.Write/Obj.Seal and Obj.Locate/Obj.Read."""
    import numpy as np
    core = nodeup._core_or_raise()
    monkeypatch.setattr(core, "_maps_arena", False)
    calls = []
    real = core.pool.call
    monkeypatch.setattr(core.pool, "call", lambda a, m, *r, **k: calls.append(m) or real(a, m, *r, **k))
    arr = np.arange(3 << 20, dtype=np.uint8)  # 3 MiB: one chunk, and out of band
    got = ray.get(ray.put(arr))
    assert (got == arr).all() and not got.flags.writeable
    assert {"Obj.Write", "Obj.Read"} <= set(calls), calls
    assert ray.get(ray.put(b"x" * (20 << 20))) == b"x" * (20 << 20)  # 3 chunks each way


def test_missing_unknown_and_foreign_tokens_are_refused_in_one_line(node, monkeypatch):
    monkeypatch.delenv("NODEUP_TOKEN", raising=False)
    monkeypatch.delenv("NODEUP_ADDRESS", raising=False)
    good = make_token(node)
    pin = good.rsplit(".", 1)[1]
    cases = [
        ({}, "refused this driver (anonymous"),
        ({"token": f"nodeup1.0123abcd.{'0' * 32}.{pin}"}, "refused token 0123abcd: "),
        ({"token": good[:-4] + ("0000" if not good.endswith("0000") else "1111")}, "this is not the cluster the token"),
    ]
    for kw, want in cases:
        with pytest.raises(ConnectionError) as e:
            nodeup.init(address=node.address, **kw)
        msg = str(e.value)
        assert want in msg and "\n" not in msg, msg
        assert good.split(".")[2] not in msg  # never the secret
        assert not nodeup.is_initialized()
    with pytest.raises(ValueError, match="want 32 hex characters"):
        nodeup.init(address=node.address, token="nodeup1.0123abcd.xyz." + pin)
    monkeypatch.setenv("NODEUP_TOKEN", make_token(node, role="read"))
    with pytest.raises(ConnectionError, match="needs role submit"):
        nodeup.init(address=node.address)


def test_the_ca_pin_is_the_hash_of_the_ca_public_key(node):
    """cert_hash agrees with the pin `nodeup token create` prints (Go's
    pki.CertHash: sha256 of the CA's SubjectPublicKeyInfo)."""
    import ssl
    with open(os.path.join(node.data, "tls", "ca.pem")) as f:
        der = ssl.PEM_cert_to_DER_cert(f.read())
    assert _token.cert_hash(der) == "sha256:" + make_token(node).rsplit(".", 1)[1]
