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

from ..store._record import (
    HEAD_V4_SIZE,
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

# the fixed header of a record with IPv4 hosts (see rocketstore.store._record), as numpy sees it
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
    binary_view array pointing into ``src``, cast to binary (one copy, in Arrow)."""
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
    else:
        views[:, 1] = src.typed("<i4")[np.where(inline, 0, starts)]
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


@dataclass
class Properties:
    """The parsed PROPERTIES of a batch: the map column, TAGS and KEYS, and the rows whose
    properties repeat a name (the per-record decoder keeps the last value of a name at its
    first position; those rows are left to it)."""

    mapping: pa.Array
    tags: pa.Array
    keys: pa.Array
    repeated: np.ndarray


def split_properties(
    props: pa.Array, map_type: pa.DataType, keys_type: pa.DataType, want_keys: bool
) -> Properties:
    """Parse ``name\\x01value\\x02name\\x01value`` per row as ``string_to_properties`` does:
    items split at \\x02, each item at its first \\x01; an item without \\x01 or with an
    empty name is dropped."""
    n = len(props)
    data, offs = binary_parts(props)
    lens = np.diff(offs)
    nonempty = lens > 0
    p2 = np.flatnonzero(data == _SEP)
    r2 = np.searchsorted(offs, p2, side="right") - 1
    n2 = np.bincount(r2, minlength=n)
    count = np.where(nonempty, n2 + 1, 0)
    base = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(count, out=base[1:])
    m = int(base[-1])
    starts = np.empty(m, dtype=np.int64)
    ends = np.empty(m, dtype=np.int64)
    ne = np.flatnonzero(nonempty)
    starts[base[ne]] = offs[ne]
    ends[base[ne] + count[ne] - 1] = offs[ne + 1]
    if len(p2):
        first2 = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(n2, out=first2[1:])
        at = base[r2] + np.arange(len(p2), dtype=np.int64) - first2[r2]
        starts[at + 1] = p2 + 1
        ends[at] = p2
    item_row = np.repeat(np.arange(n, dtype=np.int64), count)
    p1 = np.flatnonzero(data == _NV)
    if len(p1):
        k = np.searchsorted(p1, starts)
        cut = p1[np.minimum(k, len(p1) - 1)]
        valid = (k < len(p1)) & (cut < ends) & (cut > starts)
    else:
        cut = starts
        valid = np.zeros(m, dtype=bool)
    if not valid.all():
        starts, cut, ends, item_row = starts[valid], cut[valid], ends[valid], item_row[valid]
    mv = len(starts)
    map_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(item_row, minlength=n), out=map_offsets[1:])
    if mv:
        # one string array of name, \x01, value, gap tokens; names and values taken from it
        tok = np.empty(4 * mv + 1, dtype=np.int32)
        tok[0 : 4 * mv : 4] = starts
        tok[1::4] = cut
        tok[2::4] = cut + 1
        tok[3::4] = ends
        tok[4 * mv] = ends[-1]
        tokens = pa.StringArray.from_buffers(4 * mv, pa.py_buffer(tok), pa.py_buffer(data))
        names = tokens.take(pa.array(np.arange(0, 4 * mv, 4, dtype=np.int64)))
        values = tokens.take(pa.array(np.arange(2, 4 * mv, 4, dtype=np.int64)))
    else:
        names = values = pa.array([], pa.string())
    mapping = pa.MapArray.from_arrays(pa.array(map_offsets), names, values, type=map_type)
    encoded = pc.dictionary_encode(names)
    dictionary = encoded.dictionary.to_pylist()
    idx = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    repeated = _repeated_names(idx, item_row, map_offsets, len(dictionary))

    def find(name: str) -> pa.Array:
        """Each row's value of ``name`` (null when it has none)."""
        code = dictionary.index(name) if name in dictionary else -1
        which = np.full(n, -1, dtype=np.int64)
        hits = np.flatnonzero(idx == code) if code >= 0 else np.zeros(0, dtype=np.int64)
        which[item_row[hits]] = hits  # the last hit of a row wins
        return values.take(pa.array(which, mask=which < 0))

    tags = find(PROPERTY_TAGS)
    keys = split_keys(find(PROPERTY_KEYS), keys_type) if want_keys else pa.nulls(n, keys_type)
    return Properties(mapping, tags, keys, repeated)


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


def split_keys(raw: pa.Array, keys_type: pa.DataType) -> pa.Array:
    """KEYS values (space separated, may be null) → lists without empty tokens."""
    n = len(raw)
    tokens = pc.split_pattern(pc.fill_null(raw, ""), " ")
    flat = tokens.flatten()
    parents = tokens.value_parent_indices().to_numpy()
    keep = pc.greater(pc.binary_length(flat), 0).to_numpy(zero_copy_only=False)
    counts = np.bincount(parents[keep], minlength=n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), flat.filter(pa.array(keep))).cast(keys_type)


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
