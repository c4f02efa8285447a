"""Large objects through the node, for a process that cannot map its
node's arena (a driver on another machine than its node, with a token):
a put goes up in chunks (Obj.Create, Obj.Write, Obj.Seal) and a read comes
down in chunks (Obj.Locate, which makes the object local to the node and
pins it, Obj.Read, Obj.Release), each copied once over the network."""

CHUNK = 8 << 20  # bytes per Obj.Write or Obj.Read (wire.MaxWriteChunk and the node's read cap are 16 MiB)


def put(pool, node_addr, key, ser):
    """Writes ser (a _serialize.Serialized) to node_addr's store as key and
    seals it; returns its ObjectLoc. On failure the object is aborted and
    the error (P.RpcError, P.TransportError) propagates."""
    pool.call(node_addr, "Obj.Create", {"Key": key, "Size": ser.size})
    try:
        for off, part in ser.parts():
            view = memoryview(part).cast("B")
            for i in range(0, view.nbytes, CHUNK):
                pool.call(node_addr, "Obj.Write", {"Key": key, "Offset": off + i, "Data": view[i:i + CHUNK]})
        pool.call(node_addr, "Obj.Seal", {"Key": key})
    except BaseException:
        pool.call(node_addr, "Obj.Abort", {"Key": key})
        raise
    return {"Key": key, "NodeAddr": node_addr, "Size": ser.size}


def read(pool, node_addr, loc):
    """The bytes of the object at loc (an ObjectLoc) as a read-only
    memoryview, pulled to node_addr first if another node holds it; its
    pin there is released once read. Raises ValueError for a short read,
    P.RpcError (e.g. object_lost) or P.TransportError."""
    key = loc["Key"]
    where = pool.call(node_addr, "Obj.Locate", {"Loc": loc})
    size = int(where["Size"])
    buf = bytearray(size)
    try:
        off = 0
        while off < size:
            chunk = pool.call(node_addr, "Obj.Read", {"Key": key, "Offset": off, "Length": min(CHUNK, size - off)})
            if not chunk:
                raise ValueError(f"object {key}: node {node_addr} sent nothing at byte {off} of {size}")
            buf[off:off + len(chunk)] = chunk
            off += len(chunk)
    finally:
        try:
            pool.call(node_addr, "Obj.Release", {"Keys": [key]})
        except Exception:  # the job's end drops the pin anyway
            pass
    return memoryview(buf).toreadonly()
