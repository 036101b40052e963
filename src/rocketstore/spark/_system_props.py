"""System properties in a written ``properties`` column: what a write leaves out.

A frame read from rocketstore carries each message's whole properties map, the keys the
producer, the broker and the store set included (UNIQ_KEY, WAIT, TAGS, KEYS, REAL_TOPIC, ...).
Written as they are, the new messages would claim the old ones' identities (UNIQ_KEY, the key a
message is looked up by), their transaction and retry state, and tags / keys that disagree with
the ``tags`` and ``keys`` columns. So a write drops the keys RocketMQ reserves for the system
(``SYSTEM_PROPERTIES``: 4.9.8's MessageConst.STRING_HASH_SET, the 5.x names the store and the
gRPC front end read, and the transaction and dead-letter keys) from the map; TAGS and KEYS come
from the ``tags`` / ``keys`` columns, UNIQ_KEY is the writer's own (fresh, or none). Option
``keepSystemProperties=true`` keeps the map as it is.

DELAY is a request: a row that carries it asks for a delayed message, unless the row also
carries REAL_TOPIC. The schedule keeps DELAY on a message it delivers (with REAL_TOPIC and
REAL_QID, as RocketMQ 4.9.8 does), so such a row is a message that was delayed already: its
DELAY is dropped, also with ``keepSystemProperties``, and the copy is not delayed again.

Pure functions over Arrow arrays (no pyspark); any thread.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..store.log._record import PROPERTY_DELAY, PROPERTY_REAL_TOPIC, RESERVED_PROPERTIES

SYSTEM_PROPERTIES = RESERVED_PROPERTIES | {
    # transactions (set by the broker, not among the reserved names)
    "__transactionId__",
    "TRANSACTION_CHECK_TIMES",
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
}
"""Keys a write leaves out of a row's ``properties`` unless keepSystemProperties is set
(DELAY: see the module docstring)."""

_DROPPED = pa.array(sorted(SYSTEM_PROPERTIES - {PROPERTY_DELAY}), pa.string())


def strip_system_properties(col: pa.Array, keep: bool) -> pa.Array:
    """``col`` (a map<string, string> column) without system keys (all of them kept with
    ``keep``), and without a DELAY next to a REAL_TOPIC. A row left with no property is null,
    like a row that had no map."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    n = len(col)
    if n == 0 or col.null_count == n:
        return col
    # (map arrays: offsets count into the unsliced keys and items; no list kernels)
    offsets = col.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    names = col.keys.slice(lo, hi - lo)
    values = col.items.slice(lo, hi - lo)
    parents = np.repeat(np.arange(n), np.diff(offsets))
    nulls = col.is_null().to_numpy(zero_copy_only=False)
    drop = nulls[parents]
    is_delay = pc.equal(names, PROPERTY_DELAY).to_numpy(zero_copy_only=False)
    if is_delay.any():
        real = pc.equal(names, PROPERTY_REAL_TOPIC).to_numpy(zero_copy_only=False)
        delivered = np.zeros(n, dtype=bool)
        delivered[parents[real]] = True
        drop |= is_delay & delivered[parents]
    if not keep:
        drop |= pc.is_in(names, value_set=_DROPPED).to_numpy(zero_copy_only=False)
    kept = ~drop
    counts = np.bincount(parents[kept], minlength=n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    empty = nulls | (counts == 0)
    mask = pa.array(empty, pa.bool_())
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()),
        names.filter(pa.array(kept)),
        values.filter(pa.array(kept)),
        type=col.type,
        mask=mask,
    )
