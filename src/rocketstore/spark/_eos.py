"""Exactly-once writes through brokers: the decision record of a micro-batch and the ends of
its half messages. No pyspark; the task side is ``_eos_send``, the broker's checks are
answered by ``_eos_checks``.

A write with ``exactlyOnce=true`` sends every row as a half (prepared) message of producer
group ``PRODUCER_GROUP``, with four properties of its own::

    rsQuery      the write's id (a streaming query's id, kept in its checkpoint; option
                 exactlyOnceId for a batch job)
    rsBatch      the micro-batch id (0 for a batch job)
    rsPartition  the Spark partition that wrote it
    rsWriter     the writer: one id per task attempt (a retried task is another writer)

UNIQ_KEY is the writer id followed by the row's number in the writer (8 hex digits), so
every half has its own. The driver's commit then:

1. writes the **decision**: one message (or a few, for a very large batch) of topic
   ``DECISION_TOPIC`` with key ``rsQuery:rsBatch`` (``decision_key``), its body the JSON list
   of the writers that count and, per queue, each half's commit-log offset, half-queue offset
   and row number (zlib), sent like any message: acknowledged by the broker group's master
   once stored (and, with SYNC_MASTER or controller mode's in-sync replicas, replicated), so a
   failover keeps it. It is found again by QUERY_MESSAGE on the key (the key index) on every
   broker group of the topic;
2. ends every half of the decision with END_TRANSACTION (commit): a writer's halves of a
   queue one after the other in row order, every writer and queue at the same time, so a
   consumer sees a writer's rows of a queue in their order.

A decision that exists is the answer to every later question: a replayed batch sends
nothing and the commit ends the decision's halves again (a second end is a no-op on the
broker); the broker's check of a half left open is answered COMMIT when its writer is in
the decision, ROLLBACK when the batch has a decision without it, and not at all while the
batch has none (it may still be running).

Any thread; the calls block.
"""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..client._admin import AdminClient
from ..client._producer import send_request, send_result
from ..client._route import ClientError, MessageQueue
from ..remoting import AsyncRemotingClient, RemotingCommand, RemotingError, RequestCode
from ..remoting._codes import ResponseCode
from ._faults import reach
from ._options import SourceOptionError

PRODUCER_GROUP = "rocketstore-spark-eos"
DECISION_TOPIC = "rocketstore-spark-decisions"
PROP_QUERY = "rsQuery"
PROP_BATCH = "rsBatch"
PROP_PARTITION = "rsPartition"
PROP_WRITER = "rsWriter"
PROP_PARTS = "rsParts"
TRANSACTION_PREPARED = 0x4
END_COMMIT = 0x8
END_ROLLBACK = 0xC
# a decision's body part stays well below the broker's 4 MiB message size
_PART_BYTES = 3 << 20
_END_RETRIES = 6
# answers to an end that say it was not applied and may be sent again
_END_AGAIN = frozenset(
    (
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.SLAVE_NOT_AVAILABLE,
        ResponseCode.SERVICE_NOT_AVAILABLE,
    )
)
_ROUTE_WAIT_S = 60.0
# ends that fail within this long of a look-up of the masters share it
_LOOKUP_AGAIN_S = 0.5


class ExactlyOnceError(SourceOptionError):
    """An exactly-once write that cannot go on (a half the broker no longer has, a decision
    that cannot be written or read)."""


def decision_key(query: str, batch: int) -> str:
    return f"{query}:{batch}"


@dataclass
class Half:
    """One half message as its writer sent it."""

    seq: int  # the row's number in its writer
    commit_log_offset: int
    queue_offset: int  # in the half queue (tranStateTableOffset)


@dataclass
class WriterHalves:
    """What one writer (a task attempt) sent: its id and, per "topic/broker/queue", its
    halves in the order of their rows."""

    writer: str
    partition: int
    queues: dict[str, list[Half]] = field(default_factory=dict)

    def uniq(self, seq: int) -> str:
        return uniq_key(self.writer, seq)


def uniq_key(writer: str, seq: int) -> str:
    return f"{writer}{seq:08X}"


@dataclass
class Decision:
    """A batch's decision: the writers that count and their halves."""

    query: str
    batch: int
    writers: list[WriterHalves]

    @property
    def writer_ids(self) -> frozenset[str]:
        return frozenset(w.writer for w in self.writers)

    def encode(self) -> bytes:
        doc = {
            "query": self.query,
            "batch": self.batch,
            "writers": [
                {
                    "writer": w.writer,
                    "partition": w.partition,
                    "queues": {
                        q: [[h.seq, h.commit_log_offset, h.queue_offset] for h in halves]
                        for q, halves in w.queues.items()
                    },
                }
                for w in self.writers
            ],
        }
        return zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 6)

    @classmethod
    def decode(cls, body: bytes) -> Decision:
        doc = json.loads(zlib.decompress(body))
        return cls(
            doc["query"],
            int(doc["batch"]),
            [
                WriterHalves(
                    w["writer"],
                    int(w["partition"]),
                    {q: [Half(s, c, o) for s, c, o in hs] for q, hs in w["queues"].items()},
                )
                for w in doc["writers"]
            ],
        )


def ensure_decision_topic(admin: AdminClient) -> None:
    """Create the decision topic (one queue) on every master that does not have it."""
    import time

    route = admin.route(DECISION_TOPIC)
    have = set(route.brokers) if route is not None else set()
    masters = admin.masters()
    for name, addr in masters.items():
        if name not in have:
            admin.create_topic(addr, DECISION_TOPIC, read_queue_nums=1, write_queue_nums=1)
    deadline = time.monotonic() + _ROUTE_WAIT_S
    while route is None or not set(route.brokers) >= set(masters):
        if time.monotonic() > deadline:
            raise ExactlyOnceError(
                f"the name servers do not route {DECISION_TOPIC} to every broker group yet"
            )
        time.sleep(0.05)
        route = admin.route(DECISION_TOPIC)


def find_decision(admin: AdminClient, query: str, batch: int) -> Decision | None:
    """The batch's decision, or None when no broker group of the decision topic has it. A
    broker that does not answer is an error (its silence is no proof that there is none)."""
    if admin.route(DECISION_TOPIC) is None:
        # never "no decision" without asking the brokers: the route may be back soon
        raise ExactlyOnceError(f"the name servers have no route for {DECISION_TOPIC}")
    key = decision_key(query, batch)
    try:
        found = admin.query_message(DECISION_TOPIC, key, max_num=64)
    except (RemotingError, ClientError) as exc:
        raise ExactlyOnceError(f"looking up the decision {key} failed: {exc}") from exc
    heads = [m for m in found if m.properties.get(PROP_PARTS) is not None]
    if not heads:
        return None
    head = heads[0]
    parts = int(head.properties[PROP_PARTS])
    body = bytes(head.body)
    for i in range(1, parts):
        more = [m for m in admin.query_message(DECISION_TOPIC, f"{key}:{i}", max_num=64)]
        if not more:
            raise ExactlyOnceError(f"the decision {key} misses its part {i} of {parts}")
        body += bytes(more[0].body)
    return Decision.decode(body)


def write_decision(admin: AdminClient, decision: Decision, timeout_s: float) -> None:
    """Store ``decision`` (its parts first, the head with rsParts last: the head is the
    decision), and return once ``find_decision`` finds it: a broker answers a send before its
    dispatch has indexed the message (RocketMQ always, rocketstore for a new queue), and a
    replay that looked before then would decide the batch again. Raises ExactlyOnceError when
    no broker group stored it, or it was not found within ``timeout_s``."""
    import time

    body = decision.encode()
    key = decision_key(decision.query, decision.batch)
    chunks = [body[i : i + _PART_BYTES] for i in range(0, len(body), _PART_BYTES)] or [b""]
    for i in range(len(chunks) - 1, -1, -1):
        props = {"KEYS": key if i == 0 else f"{key}:{i}", "WAIT": "true"}
        props["UNIQ_KEY"] = f"{key}:{i}"
        if i == 0:
            props[PROP_PARTS] = str(len(chunks))
        _send_one(admin, DECISION_TOPIC, props, chunks[i], timeout_s)
    deadline = time.monotonic() + timeout_s
    while find_decision(admin, decision.query, decision.batch) is None:
        if time.monotonic() > deadline:
            raise ExactlyOnceError(
                f"the decision {key} was stored but not found within {timeout_s:g} s"
            )
        time.sleep(0.02)


def _send_one(
    admin: AdminClient, topic: str, props: dict[str, str], body: bytes, timeout_s: float
) -> None:
    failures: list[str] = []
    for attempt in range(_END_RETRIES):
        route = admin.route(topic)
        if route is None:
            raise ExactlyOnceError(f"topic {topic} has no route")
        for mq in route.queues(write=True):
            addr = route.master(mq.broker_name)
            if addr is None:
                continue
            cmd = send_request(PRODUCER_GROUP, topic, mq, props, body, batch=False)
            try:
                r = admin.client.invoke(addr, cmd, timeout_s)
            except RemotingError as exc:
                failures.append(f"{addr}: {exc}")
                continue
            if send_result(r, topic, mq, "") is not None and r.code == ResponseCode.SUCCESS:
                return
            failures.append(f"{addr}: code {r.code} {r.remark or ''}")
        _sleep(attempt)
    raise ExactlyOnceError(f"no broker stored the decision ({'; '.join(failures[-3:])})")


def _sleep(attempt: int) -> None:
    import time

    time.sleep(min(0.2 * (2**attempt), 2.0))


# ---- ending the halves ----------------------------------------------------------------------


def end_halves(
    admin: AdminClient,
    writers: Iterable[WriterHalves],
    commit: bool,
    timeout_s: float,
    *,
    batch: int = -1,
) -> int:
    """END_TRANSACTION (commit or rollback) for every half of ``writers``: a writer's halves
    in a queue one after the other in their order (an end is sent once the one before it is
    answered), every writer and queue at the same time. A half ended before with the same
    resolution is fine (the broker answers SUCCESS); one the broker does not have or ended
    the other way is an ExactlyOnceError. Returns how many were ended."""
    chains: dict[str, list[tuple[Half, str]]] = {}
    for w in writers:
        for q, halves in w.queues.items():
            chains[f"{q}/{w.writer}"] = [(h, w.uniq(h.seq)) for h in halves]
    if not chains:
        return 0
    return asyncio.run(_end_all(admin, chains, commit, timeout_s, batch))


def _signer_of(admin: AdminClient) -> Any:
    """The signer ``admin``'s requests carry (the write's ACL account), for the ends too."""
    return admin.client.signer


async def _end_all(
    admin: AdminClient,
    chains: dict[str, list[tuple[Half, str]]],
    commit: bool,
    timeout_s: float,
    batch: int,
) -> int:
    client = AsyncRemotingClient(signer=_signer_of(admin))
    masters: dict[str, str] = {}
    total = sum(len(v) for v in chains.values())
    done = [0]
    what = "commit" if commit else "rollback"

    looked_up = [-1e9]
    looking = asyncio.Lock()

    async def master(broker: str, refresh: bool) -> str:
        """The group's master; looked up again (once for every end that asks within
        _LOOKUP_AGAIN_S) when ``refresh``: an end to it failed."""
        loop = asyncio.get_running_loop()
        asked = loop.time()
        if refresh or broker not in masters:
            async with looking:
                if broker not in masters or looked_up[0] < asked - _LOOKUP_AGAIN_S:
                    found = await asyncio.to_thread(admin.masters)
                    looked_up[0] = loop.time()
                    masters.clear()
                    masters.update(found)
        if broker not in masters:
            raise ExactlyOnceError(f"broker group {broker} has no master")
        return masters[broker]

    async def end_one(q: str, broker: str, h: Half, uniq: str) -> None:
        header = {
            "producerGroup": PRODUCER_GROUP,
            "tranStateTableOffset": str(h.queue_offset),
            "commitLogOffset": str(h.commit_log_offset),
            "commitOrRollback": str(END_COMMIT if commit else END_ROLLBACK),
            "fromTransactionCheck": "false",
            "msgId": uniq,
            "transactionId": uniq,
        }
        failures: list[str] = []
        for attempt in range(_END_RETRIES):
            try:
                addr = await master(broker, attempt > 0)
                r = await client.invoke(
                    addr, RemotingCommand.request(RequestCode.END_TRANSACTION, header), timeout_s
                )
            except (RemotingError, ExactlyOnceError) as exc:
                failures.append(str(exc))
            else:
                if r.code == ResponseCode.SUCCESS:
                    break
                if r.code not in _END_AGAIN:
                    raise ExactlyOnceError(
                        f"{what} of {uniq} ({q}) refused: code {r.code} {r.remark or ''}"
                    )
                failures.append(f"code {r.code} {r.remark or ''}")
            await asyncio.sleep(min(0.2 * (2**attempt), 2.0))
        else:
            raise ExactlyOnceError(
                f"ending {uniq} ({q}) failed {len(failures)} times: {failures[-1]}"
            )
        done[0] += 1
        if commit and done[0] * 2 >= total and done[0] * 2 - 2 < total:
            reach("mid_end", batch)

    async def one_chain(chain: str, halves: list[tuple[Half, str]]) -> None:
        # one writer's halves of one queue, in row order: an end waits for the one before
        # it, since the broker may apply two ends of one connection in either order (one
        # waits for its half to be dispatched, or for a check of it to finish)
        q = chain.rsplit("/", 1)[0]
        broker = q.split("/")[1]
        for h, uniq in halves:
            await end_one(q, broker, h, uniq)

    try:
        await asyncio.gather(*(one_chain(c, hs) for c, hs in sorted(chains.items())))
    finally:
        client.close()
    return done[0]


def queue_name(mq: MessageQueue) -> str:
    return f"{mq.topic}/{mq.broker_name}/{mq.queue_id}"
