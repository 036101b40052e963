"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320).

A send is checked (broker writable, topic name, topic known or created from the default topic,
queue id), stored through the store's non-blocking put, and answered when the put's flush and
replication waits are over; the event loop never blocks on them. Put statuses map to RocketMQ's
response codes; a stored message's response carries its offset message id, queue id and queue
offset.

A put that must wait (SYNC_FLUSH, SYNC_MASTER) is answered through an asyncio future: the
store thread that completes the put queues it, and the first of a burst schedules one call on
the loop that answers every queued put (one wake-up of the loop per group commit, not one per
message).

Loop thread only, but for ``_PutWaits._arrived``.
"""

from __future__ import annotations

import asyncio
import functools
import random
import struct
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

from ...protocol._java_order import java_order
from ...remoting import Connection, RemotingCommand, ResponseCode
from ...remoting._command import RESPONSE_FLAG, int32_value, int_value, str_value
from ...remoting._send_header import SendHeader, send_header
from ...store._config import StoreConfig
from ...store._disk import WRITE_FAILED_PREFIX, disk_used_ratio
from ...store.ha._in_sync import FENCED_PREFIX
from ...store.ha._transfer import GroupTransferService
from ...store.log._message import BatchedMessage, Message, PutMessageResult, PutMessageStatus
from ...store.log._record import (
    PROPERTY_DELAY,
    PROPERTY_SEPARATOR,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_WAIT,
    SYSFLAG_TRANSACTION_MASK,
    properties_to_string,
    string_to_properties,
)
from ...store.services._schedule import (
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    apply_timer,
)
from .._errors import InvalidTopicError
from .._services import HasClock, HasTopics
from ..state._topic_config import PERM_WRITE, RETRY_GROUP_TOPIC_PREFIX, is_not_allowed_send_topic
from ._send_back import SendBackContext, retry_or_dlq
from ._slave_waits import SlaveWait, SlaveWaits
from ._transaction import HasTransactions

RC = ResponseCode
PROPERTY_CLUSTER = "CLUSTER"

_STATUS_CODES: dict[PutMessageStatus, tuple[int, str | None]] = {
    PutMessageStatus.PUT_OK: (RC.SUCCESS, None),
    PutMessageStatus.FLUSH_DISK_TIMEOUT: (RC.FLUSH_DISK_TIMEOUT, "flush disk timeout"),
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: (RC.FLUSH_SLAVE_TIMEOUT, "flush slave timeout"),
    PutMessageStatus.SLAVE_NOT_AVAILABLE: (RC.SLAVE_NOT_AVAILABLE, "slave not available"),
    PutMessageStatus.CREATE_MAPPED_FILE_FAILED: (
        RC.SYSTEM_ERROR,
        "create mapped file failed, server is busy or broken.",
    ),
    PutMessageStatus.MESSAGE_ILLEGAL: (RC.MESSAGE_ILLEGAL, None),
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: (RC.MESSAGE_ILLEGAL, None),
    # its remark names the disk use (disk_remark): it is made when answered
    PutMessageStatus.SERVICE_NOT_AVAILABLE: (RC.SERVICE_NOT_AVAILABLE, None),
    PutMessageStatus.OS_PAGECACHE_BUSY: (
        RC.SYSTEM_BUSY,
        "[PC_SYNCHRONIZED]broker busy, start flow control for a while",
    ),
    PutMessageStatus.UNKNOWN_ERROR: (RC.SYSTEM_ERROR, "UNKNOWN_ERROR"),
}

_PUT_OK = PutMessageStatus.PUT_OK
_SUCCESS = int(RC.SUCCESS)
_INT32_LIMIT = 1 << 31
_SMALL_TEXT = {str(i): i for i in range(1024)}  # the usual queue ids, flags and counts
_PLAN_LIMIT = 1024  # property key sets whose stored order is kept

_BATCH_HEAD = struct.Struct(">iiiii")  # total size, magic, body CRC, flag, body length
_SHORT = struct.Struct(">h")


@functools.lru_cache(maxsize=1024)
def _stored_order(keys: tuple[str, ...]) -> tuple[str, ...]:
    """The properties' names as RocketMQ's broker stores them: in the order its HashMap of the
    request's properties (with CLUSTER added) iterates them, WAIT left out. Key sets repeat
    from message to message, so the order is worked out once for each."""
    return tuple(k for k in java_order(keys) if k != PROPERTY_WAIT)


def stored_properties(props: dict[str, str]) -> tuple[dict[str, str], bool]:
    """A send's properties as RocketMQ's broker stores them (its HashMap's order, without
    WAIT, as RocketMQ 4.9 keeps "WAIT=true" out of every stored message), and whether the
    sender waits for the store (WAIT absent or "true", as Java's Boolean.parseBoolean reads
    it)."""
    value = props.get(PROPERTY_WAIT)
    wait = value is None or value.lower() == "true"
    return {k: props[k] for k in _stored_order(tuple(props))}, wait


def disk_remark(config: StoreConfig) -> str:
    """RocketMQ's answer to a put the store refused (SERVICE_NOT_AVAILABLE), with how full the
    commit log's, the consume queues' and the index's partitions are."""
    root = config.store_path_root_dir
    cl, cq, index = (
        disk_used_ratio(path)
        for path in (config.commit_log_dir, f"{root}/consumequeue", f"{root}/index")
    )
    return (
        "service not available now. It may be caused by one of the following reasons: the "
        f"broker's disk is full [CL: {cl:5.2f} CQ: {cq:5.2f} INDEX: {index:5.2f}], messages are "
        "put to the slave, message store has been shut down, etc."
    )


class SendContext(SendBackContext, HasClock, HasTopics, HasTransactions, Protocol):
    """What SEND_MESSAGE uses of the broker."""


def decode_batch(body: bytes | bytearray | memoryview) -> list[tuple[int, bytes, str]]:
    """A SEND_BATCH_MESSAGE body → (flag, body, properties text) per message. ValueError when
    the body does not parse (UnicodeDecodeError when a text is not UTF-8)."""
    view = memoryview(body)
    out: list[tuple[int, bytes, str]] = []
    pos = 0
    end = len(view)
    while pos < end:
        if pos + _BATCH_HEAD.size > end:
            raise ValueError(f"batch body truncated at {pos}")
        total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(view, pos)
        start = pos + _BATCH_HEAD.size
        props_at = start + body_len
        if total <= 0 or body_len < 0 or props_at + 2 > end or pos + total > end:
            raise ValueError(f"bad message in batch body at {pos}")
        (props_len,) = _SHORT.unpack_from(view, props_at)
        if props_len < 0 or props_at + 2 + props_len != pos + total:
            raise ValueError(f"bad properties length in batch body at {pos}")
        text = bytes(view[props_at + 2 : props_at + 2 + props_len]).decode("utf-8")
        out.append((flag, bytes(view[start:props_at]), text))
        pos += total
    return out


def batch_properties_text(header_properties: str, cluster: str) -> str:
    """The properties every message of a batch is stored with after its own, as RocketMQ's
    broker writes them: the request's ``properties`` (the batch's WAIT, most often) with
    CLUSTER added, in its HashMap's order."""
    props = string_to_properties(header_properties)
    props[PROPERTY_CLUSTER] = cluster
    return properties_to_string({k: props[k] for k in java_order(props)})


def joined_properties(own: str, shared: str) -> str:
    """A batched message's stored properties: its own text, a separator when both are there
    and its own does not end in one, then the batch's (RocketMQ 4.9's batch encoder)."""
    if own and shared and not own.endswith(PROPERTY_SEPARATOR):
        return f"{own}{PROPERTY_SEPARATOR}{shared}"
    return own + shared


# a RocketMQ 5 client's timer message (delivered at its time; see store/services/_schedule.py)
_TIMER_KEYS = frozenset(
    {PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS, PROPERTY_TIMER_DELIVER_MS}
)


_new_message: Callable[[type[Message]], Message] = object.__new__  # type: ignore[assignment]


def split_properties(text: str) -> dict[str, str]:
    """``string_to_properties`` (the reference) written out here, so that it is compiled with
    the send path: ``name\x01value\x02...`` into a dict, a pair without a name or without
    its separator left out."""
    props: dict[str, str] = {}
    if not text:
        return props
    for item in text.split(PROPERTY_SEPARATOR):
        at = item.find("\x01")
        if at > 0:
            props[item[:at]] = item[at + 1 :]
    return props


def str_value_or_empty(value: Any) -> str:
    """A text field as sent ("" when absent): a JSON number as its decimal text."""
    return str_value(value) or ""


def _plain_int(value: Any, digits: int) -> int | None:
    """A non-negative integer ext field of at most ``digits`` decimal digits, sent as a JSON
    number or as ASCII digits; None for anything else (absent, empty, signed, spaced, out of
    range): the general path reads those, and refuses what it must."""
    if type(value) is int:
        return value if 0 <= value < 10**digits else None
    if type(value) is str and 0 < len(value) <= digits and value.isdigit() and value.isascii():
        return int(value)
    return None


class SendProcessor:
    fast_path = True
    """Plain sends (see ``_send_fast``) skip the general path; False sends every request
    through it (the differential tests compare the two)."""

    def __init__(self, broker: SendContext) -> None:
        self.broker = broker
        self.store = broker.store
        self.topics = broker.topics
        self.cluster = broker.config.cluster_name
        self.broker_name = broker.config.broker_name
        self._waits: _PutWaits | None = None
        self._levels_ms = broker.store_config.delay_levels_ms()
        # a send's property names (as sent) -> the stored order with CLUSTER, or None when a
        # name asks for the general path (a delay, a transaction, a timer)
        self._plans: dict[tuple[str, ...], tuple[str, ...] | None] = {}
        # ASYNC_FLUSH without replication waits: a put is complete once appended, so the fast
        # path puts without a future (unless a put stage has been added since)
        self._commit_log = self.store.commit_log
        self._puts_never_wait = (
            broker.store_config.flush_disk_type == "ASYNC_FLUSH"
            and broker.store_config.broker_role != "SYNC_MASTER"
        )
        # ASYNC_FLUSH: a put whose one stage is a slave's acknowledgement waits for nothing else
        self._async_flush = broker.store_config.flush_disk_type == "ASYNC_FLUSH"

    def handlers(self) -> dict[int, Any]:
        return {10: self.send, 310: self.send, 320: self.send_batch}

    # ---- requests ---------------------------------------------------------------------------

    def send(self, cmd: RemotingCommand, conn: Connection) -> Any:
        """SEND_MESSAGE and SEND_MESSAGE_V2: the header decoded once (``send_header``: the
        object the ACL checked, when it is on), then the fast path or the general one."""
        if self.fast_path:
            answer = self._send_fast(cmd, conn, send_header(cmd))
            if answer is not None:
                return answer
        return self._send(cmd, conn)

    def _send_fast(
        self, cmd: RemotingCommand, conn: Connection, header: SendHeader
    ) -> RemotingCommand | asyncio.Future[RemotingCommand] | None:
        """A plain send (no batch, a known topic that is neither a retry topic nor refused, a
        queue id in range, no delay, transaction or timer property, every number plain) from
        the header to the store's put, storing and answering exactly as ``_send`` does; None
        for anything else, which ``_send`` serves."""
        batch = header.batch
        if not (batch is None or batch is False or batch == "false" or batch == "0"):
            return None
        topic = header.topic
        if topic is None:
            return None
        small = _SMALL_TEXT.get
        value = header.queue_id
        queue_id = small(value) if type(value) is str else value if type(value) is int else None
        if queue_id is None or queue_id < 0:
            queue_id = _plain_int(value, 10)
        if queue_id is None or not self.plain_queue(topic, queue_id):
            return None
        text = header.properties
        value = header.sys_flag
        sys_flag = small(value) if type(value) is str else value if type(value) is int else None
        if sys_flag is None or sys_flag < 0:
            sys_flag = _plain_int(value, 10)
        value = header.flag
        flag = small(value) if type(value) is str else value if type(value) is int else None
        if flag is None or flag < 0:
            flag = _plain_int(value, 10)
        value = header.reconsume_times
        reconsume = small(value) if type(value) is str else value if type(value) is int else None
        if reconsume is None or reconsume < 0:
            reconsume = _plain_int(value, 10)
        born = _plain_int(header.born_timestamp, 18)
        if (
            type(text) is not str
            or sys_flag is None
            or sys_flag >= _INT32_LIMIT
            or flag is None
            or flag >= _INT32_LIMIT
            or born is None
            or reconsume is None
            or reconsume >= _INT32_LIMIT
        ):
            return None
        r = self.put_plain(
            topic,
            queue_id,
            text,
            sys_flag,
            flag,
            born,
            reconsume,
            cmd.body if type(cmd.body) is bytes else bytes(cmd.body),
            conn.peer,
        )
        if r is None:
            return None
        if r.__class__ is not PutMessageResult:
            return self._finish(r, queue_id, batch=False)  # type: ignore[arg-type]
        result: PutMessageResult = r  # type: ignore[assignment]
        if result.status is _PUT_OK:
            return RemotingCommand(
                _SUCCESS,
                0,
                RESPONSE_FLAG,
                None,
                {
                    "msgId": result.msg_id,
                    "queueId": str(queue_id),
                    "queueOffset": str(result.queue_offset),
                    "MSG_REGION": "DefaultRegion",
                    "TRACE_ON": "true",
                },
            )
        return self._answer(result, queue_id, False)

    def puts_never_wait(self) -> bool:
        """A put is complete once appended: ASYNC_FLUSH, no synchronous replication, no put
        stage added since the start."""
        return self._puts_never_wait and not self._commit_log.put_stages

    def slave_stage(self) -> GroupTransferService | None:
        """The group-transfer service when a slave's acknowledgement is a put's only wait
        (ASYNC_FLUSH, the service the store's one put stage: a SYNC_MASTER), else None."""
        if not self._async_flush:
            return None
        stages = self._commit_log.put_stages
        if len(stages) != 1:
            return None
        stage = stages[0]
        return stage if isinstance(stage, GroupTransferService) else None

    def plain_queue(self, topic: str, queue_id: int) -> bool:
        """May a plain send go to ``topic``'s queue ``queue_id`` without the general path's
        checks: this broker takes writes, the topic is known, neither the store's own nor a
        retry topic, and has that queue."""
        if (
            not self.store.is_master
            or not self.broker.config.broker_permission & PERM_WRITE
            or is_not_allowed_send_topic(topic)
            or topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        ):
            return False
        config = self.topics.select(topic)
        return config is not None and queue_id < max(
            config.write_queue_nums, config.read_queue_nums
        )

    def put_plain(
        self,
        topic: str,
        queue_id: int,
        text: str,
        sys_flag: int,
        flag: int,
        born: int,
        reconsume: int,
        body: bytes,
        peer: str,
        waits: SlaveWaits | None = None,
    ) -> PutMessageResult | Future[PutMessageResult] | SlaveWait | None:
        """Store a plain send whose header fields are read and checked (topic known, queue id
        in range, numbers plain): its properties ``text`` stored as ``_send`` stores them. The
        put's result, or its future when the put waits (SYNC_FLUSH, SYNC_MASTER), or None
        (nothing stored) when a property asks for the general path.

        With ``waits`` (given only while ``slave_stage`` names its service), a send that
        waits for the slave is put without the store's wait and its wait joins ``waits``: the
        result is its ``SlaveWait``, answered on the loop (or the answer, when there is
        nothing to wait for)."""
        props = split_properties(text)
        keys = tuple(props)
        plans = self._plans
        try:
            order = plans[keys]
        except KeyError:
            order = self._plan(keys)
        if order is None:
            return None
        props[PROPERTY_CLUSTER] = self.cluster
        wait = props.get(PROPERTY_WAIT)
        # Message(topic, body, queue_id, properties=..., flag=..., ...) without its __init__'s
        # keyword arguments and its copy of the properties (a new dict here): 0.2 µs instead of
        # 0.7; tests/test_send_frame.py checks that every slot of Message is set here
        msg = _new_message(Message)
        msg.topic = topic
        msg.body = body
        msg.queue_id = queue_id
        msg.properties = {k: props[k] for k in order}
        msg.flag = flag
        msg.sys_flag = sys_flag
        msg.born_timestamp = born
        msg.born_host = peer or None
        msg.reconsume_times = reconsume
        msg.prepared_transaction_offset = 0
        msg.wait_store_msg_ok = wait is None or wait.lower() == "true"
        if self.puts_never_wait():
            return self.store.put_message(msg)  # returns once appended: nothing to wait for
        if waits is not None and msg.wait_store_msg_ok:
            # the slave's acknowledgement is the put's only wait: ``waits`` carries it
            msg.wait_store_msg_ok = False
            stored = self.store.put_message(msg)  # returns once appended
            if stored.status is not _PUT_OK:
                return stored
            return waits.wait(stored, queue_id)
        fut = self.store.put_message_async(msg)
        if not fut.done():
            return fut
        return fut.result()

    def _plan(self, keys: tuple[str, ...]) -> tuple[str, ...] | None:
        """The stored order of a send's properties once CLUSTER is added (``stored_properties``),
        or None when one of them asks for the general path; kept for the next send with the
        same names."""
        if (
            PROPERTY_DELAY in keys
            or PROPERTY_TRANSACTION_PREPARED in keys
            or not _TIMER_KEYS.isdisjoint(keys)
        ):
            order = None
        else:
            order = _stored_order(keys if PROPERTY_CLUSTER in keys else (*keys, PROPERTY_CLUSTER))
        plans = self._plans
        if len(plans) >= _PLAN_LIMIT:
            plans.clear()
        plans[keys] = order
        return order

    def _send(self, cmd: RemotingCommand, conn: Connection) -> Any:
        """The general path of a single send."""
        header = send_header(cmd)
        if header.is_batch():
            return self.send_batch(cmd, conn)
        checked = self._check(header, conn)
        if isinstance(checked, RemotingCommand):
            return checked
        topic, queue_id = checked
        props = string_to_properties(str_value_or_empty(header.properties))
        props[PROPERTY_CLUSTER] = self.cluster
        props, wait = stored_properties(props)
        sys_flag = int32_value(header.sys_flag, "sysFlag", 0) or 0
        reconsume = int32_value(header.reconsume_times, "reconsumeTimes", 0) or 0
        flag = int32_value(header.flag, "flag", 0) or 0
        born_timestamp = int_value(header.born_timestamp, "bornTimestamp", 0) or 0
        # a half message, unless it is a retry of one (clients before 4.6.1 send those back
        # with TRAN_MSG kept and a delay level), as RocketMQ decides
        delay = props.get(PROPERTY_DELAY, "")
        prepared = props.get(PROPERTY_TRANSACTION_PREPARED) == "true" and not (
            reconsume > 0 and delay.isdigit() and int(delay) > 0
        )
        if prepared and self.broker.config.reject_transaction_message:
            return RemotingCommand.response(
                RC.NO_PERMISSION,
                f"the broker[{self.broker_name}] sending transaction message is forbidden",
            )
        if not _TIMER_KEYS.isdisjoint(props):
            try:
                apply_timer(props, self.broker.clock.now_ms(), self._levels_ms)
            except ValueError as exc:
                return RemotingCommand.response(RC.MESSAGE_ILLEGAL, f"timer message: {exc}")
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            redirected = retry_or_dlq(
                self.broker,
                topic,
                queue_id,
                reconsume,
                int32_value(header.max_reconsume_times, "maxReconsumeTimes"),
                props,
            )
            if isinstance(redirected, RemotingCommand):
                return redirected
            topic, queue_id = redirected
        msg = Message(
            topic,
            bytes(cmd.body),
            queue_id,
            properties=props,
            flag=flag,
            sys_flag=sys_flag,
            born_timestamp=born_timestamp,
            born_host=conn.peer or None,
            reconsume_times=reconsume,
            wait_store_msg_ok=wait,
        )
        if prepared:
            self.broker.transactions.to_half(msg, header.producer_group)
        return self._finish(self.store.put_message_async(msg), queue_id, batch=False)

    def send_batch(self, cmd: RemotingCommand, conn: Connection) -> Any:
        """SEND_BATCH_MESSAGE (and a single send whose header says batch): clients send it
        with SEND_MESSAGE_V2's short header names (the Java and C++ clients do), older ones
        with the long names; ``send_header`` reads either."""
        header = send_header(cmd)
        checked = self._check(header, conn)
        if isinstance(checked, RemotingCommand):
            return checked
        topic, queue_id = checked
        try:
            batch_flag = int32_value(header.sys_flag, "sysFlag", 0) or 0
            born = int_value(header.born_timestamp, "bornTimestamp", 0) or 0
        except ValueError as exc:
            return RemotingCommand.response(RC.MESSAGE_ILLEGAL, str(exc))
        if batch_flag & SYSFLAG_TRANSACTION_MASK:
            return RemotingCommand.response(
                RC.MESSAGE_ILLEGAL, "a batch of messages cannot be transactional"
            )
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return RemotingCommand.response(
                RC.MESSAGE_ILLEGAL, "batch request does not support retry group"
            )
        try:
            items = decode_batch(cmd.body)
        except (ValueError, UnicodeDecodeError) as bad:
            return RemotingCommand.response(RC.MESSAGE_ILLEGAL, f"bad batch body: {bad}")
        if not items:
            return RemotingCommand.response(RC.MESSAGE_ILLEGAL, "empty batch")
        host = conn.peer or None
        shared = batch_properties_text(str_value_or_empty(header.properties), self.cluster)
        msgs: list[Message] = []
        for flag, body, text in items:
            msgs.append(
                BatchedMessage(
                    topic,
                    body,
                    queue_id,
                    joined_properties(text, shared),
                    flag=flag,
                    born_timestamp=born,
                    born_host=host,
                )
            )
        return self._finish(self.store.put_messages_async(msgs), queue_id, batch=True)

    # ---- checks and answers -----------------------------------------------------------------

    def _check(self, header: SendHeader, conn: Connection) -> tuple[str, int] | RemotingCommand:
        """(topic, queue id) of a send that may go ahead, or the refusal."""
        is_slave = not self.store.is_master
        if is_slave or not self.broker.config.broker_permission & PERM_WRITE:
            return RemotingCommand.response(
                RC.NO_PERMISSION if not is_slave else RC.SERVICE_NOT_AVAILABLE,
                f"the broker[{self.broker_name}] sending message is forbidden"
                + (" (it is a slave)" if is_slave else ""),
            )
        topic = header.topic or ""
        if is_not_allowed_send_topic(topic):
            # the schedule and transaction topics are the store's own
            return RemotingCommand.response(
                RC.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden."
            )
        try:
            config = self.topics.select(topic)
            if config is None:
                config = self.broker.create_topic_for_send(
                    topic,
                    {
                        "defaultTopic": header.default_topic,
                        "defaultTopicQueueNums": header.default_topic_queue_nums,
                        "sysFlag": header.sys_flag,
                    },
                )
        except InvalidTopicError as exc:
            return RemotingCommand.response(RC.SYSTEM_ERROR, str(exc))
        if config is None:
            return RemotingCommand.response(
                RC.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!"
            )
        try:
            queue_id = int32_value(header.queue_id, "queueId", 0)
        except ValueError as bad:
            return RemotingCommand.response(RC.SYSTEM_ERROR, str(bad))
        assert queue_id is not None
        nums = max(config.write_queue_nums, config.read_queue_nums)
        if queue_id < 0:
            queue_id = random.randrange(config.write_queue_nums)
        if queue_id >= nums:
            return RemotingCommand.response(
                RC.SYSTEM_ERROR,
                f"request queueId[{queue_id}] is illegal, topic {topic} has {nums} queues, "
                f"producer: {conn.peer}",
            )
        return topic, queue_id

    def _finish(
        self, fut: Future[PutMessageResult], queue_id: int, *, batch: bool
    ) -> RemotingCommand | asyncio.Future[RemotingCommand]:
        if fut.done():
            return self._answer(fut.result(), queue_id, batch)
        waits = self._waits
        if waits is None:
            waits = self._waits = _PutWaits(asyncio.get_running_loop(), self._answer)
        return waits.watch(fut, queue_id, batch)

    def _answer(self, r: PutMessageResult, queue_id: int, batch: bool) -> RemotingCommand:
        code, remark = _STATUS_CODES.get(r.status, (RC.SYSTEM_ERROR, r.status.name))
        if r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
            if r.error is not None and r.error.startswith((FENCED_PREFIX, WRITE_FAILED_PREFIX)):
                # a controller-mode master that may not acknowledge; a store that cannot
                # write for another cause than a full disk (open files, ...): as it is
                remark = r.error
            else:
                remark = disk_remark(self.broker.store_config)
        elif r.error is not None and r.error.startswith(WRITE_FAILED_PREFIX):
            remark = r.error
        elif remark is None and code != RC.SUCCESS:
            remark = r.error or r.status.name
        if not r.ok:
            return RemotingCommand.response(code, remark)
        msg_id = ",".join(r.msg_ids) if batch else r.msg_id
        # stored (also FLUSH_*_TIMEOUT, SLAVE_NOT_AVAILABLE): no remark, as RocketMQ answers
        return RemotingCommand.response(
            code,
            None,
            {
                "msgId": msg_id,
                "queueId": str(queue_id),
                "queueOffset": str(r.queue_offset),
                "MSG_REGION": "DefaultRegion",
                "TRACE_ON": "true",
            },
        )


class _PutWaits:
    """Puts that wait for their flush or replication, answered on the loop in bursts.

    ``watch`` (loop thread) returns the future of a put's response. The store thread that
    completes the put (``_arrived``) queues it; the first put queued since the last drain
    schedules ``_drain`` with ``call_soon_threadsafe``, which answers everything queued by then.

    No reference cycles: a completed concurrent future keeps its done callbacks, so the
    callback must not hold the future (it gets it as its argument). A cycle a message would
    leave the collector to free, and under load it ran for a third of the loop's time.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        answer: Callable[[PutMessageResult, int, bool], RemotingCommand],
    ) -> None:
        self._loop = loop
        self._answer = answer
        self._lock = threading.Lock()
        self._ready: list[_Waiting] = []
        self._scheduled = False

    def watch(
        self, fut: Future[PutMessageResult], queue_id: int, batch: bool
    ) -> asyncio.Future[RemotingCommand]:
        response: asyncio.Future[RemotingCommand] = self._loop.create_future()
        fut.add_done_callback(functools.partial(self._arrived, response, queue_id, batch))
        return response

    def _arrived(
        self,
        response: asyncio.Future[RemotingCommand],
        queue_id: int,
        batch: bool,
        fut: Future[PutMessageResult],
    ) -> None:
        """A put completed: queue it for the loop. Any thread (a store service's)."""
        with self._lock:
            self._ready.append((response, fut, queue_id, batch))
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: nobody waits for an answer any more
            pass

    def _drain(self) -> None:
        """Answer the queued puts. Loop thread."""
        with self._lock:
            ready, self._ready = self._ready, []
            self._scheduled = False
        answer = self._answer
        for response, fut, queue_id, batch in ready:
            if response.done():  # cancelled: its connection went away
                continue
            try:
                response.set_result(answer(fut.result(), queue_id, batch))
            except Exception as exc:  # answered with SYSTEM_ERROR by the connection
                response.set_exception(exc)


_Waiting = tuple["asyncio.Future[RemotingCommand]", "Future[PutMessageResult]", int, bool]
