"""A driver on another machine than its node: the token it presents and the
TLS it speaks, as the Go CLI's and SDK's (internal/pki: ParseToken,
PinnedConfig). The node is verified against the cluster CA pin the token
carries (kubeadm's discovery hash: sha256 of the CA's public key) before
anything is sent, then every connection verifies its chain to that CA."""

import hashlib
import os
import re
import socket
import ssl

from . import _protocol as P
from . import _transport

TOKEN_PREFIX = "nodeup1."
TOKEN_ENV = "NODEUP_TOKEN"  # wire.EnvToken
_HEX = re.compile(r"[0-9a-f]+")


class Token:
    """A parsed token ``nodeup1.<id>.<secret>.<ca hash>``: ``id`` (8 hex
    digits, safe to show), ``text`` (the whole token, secret) and ``pin``
    (``sha256:`` + 64 hex digits)."""

    __slots__ = ("id", "text", "pin")

    def __init__(self, id, text, pin):
        self.id, self.text, self.pin = id, text, pin

    def __repr__(self):
        return f"Token({self.id})"  # never the secret


def parse_token(s):
    """The Token in s (surrounding space ignored), as Go's pki.ParseToken;
    ValueError naming the part that is wrong, never the secret."""
    if not isinstance(s, str):
        raise ValueError(f"token: want a str (nodeup1.<id>.<secret>.<ca hash>), not {type(s).__name__}")
    s = s.strip()
    if not s.startswith(TOKEN_PREFIX):
        raise ValueError("token: want nodeup1.<id>.<secret>.<ca hash> (as printed by nodeup start --head or "
                         "nodeup token create)")
    parts = s[len(TOKEN_PREFIX):].split(".")
    if len(parts) != 3:
        raise ValueError(f"token: want 4 dot-separated parts, got {len(parts) + 1}")
    if not _is_hex(parts[0], 8):
        raise ValueError(f"token: id {parts[0]!r}: want 8 hex characters")
    if not _is_hex(parts[1], 32):
        raise ValueError(f"token {parts[0]}: secret: want 32 hex characters")
    if not _is_hex(parts[2], 64):
        raise ValueError(f"token {parts[0]}: CA hash: want 64 hex characters")
    return Token(parts[0], s, "sha256:" + parts[2])


def _is_hex(s, n):
    return len(s) == n and _HEX.fullmatch(s) is not None


def resolve_token(token=None, token_file=None):
    """The Token to present: ``token``, else the first line of
    ``token_file`` (as the CLI's --token-file), else $NODEUP_TOKEN; None
    when none is given. ValueError for both given, an empty or unreadable
    file, or a malformed token."""
    if token and token_file:
        raise ValueError("init: pass token= or token_file=, not both")
    if token_file:
        try:
            with open(token_file) as f:
                first = f.readline().strip()
        except OSError as e:
            raise ValueError(f"init(token_file={token_file!r}): {e.strerror or e}") from None
        if not first:
            raise ValueError(f"init(token_file={token_file!r}): empty (want the token printed by nodeup token create)")
        return parse_token(first)
    if token is None:
        token = os.environ.get(TOKEN_ENV) or None
    return parse_token(token) if token else None


def _der_tlv(b, i):
    """(tag, start of the value, end of the element) of the DER element at b[i]."""
    tag = b[i]
    n = b[i + 1]
    j = i + 2
    if n & 0x80:
        k = n & 0x7F
        if k == 0 or k > 4:
            raise ValueError("DER: unsupported length")
        n = int.from_bytes(b[j:j + k], "big")
        j += k
    if j + n > len(b):
        raise ValueError("DER: element past the end")
    return tag, j, j + n


def spki_of(der):
    """The DER bytes of a certificate's SubjectPublicKeyInfo (Go's
    RawSubjectPublicKeyInfo), found by walking its TBSCertificate: [0]
    version, serial, signature algorithm, issuer, validity, subject, SPKI.
    ValueError for a certificate that does not parse that far."""
    tag, start, _ = _der_tlv(der, 0)  # Certificate
    if tag != 0x30:
        raise ValueError("certificate: not a DER SEQUENCE")
    tag, i, tbs_end = _der_tlv(der, start)  # TBSCertificate
    if tag != 0x30:
        raise ValueError("certificate: TBSCertificate is not a SEQUENCE")
    if der[i] == 0xA0:  # [0] EXPLICIT version
        i = _der_tlv(der, i)[2]
    for _ in range(5):  # serial, signature, issuer, validity, subject
        i = _der_tlv(der, i)[2]
    tag, _, end = _der_tlv(der, i)
    if tag != 0x30 or end > tbs_end:
        raise ValueError("certificate: no SubjectPublicKeyInfo")
    return bytes(der[i:end])


def cert_hash(der):
    """The pin of a certificate (DER): ``sha256:`` + the hex sha256 of its
    public key, as Go's pki.CertHash."""
    return "sha256:" + hashlib.sha256(spki_of(der)).hexdigest()


def _peer_chain(sslsock):
    """The DER certificates the peer sent, its own first (Python 3.13's
    get_unverified_chain; before it, the same method of the _ssl object)."""
    get = getattr(sslsock, "get_unverified_chain", None)
    if get is not None:
        return [c if isinstance(c, bytes) else c.public_bytes(ssl._ssl.ENCODING_DER) for c in get()]
    obj = getattr(sslsock, "_sslobj", None)
    get = getattr(obj, "get_unverified_chain", None)
    if get is None:
        raise ConnectionError("this Python's ssl module cannot show a peer's certificate chain (want Python 3.10 or "
                              "later), so the cluster CA pin cannot be checked")
    return [c.public_bytes(ssl._ssl.ENCODING_DER) for c in get() or ()]


def pinned_context(address, token, timeout=10.0):
    """An ssl.SSLContext for the cluster that ``token`` pins, from one
    handshake with the node at ``address`` (host:port) that sends nothing:
    its chain must end in a CA whose public-key hash is the pin. The
    context trusts that CA alone, TLS 1.3, and verifies nodes under
    NODE_SERVER_NAME, as Go's PinnedConfig. Also returns the local IP the
    connection came from (where this driver serves: the node reached it).
    Raises ConnectionError naming the node, and for another cluster's CA
    both pins."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    probe.minimum_version = ssl.TLSVersion.TLSv1_3
    probe.check_hostname = False
    probe.verify_mode = ssl.CERT_NONE  # checked below, against the pin
    host, _, port = address.rpartition(":")
    try:
        raw = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    except (OSError, ValueError) as e:
        raise ConnectionError(f"nodeup.init: dial node {address}: {e}") from e
    try:
        local_ip = raw.getsockname()[0]
        with probe.wrap_socket(raw, server_hostname=_transport.NODE_SERVER_NAME) as s:
            chain = _peer_chain(s)
    except (OSError, ssl.SSLError) as e:
        raise ConnectionError(f"nodeup.init: TLS with node {address}: {e} (is it a secure nodeup node's RPC "
                              f"port?)") from e
    finally:
        raw.close()
    if len(chain) < 2:
        raise ConnectionError(f"nodeup.init: node {address} sent {len(chain)} certificates, want its own and the "
                              f"cluster CA's")
    try:
        got = cert_hash(chain[-1])
    except (ValueError, IndexError) as e:
        raise ConnectionError(f"nodeup.init: node {address}'s CA certificate: {e}") from e
    if got != token.pin:
        raise ConnectionError(f"nodeup.init: node {address}'s cluster CA is {got}, token {token.id} pins "
                              f"{token.pin}: this is not the cluster the token was made for")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the chain and the name
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_verify_locations(cadata=chain[-1])
    return ctx, local_ip


class Remote:
    """How a driver on another machine reaches the nodes: over TLS with
    ``ctx`` (pinned_context), presenting ``token`` (a Token) to its own
    node and its job token to the others, as Go's coreWorker.useJobToken;
    ``dialed`` is the address init dialed, kept for calls to the node's
    own name."""

    def __init__(self, token, ctx, dialed):
        self.token, self.ctx, self.dialed = token, ctx, dialed

    def use(self, pool, node_addr, job_token):
        """Makes pool (a _protocol.Pool) call node_addr, and every node it
        marks later, this way."""
        pool.mark_node(node_addr)
        if self.dialed != node_addr:
            pool.route(node_addr, self.dialed)
        user = self.token.text
        pool.set_node_tls(lambda: self.ctx, lambda a: user if a == node_addr or not job_token else job_token)


def register(address, token, request, timeout=30.0):
    """Job.Register at the node at ``address`` (host:port) over TLS pinned
    by ``token``: returns (the reply, a Remote, the local IP to serve on).
    Raises ConnectionError (pinned_context's), P.RpcError (a refusal) or
    P.TransportError."""
    ctx, local_ip = pinned_context(address, token)
    remote = Remote(token, ctx, address)
    pool = P.Pool()
    remote.use(pool, address, "")
    try:
        reg = pool.call(address, "Job.Register", request, timeout=timeout)
    finally:
        pool.close()
    return reg, remote, local_ip
