"""Runtime envs (Ray's ``runtime_env``): ``env_vars`` and ``working_dir``,
turned into the wire form every lease and actor carries, a map of
variables (LeaseRequest/ActorCreateRequest ``EnvVars``). A working dir is
packed into a tar, cut into 1 MiB chunks named by their sha256, uploaded to
this process's node (Job.Missing, Job.Upload, then the manifest as one more
chunk), and named there by its ref under NODEUP_WORKING_DIR,
``<manifest sha256>@<node host:port>`` (docs/protocol.md). Every worker
process of the task or actor starts in the dir unpacked on its node."""

import hashlib
import json
import os
import stat
import tarfile
import tempfile

WORKING_DIR_VAR = "NODEUP_WORKING_DIR"  # wire.EnvWorkingDir
RUNTIME_ENV_VAR = "NODEUP_RUNTIME_ENV"  # wire.EnvRuntimeEnv: a worker's runtime env vars, as JSON
CHUNK = 1 << 20  # wire.MaxJobChunkBytes
_RESERVED = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
PY_EXECUTABLE_VAR = "NODEUP_PY_EXECUTABLE"  # wire.EnvPyExecutable
SUPPORTED = {"env_vars", "working_dir", "py_executable"}


def check(runtime_env):
    """Validates a runtime_env dict without uploading anything; raises
    ValueError naming the bad key or variable and what is accepted."""
    if runtime_env is None:
        return
    if not isinstance(runtime_env, dict):
        raise ValueError(f"runtime_env={runtime_env!r}: want a dict")
    bad = set(runtime_env) - SUPPORTED
    if bad:
        raise ValueError(f"runtime_env keys {sorted(bad)}: supported are {sorted(SUPPORTED)}")
    env = runtime_env.get("env_vars") or {}
    if not isinstance(env, dict):
        raise ValueError(f"runtime_env env_vars={env!r}: want a dict of str to str")
    for k, v in env.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ValueError(f"runtime_env env_vars {k!r}={v!r}: want str keys and values")
        if not k or "=" in k or "\0" in k or "\0" in v:
            raise ValueError(f"env var {k!r}: want a non-empty key without '=' or NUL, a value without NUL")
        if k.startswith("NODEUP_") or k in _RESERVED:
            raise ValueError(f"env var {k!r}: NODEUP_* and the GPU visibility variables are set by nodeup")
    wd = runtime_env.get("working_dir")
    if wd is not None and not isinstance(wd, (str, os.PathLike)):
        raise ValueError(f"runtime_env working_dir={wd!r}: want a local directory path")
    exe = runtime_env.get("py_executable")
    if exe is not None and (not isinstance(exe, str) or not os.path.isabs(exe) or os.path.normpath(exe) != exe
                            or "\0" in exe or len(exe) > 4096):
        raise ValueError(f"runtime_env py_executable={exe!r}: want a clean absolute path of the interpreter "
                         "on the nodes (checked there when a worker starts)")


def inherited():
    """The runtime env vars this process runs with: a worker's from
    NODEUP_RUNTIME_ENV, a driver's none (a submitted job's working dir is
    added by init)."""
    s = os.environ.get(RUNTIME_ENV_VAR)
    if not s:
        return {}
    env = json.loads(s)
    if not isinstance(env, dict):
        raise ValueError(f"{RUNTIME_ENV_VAR}: want a JSON object of strings")
    return env


def resolve(core, runtime_env, base):
    """The env vars of work with ``runtime_env`` whose parent's are
    ``base``: base updated with its env_vars and its working dir's ref
    (uploaded through ``core``'s node once per dir and driver), as Ray's
    dict update. ``base`` is returned as it is without a runtime_env."""
    if not runtime_env:
        return base
    check(runtime_env)
    out = dict(base)
    out.update(runtime_env.get("env_vars") or {})
    wd = runtime_env.get("working_dir")
    if wd is not None:
        out[WORKING_DIR_VAR] = upload_cached(core, os.path.abspath(os.fspath(wd)))
    if runtime_env.get("py_executable"):
        out[PY_EXECUTABLE_VAR] = runtime_env["py_executable"]
    return out


def upload_cached(core, path):
    """The ref of the working dir at ``path``, uploaded through ``core``'s
    node on first use (later edits to the dir are not seen by this
    driver's later work, as Ray packs a working_dir once per job)."""
    with core.lock:
        ref = core.working_dirs.get(path)
    if ref is None:
        ref = upload(core.pool.call, core.node_addr, path)
        with core.lock:
            core.working_dirs[path] = ref
    return ref


def pack(path, out):
    """Writes ``path``'s tree to the file ``out`` as an uncompressed tar:
    relative, slash-separated names in sorted order, dirs, regular files
    and symlinks (kept as links), owners cleared, as ``nodeup job submit``
    packs (internal/wdpack). ValueError for a symlink that is absolute or
    holds "..", which the node would refuse."""
    rels = []
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            rels.append(os.path.relpath(os.path.join(root, name), path).replace(os.sep, "/"))
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tw:
        for rel in sorted(rels):
            p = os.path.join(path, rel)
            st = os.lstat(p)
            if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                continue  # sockets, devices, pipes: not part of a working dir
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(p)
                if not target or os.path.isabs(target) or ".." in target.replace(os.sep, "/").split("/"):
                    # The node would refuse it when a worker starts (it could point outside the dir).
                    raise ValueError(f"runtime_env working_dir: symlink {rel} -> {target}: a link in a working dir "
                                     "must be relative and must not hold '..'")
            info = tw.gettarinfo(p, arcname=rel + ("/" if stat.S_ISDIR(st.st_mode) else ""))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if info.isreg():
                with open(p, "rb") as f:
                    tw.addfile(info, f)
            else:
                tw.addfile(info)


def upload(call, node_addr, path):
    """Packs ``path``, uploads to ``node_addr`` the chunks it lacks and the
    manifest, and returns the working dir's ref. Raises ValueError when
    ``path`` is not a directory or packs to more than the node takes
    (naming both sizes); the node's refusals propagate."""
    if not os.path.isdir(path):
        raise ValueError(f"runtime_env working_dir {path!r}: not a directory")
    with tempfile.TemporaryFile(prefix="nodeup-wd-") as tmp:
        pack(path, tmp)
        size = tmp.tell()
        tmp.seek(0)
        chunks = []
        while True:
            b = tmp.read(CHUNK)
            if not b:
                break
            chunks.append(hashlib.sha256(b).hexdigest())
        miss = call(node_addr, "Job.Missing", {"Chunks": chunks})
        if size > miss.get("MaxBytes", 0):
            raise ValueError(f"runtime_env working_dir {path!r} packs to {size} bytes; the node takes at most "
                             f"{miss.get('MaxBytes')} (its --max-working-dir)")
        need = set(miss.get("Missing") or [])
        for i, h in enumerate(chunks):
            if h in need:
                tmp.seek(i * CHUNK)
                call(node_addr, "Job.Upload", {"Hash": h, "Data": tmp.read(CHUNK)})
                need.discard(h)
    manifest = (f"{size}\n" + "".join(h + "\n" for h in chunks)).encode()
    mhash = hashlib.sha256(manifest).hexdigest()
    call(node_addr, "Job.Upload", {"Hash": mhash, "Data": manifest})
    return f"{mhash}@{node_addr}"
