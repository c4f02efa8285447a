"""The Ray Core API of a driver or worker process (as Ray's
``ray/_private/worker.py``): init and shutdown, put, get, wait, cancel,
and the cluster's nodes and resources. ``nodeup/__init__.py`` re-exports
these names; programs use them as ``nodeup.get`` (``ray.get``)."""

import atexit
import os
import secrets
import stat

from . import _context
from . import _core
from . import _localnode
from . import _logstream
from . import _options
from . import _runtime_env
from . import _protocol as P
from . import _state
from . import _token
from . import _transport
from ._objectref import ObjectRef

_core_or_raise = _state.core_or_raise


def _current_address_file():
    # wire.CurrentAddressFile: $TMPDIR/nodeup-<uid>/current, as Go's os.TempDir.
    return os.path.join(os.environ.get("TMPDIR") or "/tmp", f"nodeup-{os.getuid()}", "current")


def _current_lines():
    """The current-address file's node address and Unix socket (wire.CurrentAddress,
    wire.CurrentSocket), "" for what it lacks."""
    try:
        with open(_current_address_file()) as f:
            lines = [l.strip() for l in f.read().splitlines()]
    except OSError:
        return "", ""
    lines += ["", ""]
    return lines[0], lines[1] if lines[1].startswith(_transport.UNIX_PREFIX) else ""


def _local_node_file(addr):
    # wire.LocalNodeFile: $TMPDIR/nodeup-<uid>/nodes/<addr, bytes outside [A-Za-z0-9.-] as _>.
    name = "".join(c if c.isascii() and (c.isalnum() or c in ".-") else "_" for c in addr)
    return os.path.join(os.environ.get("TMPDIR") or "/tmp", f"nodeup-{os.getuid()}", "nodes", name)


def _local_socket(addr):
    """The Unix socket of this user's node on this machine whose RPC address
    is ``addr`` (wire.LocalSocket): the current node's, else the one its
    record under ``nodes/`` names while that socket exists; "" for none."""
    if not addr:
        return ""
    cur, sock = _current_lines()
    if sock and addr == cur:
        return sock
    try:
        with open(_local_node_file(addr)) as f:
            lines = [l.strip() for l in f.read().splitlines()] + ["", ""]
    except OSError:
        return ""
    sock = lines[1]
    if lines[0] != addr or not sock.startswith(_transport.UNIX_PREFIX):
        return ""
    try:
        if not stat.S_ISSOCK(os.stat(sock[len(_transport.UNIX_PREFIX):]).st_mode):
            return ""
    except OSError:
        return ""
    return sock


def _find_address(address, token=None):
    """The node to connect to, and None when none is named or recorded. A
    node this user runs on this machine is reached over its Unix socket (a
    secure node refuses plaintext TCP; the socket trusts this user), also
    when its host:port is named, by ``address`` or $NODEUP_ADDRESS, unless
    a token is given (as Go's)."""
    if address and address != "auto":
        return (_local_socket(address) if token is None else "") or address
    env = os.environ.get("NODEUP_ADDRESS")
    if env:
        return (_local_socket(env) if token is None else "") or env
    cur, sock = _current_lines()
    if sock or cur:
        return sock or cur
    if address == "auto":
        raise ConnectionError("init(address='auto'): no nodeup node runs on this machine "
                              f"(none recorded in {_current_address_file()}); start one with `nodeup start --head`")
    return None


def is_initialized():
    """True once init has connected this process (or it is a worker), as
    Ray's ray.is_initialized."""
    return _state.get_core() is not None


def _register(addr, job, tok):
    """Job.Register at addr: (reply, _token.Remote or None, IP to serve on
    or None for the reply's BindIP). Over TCP with a token (a driver on
    another machine), TLS pinned to the token's cluster CA and the token
    presented; else plainly (the node's Unix socket, or an --insecure
    node). Raises ConnectionError in one line naming the node and, for a
    refusal, the token or what to pass."""
    req = {"JobID": job, "BinaryHash": "", "BinaryPath": "", "DriverPID": os.getpid(), "Language": P.LANGUAGE}
    tcp = not addr.startswith(_transport.UNIX_PREFIX)
    try:
        if tcp and tok is not None:
            return _token.register(addr, tok, req)
        conn = P.Conn(addr)
        try:
            reg = conn.call("Job.Register", req, timeout=30)
            return reg, None, conn.sock.getsockname()[0] if tcp else None
        finally:
            conn.close()
    except P.RpcError as e:
        if e.code != P.CODE_PERMISSION_DENIED:
            raise ConnectionError(f"nodeup.init: register a job at {addr}: {e}") from None
        if tok is not None:
            raise ConnectionError(f"nodeup.init: node {addr} refused token {tok.id}: {e.message}") from None
        raise ConnectionError(f"nodeup.init: node {addr} refused this driver (anonymous: a secure node takes "
                              f"drivers over TCP only with a token): pass init(token=...) or token_file=..., or "
                              f"set {_token.TOKEN_ENV}, with a token of role submit (nodeup token create --role "
                              f"submit); on the node's machine, as its user, connect without one") from None
    except P.TransportError as e:
        raise ConnectionError(f"nodeup.init: register a job at {addr}: {e}") from e


def init(address=None, namespace=None, ignore_reinit_error=False, runtime_env=None, log_to_driver=True, token=None,
         token_file=None, **_ignored):
    """Connects this driver to the nodeup node at ``address`` (``host:port``;
    default: $NODEUP_ADDRESS, else the node last started on this machine,
    else a node of its own started with the nodeup binary on PATH or
    $NODEUP_BIN and stopped at shutdown; ``"auto"`` never starts one),
    registers a Python job there and starts serving the objects it owns,
    as Ray's ray.init. ``namespace`` (str) is where named actors and
    placement groups are created and looked up (default "default").
    ``runtime_env`` (``{"env_vars": {...}, "working_dir": path}``) is the
    job's, inherited by every task and actor unless their
    ``.options(runtime_env=...)`` override it key by key; the working dir
    is uploaded here, and a driver run by ``nodeup job submit
    --working-dir`` has its job's by default (NODEUP_WORKING_DIR).
    ``log_to_driver`` (default True, as Ray's) prints the job's worker and
    actor output from every node on this process's stdout, each line
    prefixed ``(<actor class, or task> pid=<pid> node=<name>)`` and lines
    repeated by several processes collapsed; False leaves it in the nodes'
    log files (``nodeup logs``).
    ``token`` (``nodeup1.…``, from ``nodeup token create --role submit``;
    default $NODEUP_TOKEN) or ``token_file`` (a file whose first line is
    one, as the CLI's --token-file) lets a driver on another machine use a
    secure cluster over TCP: init checks that the node's CA is the one the
    token pins, then talks TLS 1.3 to the nodes, as ``nodeup`` with
    ``--token`` does; large objects then travel through the node when its
    store is not on this machine. Not needed over the node's Unix socket.
    Raises ConnectionError when no node is found, reachable or startable,
    or the node refuses the token (one line naming it); ValueError for a
    bad runtime_env or a malformed token; RuntimeError when called twice
    without ``ignore_reinit_error``."""
    if is_initialized():
        if ignore_reinit_error or _state.is_worker():
            return
        raise RuntimeError("nodeup.init called twice: call nodeup.shutdown() first, or pass ignore_reinit_error=True")
    _runtime_env.check(runtime_env)
    tok = _token.resolve_token(token, token_file)
    addr = _find_address(address, tok)
    local = None
    if addr is None:  # nothing runs: start a node of our own, as ray.init()
        binary = _localnode.find_binary()
        if binary is None:
            raise ConnectionError("no nodeup node to connect to, and no nodeup binary to start one: pass "
                                  "init(address='host:port'), set NODEUP_ADDRESS, start one with `nodeup start --head`, "
                                  "or put nodeup on PATH (or set NODEUP_BIN)")
        local = _localnode.LocalNode(binary)
        addr = local.address
    job = secrets.token_hex(4)
    try:
        reg, remote, bind_ip = _register(addr, job, tok)
    except ConnectionError:
        if local is not None:
            local.stop()
        raise
    node_addr, sock = addr, None
    if addr.startswith(_transport.UNIX_PREFIX) and reg.get("NodeAddr"):
        node_addr, sock = reg["NodeAddr"], addr  # the node's name stays host:port
    elif remote is not None and reg.get("NodeAddr"):
        node_addr = reg["NodeAddr"]  # its name in messages; calls go where init dialed
    # Over TCP this process serves on the IP it reached the node from (on
    # another machine, the node's own IP is not this machine's).
    core = _core.Core(node_addr, job, bind_ip or reg.get("BindIP") or "127.0.0.1", reg.get("ArenaPath", ""),
                      reg.get("NodeID", ""), reg.get("NodeName", ""), node_socket=sock,
                      job_token=reg.get("JobToken") or "", remote=remote)
    core.namespace = namespace or _options.DEFAULT_NAMESPACE
    core.local_node = local
    job_wd = os.environ.get(_runtime_env.WORKING_DIR_VAR)
    try:
        core.env_vars = _runtime_env.resolve(core, runtime_env, {_runtime_env.WORKING_DIR_VAR: job_wd} if job_wd else {})
    except Exception:
        core.close()
        if local is not None:
            local.stop()
        raise
    core.log_streamer = _logstream.Streamer(core) if log_to_driver else None
    _state.set_core(core)


def shutdown():
    """Ends the job, as Ray's ray.shutdown: the node stops its workers,
    frees its objects and kills its non-detached actors; a node init
    started is stopped. It runs at exit too; a second call does nothing."""
    core = _state.get_core()
    if core is None or _state.is_worker():
        return
    _state.set_core(None)
    if getattr(core, "log_streamer", None) is not None:
        core.log_streamer.stop()  # before Job.Finish, which stops the workers
    core.events.flush()  # this driver's task events, before its job ends
    try:
        core.pool.call(core.node_addr, "Job.Finish", {"JobID": core.job_id, "FromNode": False}, timeout=30)
    except Exception:
        pass
    core.close()
    if getattr(core, "local_node", None) is not None:
        core.local_node.stop()


atexit.register(shutdown)


def put(value):
    """Stores value (cloudpickled; over 100 KiB in the node's object store)
    and returns its ObjectRef, as Ray's ray.put. RuntimeError before init;
    errors of pickling propagate."""
    return _core_or_raise().put(value)


def get(refs, timeout=None):
    """The value of an ObjectRef, or the values of a list of them, waiting
    up to timeout seconds (None: forever); raises GetTimeoutError, or the
    task's error as a RayTaskError that is also of the original type."""
    core = _core_or_raise()
    if isinstance(refs, ObjectRef):
        return core.get([refs], timeout)[0]
    if not isinstance(refs, (list, tuple)) or not all(isinstance(r, ObjectRef) for r in refs):
        raise TypeError(f"get takes an ObjectRef or a list of them, not {type(refs).__name__}")
    return core.get(list(refs), timeout)


def wait(refs, num_returns=1, timeout=None):
    """Returns (ready, not_ready) once num_returns refs are ready or timeout
    seconds passed, as Ray's ray.wait."""
    if not isinstance(refs, (list, tuple)):
        raise TypeError("wait takes a list of ObjectRefs")
    if len(set(refs)) != len(refs):
        raise ValueError("wait: the list of ObjectRefs has duplicates")
    if not 0 <= num_returns <= len(refs):
        raise ValueError(f"wait: num_returns={num_returns} must be 0..{len(refs)}")
    return _core_or_raise().wait(list(refs), num_returns, timeout)


def cancel(ref, force=False):
    """Cancels the task or actor call that produces ``ref`` (an ObjectRef
    this process got from ``.remote()``), as Ray's ray.cancel: afterwards
    ``get(ref)`` raises TaskCancelledError. A task still queued never runs;
    a running task gets TaskCancelledError raised in its worker thread (at
    its next Python bytecode), or with ``force=True`` its worker process
    exits at once (and every task it ran with it); a cancelled task is not
    retried. An actor call still queued here never runs; one already sent
    to an async actor has its coroutine cancelled (asyncio.CancelledError
    at its await), and one sent to another actor runs on, as Ray's. A finished task, a put's ref and an unknown ref are left
    alone. Raises TypeError for a non-ObjectRef; ValueError for a ref
    another process owns, or force on an actor call; RuntimeError when the
    task's worker could not be told (its refs are cancelled all the same)."""
    if not isinstance(ref, ObjectRef):
        raise TypeError(f"cancel takes an ObjectRef, not {type(ref).__name__}")
    _core_or_raise().cancel(ref, force)


def _amounts(rs):
    return {k: (v / P.UNIT) for k, v in (rs or {}).items()}


def nodes():
    """Every node as Ray's ray.nodes() lists it: NodeID, NodeName, Alive,
    NodeManagerAddress (its RPC address), Resources, Labels."""
    return [{"NodeID": n.get("NodeID"), "NodeName": n.get("NodeName"), "Alive": bool(n.get("Alive")),
             "NodeManagerAddress": n.get("Addr"), "Resources": _amounts(n.get("Total")),
             "Labels": n.get("Labels") or {}} for n in _core_or_raise().cluster_view()]


def _sum(field):
    out = {}
    for n in _core_or_raise().cluster_view():
        if n.get("Alive"):
            for k, v in _amounts(n.get(field)).items():
                # A node may run over its CPUs for a moment (a task that
                # lent its CPU while blocked in get takes it back), which
                # its report shows as a negative amount: none is free.
                out[k] = out.get(k, 0) + max(v, 0)
    return out


def cluster_resources():
    """Total resources of the alive nodes (memory in bytes), as Ray's."""
    return _sum("Total")


def available_resources():
    """Free resources of the alive nodes, as Ray's: each node's as it last
    reported it (heartbeats, so up to a second old), never below zero."""
    return _sum("Available")




def get_runtime_context():
    """The RuntimeContext of this process, as Ray's
    ray.get_runtime_context(): get_job_id(), get_node_id(), get_task_id(),
    get_actor_id(), namespace, get_assigned_resources() and more.
    RuntimeError before init."""
    return _context.RuntimeContext(_core_or_raise())


def get_gpu_ids():
    """The GPUs the running task or actor may use, as Ray's ray.get_gpu_ids():
    the device indices (list of int) its node gave the worker process in
    CUDA_VISIBLE_DEVICES; [] in a driver and for work that asked for no GPU.
    RuntimeError before init; ValueError when CUDA_VISIBLE_DEVICES holds
    something other than indices (e.g. UUIDs)."""
    _core_or_raise()
    return _context.gpu_ids()
