"""The byte transport under nodeup's RPC: dialing and listening.

Kept to this one module so that the client can move from TCP to the node's
local Unix socket (``unix:///path``, issue 15) without touching the
protocol code: ``dial`` accepts ``host:port`` and ``unix://PATH``.
"""

import socket

UNIX_PREFIX = "unix://"


def dial(address, timeout=10.0):
    """Returns a connected stream socket to ``address`` (``host:port`` or
    ``unix://PATH``); raises OSError (e.g. ConnectionRefusedError)."""
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
