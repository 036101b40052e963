"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320).

A send is checked (broker writable, topic name, topic known or created from the default topic,
queue id), stored through the store's non-blocking put, and answered when the put's flush and
replication waits are over; the event loop never blocks on them. Put statuses map to RocketMQ's
response codes; a stored message's response carries its offset message id, queue id and queue
offset.

A plain send (no rule applies: see ``plain_properties`` and ``_send_frame``) is served from its
frame by the send frame path, which stores it through ``put_plain``: its properties cut and
reordered as text, the put given the record's fields. Everything else (the ACL on, a delay, a
transaction, a timer, a retry topic, a batch, an unknown topic, an unusual header) takes the
handler and the general path (``_send``), which decides and refuses as RocketMQ does.

A put that must wait (SYNC_FLUSH, SYNC_MASTER) is answered when its waits end (``PutWaits``):
the store thread that completes the put queues it, and the first of a burst schedules one
call on the loop that answers every queued put (one wake-up of the loop per group commit, not
one per message).

Loop thread only, but for ``PutWaits._arrived``.
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
from ...remoting._command import int32_value, int_value, str_value
from ...remoting._send_header import SendHeader, send_header
from ...store._config import StoreConfig
from ...store._disk import WRITE_FAILED_PREFIX, disk_used_ratio
from ...store.ha._in_sync import FENCED_PREFIX
from ...store.ha._transfer import GroupTransferService
from ...store.log._message import BatchedMessage, Message, PutMessageResult, PutMessageStatus
from ...store.log._record import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    SYSFLAG_TRANSACTION_MASK,
    properties_to_string,
    string_to_properties,
    tags_code,
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


# What a send's property names ask of its stored properties: the positions of its pairs in the
# order they are stored (-1: the broker's CLUSTER pair, added or put in place of the sent one),
# and where its TAGS, KEYS, UNIQ_KEY and WAIT pairs are (-1: absent). None: a name asks for the
# general path (a delay, a transaction, a timer, a name given twice).
PropertiesPlan = tuple[tuple[int, ...], int, int, int, int]
PlainProperties = tuple[bytes, int, str | None, str | None, bool]
_TAGS_AT = len(PROPERTY_TAGS) + 1  # a value's start in its "name\x01value" pair
_KEYS_AT = len(PROPERTY_KEYS) + 1
_UNIQ_AT = len(PROPERTY_UNIQ_KEY) + 1
_WAIT_AT = len(PROPERTY_WAIT) + 1


def properties_plan(names: tuple[str, ...]) -> PropertiesPlan | None:
    """The plan of a send whose property names are ``names``, in the order sent (see
    ``PropertiesPlan``): the order is ``stored_properties``' with CLUSTER added."""
    if (
        PROPERTY_DELAY in names
        or PROPERTY_TRANSACTION_PREPARED in names
        or not _TIMER_KEYS.isdisjoint(names)
        or len(set(names)) != len(names)
    ):
        return None
    at = {name: i for i, name in enumerate(names)}
    order = _stored_order(names if PROPERTY_CLUSTER in names else (*names, PROPERTY_CLUSTER))
    return (
        tuple(-1 if name == PROPERTY_CLUSTER else at[name] for name in order),
        at.get(PROPERTY_TAGS, -1),
        at.get(PROPERTY_KEYS, -1),
        at.get(PROPERTY_UNIQ_KEY, -1),
        at.get(PROPERTY_WAIT, -1),
    )


def plain_properties(
    text: str, cluster_pair: str, plans: dict[tuple[str, ...], PropertiesPlan | None]
) -> PlainProperties | None:
    """A plain send's properties as sent (``name\\x01value`` pairs joined by ``\\x02``) →
    (the stored properties, UTF-8, with ``cluster_pair`` (``CLUSTER\\x01<name>``) in the
    order ``stored_properties`` gives and without WAIT; the TAGS code; the KEYS and
    UNIQ_KEY values or None; whether the sender waits for the store), what the general path
    stores for the same text. The pairs are cut, reordered and joined as text: no dict.

    None when the general path must decide: a name that asks for it (``properties_plan``), a
    pair without a name or separator but for one empty pair at the end (the general path
    drops them all), a value holding
    ``\\x01`` (which the store refuses). ``plans`` keeps the plan of each set of names
    (bounded)."""
    if text.endswith(PROPERTY_SEPARATOR):  # as the C++ client ends them
        text = text[:-1]
    pairs = text.split(PROPERTY_SEPARATOR) if text else []
    names: list[str] = []
    for pair in pairs:
        at = pair.find("\x01")
        if at <= 0 or pair.find("\x01", at + 1) >= 0:
            return None
        names.append(pair[:at])
    key = tuple(names)
    try:
        plan = plans[key]
    except KeyError:
        plan = properties_plan(key)
        if len(plans) >= _PLAN_LIMIT:
            plans.clear()
        plans[key] = plan
    if plan is None:
        return None
    order, tags_at, keys_at, uniq_at, wait_at = plan
    stored = PROPERTY_SEPARATOR.join([pairs[i] if i >= 0 else cluster_pair for i in order])
    code = tags_code(pairs[tags_at][_TAGS_AT:]) if tags_at >= 0 else 0
    keys = pairs[keys_at][_KEYS_AT:] if keys_at >= 0 else None
    uniq = pairs[uniq_at][_UNIQ_AT:] if uniq_at >= 0 else None
    wait = wait_at < 0 or pairs[wait_at][_WAIT_AT:].lower() == "true"
    return stored.encode(), code, keys, uniq, wait


def str_value_or_empty(value: Any) -> str:
    """A text field as sent ("" when absent): a JSON number as its decimal text."""
    return str_value(value) or ""


class SendProcessor:
    fast_path = True
    """Plain sends take the send frame path (``_send_frame``, through ``put_plain``); False
    sends every request through the general path (the differential tests compare the two)."""

    def __init__(self, broker: SendContext) -> None:
        self.broker = broker
        self.store = broker.store
        self.topics = broker.topics
        self.cluster = broker.config.cluster_name
        self.broker_name = broker.config.broker_name
        self._waits: PutWaits | None = None
        self._levels_ms = broker.store_config.delay_levels_ms()
        # a send's property names (as sent) -> its PropertiesPlan (see plain_properties)
        self._plans: dict[tuple[str, ...], PropertiesPlan | None] = {}
        self._cluster_item = f"{PROPERTY_CLUSTER}\x01{self.cluster}"
        # ASYNC_FLUSH without replication waits: a put is complete once appended, so a plain
        # send puts without a future (unless a put stage has been added since)
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
        """SEND_MESSAGE and SEND_MESSAGE_V2 that the send frame path left to the handler (a
        rule applies, the ACL is on, the header is unusual): the general path."""
        return self._send(cmd, conn)

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
        in range, numbers plain), its properties ``text`` stored as ``_send`` stores them
        (``plain_properties``), through the store's put of a record's fields. The put's
        result, or its future when the put waits (SYNC_FLUSH, SYNC_MASTER), or None (nothing
        stored) when a property asks for the general path.

        With ``waits`` (given only while ``slave_stage`` names its service), a send that
        waits for the slave is put without the store's wait and its wait joins ``waits``: the
        result is its ``SlaveWait``, answered on the loop (or the answer, when there is
        nothing to wait for)."""
        props = plain_properties(text, self._cluster_item, self._plans)
        if props is None:
            return None
        stored, code, keys, uniq, wait = props
        store = self.store
        host = peer or None
        if self.puts_never_wait():  # returns once appended: nothing to wait for
            return store.put_fields(
                topic, queue_id, body, stored, code, keys, uniq, flag, sys_flag, born, host,
                reconsume, wait,
            )  # fmt: skip
        if waits is not None and wait:
            # the slave's acknowledgement is the put's only wait: ``waits`` carries it
            r = store.put_fields(
                topic, queue_id, body, stored, code, keys, uniq, flag, sys_flag, born, host,
                reconsume, False,
            )  # fmt: skip
            if r.status is not _PUT_OK:
                return r
            return waits.wait(r, queue_id)
        pending: list[Future[PutMessageResult]] = []
        r = store.put_fields(
            topic, queue_id, body, stored, code, keys, uniq, flag, sys_flag, born, host,
            reconsume, wait, pending,
        )  # fmt: skip
        return pending[0] if pending else r

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
            waits = self._waits = PutWaits(asyncio.get_running_loop(), self._deliver)
        response: asyncio.Future[RemotingCommand] = waits.loop.create_future()
        waits.watch(fut, (response, queue_id, batch))
        return response

    def _deliver(self, ready: list[tuple[Any, Future[PutMessageResult]]]) -> None:
        """Answer the general path's puts whose waits ended (``PutWaits``). Loop thread."""
        answer = self._answer
        for (response, queue_id, batch), fut in ready:
            if response.done():  # cancelled: its connection went away
                continue
            try:
                response.set_result(answer(fut.result(), queue_id, batch))
            except Exception as exc:  # answered with SYSTEM_ERROR by the connection
                response.set_exception(exc)

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


class PutWaits:
    """Puts that wait for their flush or replication, delivered on the loop in bursts.

    ``watch`` (loop thread) hands over a put's future with a token of the caller's (what to
    answer, and how). The store thread that completes the put (``_arrived``) queues it; the
    first put queued since the last drain schedules ``_drain`` with ``call_soon_threadsafe``,
    which gives ``deliver`` every (token, future) queued by then: one wake-up of the loop per
    group commit, not one per message.

    No reference cycles: a completed concurrent future keeps its done callbacks, so the
    callback must not hold the future (it gets it as its argument). A cycle a message would
    leave the collector to free, and under load it ran for a third of the loop's time.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        deliver: Callable[[list[tuple[Any, Future[PutMessageResult]]]], None],
    ) -> None:
        self.loop = loop
        self._deliver = deliver
        self._lock = threading.Lock()
        self._ready: list[tuple[Any, Future[PutMessageResult]]] = []
        self._scheduled = False

    def watch(self, fut: Future[PutMessageResult], token: Any) -> None:
        fut.add_done_callback(functools.partial(self._arrived, token))

    def _arrived(self, token: Any, fut: Future[PutMessageResult]) -> None:
        """A put completed: queue it for the loop. Any thread (a store service's)."""
        with self._lock:
            self._ready.append((token, fut))
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: nobody waits for an answer any more
            pass

    def _drain(self) -> None:
        """Deliver the queued puts. Loop thread."""
        with self._lock:
            ready, self._ready = self._ready, []
            self._scheduled = False
        self._deliver(ready)
