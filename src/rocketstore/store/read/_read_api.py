"""The read side of the store: get_message, lookups by offset, key and time.

RocketMQ's rules, kept here in one place:

- get_message walks the consume queue from ``offset``: at most max(800, max_msg_nums) units,
  stopping when the batch is full (message count, or bytes: the in-memory limits while the
  message is within ``access_message_in_memory_max_ratio`` % of physical RAM of the commit
  log's end, the on-disk limits past that). ``next_begin_offset`` is ``offset`` plus the units
  looked at; the status says why nothing came back. Out-of-range offsets give the corrected
  offset as ``next_begin_offset`` (a slave keeps the one asked for).
- A unit whose record is gone (its file deleted) is skipped together with the rest of that
  commit-log file (MESSAGE_WAS_REMOVING); a unit that points at something that is not its
  record, or a record with a bad body CRC, ends the batch before it, and raises
  CorruptRecordError when it is the first one.

Threads: any; nothing here takes a store-wide lock (files are held while read).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING

from .._config import StoreConfig
from .._errors import CorruptRecordError
from ..log._mapped_file import MappedFile
from ..log._message import GetMessageResult, GetMessageStatus, QueryMessageResult
from ..log._record import (
    INT32,
    INT64,
    OFFSET_BORN_HOST,
    OFFSET_SYSFLAG,
    SYSFLAG_BORNHOST_V6,
    MessageExt,
    decode_run,
    decode_stored,
)
from ..queue._consume_queue import (
    BLANK_SIZE,
    OFFSET_TAGS_CODE,
    TAGS_CODE,
    UNIT_SIZE,
    UNIT_WITHOUT_TAGS,
    ConsumeQueue,
    ConsumeQueueTable,
)
from ..queue._filter import MessageFilter
from ..queue._index import IndexService

if TYPE_CHECKING:
    from ..log._commit_log import CommitLog

log = logging.getLogger(__name__)

S = GetMessageStatus
MIN_FILTER_UNITS = 16000 // UNIT_SIZE  # RocketMQ looks at 16,000 bytes of units at least


@lru_cache(maxsize=64)
def _unit_run(count: int) -> struct.Struct:
    """``count`` consecutive units as (commit-log offset, size) pairs, flattened."""
    return struct.Struct(">" + "qi8x" * count)


def total_physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 1024**3


class ReadApi:
    """Reads for MessageStore. Narrow dependencies: the commit log, the consume queues, the
    index and the read settings of the config."""

    def __init__(
        self,
        config: StoreConfig,
        commit_log: CommitLog,
        consume_queues: ConsumeQueueTable,
        index: IndexService | None,
        *,
        known_queue: Callable[[str, int], bool] | None = None,
    ) -> None:
        self.commit_log = commit_log
        self.consume_queues = consume_queues
        self.index = index
        self.slave = config.broker_role == "SLAVE"
        self.memory = int(
            total_physical_memory() * (config.access_message_in_memory_max_ratio / 100.0)
        )
        self.max_bytes_memory = config.max_transfer_bytes_on_message_in_memory
        self.max_count_memory = config.max_transfer_count_on_message_in_memory
        self.max_bytes_disk = config.max_transfer_bytes_on_message_in_disk
        self.max_count_disk = config.max_transfer_count_on_message_in_disk
        self.known_queue = known_queue or (lambda _t, _q: False)
        self.get_found = 0
        self.get_miss = 0
        self.transferred = 0

    def correct(self, old: int, new: int) -> int:
        """A corrected offset: a slave keeps the one asked for."""
        return old if self.slave else new

    def bounds(
        self, topic: str, queue_id: int, offset: int
    ) -> tuple[ConsumeQueue, int, int] | GetMessageResult:
        """(queue, min offset, max offset) when ``offset`` can be read, else the result that
        says why not (RocketMQ's statuses and corrected next offsets)."""
        cq = self.consume_queues.find(topic, queue_id) if isinstance(queue_id, int) else None
        if cq is None:
            status = (
                S.NO_MESSAGE_IN_QUEUE
                if self.known_queue(topic, queue_id)
                else S.NO_MATCHED_LOGIC_QUEUE
            )
            return GetMessageResult(status, self.correct(offset, 0), 0, 0)
        min_offset = cq.min_offset
        max_offset = cq.max_offset
        if max_offset == 0:
            return GetMessageResult(S.NO_MESSAGE_IN_QUEUE, self.correct(offset, 0), 0, 0)
        if offset < min_offset:
            return GetMessageResult(
                S.OFFSET_TOO_SMALL, self.correct(offset, min_offset), min_offset, max_offset
            )
        if offset == max_offset:
            return GetMessageResult(S.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
        if offset > max_offset:
            nxt = self.correct(offset, min_offset if min_offset == 0 else max_offset)
            return GetMessageResult(S.OFFSET_OVERFLOW_BADLY, nxt, min_offset, max_offset)
        return cq, min_offset, max_offset

    # ---- get_message ------------------------------------------------------------------------

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None = None,
    ) -> GetMessageResult:
        if not isinstance(max_msg_nums, int) or max_msg_nums <= 0:
            raise ValueError(f"max_msg_nums must be a positive integer, got {max_msg_nums!r}")
        if not isinstance(offset, int):
            raise ValueError(f"offset must be an integer, got {offset!r}")
        bounds = self.bounds(topic, queue_id, offset)
        if isinstance(bounds, GetMessageResult):
            result = bounds
        else:
            cq, min_offset, max_offset = bounds
            result = self._read_units(cq, offset, max_msg_nums, message_filter)
            result.min_offset = min_offset
            result.max_offset = max_offset
        if result.status is S.FOUND:
            self.get_found += 1
            self.transferred += len(result.messages)
        else:
            self.get_miss += 1
        return result

    def _read_units(
        self, cq: ConsumeQueue, offset: int, max_msg_nums: int, message_filter: MessageFilter | None
    ) -> GetMessageResult:
        units = cq.select_units(offset)
        if units is None:
            nxt = self.correct(offset, cq.roll_next_file(offset))
            log.warning(
                "%s/%d: no consume-queue data at %d (max %d)",
                cq.topic,
                cq.queue_id,
                offset,
                cq.max_offset,
            )
            return GetMessageResult(S.OFFSET_FOUND_NULL, nxt, 0, 0)
        try:
            limit = min(units.size // UNIT_SIZE, max(MIN_FILTER_UNITS, max_msg_nums))
            return self._collect(
                cq, offset, units.buffer[: limit * UNIT_SIZE], max_msg_nums, message_filter
            )
        finally:
            units.release()

    def _collect(
        self,
        cq: ConsumeQueue,
        offset: int,
        units: memoryview,
        max_msg_nums: int,
        message_filter: MessageFilter | None,
    ) -> GetMessageResult:
        cl = self.commit_log
        max_phys = cl.max_offset
        memory = self.memory
        on_disk_below = max_phys - memory  # records before this are taken to be on disk
        # a batch ends at max_msg_nums or the count/byte limit for where its next message is
        count_memory = min(max_msg_nums, self.max_count_memory)
        bytes_memory = self.max_bytes_memory
        topic, queue_id = cq.topic, cq.queue_id
        raw_topic = topic.encode()
        messages: list[MessageExt] = []
        n = 0  # len(messages), kept by hand in the loop
        total = 0
        phys = 0  # after the loop: the commit-log offset of the last unit looked at
        if message_filter is None:
            run = self._plain_run(
                units, count_memory, bytes_memory, on_disk_below, raw_topic, queue_id
            )
            if run is not None:
                messages, total, phys = run
                n = len(messages)
                if n == min(count_memory, len(units) // UNIT_SIZE):  # the whole batch
                    return self._result(
                        S.FOUND, offset + n, messages, total, max_phys - phys > memory
                    )
        files = cl.queue
        file_size = cl.file_size
        min_phys = cl.min_offset
        count_disk = min(max_msg_nums, self.max_count_disk)
        bytes_disk = self.max_bytes_disk
        decode = decode_stored
        status = S.NO_MATCHED_MESSAGE  # FOUND once there is a message; set after the loop
        append = messages.append
        examined = n
        next_file_start = -1
        held: list[MappedFile] = []
        mf: MappedFile | None = None
        mf_from = mf_end = -1  # the range of commit-log offsets readable in ``mf``
        mm = None
        try:
            # The loop runs once a message: keep it short. Tags codes are read only when
            # filtering (the unit being looked at is number ``examined - 1``).
            for phys, size in UNIT_WITHOUT_TAGS.iter_unpack(units[examined * UNIT_SIZE :]):
                if phys < next_file_start:
                    examined += 1
                    continue
                if n:
                    if phys < on_disk_below:
                        if n >= count_disk or total + size > bytes_disk:
                            break
                    elif n >= count_memory or total + size > bytes_memory:
                        break
                examined += 1
                if message_filter is not None and not message_filter.is_matched_by_consume_queue(
                    TAGS_CODE.unpack_from(units, (examined - 1) * UNIT_SIZE + OFFSET_TAGS_CODE)[0]
                ):
                    continue
                if not (mf_from <= phys and phys + size <= mf_end and 0 < size < BLANK_SIZE):
                    if phys < 0 or size <= 0 or size == BLANK_SIZE:
                        log.warning(
                            "%s/%d: invalid unit (%d, %d) at %d skipped",
                            topic,
                            queue_id,
                            phys,
                            size,
                            offset + examined - 1,
                        )
                        if not messages:
                            status = S.MESSAGE_WAS_REMOVING
                        continue
                    mf = files.find_mapped_file_by_offset(phys)
                    if mf is not None and mf not in held:
                        if mf.hold():
                            held.append(mf)
                        else:
                            mf = None
                    if mf is None or phys + size > mf.from_offset + mf.read_position:
                        if not messages:
                            status = S.MESSAGE_WAS_REMOVING
                        if phys < min_phys:  # its file was deleted: skip the rest of it
                            next_file_start = phys + file_size - phys % file_size
                        mf_from = mf_end = -1
                        continue
                    mf_from = mf.from_offset
                    mf_end = mf_from + mf.read_position
                    mm = mf.mm
                try:
                    msg = decode(mm, phys - mf_from, size)  # type: ignore[arg-type]
                    if msg.topic_bytes != raw_topic or msg.queue_id != queue_id:
                        raise CorruptRecordError(
                            f"the record at {phys} belongs to {msg.topic}/{msg.queue_id}"
                        )
                except CorruptRecordError as exc:
                    where = f"{topic}/{queue_id} offset {offset + examined - 1} → commit log {phys}"
                    if messages:
                        log.error("%s: %s; the batch ends before it", where, exc)
                        examined -= 1
                        break
                    raise CorruptRecordError(f"{where}: {exc}") from None
                if message_filter is not None and not message_filter.is_matched_by_commit_log(msg):
                    continue
                append(msg)
                n += 1
                total += size
                next_file_start = -1
        finally:
            for f in held:
                f.release()
        if messages:
            status = S.FOUND
        return self._result(status, offset + examined, messages, total, max_phys - phys > memory)

    def _plain_run(
        self,
        units: memoryview,
        count: int,
        max_bytes: int,
        on_disk_below: int,
        raw_topic: bytes,
        queue_id: int,
    ) -> tuple[list[MessageExt], int, int] | None:
        """The usual batch without a filter, taken in one tight loop: up to ``count`` units
        whose records are in memory, in one commit-log file and within ``max_bytes``, each
        a V1 record with IPv4 hosts at a remembered layout. Returns (the messages decoded,
        their bytes, the commit-log offset of the last one), or None when the batch is not
        like that. A record that is not as expected ends the run before it: the general
        loop takes it from there, with every check."""
        k = min(len(units) // UNIT_SIZE, count)
        if k <= 0:
            return None
        flat = _unit_run(k).unpack_from(units)
        offsets = flat[0::2]
        sizes = flat[1::2]
        low = min(offsets)  # the file holding it starts at or below every offset
        total = sum(sizes)
        if low < on_disk_below or total > max_bytes or min(sizes) <= 0:
            return None
        mf = self.commit_log.queue.find_mapped_file_by_offset(low)
        if mf is None or not mf.hold():
            return None
        try:
            base = mf.from_offset
            if max(offsets) + max(sizes) > base + mf.read_position:
                return None
            taken: list[MessageExt] = []
            pairs = zip(offsets, sizes, strict=True)
            n = decode_run(mf.mm, base, pairs, raw_topic, queue_id, taken)
        finally:
            mf.release()
        if n == k:
            return taken, total, offsets[-1]
        return taken, sum(sizes[:n]), offsets[n - 1] if n else low

    @staticmethod
    def _result(
        status: GetMessageStatus,
        next_begin: int,
        messages: list[MessageExt],
        total: int,
        from_slave: bool,
    ) -> GetMessageResult:
        """A batch's result (min and max offsets are filled in by get_message)."""
        result = GetMessageResult(status, next_begin, 0, 0, messages)
        result.buffer_total_size = total
        result.suggest_pulling_from_slave = from_slave
        return result

    # ---- lookups ----------------------------------------------------------------------------

    def look_message_by_offset(
        self, phys_offset: int, size: int | None = None
    ) -> MessageExt | None:
        return self.commit_log.read_message(phys_offset, size)

    def pickup_store_timestamp(self, phys_offset: int, size: int) -> int:
        """The store time of the record at ``phys_offset`` (-1 when it is not there)."""
        mf = self.commit_log.queue.find_mapped_file_by_offset(phys_offset)
        if mf is None or phys_offset < self.commit_log.min_offset or not mf.hold():
            return -1
        try:
            pos = phys_offset - mf.from_offset
            if pos + min(size, 91) > mf.read_position:
                return -1
            sys_flag = INT32.unpack_from(mf.mm, pos + OFFSET_SYSFLAG)[0]
            born = 20 if sys_flag & SYSFLAG_BORNHOST_V6 else 8
            return INT64.unpack_from(mf.mm, pos + OFFSET_BORN_HOST + born)[0]  # type: ignore[no-any-return]
        finally:
            mf.release()

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        unit = cq.get_unit(offset) if cq is not None else None
        if unit is None:
            return -1
        return self.pickup_store_timestamp(unit[0], unit[1])

    def get_earliest_message_time(
        self, topic: str | None = None, queue_id: int | None = None
    ) -> int:
        """Store time of the first message of a queue, or of the commit log; -1 when none."""
        if topic is None:
            lo = self.commit_log.min_offset
            if lo < 0:
                return -1
            return self.pickup_store_timestamp(lo, 91)
        cq = self.consume_queues.find(topic, queue_id if queue_id is not None else 0)
        if cq is None:
            return -1
        return self.get_message_store_timestamp(topic, cq.queue_id, cq.min_offset)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        if cq is None:
            return 0
        return cq.get_offset_in_queue_by_time(
            timestamp, self.pickup_store_timestamp, max(0, self.commit_log.min_offset)
        )

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        return cq.min_offset if cq is not None else -1

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        unit = cq.get_unit(offset) if cq is not None else None
        return unit[0] if unit is not None else 0

    # ---- query by key -----------------------------------------------------------------------

    def query_message(
        self, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> QueryMessageResult:
        """Messages of ``topic`` whose UNIQ_KEY or one of whose KEYS is ``key``, stored within
        [begin, end]: the newest ``max_num`` (at most 64), ascending by commit-log offset."""
        result = QueryMessageResult()
        if self.index is None or max_num <= 0:
            return result
        found: dict[int, MessageExt] = {}

        def accept(phys: int) -> bool:
            if phys in found:
                return False
            msg = self.commit_log.read_message(phys)
            if msg is None or msg.topic != topic:
                return False
            if msg.uniq_key != key and key not in msg.keys:
                return False
            found[phys] = msg
            return True

        offsets, ts, phy = self.index.query(topic, key, max_num, begin, end, accept)
        if offsets:
            result.index_last_update_timestamp = ts
            result.index_last_update_phyoffset = phy
        result.messages = [found[o] for o in offsets]
        result.buffer_total_size = sum(m.store_size for m in result.messages)
        return result
