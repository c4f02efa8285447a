"""runtime_env (env_vars, working_dir) through init and .options, against a
real node: the working dir is uploaded once, every worker process starts
in it unpacked on its node, and it goes when the job ends."""

import os

import pytest

import nodeup
from conftest import until


def _write_dir(tmp_path, name, body):
    d = tmp_path / name
    (d / "data").mkdir(parents=True)
    (d / "data" / "in.txt").write_text(body)
    return str(d)


@nodeup.remote
def read_data():
    with open(os.path.join("data", "in.txt")) as f:  # relative: the working dir's
        return f.read(), os.environ.get("RENV_A"), os.getcwd()


@nodeup.remote
def nested_read():
    return nodeup.get(read_data.remote())


@nodeup.remote
class Reader:
    def read(self):
        with open(os.path.join("data", "in.txt")) as f:
            return f.read(), os.environ.get("RENV_A")


def test_working_dir_and_env_vars(node, tmp_path):
    assert not os.path.exists(os.path.join("data", "in.txt"))
    nodeup.init(address=node.socket, runtime_env={"working_dir": _write_dir(tmp_path, "job", "from init"),
                                                  "env_vars": {"RENV_A": "a"}})
    try:
        data, a, cwd = nodeup.get(read_data.remote(), timeout=60)
        assert (data, a) == ("from init", "a")
        assert cwd.startswith(os.path.join(node.data, "jobs", "wd") + os.sep)
        assert nodeup.get(nested_read.remote(), timeout=60)[:2] == ("from init", "a")
        r = Reader.remote()
        assert nodeup.get(r.read.remote(), timeout=60) == ("from init", "a")
        # Per call: its own dir, the job's env vars still inherited; and back.
        other = read_data.options(runtime_env={"working_dir": _write_dir(tmp_path, "other", "per call")})
        assert nodeup.get(other.remote(), timeout=60)[:2] == ("per call", "a")
        over = read_data.options(runtime_env={"env_vars": {"RENV_A": "b"}})
        assert nodeup.get(over.remote(), timeout=60)[:2] == ("from init", "b")
    finally:
        nodeup.shutdown()
    wd = os.path.join(node.data, "jobs", "wd")
    until("the node removes the job's working dirs", lambda: not os.path.isdir(wd) or not os.listdir(wd))


def test_bad_runtime_env(node, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ValueError, match="supported are"):
        read_data.options(runtime_env={"pip": ["x"]})
    with pytest.raises(ValueError, match="NODEUP_"):
        read_data.options(runtime_env={"env_vars": {"NODEUP_X": "1"}})
    with pytest.raises(ValueError, match="not a directory"):
        nodeup.init(address=node.socket, runtime_env={"working_dir": str(f)})
    linked = tmp_path / "linked"
    linked.mkdir()
    os.symlink("/etc/hosts", linked / "out")
    with pytest.raises(ValueError, match="symlink out -> /etc/hosts"):
        nodeup.init(address=node.socket, runtime_env={"working_dir": str(linked)})
    assert not nodeup.is_initialized()


@nodeup.remote
def interpreter():
    import sys
    return sys.executable


def test_py_executable(node, tmp_path):
    """runtime_env py_executable (as Ray's): the work's worker processes run
    that interpreter (here a symlink to this one, which sys.executable
    keeps); a path that is not an executable file on the node fails the
    work for good with RuntimeEnvSetupError naming it; a relative path is
    refused at options."""
    import sys
    link = tmp_path / "my-python"
    os.symlink(os.path.realpath(sys.executable), link)
    with pytest.raises(ValueError, match="py_executable"):
        interpreter.options(runtime_env={"py_executable": "python3"})
    nodeup.init(address=node.socket)
    try:
        assert nodeup.get(interpreter.options(runtime_env={"py_executable": str(link)}).remote(), timeout=60) == str(link)
        assert nodeup.get(interpreter.remote(), timeout=60) != str(link)
        missing = str(tmp_path / "no-such-python")
        with pytest.raises(nodeup.exceptions.RuntimeEnvSetupError, match="no-such-python"):
            nodeup.get(interpreter.options(runtime_env={"py_executable": missing}).remote(), timeout=60)
        plain = tmp_path / "not-executable"
        plain.write_text("#!/bin/sh\n")
        with pytest.raises(nodeup.exceptions.RuntimeEnvSetupError, match="not executable"):
            nodeup.get(interpreter.options(runtime_env={"py_executable": str(plain)}).remote(), timeout=60)
    finally:
        nodeup.shutdown()
