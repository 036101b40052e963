"""Test helpers of the tiered store: a tiered directory built from a store exactly as the
contract of ``rocketstore.tier._manifest`` says (the data source's rows, sorted by queue id and
queue offset, one ``part-<from>.parquet`` per topic and commit-log file, manifests, the covered
offset), and retention of a store's oldest commit-log files the way its cleaner deletes them."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rocketstore import MessageStore
from rocketstore.columns._arrow import ARROW_SCHEMA, QueueRange, RangeDecoder
from rocketstore.store.read._reader import StoreReader
from rocketstore.tier._manifest import (
    TierFile,
    TopicManifest,
    part_name,
    save_covered,
    save_manifest,
    topic_dir,
)

HOUR_MS = 3_600_000


def store_rows(store_dir: str | os.PathLike[str], topic: str) -> pa.Table:
    """Every row of ``topic`` the store still holds (the data source's rows)."""
    with StoreReader(store_dir) as reader:
        decoder = RangeDecoder(reader, schema=ARROW_SCHEMA, batch_rows=1000)
        batches = []
        for qid in reader.queue_ids(topic):
            lo, hi = reader.min_offset(topic, qid), reader.max_offset(topic, qid)
            if lo < hi:
                batches.extend(decoder.batches(QueueRange(topic, qid, lo, hi)))
        return pa.Table.from_batches(batches, ARROW_SCHEMA)


def tier_store(
    store_dir: str | os.PathLike[str],
    tiered: str | os.PathLike[str],
    *,
    files: int,
    row_group_rows: int = 64,
) -> int:
    """Tier the first ``files`` commit-log files of the store (every topic), as the tiering
    service does; returns the covered commit-log offset. The files must still be there."""
    with StoreReader(store_dir) as reader:
        size = reader.commit_log_file_size
        topics = reader.topics()
    covered = files * size
    for topic in topics:
        rows = store_rows(store_dir, topic)
        manifest = TopicManifest(topic)
        directory = topic_dir(tiered, topic)
        for start in range(0, covered, size):
            phys = rows.column("commitlog_offset")
            mask = pc.and_(pc.greater_equal(phys, start), pc.less(phys, start + size))
            part = rows.filter(mask).sort_by(
                [("queue_id", "ascending"), ("queue_offset", "ascending")]
            )
            if not part.num_rows:
                continue
            directory.mkdir(parents=True, exist_ok=True)
            name = part_name(start)
            hidden = directory / f".{name}.tmp"
            pq.write_table(part, hidden, row_group_size=row_group_rows)
            os.replace(hidden, directory / name)
            queues: dict[int, tuple[int, int]] = {}
            for qid, qoff in zip(
                part.column("queue_id").to_pylist(),
                part.column("queue_offset").to_pylist(),
                strict=True,
            ):
                lo, hi = queues.get(qid, (qoff, qoff))
                queues[qid] = (min(lo, qoff), max(hi, qoff))
            ms = pc.divide(part.column("store_timestamp").cast(pa.int64()), 1000)
            manifest.files.append(
                TierFile(
                    name,
                    (start, start + size),
                    part.num_rows,
                    (directory / name).stat().st_size,
                    queues,
                    (pc.min(ms).as_py(), pc.max(ms).as_py()),
                )
            )
        if manifest.files:
            save_manifest(tiered, manifest)
    save_covered(tiered, covered)
    return covered


def expire_oldest(store: MessageStore, files: int) -> None:
    """Delete the store's ``files`` oldest commit-log files as its cleaner does (aged past the
    reserved time, a manual deletion, one cleaning pass: consume queues corrected after). The
    store must be configured with ``file_reserved_time=1`` and
    ``delete_commit_log_files_interval=0``."""
    queue = store.commit_log.queue
    before = len(queue.files)
    assert before > files, "retention never deletes the newest commit-log file"
    old = (time.time() * 1000 - 2 * HOUR_MS) / 1000
    for mf in queue.files[:files]:
        os.utime(mf.path, (old, old))
    store.execute_delete_files_manually()
    deadline = time.monotonic() + 10
    while len(queue.files) > before - files and time.monotonic() < deadline:
        store.cleaner.run_once()
        time.sleep(0.01)
    assert len(queue.files) == before - files, "the cleaner did not delete the files"
    store.cleaner.run_once()  # consume queues corrected to the new minimum


def wait_dispatched(store: MessageStore, timeout: float = 60.0) -> None:
    """Until every put message is in the consume queues and every full file is flushed."""
    last = store.commit_log.queue.files[-1].from_offset
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (
        store.dispatch_behind_bytes() or store.commit_log.queue.flushed_where < last
    ):
        time.sleep(0.005)
