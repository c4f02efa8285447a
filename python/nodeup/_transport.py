"""The byte transport under nodeup's RPC: dialing and listening.

Kept to this one module so that the client can move from TCP to the node's
local Unix socket (``unix:///path``, issue 15) without touching the
protocol code: ``dial`` accepts ``host:port`` and ``unix://PATH``.
"""

import os
import socket
import ssl

UNIX_PREFIX = "unix://"

# NODE_SERVER_NAME is the name in every node certificate (pki.NodeServerName):
# the name a caller verifies a node's port under.
NODE_SERVER_NAME = "node.nodeup"


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
