"""Several nodes of one user on one machine (issue 27): a driver given the
host:port of any of them, not only the node started last, reaches it over
its Unix socket, as the CLI and the Go SDK do (wire.LocalSocket)."""

import json
import os
import tempfile

import nodeup
from conftest import Node


def test_init_by_host_port_reaches_a_node_started_before_the_last(monkeypatch):
    with tempfile.TemporaryDirectory(prefix="nodeup-pytest-local-") as shared, \
            tempfile.TemporaryDirectory(prefix="nodeup-pytest-local-") as t0, \
            tempfile.TemporaryDirectory(prefix="nodeup-pytest-local-") as t1:
        head = Node(t0, tmpdir=shared)
        try:
            later = Node(t1, join=head, tmpdir=shared)
            try:
                monkeypatch.setenv("TMPDIR", shared)
                monkeypatch.delenv("NODEUP_ADDRESS", raising=False)
                monkeypatch.delenv("NODEUP_TOKEN", raising=False)
                for nd in (head, later):
                    nodeup.init(address=nd.address)
                    try:
                        @nodeup.remote
                        def node_id():
                            return nodeup.get_runtime_context().get_node_id()

                        assert nodeup.get(node_id.remote(), timeout=60)
                        assert nodeup.get_runtime_context().get_node_id() == _node_id(nd)
                    finally:
                        nodeup.shutdown()
                # A record of an address whose socket is gone is not taken.
                assert nodeup._api._local_socket("127.0.0.1:1") == ""
            finally:
                later.stop()
        finally:
            head.stop()
        assert not os.listdir(os.path.join(shared, f"nodeup-{os.getuid()}", "nodes")), "stopped nodes leave their records"


def _node_id(nd):
    with open(os.path.join(nd.data, "node.json")) as f:
        return json.load(f)["node_id"]
