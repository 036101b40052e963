"""The task side of an exactly-once write through brokers (``_eos``): every row sent as a
half message, many in flight at once, none sent when the batch has a decision already.

A half refused with a status that says it was not stored (SYSTEM_BUSY, ...) is sent again; a
half whose answer was lost, or stored without SEND_OK, fails the task: Spark runs the task
again as another writer, and the halves of the failed one are never committed (their writer
is not in the decision). So each row of a writer has one half and one UNIQ_KEY.

No pyspark but ``TaskContext`` (the query, batch and partition ids); called from the writer's
thread.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ..client._admin import AdminClient
from ..client._producer import send_request
from ..remoting import AsyncRemotingClient, RemotingError
from ..remoting._codes import ResponseCode
from ..store.log._record import decode_msg_id
from ._broker_send import _RETRYABLE, RemoteWriteSettings, _properties, _Queues
from ._eos import (
    PRODUCER_GROUP,
    PROP_BATCH,
    PROP_PARTITION,
    PROP_QUERY,
    PROP_WRITER,
    TRANSACTION_PREPARED,
    ExactlyOnceError,
    Half,
    WriterHalves,
    find_decision,
    queue_name,
    uniq_key,
)
from ._faults import reach
from ._options import SourceOptionError
from ._write_common import without_system_properties

IN_FLIGHT = 256


@dataclass
class HalfReport:
    """What one exactly-once writer sent (its halves), or that the batch was decided before
    (``replayed``)."""

    query: str = ""
    batch: int = 0
    rows: int = 0
    replayed: bool = False
    halves: WriterHalves | None = None
    retries: int = 0
    sent: dict[str, int] = field(default_factory=dict)


def task_ids(query_option: str | None) -> tuple[str, int, int, int]:
    """(query id, batch id, partition, attempt) of the running task: the streaming query's
    id and micro-batch (Spark's local properties), else option exactlyOnceId and batch 0."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise ExactlyOnceError("an exactly-once write runs in a Spark task")
    query = query_option or ctx.getLocalProperty("sql.streaming.queryId")
    if not query:
        raise ExactlyOnceError(
            "exactlyOnce=true on a batch write needs option exactlyOnceId: an id of the job "
            "that stays the same when the job is run again"
        )
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    return query, int(batch) if batch else 0, ctx.partitionId(), ctx.attemptNumber()


def write_halves(
    s: RemoteWriteSettings,
    batches: Iterator[pa.RecordBatch],
    ids: tuple[str, int, int, int],
    report: HalfReport,
) -> HalfReport:
    """Send every row of ``batches`` as a half message (or nothing when the batch has a
    decision); ``report`` filled and returned."""
    query, batch_id, partition, _attempt = ids
    report.query, report.batch = query, batch_id
    signer = s.remote.signer()
    with AdminClient(";".join(s.remote.namesrv), timeout=s.timeout_s, signer=signer) as admin:
        if find_decision(admin, query, batch_id) is not None:
            report.replayed = True
            for _ in batches:  # Spark expects the input read
                pass
            return report
    writer = os.urandom(12).hex().upper()
    halves = WriterHalves(writer, partition)
    report.halves = halves
    asyncio.run(_send_all(s, batches, query, batch_id, partition, halves, report))
    for q in halves.queues.values():
        q.sort(key=lambda h: h.seq)
    return report


async def _send_all(
    s: RemoteWriteSettings,
    batches: Iterator[pa.RecordBatch],
    query: str,
    batch_id: int,
    partition: int,
    halves: WriterHalves,
    report: HalfReport,
) -> None:
    queues = _Queues(s.remote)
    client = AsyncRemotingClient(signer=s.remote.signer())
    window = asyncio.Semaphore(IN_FLIGHT)
    pending: set[asyncio.Task[None]] = set()
    failed: list[BaseException] = []
    turn: dict[str, int] = {}
    seq = 0

    async def one(topic: str, index: int, body: bytes, props: dict[str, str], n: int) -> None:
        try:
            for attempt in range(s.retries + 1):
                qs = queues.get(topic, refresh=attempt > 0)  # cached after the first
                mq, addr = qs[index % len(qs)]
                cmd = send_request(PRODUCER_GROUP, topic, mq, props, body, batch=False)
                cmd.ext_fields["f"] = str(TRANSACTION_PREPARED)
                try:
                    r = await client.invoke(addr, cmd, s.timeout_s)
                except RemotingError as exc:
                    raise ExactlyOnceError(
                        f"half message of {topic} to {addr} lost ({exc}); the task is run "
                        "again as another writer"
                    ) from exc
                if r.code == ResponseCode.SUCCESS:
                    _, clo = decode_msg_id(str(r.ext_fields.get("msgId", "")))
                    qo = int(r.ext_fields.get("queueOffset", -1))
                    halves.queues.setdefault(queue_name(mq), []).append(Half(n, clo, qo))
                    report.sent[queue_name(mq)] = report.sent.get(queue_name(mq), 0) + 1
                    return
                if r.code not in _RETRYABLE:
                    raise SourceOptionError(
                        f"{mq.broker_name} ({addr}) refused a half message of {topic}: "
                        f"code {r.code} {r.remark or ''}"
                    )
                report.retries += 1
                await asyncio.sleep(0.1 * (attempt + 1))
            raise ExactlyOnceError(f"half message of {topic} refused {s.retries + 1} times")
        except BaseException as exc:
            failed.append(exc)
        finally:
            window.release()

    try:
        first = True
        for batch in batches:
            n = batch.num_rows
            if not n:
                continue
            batch = without_system_properties(batch, s.keep_system_properties)
            cols = _columns(batch, n)
            for i in range(n):
                topic = cols["topic"][i]
                if topic is None:
                    raise SourceOptionError("a row has no topic (null)")
                body = cols["body"][i]
                if body is None:
                    raise SourceOptionError(f"a row of {topic} has no body (null)")
                if isinstance(body, str):
                    body = body.encode("utf-8")
                props = _properties(cols["tags"][i], cols["keys"][i], cols["properties"][i])
                props["UNIQ_KEY"] = uniq_key(halves.writer, seq)
                props["TRAN_MSG"] = "true"
                props["PGROUP"] = PRODUCER_GROUP
                props[PROP_QUERY] = query
                props[PROP_BATCH] = str(batch_id)
                props[PROP_PARTITION] = str(partition)
                props[PROP_WRITER] = halves.writer
                qid = cols["queue_id"][i]
                if qid is None:
                    k = turn.get(topic, partition)
                    turn[topic] = k + 1
                    index = k
                else:
                    index = int(qid)
                await window.acquire()
                if failed:
                    window.release()
                    raise failed[0]
                task = asyncio.create_task(one(topic, index, body, props, seq))
                pending.add(task)
                task.add_done_callback(pending.discard)
                seq += 1
            report.rows += n
            if first and partition == 0:
                await asyncio.gather(*pending)
                reach("task", batch_id)
            first = False
        await asyncio.gather(*pending)
        if failed:
            raise failed[0]
    finally:
        for t in pending:
            t.cancel()
        client.close()


def _columns(batch: pa.RecordBatch, n: int) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for name in ("topic", "body", "tags", "keys", "properties", "queue_id"):
        idx = batch.schema.get_field_index(name)
        out[name] = batch.column(idx).to_pylist() if idx >= 0 else [None] * n
    return out
