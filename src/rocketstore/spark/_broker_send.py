"""Sending Arrow batches of rows through brokers: what a write through brokers does with each
batch (SEND_BATCH_MESSAGE requests, retried), for one Spark write task or for ``rocketstore
import`` without Spark.

Rows are cut into SEND_BATCH_MESSAGE requests of at most ``sendBatchRows`` rows /
``sendBatchBytes`` bytes, each to one write queue of the topic (the queues of every broker group
with a master, ordered by broker name and queue id). Without ``queue_id`` a writer's batches go
to those queues in turn (starting at its task index); a row's ``queue_id`` is an index into
them (with one broker group: the queue id). A request refused with a retryable status
(SYSTEM_BUSY, SERVICE_NOT_AVAILABLE, ...) or lost with its connection is sent again (the
route is looked up again first) up to ``sendRetries`` times.

No pyspark; called from the writer's thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ..client._producer import UNIQ_IDS, encode_batch, send_request, send_result
from ..client._route import MessageQueue
from ..remoting import RemotingError, ResponseCode
from ._broker import Cluster, pooled
from ._options import RemoteOptions, SendOptions, SourceOptionError
from ._write_common import task_index, without_system_properties

log = logging.getLogger(__name__)

PRODUCER_GROUP = "rocketstore-spark-producer"
_RETRYABLE = frozenset(
    {
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.NO_PERMISSION,
    }
)
_BACKOFF_S = (0.1, 0.3, 1.0, 2.0)


@dataclass(frozen=True)
class RemoteWriteSettings:
    remote: RemoteOptions
    columns: tuple[str, ...]
    batch_rows: int
    batch_bytes: int
    retries: int
    timeout_s: float
    keep_system_properties: bool = False


@dataclass
class RemoteWriteReport:
    """What one write (a Spark task's) sent: rows, body bytes and per "topic/broker/queue" the first
    offset stored and the next one."""

    rows: int = 0
    body_bytes: int = 0
    requests: int = 0
    retries: int = 0
    sent: dict[str, tuple[int, int]] = field(default_factory=dict)


def send_settings(options: Mapping[str, str], columns: tuple[str, ...]) -> RemoteWriteSettings:
    """The settings of a write of ``columns`` through the brokers option namesrv / broker names."""
    remote = RemoteOptions.parse(options)
    assert remote is not None
    send = SendOptions.parse(options)
    return RemoteWriteSettings(
        remote=remote,
        columns=columns,
        batch_rows=send.batch_rows,
        batch_bytes=send.batch_bytes,
        retries=send.retries,
        timeout_s=send.timeout_s,
        keep_system_properties=send.keep_system_properties,
    )


class _Queues:
    """The write queues of each topic (looked up once, again after a failed send)."""

    def __init__(self, remote: RemoteOptions) -> None:
        self.remote = remote
        self._queues: dict[str, list[tuple[MessageQueue, str]]] = {}

    def get(self, topic: str, *, refresh: bool = False) -> list[tuple[MessageQueue, str]]:
        got = self._queues.get(topic)
        if got is not None and not refresh:
            return got
        with Cluster(self.remote) as cluster:
            route = cluster.route(topic)
        if route is None:
            raise SourceOptionError(
                f"topic {topic} has no route ({self.remote.where}): create it on the brokers"
            )
        out = []
        for mq in route.queues(write=True):
            addr = route.master(mq.broker_name)
            if addr is not None:
                out.append((mq, addr))
        if not out:
            raise SourceOptionError(f"topic {topic} has no writable queue ({self.remote.where})")
        self._queues[topic] = out
        return out


def _properties(tags: str | None, keys: Any, props: Any) -> dict[str, str]:
    out: dict[str, str] = dict(props) if props else {}
    if tags:
        out["TAGS"] = tags
    if keys:
        out["KEYS"] = keys if isinstance(keys, str) else " ".join(k for k in keys if k)
    out.setdefault("UNIQ_KEY", UNIQ_IDS.next())
    out.setdefault("WAIT", "true")
    return out


def _send(
    s: RemoteWriteSettings,
    queues: _Queues,
    topic: str,
    index: int,
    items: list[tuple[bytes, dict[str, str]]],
    report: RemoteWriteReport,
) -> None:
    """One SEND_BATCH_MESSAGE of ``items`` to the topic's ``index``-th write queue, retried."""
    body = encode_batch(items)
    failures: list[str] = []
    for attempt in range(s.retries + 1):
        qs = queues.get(topic, refresh=attempt > 0)
        mq, addr = qs[index % len(qs)]
        cmd = send_request(PRODUCER_GROUP, topic, mq, {}, body, batch=True)
        try:
            r = pooled(addr, s.timeout_s, queues.remote).invoke(addr, cmd, s.timeout_s)
        except RemotingError as exc:
            failures.append(f"{addr}: {exc}")
        else:
            result = send_result(r, topic, mq, "")
            if result is not None:
                report.requests += 1
                report.rows += len(items)
                report.body_bytes += sum(len(b) for b, _ in items)
                key = f"{topic}/{mq.broker_name}/{result.queue.queue_id}"
                first, _ = report.sent.get(key, (result.queue_offset, 0))
                report.sent[key] = (first, result.queue_offset + len(items))
                return
            if r.code not in _RETRYABLE:
                raise SourceOptionError(
                    f"{mq.broker_name} ({addr}) refused {len(items)} message(s) for "
                    f"{topic}/{mq.queue_id}: code {r.code} {r.remark or ''}"
                )
            failures.append(f"{addr}: code {r.code} {r.remark or ''}")
        report.retries += 1
        if attempt < s.retries:
            time.sleep(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)])
    raise SourceOptionError(
        f"sending {len(items)} message(s) of {topic} failed {len(failures)} times "
        f"({'; '.join(failures[-2:])})"
    )


def write_remote(
    s: RemoteWriteSettings,
    batches: Iterator[pa.RecordBatch],
    report_type: Callable[[], RemoteWriteReport] = RemoteWriteReport,
) -> RemoteWriteReport:
    """Send every row of ``batches`` through the brokers: the work of one write task."""
    report = report_type()
    queues = _Queues(s.remote)
    turn: dict[str, int] = {}
    start = task_index()
    for batch in batches:
        n = batch.num_rows
        if not n:
            continue
        batch = without_system_properties(batch, s.keep_system_properties)

        def column(name: str, n: int = n, batch: pa.RecordBatch = batch) -> list[Any]:
            idx = batch.schema.get_field_index(name)
            return batch.column(idx).to_pylist() if idx >= 0 else [None] * n

        topics, bodies = column("topic"), column("body")
        tags, keys, props, qids = (
            column("tags"),
            column("keys"),
            column("properties"),
            column("queue_id"),
        )
        # (topic, queue index or None) → the rows, in input order
        groups: dict[tuple[str, int | None], list[tuple[bytes, dict[str, str]]]] = {}
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise SourceOptionError("a row has no topic (null)")
            body = bodies[i]
            if body is None:
                raise SourceOptionError(f"a row of {topic} has no body (null)")
            if isinstance(body, str):
                body = body.encode("utf-8")
            item = (body, _properties(tags[i], keys[i], props[i]))
            groups.setdefault((topic, qids[i]), []).append(item)
        for (topic, qid), items in groups.items():
            lo = 0
            while lo < len(items):
                hi, size = lo, 0
                while hi < len(items) and hi - lo < s.batch_rows:
                    size += len(items[hi][0]) + 64
                    if hi > lo and size > s.batch_bytes:
                        break
                    hi += 1
                if qid is None:
                    k = turn.get(topic, start)
                    turn[topic] = k + 1
                    index = k
                else:
                    index = int(qid)
                _send(s, queues, topic, index, items[lo:hi], report)
                lo = hi
    return report
