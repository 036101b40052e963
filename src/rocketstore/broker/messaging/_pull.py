"""PULL_MESSAGE (11): stored records of a queue, sent as they lie in the commit log, with
long polling.

A pull that finds nothing new and carries the suspend flag is held (up to its
``suspendTimeoutMillis``, or ``short_polling_time_mills`` with long polling off) and answered
when a message arrives for its queue (the store's message-arriving listener) or when the hold
runs out. Tags are filtered by the consume-queue units' hash codes, as RocketMQ's broker does;
the client checks the tag strings.

A pull below a queue's minimum offset (retention removed its records) whose offset the tiered
store holds (``HasTier``) is answered from the tier: the records rebuilt from its rows, read in
a worker thread, within the same count and size limits as a read of the commit log on disk,
``nextBeginOffset`` right after them. Offsets the tier does not hold get today's answer
(OFFSET_MOVED).

The common answer (a request that is not one-way, its header JSON or binary: found, not
found, retry, offset moved; at once or when a held pull is woken) is written as a frame from a
template in the request's serialize type, the four numbers patched in, the records behind it
(``answer_frame``): no command object, no header dictionary, the same bytes the connection
writes for the command ``answer`` builds (tests/test_pull_frame.py compares both). Errors and
tier answers are answered with commands.

Loop thread only.
"""

from __future__ import annotations

import asyncio
import struct
from typing import TYPE_CHECKING, Any, Protocol

from ...acl._table import request_names
from ...protocol._errors import InvalidSubscriptionError
from ...protocol._heartbeat import SubscriptionData, build_subscription, is_tag_type
from ...remoting import Connection, RemotingCommand, ResponseCode, ext_int, ext_str
from ...remoting._codes import LanguageCode
from ...remoting._command import (
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    SERVER_VERSION,
)
from ...store._errors import CorruptRecordError
from ...store.log._message import GetMessageStatus
from ...store.read._raw_read import RawGetResult, get_raw
from ...tier._manifest import TierError
from .._services import (
    HasConfig,
    HasConsumers,
    HasGroups,
    HasHolds,
    HasOffsets,
    HasStats,
    HasStore,
    HasStoreConfig,
    HasTier,
    HasTopics,
)
from ..state._topic_config import PERM_READ

RC = ResponseCode
S = GetMessageStatus
FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4

_CODES = {
    S.FOUND: RC.SUCCESS,
    S.MESSAGE_WAS_REMOVING: RC.PULL_RETRY_IMMEDIATELY,
    S.NO_MATCHED_MESSAGE: RC.PULL_RETRY_IMMEDIATELY,
    S.OFFSET_FOUND_NULL: RC.PULL_NOT_FOUND,
    S.OFFSET_OVERFLOW_ONE: RC.PULL_NOT_FOUND,
    S.OFFSET_OVERFLOW_BADLY: RC.PULL_OFFSET_MOVED,
    S.OFFSET_TOO_SMALL: RC.PULL_OFFSET_MOVED,
}
# what a read below the consume queue's minimum (or of a queue retention emptied) gives
_BELOW_STORE = frozenset(
    {S.OFFSET_TOO_SMALL, S.MESSAGE_WAS_REMOVING, S.NO_MESSAGE_IN_QUEUE, S.NO_MATCHED_LOGIC_QUEUE}
)


_PREFIX = struct.Struct(">ii")  # frame length, serialize type << 24 | header length
# the JSON header of a pull's answer as the connection encodes ``answer``'s command: the fixed
# fields, the remark, extFields in ``answer``'s order, the field the Java side adds
_VERSION = f',"language":"PYTHON","version":{SERVER_VERSION:d},"opaque":'
# the binary form's prefix and fixed fields: code, language, version, opaque, flag
_BINARY_HEAD = struct.Struct(">iihbhii")
_BINARY_FIXED = struct.Struct(">hbhii")
_PYTHON = int(LanguageCode.PYTHON)


def _ext_name(name: str) -> str:
    """An ext field's name as the binary header writes it (int16 length, name) and its
    value's length's three high bytes, as latin-1 text."""
    return f"\0{chr(len(name))}{name}\0\0\0"


_EXT_SUGGEST = _ext_name("suggestWhichBrokerId")
_EXT_NEXT = _ext_name("nextBeginOffset")
_EXT_MIN = _ext_name("minOffset")
_EXT_MAX = _ext_name("maxOffset")


def answer(code: int, r: RawGetResult, suggest: int) -> RemotingCommand:
    """The answer to a pull that read ``r`` (the command form)."""
    return RemotingCommand.response(
        code,
        r.status.name,
        {
            "suggestWhichBrokerId": str(suggest),
            "nextBeginOffset": str(r.next_begin_offset),
            "minOffset": str(r.min_offset),
            "maxOffset": str(r.max_offset),
        },
        r.data,
    )


def answer_frame(
    code: int, r: RawGetResult, suggest: int, opaque: int, serialize_type: int = SERIALIZE_JSON
) -> bytes:
    """``answer``'s frame for the request ``opaque`` in its serialize type (JSON, or
    ROCKETMQ's binary form), length prefix included: the header from the template, the records
    behind it (copied once, into the frame)."""
    if serialize_type == SERIALIZE_ROCKETMQ:
        return _binary_frame(code, r, suggest, opaque)
    header = (
        f'{{"code":{code:d}{_VERSION}{opaque:d},"flag":1,"remark":"{r.status.name}",'
        f'"extFields":{{"suggestWhichBrokerId":"{suggest:d}",'
        f'"nextBeginOffset":"{r.next_begin_offset:d}","minOffset":"{r.min_offset:d}",'
        f'"maxOffset":"{r.max_offset:d}"}},"serializeTypeCurrentRPC":"JSON"}}'
    ).encode()
    data = r.data
    prefix = _PREFIX.pack(4 + len(header) + len(data), len(header))  # SERIALIZE_JSON << 24: 0
    return b"".join((prefix, header, data)) if data else prefix + header


def _binary_frame(code: int, r: RawGetResult, suggest: int, opaque: int) -> bytes:
    """``answer_frame`` in the binary form: the fixed fields (the code, language PYTHON, the
    server's version, the opaque, the response flag), the remark (the status's name) and the
    ext fields in ``answer``'s order, as ``_encode_binary_header`` writes them. The remark and
    the ext fields are written as one latin-1 text (every text here is ASCII, each value
    shorter than 256 characters: its length the character after three zero bytes)."""
    remark = r.status.name
    suggested = str(suggest)
    next_begin = str(r.next_begin_offset)
    low = str(r.min_offset)
    high = str(r.max_offset)
    ext = (
        _EXT_SUGGEST
        + chr(len(suggested))
        + suggested
        + _EXT_NEXT
        + chr(len(next_begin))
        + next_begin
        + _EXT_MIN
        + chr(len(low))
        + low
        + _EXT_MAX
        + chr(len(high))
        + high
    )
    n = len(ext)
    rest = f"\0\0\0{chr(len(remark))}{remark}\0\0{chr(n >> 8)}{chr(n & 0xFF)}{ext}".encode(
        "latin-1"
    )
    header = len(rest) + _BINARY_FIXED.size
    data = r.data
    head = _BINARY_HEAD.pack(
        4 + header + len(data),
        (SERIALIZE_ROCKETMQ << 24) | header,
        code,
        _PYTHON,
        SERVER_VERSION,
        opaque,
        RESPONSE_FLAG,
    )
    return b"".join((head, rest, data)) if data else head + rest


def _framed(cmd: RemotingCommand) -> bool:
    """Whether the answer to the pull ``cmd`` is written from a template (``answer_frame``):
    a pull that is answered (not one-way), in either serialize type."""
    return not cmd.flag & ONEWAY_FLAG


if TYPE_CHECKING:  # the tier reads Parquet (the spark extra): imported where a tier is read
    from ...tier._read import TierReader


class PullContext(
    HasStats,
    HasConfig,
    HasConsumers,
    HasGroups,
    HasHolds,
    HasOffsets,
    HasStore,
    HasStoreConfig,
    HasTier,
    HasTopics,
    Protocol,
):
    """What PULL_MESSAGE uses of the broker."""


class PullProcessor:
    def __init__(self, broker: PullContext) -> None:
        self.broker = broker
        self.store = broker.store
        self.reader = broker.store.reader
        self.topics = broker.topics
        self.tier = broker.tier_reader()
        self._codes: dict[str, frozenset[int] | None] = {}  # header subscriptions, parsed

    def handlers(self) -> dict[int, Any]:
        return {11: self.pull}

    def pull(self, cmd: RemotingCommand, conn: Connection) -> Any:
        return self.process(cmd, conn, allow_suspend=True, frame=_framed(cmd))

    @staticmethod
    def _tag_codes(subscription: SubscriptionData) -> frozenset[int] | None:
        """The tags codes a TAG subscription passes, None for all."""
        return None if subscription.matches_all else subscription.code_set

    def _header_codes(self, topic: str, expression: str) -> frozenset[int] | None:
        """A pull's own TAG subscription, parsed as a heartbeat's is (cached by expression).
        InvalidSubscriptionError when it does not parse."""
        try:
            return self._codes[expression]
        except KeyError:
            pass
        if len(self._codes) > 4096:
            self._codes.clear()
        codes = self._codes[expression] = self._tag_codes(build_subscription(topic, expression))
        return codes

    def process(
        self, cmd: RemotingCommand, conn: Connection, *, allow_suspend: bool, frame: bool = False
    ) -> Any:
        """The answer to the pull ``cmd``: a command, a future or coroutine of one, or with
        ``frame`` the common answer's frame (``answer_frame``; the connection writes it)."""
        ext = cmd.ext_fields
        broker = self.broker
        if not broker.config.broker_permission & PERM_READ:
            return RemotingCommand.response(
                RC.NO_PERMISSION,
                f"the broker[{broker.config.broker_name}] pulling message is forbidden",
            )
        names = request_names(cmd)  # the topic and group the ACL checked
        group = names.group or ""
        topic = names.topic or ""
        try:
            queue_id = ext_int(ext, "queueId", 0) or 0
            offset = ext_int(ext, "queueOffset", 0) or 0
            max_nums = ext_int(ext, "maxMsgNums", 32) or 32
            sys_flag = ext_int(ext, "sysFlag", 0) or 0
            commit_offset = ext_int(ext, "commitOffset", 0) or 0
            suspend_ms = ext_int(ext, "suspendTimeoutMillis", 15000) or 0
        except ValueError as exc:
            return RemotingCommand.response(RC.SYSTEM_ERROR, str(exc))
        group_config = broker.groups.find_or_create(group) if group else None
        if group_config is None:
            return RemotingCommand.response(
                RC.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist"
            )
        if not group_config.consume_enable:
            return RemotingCommand.response(
                RC.NO_PERMISSION, f"subscription group no permission, {group}"
            )
        config = self.topics.select(topic)
        if config is None:
            return RemotingCommand.response(
                RC.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!"
            )
        if not config.perm & PERM_READ:
            return RemotingCommand.response(
                RC.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden"
            )
        if queue_id < 0 or queue_id >= config.read_queue_nums:
            return RemotingCommand.response(
                RC.SYSTEM_ERROR,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                f"[{config.read_queue_nums}] consumer:[{conn.peer}]",
            )
        if max_nums <= 0:
            return RemotingCommand.response(
                RC.SYSTEM_ERROR, f"maxMsgNums must be positive: {max_nums}"
            )
        subscription = None
        if sys_flag & FLAG_SUBSCRIPTION:
            expression_type = ext_str(ext, "expressionType")
        else:
            subscription = broker.consumers.find_subscription(group, topic)
            if subscription is None:
                return RemotingCommand.response(
                    RC.SUBSCRIPTION_NOT_EXIST, "the consumer's subscription not exist"
                )
            expression_type = subscription.expression_type
        if not is_tag_type(expression_type):
            # filtering by SQL92 (or a class) is not offered: refuse rather than hand out
            # messages as if the expression were a tag list
            return RemotingCommand.response(
                RC.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by {expression_type}",
            )
        if subscription is not None:
            codes = self._tag_codes(subscription)
        else:
            try:
                codes = self._header_codes(topic, ext_str(ext, "subscription") or "*")
            except InvalidSubscriptionError as exc:
                return RemotingCommand.response(RC.SUBSCRIPTION_PARSE_FAILED, str(exc))
        try:
            r = get_raw(self.reader, topic, queue_id, offset, max_nums, codes)
        except CorruptRecordError as exc:
            return RemotingCommand.response(RC.SYSTEM_ERROR, f"store error: {exc}")
        tier = self.tier
        if tier is not None and r.status in _BELOW_STORE:
            try:
                held = tier.holds(topic, queue_id, offset)
            except TierError as exc:
                return RemotingCommand.response(RC.SYSTEM_ERROR, f"tier error: {exc}")
            if held:
                commit = allow_suspend and sys_flag & FLAG_COMMIT_OFFSET and self.store.is_master
                return self._from_tier(
                    tier,
                    conn,
                    group,
                    topic,
                    queue_id,
                    offset,
                    max_nums,
                    codes,
                    r,
                    commit_offset if commit else None,
                )
        code = self._code(r, offset)
        broker.stats.note_out(topic, group, r.msg_count, len(r.data))
        if allow_suspend and sys_flag & FLAG_COMMIT_OFFSET and self.store.is_master:
            broker.offsets.commit_offset(conn.peer, group, topic, queue_id, commit_offset)
        if code == RC.PULL_NOT_FOUND and allow_suspend and sys_flag & FLAG_SUSPEND:
            timeout_ms = (
                suspend_ms
                if broker.config.long_polling_enable
                else broker.config.short_polling_time_mills
            )
            return self._hold(cmd, conn, topic, queue_id, offset, timeout_ms / 1000.0)
        suggest = 0
        if r.suggest_pulling_from_slave and broker.config.slave_read_enable:
            suggest = group_config.which_broker_when_consume_slowly
        if frame:
            return answer_frame(code, r, suggest, cmd.opaque, cmd.serialize_type)
        return answer(code, r, suggest)

    async def _from_tier(
        self,
        tier: TierReader,
        conn: Connection,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_nums: int,
        codes: frozenset[int] | None,
        store: RawGetResult,
        commit_offset: int | None,
    ) -> RemotingCommand:
        """The answer to a pull of ``offset``, which the tier holds and the store no longer
        does: FOUND with the tier's records (NO_MATCHED_MESSAGE when the tags pass none)."""
        reader = self.reader
        try:
            got = await asyncio.to_thread(
                tier.records,
                topic,
                queue_id,
                offset,
                min(max_nums, reader.max_count_disk),
                reader.max_bytes_disk,
                codes,
            )
            held = await asyncio.to_thread(tier.queue_range, topic, queue_id)
        except TierError as exc:
            return RemotingCommand.response(RC.SYSTEM_ERROR, f"tier error: {exc}")
        first = held[0] if held is not None else offset
        end = held[1] if held is not None else got.next_offset
        broker = self.broker
        broker.stats.note_out(topic, group, got.count, len(got.data))
        if commit_offset is not None:
            broker.offsets.commit_offset(conn.peer, group, topic, queue_id, commit_offset)
        status = S.FOUND if got.count else S.NO_MATCHED_MESSAGE
        return RemotingCommand.response(
            _CODES[status],
            status.name,
            {
                "suggestWhichBrokerId": "0",
                "nextBeginOffset": str(got.next_offset),
                "minOffset": str(min(first, store.min_offset) if store.max_offset else first),
                "maxOffset": str(max(store.max_offset, end)),
            },
            got.data,
        )

    def _code(self, r: RawGetResult, offset: int) -> int:
        status = r.status
        if status is S.NO_MATCHED_LOGIC_QUEUE or status is S.NO_MESSAGE_IN_QUEUE:
            code = RC.PULL_OFFSET_MOVED if offset != 0 else RC.PULL_NOT_FOUND
        else:
            code = _CODES.get(status, RC.SYSTEM_ERROR)
        if code == RC.PULL_OFFSET_MOVED and not self.store.is_master:
            code = RC.PULL_RETRY_IMMEDIATELY
        return code

    def _hold(
        self,
        cmd: RemotingCommand,
        conn: Connection,
        topic: str,
        queue_id: int,
        offset: int,
        timeout_s: float,
    ) -> asyncio.Future[RemotingCommand | bytes | None]:
        """Suspend the pull; the returned future is its response (a command, or the answer's
        frame when the pull is answered from the template)."""
        fut: asyncio.Future[RemotingCommand | bytes | None] = (
            asyncio.get_running_loop().create_future()
        )

        def wake() -> None:
            if fut.done():
                return
            if conn.closed:
                fut.set_result(None)
                return
            try:
                result = self.process(cmd, conn, allow_suspend=False, frame=_framed(cmd))
            except Exception as exc:  # answered with SYSTEM_ERROR by the connection
                fut.set_exception(exc)
                return
            if asyncio.iscoroutine(result):  # answered from the tier
                asyncio.ensure_future(result).add_done_callback(lambda t: _chain(t, fut))
            else:
                fut.set_result(result)

        hold = self.broker.holds.hold(topic, queue_id, offset, timeout_s, wake)
        # the connection cancels its waiting requests when it closes: the hold goes with it
        fut.add_done_callback(lambda f: hold.cancel() if f.cancelled() else None)
        return fut


def _chain(task: asyncio.Future[Any], fut: asyncio.Future[RemotingCommand | bytes | None]) -> None:
    """Complete ``fut`` as ``task`` completed (unless it is done already)."""
    if fut.done():
        return
    if task.cancelled():
        fut.cancel()
    elif task.exception() is not None:
        fut.set_exception(task.exception())  # type: ignore[arg-type]
    else:
        fut.set_result(task.result())
