"""Pop consumption for v2 clients: ReceiveMessage, AckMessage, ChangeInvisibleDuration and
ForwardMessageToDeadLetterQueue over the broker's :class:`~rocketstore.broker.state._pop.PopState`.

A receive takes messages from every readable queue of the topic on this broker (as RocketMQ's
proxy pops with queue id -1; the queue a client names only picks the broker), starting at a
queue that turns with each receive so queues are served fairly. Per queue, PopState hands out
first the messages whose invisible time ran out (delivery attempt + 1), then new ones read from
the consume queue through the group's tag filter, each invisible to the rest of the group
until acked, extended or expired. A message that already had the group's max delivery attempts
(``retryMaxTimes`` + 1) is put into ``%DLQ%<group>`` instead and acked once stored.

A receive that finds nothing waits (long polling) until the earliest of: a message arriving
in one of the topic's queues (the broker's long-poll holds), the invisible time of a message of
the group running out, a change of invisibility in the group, the recheck interval, or the
end of the poll; then it looks again. The poll is the client's ``long_polling_timeout`` (or
its deadline less half its request timeout), at most ``max_long_polling_ms``, and always ends
``long_polling_reserve_ms`` before the client's deadline.

Memory: a receive takes room for its answer (``max_receive_bytes``) from the front end's
budget (``room``, ``max_buffered_bytes``, shared with sends and Telemetry replies, see
``_gate``) before it reads a message, waiting
for it within its poll time (none in time: an empty answer), and gives back what its messages
do not need at once; the rest goes back message by message as the stream writes them
(``delivered``), so messages read for clients that do not take them cannot pile up. Messages
beyond ``max_receive_bytes`` (after the first) are made visible again at once.

A group's first receive from a queue starts at its committed consumer offset; without one at
the queue's first message while that is still in memory (the queue was never cleaned),
else at its end, as RocketMQ's pop does. The group's pop progress is committed as its consumer
offset by the front end (see ``_server``), so GetOffset and the remoting front end see it.

Loop thread only.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Coroutine
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from ..broker._services import (
    HasConfig,
    HasGroups,
    HasHolds,
    HasOffsets,
    HasStats,
    HasStore,
    HasStoreConfig,
    HasTopics,
    TopicCreation,
)
from ..broker.messaging._send_back import DLQ_NUMS_PER_GROUP, DLQ_PERM
from ..broker.state._pop import InvalidReceiptHandleError, PopState, ReadBatch, Receipt
from ..broker.state._topic_config import PERM_READ, dlq_topic
from ..remoting._room import ByteRoom
from ..store._clock import Clock
from ..store._errors import CorruptRecordError, StoreError
from ..store.log._message import GetMessageStatus
from ..store.log._record import MessageExt
from ..store.queue._filter import TagFilter
from ._checks import check_group, check_invisible, check_topic, topic_config
from ._config import GrpcConfig
from ._convert import Code, GrpcError, copy_for_dead_letter
from ._pb import definition_pb2 as pb
from ._pb import service_pb2 as spb

if TYPE_CHECKING:
    from ..protocol._subscription_group import SubscriptionGroupConfig

log = logging.getLogger(__name__)

S = GetMessageStatus
# a message that could not be written to its consumer comes back this soon
NACK_INVISIBLE_MS = 1_000
_STAY = (S.NO_MESSAGE_IN_QUEUE, S.NO_MATCHED_LOGIC_QUEUE, S.OFFSET_OVERFLOW_ONE)

Delivery = tuple[MessageExt, Receipt]


class ReceiveContext(
    HasStats,
    HasConfig,
    HasGroups,
    HasHolds,
    HasOffsets,
    HasStore,
    HasStoreConfig,
    HasTopics,
    TopicCreation,
    Protocol,
):
    """What gRPC receives use of the broker."""


def tag_filter_of(expression: pb.FilterExpression) -> TagFilter:
    """The tag filter of a v2 filter expression (``A || B``, ``*`` or empty);
    ILLEGAL_FILTER_EXPRESSION for SQL92, which this broker does not evaluate."""
    if expression.type == pb.SQL:
        raise GrpcError(
            Code.ILLEGAL_FILTER_EXPRESSION, "SQL92 filter expressions are not supported"
        )
    if expression.type not in (pb.TAG, pb.FILTER_TYPE_UNSPECIFIED):
        raise GrpcError(Code.ILLEGAL_FILTER_EXPRESSION, f"unknown filter type {expression.type}")
    return TagFilter(expression.expression or "*")


class PopService:
    def __init__(
        self,
        broker: ReceiveContext,
        config: GrpcConfig,
        clock: Clock,
        pop: PopState,
        room: ByteRoom | None = None,
    ) -> None:
        self.broker = broker
        self.config = config
        self.clock = clock
        self.pop = pop
        self._turns: dict[tuple[str, str], itertools.count[int]] = {}
        # (group, topic) → heap of invisibility deadlines (epoch ms) handed out here
        self._deadlines: dict[tuple[str, str], list[int]] = {}
        # (group, topic) → events of the receives waiting on it
        self._waiters: dict[tuple[str, str], set[asyncio.Event]] = {}
        self._tasks: set[asyncio.Task[bool]] = set()
        self._closing = False
        self._filters: dict[str, TagFilter] = {}
        # handles of auto-renewed receives (push consumers): handle → [client id, first
        # delivery ms, current deadline ms]; and each client's handles
        self._auto: dict[str, list[Any]] = {}
        self._auto_by_client: dict[str, set[str]] = {}
        # the front end's budget: receive answers being read or written take from it (see
        # the module docstring), as sends and Telemetry replies do
        self.room = room if room is not None else ByteRoom(config.max_buffered_bytes)

    def delivered(self, msg: MessageExt) -> None:
        """A message of a receive's answer was written to its stream, or will never be: its
        room goes back."""
        self.room.release(msg.store_size)

    # ---- checks ------------------------------------------------------------------------------

    def _group_config(self, group: str) -> SubscriptionGroupConfig:
        config = self.broker.groups.find_or_create(group)
        if config is None:
            raise GrpcError(
                Code.CONSUMER_GROUP_NOT_FOUND, f"subscription group [{group}] does not exist"
            )
        if not config.consume_enable:
            raise GrpcError(Code.FORBIDDEN, f"consumer group {group} may not consume")
        return config

    def _is_orderly(self, group: str) -> bool:
        config = self.broker.groups.get(group)
        return config is not None and config.consume_message_orderly

    def _readable_queues(self, topic: str) -> list[int]:
        config = topic_config(self.broker, topic, create=False)
        if not config.perm & PERM_READ or not self.broker.config.broker_permission & PERM_READ:
            raise GrpcError(Code.FORBIDDEN, f"the topic[{topic}] pulling message is forbidden")
        return list(range(config.read_queue_nums))

    # ---- ReceiveMessage ----------------------------------------------------------------------

    async def receive(
        self, request: spb.ReceiveMessageRequest, remaining_s: float | None, client_id: str = ""
    ) -> list[Delivery]:
        """Messages for a ReceiveMessage, after a long poll when there are none yet (then the
        list is empty: MESSAGE_NOT_FOUND). GrpcError for a refused request. The handles of an
        auto-renewed receive are kept invisible while ``client_id`` lives (see
        :meth:`renew_due`)."""
        found = await self._receive(request, remaining_s)
        if request.auto_renew and not request.HasField("invisible_duration") and client_id:
            now = self.clock.now_ms()
            for _msg, receipt in found:
                self._auto[receipt.handle] = [client_id, now, receipt.invisible_until_ms]
                self._auto_by_client.setdefault(client_id, set()).add(receipt.handle)
        return found

    async def _receive(
        self, request: spb.ReceiveMessageRequest, remaining_s: float | None
    ) -> list[Delivery]:
        cfg = self.config
        group = check_group(request.group)
        topic = check_topic(request.message_queue.topic, self.broker.topics)
        group_config = self._group_config(group)
        queues = self._readable_queues(topic)
        tag_filter = tag_filter_of(request.filter_expression)
        batch = request.batch_size
        if batch <= 0:
            raise GrpcError(Code.BAD_REQUEST, f"batch size must be positive, not {batch}")
        batch = min(batch, cfg.max_batch_size)
        if request.HasField("invisible_duration"):
            invisible_ms = check_invisible(
                request.invisible_duration.ToMilliseconds(),
                cfg.min_invisible_ms,
                cfg.max_invisible_ms,
            )
        elif request.auto_renew:
            invisible_ms = cfg.default_invisible_ms
        else:
            raise GrpcError(Code.ILLEGAL_INVISIBLE_TIME, "no invisible duration")
        poll_ms = self._polling_ms(request, remaining_s)
        if not queues:
            return []
        return await self._pop_wait(
            group,
            topic,
            queues,
            batch,
            invisible_ms,
            None if tag_filter.matches_all else tag_filter,
            group_config.retry_max_times + 1,
            poll_ms,
            group_config.consume_message_orderly,
        )

    def _polling_ms(self, request: spb.ReceiveMessageRequest, remaining_s: float | None) -> int:
        cfg = self.config
        if request.HasField("long_polling_timeout"):
            poll = int(request.long_polling_timeout.ToMilliseconds())
        elif remaining_s is not None:
            poll = int(remaining_s * 1000) // 2
        else:
            poll = cfg.max_long_polling_ms
        poll = min(max(poll, 0), cfg.max_long_polling_ms)
        if remaining_s is not None:
            left = int(remaining_s * 1000) - cfg.long_polling_reserve_ms
            if left <= 0:
                raise GrpcError(
                    Code.ILLEGAL_POLLING_TIME,
                    "the time left before the deadline is not enough for polling",
                )
            poll = min(poll, left)
        return poll

    async def _pop_wait(
        self,
        group: str,
        topic: str,
        queues: list[int],
        batch: int,
        invisible_ms: int,
        tag_filter: TagFilter | None,
        max_attempts: int,
        poll_ms: int,
        orderly: bool,
    ) -> list[Delivery]:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + poll_ms / 1000.0
        key = (group, topic)
        holds = self.broker.holds
        store = self.broker.store
        cap = self.config.max_receive_bytes
        while True:
            # room for the answer before a message is read: none within the poll, no answer
            if not await self.room.acquire(cap, max(0.0, give_up - loop.time())):
                return []
            attempt_ms = self.clock.now_ms()
            # what the queues hold before the look: an arrival after it wakes the wait below
            snapshot = [store.get_max_offset_in_queue(topic, q) for q in queues]
            try:
                found = self._pop_once(
                    group, topic, queues, batch, invisible_ms, tag_filter, max_attempts, orderly
                )
            except BaseException:
                self.room.release(cap)
                raise
            self.room.release(cap - sum(msg.store_size for msg, _r in found))
            if found or self._closing:
                return found  # their room goes back as the stream writes them (delivered)
            left = give_up - loop.time()
            if left <= 0:
                return []
            wait = min(left, self.config.pop_recheck_ms / 1000.0)
            deadline = self._next_deadline(key, attempt_ms)
            if deadline is not None:
                wait = min(wait, max(0.0, (deadline - self.clock.now_ms()) / 1000.0) + 0.001)
            event = asyncio.Event()
            waiters = self._waiters.setdefault(key, set())
            waiters.add(event)
            held = [
                holds.hold(topic, q, snapshot[i], wait, event.set) for i, q in enumerate(queues)
            ]
            try:
                await asyncio.wait_for(event.wait(), wait)
            except TimeoutError:
                pass
            finally:
                for h in held:
                    h.cancel()
                waiters.discard(event)
                if not waiters:
                    self._waiters.pop(key, None)

    def _pop_once(
        self,
        group: str,
        topic: str,
        queues: list[int],
        batch: int,
        invisible_ms: int,
        tag_filter: TagFilter | None,
        max_attempts: int,
        orderly: bool = False,
    ) -> list[Delivery]:
        out: list[Delivery] = []
        size = 0
        cap = self.config.max_receive_bytes
        turn = self._turns.get((group, topic))
        if turn is None:
            turn = self._turns[(group, topic)] = itertools.count()
        start = next(turn)
        n = len(queues)
        store = self.broker.store
        for i in range(n):
            if len(out) >= batch or size >= cap:
                break
            queue_id = queues[(start + i) % n]
            cache: dict[int, MessageExt] = {}
            try:
                received = self.pop.receive(
                    group,
                    topic,
                    queue_id,
                    batch - len(out),
                    invisible_ms,
                    read=partial(self._read, group, topic, queue_id, tag_filter, cache),
                    start_offset=partial(self._start_offset, group, topic, queue_id),
                    max_delivery_attempts=max_attempts,
                    orderly=orderly,
                )
            except CorruptRecordError as exc:
                log.error("receive %s of %s:%d: %s", group, topic, queue_id, exc)
                continue
            for receipt in received.dead_letters:
                self._note(receipt)
                self._spawn(self.dead_letter(receipt))
            for receipt in received.deliveries:
                self._note(receipt)
                msg = cache.get(receipt.offset)
                if msg is None:
                    msg = store.look_message_by_offset(receipt.phys_offset)
                if msg is None:
                    log.warning(
                        "%s:%d offset %d (commit log %d) is gone from the store; dropped",
                        topic,
                        queue_id,
                        receipt.offset,
                        receipt.phys_offset,
                    )
                    self._ack_quietly(receipt.handle)
                    continue
                if out and size + msg.store_size > cap:  # the answer is full: visible again
                    self._release_now(receipt)
                    continue
                size += msg.store_size
                out.append((msg, receipt))
                self.broker.stats.note_out(topic, group, 1, msg.store_size)
        return out

    def _release_now(self, receipt: Receipt) -> None:
        """A message handed out but not put into the answer: visible to the group at once."""
        self._untrack(receipt.handle)
        try:
            self.pop.change_invisible(receipt.handle, 0)
        except InvalidReceiptHandleError:
            return
        self._wake((receipt.group, receipt.topic))

    def _read(
        self,
        group: str,
        topic: str,
        queue_id: int,
        tag_filter: TagFilter | None,
        cache: dict[int, MessageExt],
        offset: int,
        count: int,
    ) -> ReadBatch:
        """PopState's read: the matching messages from ``offset`` (kept in ``cache`` for the
        answer) and where the next read starts."""
        r = self.broker.store.get_message(group, topic, queue_id, offset, count, tag_filter)
        found: list[tuple[int, int]] = []
        for m in r.messages:
            cache[m.queue_offset] = m
            found.append((m.queue_offset, m.commitlog_offset))
        nxt = r.next_begin_offset
        if r.status in _STAY or nxt < offset:
            nxt = offset
        if found and nxt <= found[-1][0]:
            nxt = found[-1][0] + 1
        return ReadBatch(found, nxt)

    def _start_offset(self, group: str, topic: str, queue_id: int) -> int:
        committed = self.broker.offsets.query_offset(group, topic, queue_id)
        if committed >= 0:
            return committed
        store = self.broker.store
        min_offset = store.get_min_offset_in_queue(topic, queue_id)
        max_offset = store.get_max_offset_in_queue(topic, queue_id)
        if min_offset <= 0:
            first = store.get_commit_log_offset_in_queue(topic, queue_id, 0)
            memory: int = store.reader.memory
            if store.max_phy_offset - first <= memory:
                return 0
        return max(0, max_offset)

    def _note(self, receipt: Receipt) -> None:
        heapq.heappush(
            self._deadlines.setdefault((receipt.group, receipt.topic), []),
            receipt.invisible_until_ms,
        )

    def _next_deadline(self, key: tuple[str, str], after_ms: int) -> int | None:
        heap = self._deadlines.get(key)
        while heap and heap[0] <= after_ms:
            heapq.heappop(heap)
        if not heap:
            self._deadlines.pop(key, None)
            return None
        return heap[0]

    def prune_deadlines(self) -> None:
        """Drop deadlines that have passed (the front end's housekeeping)."""
        now = self.clock.now_ms()
        for key in list(self._deadlines):
            self._next_deadline(key, now)

    def _wake(self, key: tuple[str, str]) -> None:
        for event in self._waiters.get(key, ()):
            event.set()

    def wake_all(self) -> None:
        """Answer every waiting receive now (shutdown)."""
        self._closing = True
        for events in self._waiters.values():
            for event in events:
                event.set()

    # ---- auto-renewal ------------------------------------------------------------------------

    def _untrack(self, handle: str) -> None:
        tracked = self._auto.pop(handle, None)
        if tracked is not None:
            handles = self._auto_by_client.get(tracked[0])
            if handles is not None:
                handles.discard(handle)
                if not handles:
                    del self._auto_by_client[tracked[0]]

    def renew_due(self) -> int:
        """Extend the auto-renewed handles whose invisibility ends within ``renew_ahead_ms``
        by ``default_invisible_ms``, for at most ``renew_max_ms`` after their delivery (the
        front end's housekeeping); the number renewed."""
        cfg = self.config
        now = self.clock.now_ms()
        renewed = 0
        for handle, tracked in list(self._auto.items()):
            _client, first_ms, deadline = tracked
            if deadline - now > cfg.renew_ahead_ms:
                continue
            if now - first_ms >= cfg.renew_max_ms:
                self._untrack(handle)  # left to expire: redelivered to the group
                continue
            try:
                tracked[2] = self.pop.renew(handle, cfg.default_invisible_ms)
                renewed += 1
            except InvalidReceiptHandleError:
                self._untrack(handle)  # acked or handed out again meanwhile
        return renewed

    def release_client(self, client_id: str) -> int:
        """A client left (terminated or expired): what it received with auto-renewal and did
        not ack becomes visible to its group again after ``release_invisible_ms``; the number
        released."""
        released = 0
        for handle in list(self._auto_by_client.get(client_id, ())):
            self._untrack(handle)
            try:
                new = self.pop.change_invisible(handle, self.config.release_invisible_ms)
            except InvalidReceiptHandleError:
                continue
            self._note(new)
            released += 1
        return released

    def nack(self, receipt: Receipt) -> None:
        """A delivery that did not reach its consumer: visible again soon."""
        self._untrack(receipt.handle)
        try:
            new = self.pop.change_invisible(receipt.handle, NACK_INVISIBLE_MS)
        except InvalidReceiptHandleError:
            return
        self._note(new)
        self._wake((new.group, new.topic))

    # ---- AckMessage / ChangeInvisibleDuration ------------------------------------------------

    def ack(self, request: spb.AckMessageRequest) -> spb.AckMessageResponse:
        group = check_group(request.group)
        topic = check_topic(request.topic, self.broker.topics)
        if not request.entries:
            raise GrpcError(Code.BAD_REQUEST, "no entries to ack")
        response = spb.AckMessageResponse()
        codes: set[int] = set()
        for entry in request.entries:
            out = response.entries.add(
                message_id=entry.message_id, receipt_handle=entry.receipt_handle
            )
            try:
                self.pop.ack(entry.receipt_handle, group=group, topic=topic)
                self._untrack(entry.receipt_handle)
            except InvalidReceiptHandleError as exc:
                out.status.code = Code.INVALID_RECEIPT_HANDLE
                out.status.message = str(exc)
            else:
                out.status.code = Code.OK
                out.status.message = "OK"
            codes.add(out.status.code)
        if Code.OK in codes and self._is_orderly(group):
            self._wake((group, topic))  # an ack may free a FIFO queue for the next message
        code = codes.pop() if len(codes) == 1 else Code.MULTIPLE_RESULTS
        response.status.code = code  # type: ignore[assignment]
        response.status.message = Code.Name(code)  # type: ignore[arg-type]
        return response

    def change_invisible(
        self, request: spb.ChangeInvisibleDurationRequest
    ) -> spb.ChangeInvisibleDurationResponse:
        group = check_group(request.group)
        topic = check_topic(request.topic, self.broker.topics)
        ms = check_invisible(
            request.invisible_duration.ToMilliseconds(), 0, self.config.max_invisible_ms
        )
        try:
            receipt = self.pop.change_invisible(
                request.receipt_handle, ms, group=group, topic=topic
            )
        except InvalidReceiptHandleError as exc:
            raise GrpcError(Code.INVALID_RECEIPT_HANDLE, str(exc)) from None
        self._untrack(request.receipt_handle)  # the consumer decides its time from here
        self._note(receipt)
        self._wake((group, topic))
        response = spb.ChangeInvisibleDurationResponse(receipt_handle=receipt.handle)
        response.status.code = Code.OK
        response.status.message = "OK"
        return response

    # ---- dead letters ------------------------------------------------------------------------

    async def forward_to_dlq(self, request: spb.ForwardMessageToDeadLetterQueueRequest) -> None:
        """The client gives up on a message: into %DLQ%<group> at once. GrpcError when the
        handle is not current or the put fails (the message then comes back later)."""
        group = check_group(request.group)
        topic = check_topic(request.topic, self.broker.topics)
        try:
            receipt = self.pop.change_invisible(
                request.receipt_handle, self.config.dead_letter_retry_ms, group=group, topic=topic
            )
        except InvalidReceiptHandleError as exc:
            raise GrpcError(Code.INVALID_RECEIPT_HANDLE, str(exc)) from None
        self._untrack(request.receipt_handle)
        self._note(receipt)
        if not await self.dead_letter(receipt):
            raise GrpcError(Code.INTERNAL_SERVER_ERROR, "putting the message into the DLQ failed")

    async def dead_letter(self, receipt: Receipt) -> bool:
        """Put the message of ``receipt`` into its group's DLQ and ack it; False when the put
        failed (the message stays invisible until the handle's deadline, then is offered
        again)."""
        broker = self.broker
        try:
            msg = broker.store.look_message_by_offset(receipt.phys_offset)
            if msg is None:
                log.warning("dead letter %s: the message is gone from the store", receipt)
                self._ack_quietly(receipt.handle)
                return True
            dlq = dlq_topic(receipt.group)
            broker.create_topic_for_send_back(dlq, DLQ_NUMS_PER_GROUP, DLQ_PERM, 0)
            copy = copy_for_dead_letter(msg, receipt.group, dlq, receipt.attempt)
            fut = broker.store.put_message_async(copy)
            r = fut.result() if fut.done() else await asyncio.wrap_future(fut)
        except (StoreError, ValueError) as exc:
            log.error("dead letter %s failed: %s", receipt, exc)
            return False
        if not r.ok:
            log.error("dead letter %s: put failed with %s", receipt, r.status.name)
            return False
        self._ack_quietly(receipt.handle)
        if self._is_orderly(receipt.group):
            self._wake((receipt.group, receipt.topic))
        return True

    def _ack_quietly(self, handle: str) -> None:
        try:
            self.pop.ack(handle)
        except InvalidReceiptHandleError:
            pass

    def _spawn(self, coro: Coroutine[Any, Any, bool]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Answer waiting receives and let pending dead-letter puts finish."""
        self.wake_all()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
