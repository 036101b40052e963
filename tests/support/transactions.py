"""A transactional producer speaking the remoting protocol by hand on a broker's loop (half
messages, their ends, answers to the broker's checks), and the end kinds it sends."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rocketstore.protocol._heartbeat import HeartbeatData, ProducerData, encode_heartbeat
from rocketstore.remoting._client import AsyncRemotingClient
from rocketstore.remoting._codes import RequestCode
from rocketstore.remoting._codes import ResponseCode as RC
from rocketstore.remoting._command import RemotingCommand
from rocketstore.store.log._record import (
    TRANSACTION_PREPARED_TYPE,
    MessageExt,
    decode_msg_id,
    decode_stored,
    properties_to_string,
)

from .grpc_broker import BrokerThread
from .waits import wait_dispatched

PG = "TxProducerGroup"
COMMIT, ROLLBACK, UNKNOWN = 8, 12, 0
_ids = itertools.count()
# the broker checks only when a test asks (``check``), and every half is old enough at once
QUIET_CHECKS = {"transaction_timeout": 0, "transaction_check_interval": 3_600_000}


@contextlib.contextmanager
def quiet_broker(root: Path) -> Iterator[BrokerThread]:
    """A broker in ``root`` with QUIET_CHECKS, closed when the block ends."""
    b = BrokerThread(root, broker_overrides=dict(QUIET_CHECKS))
    try:
        yield b.start()
    finally:
        b.close()


def heartbeat_request(client_id: str, group: str) -> RemotingCommand:
    """A HEART_BEAT of a client with one producer group."""
    body = encode_heartbeat(HeartbeatData(client_id, producers=(ProducerData(group),)))
    return RemotingCommand.request(RequestCode.HEART_BEAT, {}, body)


def half_header(
    group: str, topic: str, queue_id: int, properties: dict[str, str], born_ms: int | None = None
) -> dict[str, str]:
    """The SEND_MESSAGE header of a half message (its ``properties`` as given)."""
    return {
        "producerGroup": group,
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": str(queue_id),
        "sysFlag": str(TRANSACTION_PREPARED_TYPE),
        "bornTimestamp": str(born_ms if born_ms is not None else int(time.time() * 1000)),
        "flag": "0",
        "properties": properties_to_string(properties),
        "reconsumeTimes": "0",
        "unitMode": "false",
        "batch": "false",
    }


def half_properties(group: str, uniq: str, **props: str) -> dict[str, str]:
    """A half message's properties: a transaction of ``group`` with id ``uniq``."""
    return {"TRAN_MSG": "true", "PGROUP": group, "UNIQ_KEY": uniq, "WAIT": "true", **props}


def end_header(
    sent: RemotingCommand,
    uniq: str,
    kind: int,
    group: str,
    *,
    from_check: bool = False,
    commit_log_offset: int | None = None,
) -> dict[str, str]:
    """The END_TRANSACTION header ending the half ``sent`` answered (id ``uniq``) with
    ``kind``."""
    if commit_log_offset is None:
        commit_log_offset = decode_msg_id(sent.ext_fields["msgId"])[1]
    return {
        "producerGroup": group,
        "tranStateTableOffset": str(sent.ext_fields["queueOffset"]),
        "commitLogOffset": str(commit_log_offset),
        "commitOrRollback": str(kind),
        "fromTransactionCheck": "true" if from_check else "false",
        "msgId": uniq,
        "transactionId": uniq,
    }


class TxProducer:
    """A producer speaking the remoting protocol by hand on the broker's loop: heartbeats for
    its group, sends half messages, ends them, and answers the broker's checks with
    ``answer`` (commit / rollback / unknown)."""

    def __init__(self, b: BrokerThread, group: str = PG, answer: int = COMMIT) -> None:
        self.b = b
        self.group = group
        self.answer = answer
        self.checks: list[tuple[dict[str, Any], MessageExt]] = []
        self.client: AsyncRemotingClient

        async def make() -> None:
            self.client = AsyncRemotingClient({RequestCode.CHECK_TRANSACTION_STATE: self._check})

        b.call(make)

    @property
    def addr(self) -> str:
        return self.b.broker.address

    def call(self, cmd: RemotingCommand) -> RemotingCommand:
        async def go() -> RemotingCommand:
            return await self.client.invoke(self.addr, cmd, 5.0)

        return self.b.call(go)

    def heartbeat(self) -> None:
        r = self.call(heartbeat_request(f"tx-client-{self.group}", self.group))
        assert r.code == RC.SUCCESS, r.remark

    def send_half(
        self, topic: str, body: bytes, queue_id: int = 1, **props: str
    ) -> tuple[RemotingCommand, str]:
        uniq = f"UNIQ{next(_ids):08d}"
        properties = half_properties(self.group, uniq, TAGS="TagTx", **props)
        header = half_header(self.group, topic, queue_id, properties)
        r = self.call(RemotingCommand.request(RequestCode.SEND_MESSAGE, header, body))
        return r, uniq

    def end(
        self,
        sent: RemotingCommand,
        uniq: str,
        kind: int,
        *,
        group: str | None = None,
        from_check: bool = False,
        commit_log_offset: int | None = None,
    ) -> RemotingCommand:
        header = end_header(
            sent,
            uniq,
            kind,
            group or self.group,
            from_check=from_check,
            commit_log_offset=commit_log_offset,
        )
        return self.call(RemotingCommand.request(RequestCode.END_TRANSACTION, header))

    def _check(self, cmd: RemotingCommand, conn: Any) -> None:
        ext = dict(cmd.ext_fields)
        msg = decode_stored(bytes(cmd.body), 0, len(cmd.body))
        self.checks.append((ext, msg))
        header = {
            "producerGroup": self.group,
            "tranStateTableOffset": ext["tranStateTableOffset"],
            "commitLogOffset": ext["commitLogOffset"],
            "commitOrRollback": str(self.answer),
            "fromTransactionCheck": "true",
            "msgId": ext["msgId"],
            "transactionId": ext["transactionId"],
        }
        conn.send(RemotingCommand.request(RequestCode.END_TRANSACTION, header, oneway=True))

    def close(self) -> None:
        async def down() -> None:
            self.client.close()

        self.b.call(down)


def check(b: BrokerThread) -> int:
    """One transaction check round, once everything stored so far is in its queues (as the
    periodic round a moment later would find it)."""
    wait_dispatched(b.broker.store)
    return b.call(b.broker.transactions.check)


def queue_messages(b: BrokerThread, topic: str, queue_id: int) -> list[MessageExt]:
    """What the queue holds, once everything stored so far is in its queues."""
    wait_dispatched(b.broker.store)

    def read() -> list[MessageExt]:
        return list(b.broker.store.get_message("reader", topic, queue_id, 0, 1000).messages)

    return b.run(read)


def wait_for(cond: Any, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return bool(cond())
