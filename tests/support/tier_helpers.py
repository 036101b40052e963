"""Stores to tier and the rows to expect: what the ``rocketstore`` source's decoder reads
through the consume queues (``RangeDecoder`` over a StoreReader), against what the tier holds
(its listed files below ``covered``) plus the commit log's messages from ``covered`` on."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from rocketstore.columns._arrow import ARROW_SCHEMA, QueueRange, RangeDecoder
from rocketstore.store._config import StoreConfig
from rocketstore.store._store import MessageStore
from rocketstore.store.log._message import Message
from rocketstore.store.log._record import TRANSACTION_PREPARED_TYPE
from rocketstore.store.read._reader import StoreReader
from rocketstore.tier._manifest import load_covered, load_manifest, tiered_topics, topic_dir

FILE_SIZE = 64 * 1024
TOPICS = ["TopicA", "TopicB", "%RETRY%group1", "RMQ_SYS_TRACE_TOPIC"]
_ORDER = [("topic", "ascending"), ("queue_id", "ascending"), ("queue_offset", "ascending")]


def text_body(rng: random.Random, i: int) -> bytes:
    words = ["order", "paid", "shipped", "customer", "item", "price", "status", "ok", "eu-west"]
    return (
        f'{{"id": {i}, "text": "'
        + " ".join(rng.choice(words) for _ in range(rng.randint(3, 30)))
        + '"}'
    ).encode()


def fill(store: MessageStore, count: int, seed: int = 1) -> None:
    """``count`` messages over four topics and four queues: singles with tags, keys and
    properties, batches, a delayed one, and transaction halves (in no queue)."""
    rng = random.Random(seed)
    i = 0
    while i < count:
        topic = TOPICS[i % len(TOPICS)]
        qid = rng.randrange(4)
        kind = rng.random()
        if kind < 0.15:
            n = min(rng.randint(2, 6), count - i)
            batch = [
                Message(topic, text_body(rng, i + k), qid, keys=[f"b{i + k}"]) for k in range(n)
            ]
            store.put_messages(batch)
            i += n
            continue
        props = {"color": rng.choice(["red", "blue"]), "n": str(i)}
        if kind < 0.18:
            props["DELAY"] = "2"
        sys_flag = TRANSACTION_PREPARED_TYPE if kind > 0.97 else 0
        if sys_flag:
            props["TRAN_MSG"] = "true"
        store.put_message(
            Message(
                topic,
                text_body(rng, i),
                qid,
                tags=rng.choice(["tagA", "tagB", None]),
                keys=[f"k{i}", f"k{i % 7}"],
                properties=props,
                sys_flag=sys_flag,
            )
        )
        i += 1


def store_config(root: Path, **over: object) -> StoreConfig:
    import dataclasses

    base = StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=FILE_SIZE,
        flush_interval_commit_log=10,
        commit_interval_commit_log=10,
        flush_commit_log_least_pages=0,  # the flushed end follows every put
    )
    return dataclasses.replace(base, **over)  # type: ignore[arg-type]


def source_rows(store_dir: Path) -> pa.Table:
    """Every row the Spark source reads from the store (bad records skipped), sorted."""
    batches: list[pa.RecordBatch] = []
    with StoreReader(store_dir) as reader:
        decoder = RangeDecoder(reader, fail_on_data_loss=False)
        for topic in reader.topics():
            for qid in reader.queue_ids(topic):
                lo, hi = reader.min_offset(topic, qid), reader.max_offset(topic, qid)
                batches += decoder.batches(QueueRange(topic, qid, lo, hi))
    return pa.Table.from_batches(batches, ARROW_SCHEMA).sort_by(_ORDER)


def tier_rows(tiered: Path, *, covered: int | None = None) -> pa.Table:
    """The rows of every listed file below ``covered`` (read with pyarrow), sorted."""
    cover = load_covered(tiered) if covered is None else covered
    tables = []
    for topic in tiered_topics(tiered):
        for f in load_manifest(tiered, topic).covered_files(cover):
            t = pq.read_table(topic_dir(tiered, topic) / f.name)
            assert t.schema.equals(ARROW_SCHEMA), t.schema
            assert t.num_rows == f.rows
            tables.append(t)
    if not tables:
        return ARROW_SCHEMA.empty_table()
    return pa.concat_tables(tables).sort_by(_ORDER)


def assert_same_rows(actual: pa.Table, expected: pa.Table) -> None:
    assert actual.num_rows == expected.num_rows
    for name in ARROW_SCHEMA.names:
        a, e = actual.column(name), expected.column(name)
        assert a.equals(e), f"column {name} differs"


def split_at(rows: pa.Table, covered: int) -> tuple[pa.Table, pa.Table]:
    """(rows below ``covered``, rows from it) by commit-log offset."""
    import pyarrow.compute as pc

    below = pc.less(rows.column("commitlog_offset"), covered)
    return rows.filter(below), rows.filter(pc.invert(below))
