"""Exactly-once writes into a store path (option ``path`` with ``exactlyOnce=true``): each
task's rows with markers of their own in the same commit log, found through the key index.

A write task owns the store for the whole of its write (tasks take turns, ``_store_write``),
so the records of one attempt are contiguous in the commit log. Per (write id, batch,
partition) = ``q:b:p`` the store holds, in topic ``DECISION_TOPIC`` (queue 0)::

    begin marker   key q:b:p:begin   body {"writer": W, "resume": K}: writer W writes the
                                     partition's rows from row K on, right after this record
    the rows       properties rsQuery, rsBatch, rsPartition, rsWriter=W (their own topics)
    end marker     key q:b:p         body {"writer": W, "rows": N}: the partition is complete

A replayed task (the same rows in the same order: Spark replays a micro-batch from the same
source offsets) looks up the end marker: there is one, it writes nothing. Else, when a begin
marker exists, the attempt that wrote it died: the rows of its writer that follow it are
counted (recovery kept a prefix of the commit log, so they are rows K, K+1, ... in order),
and the new attempt writes a begin marker with the rows already there and only the rest: a
partial partition is completed, never doubled. The end marker is the partition's decision.

Consumers may see a partition's first rows before its end marker (as a write of the same
rows would show them); they never see a row twice.

Called from the writer's thread; the store is opened here.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from .. import MessageStore
from ..store.log._message import Message
from ._eos import DECISION_TOPIC, PROP_BATCH, PROP_PARTITION, PROP_QUERY, PROP_WRITER
from ._eos_send import task_ids
from ._store_put import WriteReport, WriteSettings, put_batch
from ._store_write import open_store
from ._write_common import task_index

_MAX_MARKERS = 1024


@dataclasses.dataclass
class StoreOnceReport(WriteReport):
    """What one exactly-once write task stored; ``skipped`` rows were there already."""

    replayed: bool = False
    skipped: int = 0


def _wait_dispatched(store: MessageStore) -> None:
    import time

    while store.dispatch_behind_bytes() > 0:
        time.sleep(0.005)


def _latest(store: MessageStore, key: str) -> Any:
    found = store.query_message(DECISION_TOPIC, key, _MAX_MARKERS).messages
    mine = [m for m in found if key in m.keys]
    return max(mine, key=lambda m: m.commitlog_offset) if mine else None


def _rows_after(store: MessageStore, marker: Any, writer: str, file_size: int) -> int:
    """How many records of ``writer`` follow ``marker`` without a gap."""
    offset = marker.commitlog_offset + marker.store_size
    end = store.max_phy_offset
    n = 0
    while offset < end:
        msg = store.look_message_by_offset(offset)
        if msg is None:  # the blank end of a commit-log file
            offset = (offset // file_size + 1) * file_size
            continue
        if msg.properties.get(PROP_WRITER) != writer:
            break
        n += 1
        offset += msg.store_size
    return n


def _tagged(batch: pa.RecordBatch, tags: dict[str, str]) -> pa.RecordBatch:
    """``batch`` with ``tags`` added to every row's properties."""
    n = batch.num_rows
    idx = batch.schema.get_field_index("properties")
    old = batch.column(idx).to_pylist() if idx >= 0 else [None] * n
    extra = list(tags.items())
    merged = [list(p or []) + extra for p in old]
    col = pa.array(merged, type=pa.map_(pa.string(), pa.string()))
    if idx >= 0:
        return batch.set_column(idx, "properties", col)
    return batch.append_column("properties", col)


def _put_marker(store: MessageStore, key: str, doc: dict[str, Any]) -> None:
    r = store.put_message(Message(DECISION_TOPIC, json.dumps(doc).encode(), 0, keys=[key]))
    if not r.ok:
        raise OSError(f"storing the marker {key} failed: {r.status.name}")


def write_once(
    s: WriteSettings, batches: Iterator[pa.RecordBatch], write_id: str | None
) -> StoreOnceReport:
    """Store the rows of ``batches`` once per (write, batch, partition); see the docstring."""
    import os

    report = StoreOnceReport()
    first = next(batches, None)
    if first is None:
        return report
    query, batch_id, partition, _ = task_ids(write_id)
    key = f"{query}:{batch_id}:{partition}"
    if "properties" not in s.columns:
        s = dataclasses.replace(s, columns=(*s.columns, "properties"))
    store = open_store(s)
    try:
        _wait_dispatched(store)
        if _latest(store, key) is not None:
            report.replayed = True
            for _ in batches:
                pass
            return report
        done = 0
        begin = _latest(store, f"{key}:begin")
        file_size = store.config.mapped_file_size_commit_log
        if begin is not None:
            doc = json.loads(bytes(begin.body))
            done = int(doc["resume"]) + _rows_after(store, begin, doc["writer"], file_size)
        writer = os.urandom(12).hex().upper()
        _put_marker(store, f"{key}:begin", {"writer": writer, "resume": done})
        tags = {
            PROP_QUERY: query,
            PROP_BATCH: str(batch_id),
            PROP_PARTITION: str(partition),
            PROP_WRITER: writer,
        }
        turn: dict[str, int] = {}
        start = task_index()
        seen = 0
        batch: pa.RecordBatch | None = first
        while batch is not None:
            n = batch.num_rows
            skip = min(max(done - seen, 0), n)
            seen += n
            if skip:
                report.skipped += skip
                batch = batch.slice(skip)
            if batch.num_rows:
                put_batch(store, s, _tagged(batch, tags), turn, start, report)
                if report.rows >= 1 and partition == 0:
                    from ._faults import reach

                    reach("store_task", batch_id)
            batch = next(batches, None)
        _put_marker(store, key, {"writer": writer, "rows": seen})
    finally:
        store.shutdown()
    return report
