"""Message lookups (RocketMQ 4.9.8's QueryMessageProcessor): QUERY_MESSAGE (12) by key and
VIEW_MESSAGE_BY_ID (33) by commit-log offset.

=====  ===================  ==================================================================
code   request              ext fields → answer
=====  ===================  ==================================================================
12     QUERY_MESSAGE        topic, key, maxNum, beginTimestamp, endTimestamp
                            [, _UNIQUE_KEY_QUERY] → body: the stored records found, as they
                            lie in the commit log, concatenated; ext indexLastUpdateTimestamp,
                            indexLastUpdatePhyoffset. None found: QUERY_NOT_FOUND
33     VIEW_MESSAGE_BY_ID   offset (commit-log offset) → body: the stored record there;
                            none: SYSTEM_ERROR
=====  ===================  ==================================================================

With the ACL on, a record goes out only when the account may read its topic (the topic a
delayed or half message waits for): VIEW_MESSAGE_BY_ID is refused after the lookup, and a
query leaves out what it found of other topics (``rocketstore.acl``'s ``check_then``).

A query for a unique key (``_UNIQUE_KEY_QUERY`` = ``true``, the client's message id) asks for
the store's defaultQueryMaxNum messages whatever maxNum says, as RocketMQ does. Each record is
checked (magic and lengths) before it is sent. Both lookups read index and commit-log files, so
they run in a worker thread; the handlers themselves run on the broker's event loop.

An answer is counted against the connection's share of the server's memory budget before its
records are copied (``Connection.reserve`` / ``room``): VIEW_MESSAGE_BY_ID reads the record's
length on the loop first (four bytes of a mapped file), QUERY_MESSAGE finds its records' offsets
and lengths first. A request whose answer finds no room waits, unbuilt (see remoting._limits).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

from ...acl._remoting import allows_then, check_then
from ...acl._table import request_names
from ...remoting import Connection, RemotingCommand, RequestCode, ResponseCode, ext_int, ext_str
from ...store._errors import CorruptRecordError
from ...store.log._record import PROPERTY_REAL_TOPIC, read_layout, string_to_properties
from .._services import HasStore, HasStoreConfig
from ..state._topic_config import owning_topic

if TYPE_CHECKING:
    from ...store._store import MessageStore

RC = ResponseCode
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"
NOT_FOUND_REMARK = "can not find message, maybe time range not correct"
MAX_TIMESTAMP = 2**63 - 1


class QueryContext(HasStore, HasStoreConfig, Protocol):
    """What the message queries use of the broker."""


ANSWER_HEAD = 512  # room counted for an answer's header, beyond its records


def record_size(store: MessageStore, phys_offset: int) -> int | None:
    """The length of the stored record at ``phys_offset``, or None when no whole record
    starts there (any thread; on the loop: reads a record's header in a mapped file)."""
    if phys_offset < 0 or phys_offset < store.min_phy_offset:
        return None
    selected = store.commit_log.get_data(phys_offset)
    if selected is None:
        return None
    with selected:
        try:
            return read_layout(selected.buffer, 0, selected.size).total_size
        except CorruptRecordError:
            return None


def raw_record(store: MessageStore, phys_offset: int) -> tuple[bytes, str] | None:
    """The stored record at ``phys_offset`` exactly as it lies in the commit log and the topic
    it belongs to (``owning_topic``), or None when no whole record starts there (any
    thread)."""
    if phys_offset < 0 or phys_offset < store.min_phy_offset:
        return None
    selected = store.commit_log.get_data(phys_offset)
    if selected is None:
        return None
    with selected:
        try:
            layout = read_layout(selected.buffer, 0, selected.size)
            buf = selected.buffer
            topic = bytes(buf[layout.topic : layout.properties_length]).decode("utf-8")
            props = bytes(buf[layout.properties : layout.total_size]).decode("utf-8")
        except (CorruptRecordError, UnicodeDecodeError):
            return None
        real = string_to_properties(props).get(PROPERTY_REAL_TOPIC) if props else None
        return bytes(buf[: layout.total_size]), owning_topic(topic, real)


class QueryProcessor:
    """Serves QUERY_MESSAGE and VIEW_MESSAGE_BY_ID for one BrokerController (loop thread)."""

    def __init__(self, broker: QueryContext) -> None:
        self.broker = broker
        self.store = broker.store
        self.default_query_max_num = broker.store_config.default_query_max_num

    def handlers(self) -> dict[int, Any]:
        return {
            int(RequestCode.QUERY_MESSAGE): self.query_message,
            int(RequestCode.VIEW_MESSAGE_BY_ID): self.view_message_by_id,
        }

    def query_message(self, cmd: RemotingCommand, conn: Connection) -> Any:
        ext = cmd.ext_fields
        topic = request_names(cmd).topic  # as the ACL read it
        try:
            key = ext_str(ext, "key")
            max_num = ext_int(ext, "maxNum")
            begin = ext_int(ext, "beginTimestamp")
            end = ext_int(ext, "endTimestamp")
        except ValueError as exc:
            return RemotingCommand.response(RC.SYSTEM_ERROR, str(exc))
        for name, value in (
            ("topic", topic),
            ("key", key),
            ("maxNum", max_num),
            ("beginTimestamp", begin),
            ("endTimestamp", end),
        ):
            if value is None:
                return RemotingCommand.response(
                    RC.SYSTEM_ERROR, f"the custom field <{name}> is null"
                )
        assert topic is not None and key is not None and max_num is not None
        assert begin is not None and end is not None
        if ext_str(ext, UNIQUE_MSG_QUERY_FLAG) == "true":
            max_num = self.default_query_max_num
        return self._query(cmd, conn, topic, key, max_num, begin, end)

    async def _query(
        self,
        cmd: RemotingCommand,
        conn: Connection,
        topic: str,
        key: str,
        max_num: int,
        begin: int,
        end: int,
    ) -> RemotingCommand:
        found, ts, phy = await asyncio.to_thread(self.find, topic, key, max_num, begin, end)
        await conn.room(cmd, sum(size for _o, size in found) + ANSWER_HEAD)
        body = await asyncio.to_thread(self.records, [offset for offset, _s in found], cmd)
        ext = {"indexLastUpdateTimestamp": str(ts), "indexLastUpdatePhyoffset": str(phy)}
        if not body:
            return RemotingCommand.response(RC.QUERY_NOT_FOUND, NOT_FOUND_REMARK, ext)
        return RemotingCommand.response(RC.SUCCESS, None, ext, body)

    def find(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> tuple[list[tuple[int, int]], int, int]:
        """([(commit-log offset, record length)], index last update timestamp, index last
        update offset) of the messages of ``topic`` with ``key`` stored within [begin, end]
        (worker thread)."""
        result = self.store.query_message(topic, key, max_num, begin, end)
        return (
            [(msg.commitlog_offset, msg.store_size) for msg in result.messages],
            result.index_last_update_timestamp,
            result.index_last_update_phyoffset,
        )

    def records(self, offsets: list[int], cmd: RemotingCommand | None = None) -> bytes:
        """The records at ``offsets`` as they lie in the commit log, concatenated: those the
        request ``cmd`` may read (worker thread)."""
        records = []
        for offset in offsets:
            found = raw_record(self.store, offset)
            if found is not None and (cmd is None or allows_then(cmd, found[1])):
                records.append(found[0])
        return b"".join(records)

    def view_message_by_id(self, cmd: RemotingCommand, conn: Connection) -> Any:
        try:
            offset = ext_int(cmd.ext_fields, "offset")
        except ValueError as exc:
            return RemotingCommand.response(RC.SYSTEM_ERROR, str(exc))
        if offset is None:
            return RemotingCommand.response(RC.SYSTEM_ERROR, "the custom field <offset> is null")
        size = record_size(self.store, offset)
        if size is not None and not conn.reserve(cmd, size + ANSWER_HEAD):
            return None  # served again once the connection has room for the answer
        return self._view(cmd, offset)

    async def _view(self, cmd: RemotingCommand, offset: int) -> RemotingCommand:
        found = await asyncio.to_thread(raw_record, self.store, offset)
        if found is None:
            return RemotingCommand.response(
                RC.SYSTEM_ERROR, f"can not find message by the offset, {offset}"
            )
        raw, topic = found
        refused = check_then(cmd, topic)  # the account must read the message's topic
        if refused is not None:
            return refused
        return RemotingCommand.response(RC.SUCCESS, None, None, raw)
