"""Whole-batch decoding: the records of one queue in one commit-log file → Arrow columns.

Every step works on all the records of a run at once, with numpy and Arrow kernels:

- ``locate`` reads the fixed header of every record out of the read-only mapping (one
  88-byte gather, viewed as a numpy record), works out where the variable fields sit (IPv6
  hosts shift them by 12 bytes each, V2 records have a 2-byte topic length) and checks each
  record the way the per-record decoder does (magic, lengths, topic, queue, offsets, body
  CRC). Records that fail are left to the per-record decoder, which rejects them with a reason.
- ``gather`` copies variable-length fields (bodies, properties) into one Arrow buffer with a
  single ``binary_view → binary`` cast: the views (length, prefix, offset) are built with numpy
  and point into the mapping.
- ``split_properties`` cuts ``name\\x01value\\x02...`` with numpy (separator positions,
  per-row item counts) and takes names and values out with one ``take`` each; TAGS and KEYS
  come from the dictionary of names.

Called from a Spark task's Python worker (one thread); nothing here keeps state.
"""

from __future__ import annotations

import binascii
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..store.log._record import (
    HEAD_V4_SIZE,
    KEY_SEPARATOR,
    MAGIC_V1,
    MAGIC_V2,
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    crc32,
    unpack_host,
)

MIN_RECORD = 91  # a V1 record with IPv4 hosts, empty body and properties, 1-byte topic
_HOST_V4 = 8
_HOST_V6 = 20
_V6_EXTRA = _HOST_V6 - _HOST_V4
_MAX_VIEW_SPAN = 2**31 - 1  # binary_view offsets are int32

# the fixed header of a record with IPv4 hosts (see rocketstore.store.log._record), as numpy sees it
_HEAD_FIELDS = [
    ("total", ">i4", 0),
    ("magic", ">i4", 4),
    ("crc", ">i4", 8),
    ("queue_id", ">i4", 12),
    ("flag", ">i4", 16),
    ("queue_offset", ">i8", 20),
    ("phys", ">i8", 28),
    ("sys_flag", ">i4", 36),
    ("born_ts", ">i8", 40),
    ("born_host", ">u8", 48),
    ("store_ts", ">i8", 56),
    ("store_host", ">u8", 64),
    ("reconsume", ">i4", 72),
    ("prepared", ">i8", 76),
    ("body_len", ">i4", 84),
]
HEAD = np.dtype(
    {
        "names": [name for name, _, _ in _HEAD_FIELDS],
        "formats": [fmt for _, fmt, _ in _HEAD_FIELDS],
        "offsets": [at for _, _, at in _HEAD_FIELDS],
        "itemsize": HEAD_V4_SIZE,
    }
)
_BORN_HOST = 48  # where the born host starts in every record
_SYSFLAG_V6 = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6
_TS = pa.timestamp("us", tz="UTC")


class Bytes:
    """Bytes (a commit-log file's mapping, or any buffer) as numpy (``data``), Arrow
    (``buffer``) and a memoryview, with typed views for reading fields at arbitrary positions.
    Release it before the mapping closes."""

    def __init__(self, raw: object) -> None:
        self.raw = raw
        self.data = np.frombuffer(raw, dtype=np.uint8)  # type: ignore[call-overload]
        self.buffer = pa.py_buffer(raw)
        self.memory = memoryview(raw)  # type: ignore[arg-type]
        self._views: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.data)

    def typed(self, dtype: str) -> np.ndarray:
        """A view with an item of ``dtype`` starting at every byte: ``typed(t)[at]`` reads the
        values at positions ``at`` (each must leave room for a whole item)."""
        v = self._views.get(dtype)
        if v is None:
            width = np.dtype(dtype).itemsize
            count = max(len(self.data) - width + 1, 0)
            v = np.ndarray(shape=(count,), dtype=dtype, buffer=self.data, strides=(1,))
            self._views[dtype] = v
        return v

    def read(self, at: np.ndarray, dtype: str) -> np.ndarray:
        """The big-endian integers of type ``dtype`` at positions ``at`` (native int64)."""
        got: np.ndarray = self.typed(dtype)[at]
        return got.astype(np.int64)

    def release(self) -> None:
        self._views.clear()
        self.memory.release()
        del self.data, self.buffer, self.raw


@dataclass
class Located:
    """Where the fields of a run's records are (positions relative to the file) and what their
    fixed header says. Rows are records, in unit order."""

    pos: np.ndarray
    queue_offset: np.ndarray
    phys: np.ndarray
    head: np.ndarray  # HEAD records (born/store host and later fields valid for IPv4 only)
    sys_flag: np.ndarray
    v6: bool  # some record has an IPv6 host: the fields after the born host move
    born_host_len: np.ndarray
    store_host_len: np.ndarray
    body_start: np.ndarray
    body_len: np.ndarray
    props_start: np.ndarray
    props_len: np.ndarray

    def __len__(self) -> int:
        return len(self.pos)

    def take(self, rows: np.ndarray) -> Located:
        return Located(
            self.pos[rows],
            self.queue_offset[rows],
            self.phys[rows],
            self.head[rows],
            self.sys_flag[rows],
            self.v6,
            self.born_host_len[rows],
            self.store_host_len[rows],
            self.body_start[rows],
            self.body_len[rows],
            self.props_start[rows],
            self.props_len[rows],
        )


def locate(
    f: Bytes,
    pos: np.ndarray,
    sizes: np.ndarray,
    queue_offset: np.ndarray,
    phys: np.ndarray,
    topic: bytes,
    queue_id: int,
    check_crc: bool,
) -> tuple[Located, np.ndarray]:
    """The fields of the records at ``pos`` (each ``sizes`` bytes by its unit) and which of
    them pass every check of the per-record decoder (a bool mask)."""
    fsize = len(f.data)
    ok = (pos >= 0) & (sizes >= MIN_RECORD) & (pos + sizes <= fsize)
    p = np.where(ok, pos, 0)
    if fsize < HEAD_V4_SIZE:
        ok[:] = False
        p[:] = 0
        head = np.zeros(len(pos), dtype=HEAD)
    else:
        head = f.typed(f"V{HEAD_V4_SIZE}")[p].view(HEAD)
    total = head["total"].astype(np.int64)
    magic = head["magic"]
    sys_flag = head["sys_flag"].astype(np.int64)
    v2 = magic == MAGIC_V2
    ok &= (total == sizes) & ((magic == MAGIC_V1) | v2)
    bh = np.where(sys_flag & SYSFLAG_BORNHOST_V6, _HOST_V6, _HOST_V4)
    sh = np.where(sys_flag & SYSFLAG_STOREHOST_V6, _HOST_V6, _HOST_V4)
    v6 = bool(((sys_flag & _SYSFLAG_V6) != 0)[ok].any())
    if v6:
        at_body_len = 68 + bh + sh
        ok &= at_body_len + 7 <= total  # BODYLENGTH, a 1-byte topic length, PROPERTIESLENGTH
        body_len = f.read(p + np.where(ok, at_body_len, 0), ">i4")
    else:
        at_body_len = np.full(len(p), 84, dtype=np.int64)
        body_len = head["body_len"].astype(np.int64)
    at_topic_len = at_body_len + 4 + body_len
    ok &= (body_len >= 0) & (at_topic_len + 1 <= total)
    # the topic length: 1 byte (V1) or 2 (V2), read where the record has room for it
    tl_at = p + np.where(ok, at_topic_len, 0)
    topic_len = f.data[tl_at].astype(np.int64)
    if v2[ok].any():
        room2 = ok & v2 & (at_topic_len + 2 <= total)
        tl2 = f.read(np.where(room2, tl_at, 0), ">i2")
        topic_len = np.where(v2, np.where(room2, tl2, -1), topic_len)
    at_topic = at_topic_len + np.where(v2, 2, 1)
    at_props_len = at_topic + topic_len
    ok &= (topic_len > 0) & (at_props_len + 2 <= total)
    props_len = f.read(p + np.where(ok, at_props_len, 0), ">i2")
    ok &= (props_len >= 0) & (at_props_len + 2 + props_len == total)
    ok &= topic_len == len(topic)
    if ok.any():
        want = np.frombuffer(topic, dtype=f"V{len(topic)}")[0]
        ok &= f.typed(f"V{len(topic)}")[np.where(ok, p + at_topic, 0)] == want
    ok &= head["queue_id"] == queue_id
    ok &= head["queue_offset"] == queue_offset
    ok &= head["phys"] == phys
    body_start = p + at_body_len + 4
    if check_crc and ok.any():
        starts = body_start[ok].tolist()
        ends = (body_start + body_len)[ok].tolist()
        mem = f.memory
        got_crc = np.fromiter(
            map(crc32, map(mem.__getitem__, map(slice, starts, ends))),
            dtype=np.int64,
            count=len(starts),
        )
        crc_ok = (got_crc & 0x7FFFFFFF) == head["crc"][ok]
        if not crc_ok.all():
            ok[np.flatnonzero(ok)[~crc_ok]] = False
    located = Located(
        p,
        queue_offset,
        phys,
        head,
        sys_flag,
        v6,
        bh,
        sh,
        body_start,
        body_len,
        p + at_props_len + 2,
        props_len,
    )
    return located, ok


# ---- variable-length fields -----------------------------------------------------------------


def gather(src: Bytes, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """``src[starts[i] : starts[i] + lengths[i]]`` for every i, as one binary array: a
    binary_view array pointing into ``src``, cast to binary (one copy, in Arrow). The views
    leave the 4-byte prefix of long values zero: the cast reads the buffer, and reading each
    prefix would cost a cache miss a value."""
    n = len(starts)
    if n == 0:
        return pa.array([], pa.binary())
    ends = starts + lengths
    lo = int(starts.min())
    hi = int(ends.max())
    if hi - lo > _MAX_VIEW_SPAN:
        mem = src.memory
        joined = b"".join(map(mem.__getitem__, map(slice, starts.tolist(), ends.tolist())))
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(joined)]
        ).cast(pa.binary())
    views = np.zeros((n, 4), dtype="<i4")  # length, prefix or inline bytes, buffer, offset
    views[:, 0] = lengths
    inline = lengths <= 12
    if inline.all():
        _inline(src, views, starts, lengths)
    else:  # by reference; the prefix is left zero: the array is only cast
        views[:, 3] = starts - lo
        if inline.any():
            short = np.flatnonzero(inline)
            sub = views[short]
            _inline(src, sub, starts[short], lengths[short])
            views[short] = sub
    arr = pa.Array.from_buffers(
        pa.binary_view(), n, [None, pa.py_buffer(views), src.buffer.slice(lo, hi - lo)]
    )
    return arr.cast(pa.binary())


def _inline(src: Bytes, views: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> None:
    """Fill the views of values of at most 12 bytes: the bytes in place of prefix, buffer and
    offset, zero-padded."""
    data = src.data
    room = starts + 12 <= len(data)
    raw = np.zeros((len(starts), 12), dtype=np.uint8)
    if room.all():
        raw[:] = src.typed("V12")[starts].view(np.uint8).reshape(-1, 12)
    else:
        span = np.arange(12, dtype=np.int64)
        idx = np.minimum(starts[:, None] + span, max(len(data) - 1, 0))
        raw[:] = data[idx] if len(data) else 0
    raw[np.arange(12) >= lengths[:, None]] = 0
    views[:, 1:] = raw.view("<i4")


def crc_mismatches(values: pa.Array, crcs: np.ndarray) -> np.ndarray:
    """Rows whose value's ``crc32 & 0x7FFFFFFF`` is not ``crcs`` (a binary array's values,
    checked in one C-level loop over slices of its buffer)."""
    data, offsets = binary_parts(values)
    mem = data.data
    try:
        starts = offsets[:-1].tolist()
        ends = offsets[1:].tolist()
        got = np.fromiter(
            map(crc32, map(mem.__getitem__, map(slice, starts, ends))),
            dtype=np.int64,
            count=len(starts),
        )
    finally:
        mem.release()
    return np.flatnonzero((got & 0x7FFFFFFF) != crcs)


def strings(arr: pa.Array) -> pa.Array:
    """A binary array known to hold UTF-8, as strings (no copy)."""
    return arr.view(pa.string())


def repeat(text: str, n: int) -> pa.Array:
    """``text`` n times."""
    raw = text.encode()
    offsets = np.arange(0, len(raw) * n + 1, max(len(raw), 1), dtype=np.int32)
    if not raw:
        offsets = np.zeros(n + 1, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(raw * n))


def binary_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, int64 offsets from 0) of a binary or string array without nulls."""
    _validity, off_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int32)[arr.offset : arr.offset + len(arr) + 1]
    offsets = offsets.astype(np.int64)
    data = (
        np.frombuffer(data_buf, dtype=np.uint8)
        if data_buf is not None
        else np.zeros(0, dtype=np.uint8)
    )
    first = int(offsets[0]) if len(offsets) else 0
    return data[first : int(offsets[-1]) if len(offsets) else 0], offsets - first


def non_utf8_rows(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Rows (indices) whose bytes are not UTF-8."""
    high = np.flatnonzero(data >= 0x80)
    if not len(high):
        return np.zeros(0, dtype=np.int64)
    rows = np.unique(np.searchsorted(offsets, high, side="right") - 1)
    raw = data.tobytes()
    bad = []
    for r in rows.tolist():
        try:
            raw[offsets[r] : offsets[r + 1]].decode()
        except UnicodeDecodeError:
            bad.append(r)
    return np.array(bad, dtype=np.int64)


# ---- properties -----------------------------------------------------------------------------

_SEP = ord(PROPERTY_SEPARATOR)
_NV = ord(NAME_VALUE_SEPARATOR)
_SPACE = ord(KEY_SEPARATOR)
MAP_TYPE = pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", pa.string()))
KEYS_TYPE = pa.list_(pa.field("element", pa.string()))
_NO_TEXT = pa.array([], pa.string())


@dataclass
class Properties:
    """The parsed PROPERTIES of a batch: the columns asked for (map, TAGS, KEYS), or the rows
    whose properties repeat a name (the per-record decoder keeps the last value of a name at
    its first position; those rows are left to it, and no column is built)."""

    mapping: pa.Array | None = None
    tags: pa.Array | None = None
    keys: pa.Array | None = None
    repeated: np.ndarray | None = None


def _cumsum0(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def split_ranges(
    starts: np.ndarray, ends: np.ndarray, seps: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut the ranges ``[starts[i], ends[i])`` (disjoint, in order) at the separator
    positions ``seps`` (sorted, each inside one range): (piece starts, piece ends, the range
    of each piece). A range with k separators gives k + 1 pieces, empty ones included."""
    owner = np.searchsorted(starts, seps, side="right") - 1
    per = np.bincount(owner, minlength=len(starts))
    base = _cumsum0(per + 1)
    m = int(base[-1])
    a = np.empty(m, dtype=np.int64)
    b = np.empty(m, dtype=np.int64)
    a[base[:-1]] = starts
    b[base[1:] - 1] = ends
    if len(seps):
        at = base[owner] + np.arange(len(seps), dtype=np.int64) - _cumsum0(per)[owner]
        a[at + 1] = seps + 1
        b[at] = seps
    return a, b, np.repeat(np.arange(len(starts), dtype=np.int64), per + 1)


def _pieces(data: pa.Buffer, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """The strings ``data[starts[i]:ends[i]]`` (disjoint, in order), copied by one take."""
    m = len(starts)
    if not m:
        return pa.array([], pa.string())
    bounds = np.empty(2 * m + 1, dtype=np.int32)  # piece, gap, piece, gap, ...
    bounds[0 : 2 * m : 2] = starts
    bounds[1::2] = ends
    bounds[2 * m] = ends[-1]
    both = pa.StringArray.from_buffers(2 * m, pa.py_buffer(bounds), data)
    return both.take(pa.array(np.arange(0, 2 * m, 2, dtype=np.int64)))


def split_properties(props: pa.Array, want: frozenset[str]) -> Properties:
    """Parse ``name\\x01value\\x02name\\x01value`` per row as ``string_to_properties``
    does: items split at \\x02, each item at its first \\x01; an item without \\x01 or with
    an empty name is dropped. ``want``: which of properties, tags and keys to build."""
    n = len(props)
    data, offs = binary_parts(props)
    buffer = props.buffers()[2]
    if buffer is None or not len(data):
        return Properties(
            pa.MapArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), _NO_TEXT, _NO_TEXT,
                                    type=MAP_TYPE),
            pa.nulls(n, pa.string()),
            pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), _NO_TEXT, type=KEYS_TYPE),
        )  # fmt: skip
    base_off = props.offset  # data starts at offs[0] of the buffer
    first = int(np.frombuffer(props.buffers()[1], dtype=np.int32)[base_off])
    rows = np.flatnonzero(offs[1:] > offs[:-1])
    starts, ends, item_row = split_ranges(offs[rows], offs[rows + 1], np.flatnonzero(data == _SEP))
    item_row = rows[item_row]
    p1 = np.flatnonzero(data == _NV)
    k = np.searchsorted(p1, starts)
    cut = p1[np.minimum(k, len(p1) - 1)] if len(p1) else starts
    valid = (k < len(p1)) & (cut < ends) & (cut > starts)
    if not valid.all():
        starts, cut, ends, item_row = starts[valid], cut[valid], ends[valid], item_row[valid]
    map_offsets = _cumsum0(np.bincount(item_row, minlength=n)).astype(np.int32)
    names = _pieces(buffer, starts + first, cut + first)
    encoded = pc.dictionary_encode(names)
    dictionary = encoded.dictionary.to_pylist()
    idx = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    repeated = _repeated_names(idx, item_row, map_offsets, len(dictionary))
    if len(repeated):
        return Properties(repeated=repeated)

    def item_of(name: str) -> np.ndarray:
        """Each row's item named ``name`` (-1: none)."""
        which = np.full(n, -1, dtype=np.int64)
        if name in dictionary:
            hits = np.flatnonzero(idx == dictionary.index(name))
            which[item_row[hits]] = hits
        return which

    out = Properties()
    if "properties" in want or "tags" in want:
        values = _pieces(buffer, cut + 1 + first, ends + first)
        if "properties" in want:
            out.mapping = pa.MapArray.from_arrays(
                pa.array(map_offsets), names, values, type=MAP_TYPE
            )
        if "tags" in want:
            which = item_of(PROPERTY_TAGS)
            out.tags = values.take(pa.array(which, mask=which < 0))
    if "keys" in want:
        which = item_of(PROPERTY_KEYS)
        has = np.flatnonzero(which >= 0)
        out.keys = _keys(data, buffer, first, cut[which[has]] + 1, ends[which[has]], has, n)
    return out


def _keys(
    data: np.ndarray,
    buffer: pa.Buffer,
    first: int,
    starts: np.ndarray,
    ends: np.ndarray,
    rows: np.ndarray,
    n: int,
) -> pa.Array:
    """The KEYS values ``data[starts[i]:ends[i]]`` of ``rows`` split at spaces, empty tokens
    dropped: a list per row (empty for rows without KEYS)."""
    spaces = np.flatnonzero(data == _SPACE)
    if len(spaces) and len(starts):
        owner = np.searchsorted(starts, spaces, side="right") - 1
        inside = (owner >= 0) & (spaces < ends[np.maximum(owner, 0)])
        spaces = spaces[inside]
    elif len(spaces):
        spaces = spaces[:0]
    a, b, parent = split_ranges(starts, ends, spaces)
    keep = b > a
    a, b, parent = a[keep], b[keep], parent[keep]
    offsets = _cumsum0(np.bincount(rows[parent], minlength=n)).astype(np.int32)
    tokens = _pieces(buffer, a + first, b + first)
    return pa.ListArray.from_arrays(pa.array(offsets), tokens, type=KEYS_TYPE)


def _repeated_names(
    idx: np.ndarray, item_row: np.ndarray, map_offsets: np.ndarray, kinds: int
) -> np.ndarray:
    """Rows in which a property name occurs twice."""
    counts = np.diff(map_offsets)
    if not len(idx) or int(counts.max()) < 2:
        return np.zeros(0, dtype=np.int64)
    if kinds <= 64:  # one bit a name: a row repeats a name when its bits are fewer than items
        bits = np.left_shift(np.uint64(1), idx.astype(np.uint64))
        rows = np.flatnonzero(counts)
        ored = np.bitwise_or.reduceat(bits, map_offsets[:-1][rows])
        return rows[np.bitwise_count(ored) < counts[rows]]
    key = item_row * kinds + idx
    ordered = np.sort(key)
    return np.unique(ordered[1:][ordered[1:] == ordered[:-1]] // kinds)


# ---- fixed fields ---------------------------------------------------------------------------


def timestamps(ms: np.ndarray) -> pa.Array:
    return pa.array(ms.astype(np.int64) * 1000, pa.int64()).view(_TS)


def _hosts_v4(keys: np.ndarray) -> pa.Array:
    """IPv4 host blocks as uint64 (address, port) → "ip:port" (few distinct values)."""
    if len(keys) and (keys == keys[0]).all():
        return repeat(unpack_host(int(keys[0]).to_bytes(8, "big")), len(keys))
    uniq, inverse = np.unique(keys, return_inverse=True)
    names = pa.array([unpack_host(int(u).to_bytes(8, "big")) for u in uniq], pa.string())
    return names.take(pa.array(inverse.astype(np.int32)))


def hosts(f: Bytes, at: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """The hosts (8 or 20 bytes) at ``at`` as "ip:port" strings."""
    if not len(at):
        return pa.array([], pa.string())
    if (lengths == _HOST_V4).all():
        return _hosts_v4(f.typed(">u8")[at])
    raw = np.zeros((len(at), _HOST_V6 + 1), dtype=np.uint8)
    raw[:, :_HOST_V6] = f.typed(f"V{_HOST_V6}")[at].view(np.uint8).reshape(-1, _HOST_V6)
    short = lengths == _HOST_V4
    raw[short, _HOST_V4:_HOST_V6] = 0
    raw[:, _HOST_V6] = lengths
    uniq, inverse = np.unique(raw.view(f"V{_HOST_V6 + 1}").ravel(), return_inverse=True)
    names = []
    for u in uniq.tolist():
        b = bytes(u)
        names.append(unpack_host(b[: b[_HOST_V6]]))
    return pa.array(names, pa.string()).take(pa.array(inverse.astype(np.int32).ravel()))


def msg_ids_v4(store_hosts: np.ndarray, phys: np.ndarray) -> pa.Array:
    """offsetMsgId of records with IPv4 store hosts (8-byte blocks as big-endian uint64)."""
    n = len(phys)
    raw = np.empty((n, 2), dtype=">u8")
    raw[:, 0] = store_hosts
    raw[:, 1] = phys
    text = binascii.hexlify(raw.tobytes()).upper()
    offsets = np.arange(0, 32 * n + 1, 32, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(text))


def msg_ids(f: Bytes, at: np.ndarray, lengths: np.ndarray, phys: np.ndarray) -> pa.Array:
    """offsetMsgId: the store host (8 or 20 bytes) + the commit-log offset, upper-case hex."""
    n = len(at)
    if not n:
        return pa.array([], pa.string())
    width = int(lengths.max())
    raw = np.zeros((n, width + 8), dtype=np.uint8)
    raw[:, :width] = f.typed(f"V{width}")[at].view(np.uint8).reshape(-1, width)
    if (lengths == width).all():
        raw[:, width:] = phys.astype(">i8").view(np.uint8).reshape(n, 8)
        text = binascii.hexlify(raw.tobytes()).upper()
        step = 2 * (width + 8)
        offsets = np.arange(0, step * n + 1, step, dtype=np.int32)
        return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(text))
    short = lengths == _HOST_V4
    raw[short, _HOST_V4 : _HOST_V4 + 8] = phys[short].astype(">i8").view(np.uint8).reshape(-1, 8)
    raw[~short, width:] = phys[~short].astype(">i8").view(np.uint8).reshape(-1, 8)
    raw[short, _HOST_V4 + 8 :] = 0
    hexed = Bytes(binascii.hexlify(raw.tobytes()).upper())
    step = 2 * (width + 8)
    starts = np.arange(n, dtype=np.int64) * step
    return strings(gather(hexed, starts, 2 * (lengths + 8)))
