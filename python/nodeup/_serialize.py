"""Values as the object store holds them: cloudpickle protocol 5 with large
buffers out of band, as Ray's serialization (docs/protocol.md, Python
values).

A value without out-of-band buffers is a plain pickle stream, as before.
One with them is a frame:

    b"NUP5" | kind u8 | 3 zero bytes | count u32 | pickle length u64 |
    count × buffer length u64 | pickle stream | each buffer

every section starting at a multiple of 64 bytes from the frame's start
(so numpy reads aligned data). A pickle stream starts with 0x80, so the
magic never begins one. ``kind`` 1 says the value is ``bytes(buffer 0)``
(a large top-level ``bytes``, which pickle never hands out of band).

Writing copies each buffer once, into the store; reading on the same node
gives numpy arrays (and any other protocol-5 buffer user) read-only views
of the store's pages, kept pinned and referenced until the last view goes
(see ``Core.store_read_value``).
"""

import pickle
import struct

import cloudpickle

MAGIC = b"NUP5"
# Buffers from this size (bytes) go out of band: Ray's threshold for
# zero-copy reads, and the size above which a value leaves the inline path
# anyway (wire.InlineMax).
OOB_MIN = 100 << 10
ALIGN = 64
KIND_PICKLE = 0
KIND_BYTES = 1
_HEAD = struct.Struct("<4sB3xIQ")
# A frame names at most this many buffers: a hostile or corrupt header
# cannot make a reader allocate for more.
MAX_BUFFERS = 1 << 16


def _align(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


class Serialized:
    """A value ready for the store: ``pickle`` (bytes) and ``buffers``
    (contiguous memoryviews, each at least OOB_MIN bytes) to write after it;
    ``size`` is the frame's length in bytes (the pickle's alone when there
    are no buffers)."""

    __slots__ = ("pickle", "buffers", "kind", "size", "_offsets")

    def __init__(self, data, buffers=(), kind=KIND_PICKLE):
        self.pickle = data
        self.buffers = list(buffers)
        self.kind = kind
        if not self.buffers:
            self.size, self._offsets = len(data), None
            return
        off = _align(_HEAD.size + 8 * len(self.buffers))
        offsets = [off]
        off = _align(off + len(data))
        for b in self.buffers:
            offsets.append(off)
            off = _align(off + b.nbytes)
        self._offsets = offsets
        self.size = offsets[-1] + self.buffers[-1].nbytes

    def header(self):
        """The frame's header bytes (none without buffers)."""
        if not self.buffers:
            return b""
        lens = struct.pack(f"<{len(self.buffers)}Q", *(b.nbytes for b in self.buffers))
        return _HEAD.pack(MAGIC, self.kind, len(self.buffers), len(self.pickle)) + lens

    def write_into(self, dst):
        """Writes the frame into dst (a writable buffer of at least size
        bytes, e.g. a slice of the store's mapping), copying each part once."""
        if not self.buffers:
            dst[:len(self.pickle)] = self.pickle
            return
        h = self.header()
        dst[:len(h)] = h
        parts = [self.pickle] + self.buffers
        for off, p in zip(self._offsets, parts):
            n = p.nbytes if isinstance(p, memoryview) else len(p)
            dst[off:off + n] = p

    def parts(self):
        """The frame as (offset, bytes-like) pieces, in order: what
        write_into writes, for a writer that sends it in pieces (the
        alignment gaps between them are never read)."""
        if not self.buffers:
            return [(0, self.pickle)]
        return [(0, self.header())] + list(zip(self._offsets, [self.pickle] + self.buffers))

    def to_bytes(self):
        """The whole frame as one bytes (for the inline path)."""
        if not self.buffers:
            return self.pickle
        out = bytearray(self.size)
        self.write_into(memoryview(out))
        return bytes(out)


def serialize(value):
    """Pickles value with cloudpickle protocol 5; contiguous buffers of at
    least OOB_MIN bytes (numpy arrays, bytearray, PickleBuffer) are kept
    out of band, and so is a top-level ``bytes`` of that size."""
    if type(value) is bytes and len(value) >= OOB_MIN:
        return Serialized(b"", [memoryview(value)], KIND_BYTES)
    buffers = []

    def keep(pb):
        try:
            m = pb.raw()
        except BufferError:  # not contiguous: in band
            return True
        if m.nbytes < OOB_MIN:
            return True
        buffers.append(m)
        return False

    data = cloudpickle.dumps(value, protocol=5, buffer_callback=keep)
    return Serialized(data, buffers)


def parse_header(head, size):
    """Parses a frame's header from head (its first bytes: at least the
    fixed header and the lengths) for a frame of size bytes. Returns (kind,
    (pickle offset, length), [(buffer offset, length), ...]), or None when
    head is not a frame (a plain pickle). Raises ValueError for a header
    that does not fit in size bytes."""
    if len(head) < _HEAD.size or head[:4] != MAGIC:
        return None
    magic, kind, count, plen = _HEAD.unpack_from(head)
    if kind not in (KIND_PICKLE, KIND_BYTES) or not 0 < count <= MAX_BUFFERS:
        raise ValueError(f"object frame: kind {kind}, {count} buffers: want kind 0 or 1 and 1 to {MAX_BUFFERS} buffers")
    if len(head) < _HEAD.size + 8 * count:
        raise ValueError(f"object frame: header of {count} buffers cut short at {len(head)} bytes")
    lens = struct.unpack_from(f"<{count}Q", head, _HEAD.size)
    off = _align(_HEAD.size + 8 * count)
    pk = (off, plen)
    off = _align(off + plen)
    bufs = []
    for n in lens:
        bufs.append((off, n))
        end = off + n
        off = _align(end)
    if end > size:
        raise ValueError(f"object frame of {size} bytes: its parts end at byte {end}")
    return kind, pk, bufs


def header_size(head):
    """How many leading bytes parse_header needs, given the fixed header in
    head (its first 24 bytes or more)."""
    if len(head) < _HEAD.size or head[:4] != MAGIC:
        return _HEAD.size
    count = min(_HEAD.unpack_from(head)[2], MAX_BUFFERS)
    return _HEAD.size + 8 * count


def loads(view):
    """The value of a frame or plain pickle held in view (bytes or a
    memoryview). Out-of-band buffers are slices of view: zero-copy when view
    maps the store, and read-only when view is."""
    if type(view) is bytes and not view.startswith(MAGIC):
        return pickle.loads(view)  # the common small value: no views made
    mv = memoryview(view)
    head = bytes(mv[:header_size(bytes(mv[:_HEAD.size]))])
    parsed = parse_header(head, mv.nbytes)
    if parsed is None:
        return pickle.loads(mv)
    kind, (po, pl), bufs = parsed
    views = [mv[o:o + n] for o, n in bufs]
    if kind == KIND_BYTES:
        return bytes(views[0])
    return pickle.loads(mv[po:po + pl], buffers=views)
