"""Transactional messages: half messages, their commit or rollback, and the broker's checks of
transactions a producer left open. The files are RocketMQ 4.x's.

A producer sends a *half* message (sysFlag TRANSACTION_PREPARED, property TRAN_MSG=true). The
broker does not store it under its topic: it keeps the real topic and queue in the REAL_TOPIC
and REAL_QID properties, clears the transaction bits and puts it into queue 0 of
``RMQ_SYS_TRANS_HALF_TOPIC``, where consumers of the real topic never see it. Then:

- **commit** (END_TRANSACTION, or gRPC EndTransaction): the half message is read back by its
  commit-log offset and stored again under its real topic and queue with sysFlag
  TRANSACTION_COMMIT and the half's commit-log offset as its prepared-transaction offset; from
  there it is an ordinary message. Its properties are the half's, REAL_TOPIC, REAL_QID and
  TRAN_MSG included, as RocketMQ 4.9.8 stores them.
- **rollback**: nothing is stored under the real topic.
- either way an *op* message marks the half done: topic ``RMQ_SYS_TRANS_OP_HALF_TOPIC``, the
  half's queue, tag ``d``, body the half's queue offset in decimal.

An end names its half by queue offset in the half queue and commit-log offset, and both must
agree with the half queue's index: a record forged inside another message's body is refused.

**Checks.** Every ``check_interval_ms`` the broker walks the half queue from its progress (the
consumer offset of group ``CID_RMQ_SYS_TRANS`` on the half topic, in consumerOffset.json; the
op queue's progress likewise), for at most that interval (and 60 s) a round. A half with an op
is done. A half younger than ``timeout_ms`` ends the walk (the ones behind it are younger); one
born in the future is checked at once. A half with CHECK_IMMUNITY_TIME_IN_SECONDS (at most an
hour) that is not due is appended to the queue again as it is, so it holds back nothing. An
older one is appended again with TRANSACTION_CHECK_TIMES one higher and the producer is asked
about the copy (the remoting front end's CHECK_TRANSACTION_STATE to a producer of the half's
PGROUP, the gRPC front end's RecoverOrphanedTransactionCommand to a client publishing its
topic, the PGROUP of a 5.x client's half); its answer ends the copy. After ``check_max`` checks
a half is given up (logged, left uncommitted), as RocketMQ does.

Beyond RocketMQ: a transaction ends once. A second end of the same half, or of another copy of
it (known by its UNIQ_KEY), with the same resolution is a no-op; with the other resolution it
is refused. Ending a transaction writes an op for every copy of it known past the progress, and
an end and a check of one transaction never run at the same time, so a late commit and a
check's answer never store a message twice, across restarts too: at start the broker reads the
op messages and the open halves past the progress, and a resolution known only from an op is
recalled from the real topic (a committed message with the key). A master that died between
storing a commit and its op (kill -9, or a failover in controller mode) leaves a committed
message and no op: the end of a half older than the broker's last start as master looks in
the real topic for a committed message with the half's key first (once the key index has
taken in the commit log up to that start; SYSTEM_BUSY before) and stores none again.

Threads: every method runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ...remoting._codes import ResponseCode as RC
from ...store._errors import StoreError
from ...store.log._message import Message, PutMessageResult
from ...store.log._record import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_KEY,
    SYSFLAG_TRANSACTION_MASK,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    MessageExt,
)
from .._errors import BrokerError
from .._services import HasClock, HasOffsets, HasStore, HasTopics, TopicCreation
from ..state._topic_config import PERM_READ, PERM_WRITE, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC

log = logging.getLogger(__name__)

PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_S = "CHECK_IMMUNITY_TIME_IN_SECONDS"
SYSTEM_GROUP = "CID_RMQ_SYS_TRANS"
OP_TAG = "d"
# RocketMQ's defaults (BrokerConfig transactionTimeOut, transactionCheckMax,
# transactionCheckInterval)
DEFAULT_TIMEOUT_MS = 6_000
DEFAULT_CHECK_MAX = 15
DEFAULT_CHECK_INTERVAL_MS = 60_000
# a check round's longest run (RocketMQ's MAX_PROCESS_TIME_LIMIT), giving the loop a turn
# every _YIELD_EVERY halves
_ROUND_MAX_MS = 60_000
_YIELD_EVERY = 64
_READ_BATCH = 32
# how long an end waits for its half to reach the half queue (dispatch after a flush)
_DISPATCH_WAIT_S = 2.0
# how long an end of an older half waits for the key index to take in the commit log
_INDEX_WAIT_S = 5.0
_NOT_STARTED = 2**63 - 1
# the longest check immunity a message may ask for (RocketMQ 5's maxTransactionRecoverySecond)
MAX_IMMUNITY_S = 3600
# keys of ended transactions kept in memory (beyond the op messages past the progress)
_ENDED_KEPT = 50_000


class TransactionContext(HasClock, HasOffsets, HasStore, HasTopics, TopicCreation, Protocol):
    """What the transaction service uses of the broker."""


class TransactionError(BrokerError):
    """An end of transaction the broker refuses; ``code`` is the remoting response code,
    ``kind`` why: "unknown" (no such half message), "mismatch" (another group, message id or
    queue offset than the half's), "conflict" (the other resolution was taken), "store" (a
    put failed), "busy" (ask again soon)."""

    def __init__(self, message: str, kind: str, code: int = RC.SYSTEM_ERROR) -> None:
        super().__init__(message)
        self.kind = kind
        self.code = code


@dataclass(frozen=True, slots=True)
class CheckRequest:
    """A half message whose producer is asked how its transaction ended."""

    # the half as stored (its copy in the half queue): offsets name it in the producer's answer
    half: MessageExt
    real_topic: str
    real_queue_id: int
    producer_group: str | None
    transaction_id: str  # the half's UNIQ_KEY ("" when it has none)


# a front end's way to ask a producer: True when it found one to ask
Checker = Callable[[CheckRequest], bool]


class HasTransactions(Protocol):
    """The broker's transaction service (half messages, their ends and checks)."""

    @property
    def transactions(self) -> TransactionService: ...


class TransactionService:
    """The broker's transactional messages (see the module docstring)."""

    def __init__(
        self,
        broker: TransactionContext,
        *,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        check_max: int = DEFAULT_CHECK_MAX,
        check_interval_ms: int = DEFAULT_CHECK_INTERVAL_MS,
    ) -> None:
        self.broker = broker
        self.timeout_ms = timeout_ms
        self.check_max = check_max
        self.check_interval_ms = check_interval_ms
        self.checkers: list[Checker] = []
        # half queue offset → True commit / False rollback / None (learnt from an op message),
        # for the halves at or past the progress
        self._resolved: dict[int, bool | None] = {}
        # half queue offset → the op queue offset that marks it
        self._op_of: dict[int, int] = {}
        # UNIQ_KEY → resolution of the transactions ended lately
        self._ended: dict[str, bool | None] = {}
        # UNIQ_KEY → the unresolved half queue offsets at or past the progress known to hold
        # it (the check copies made here, and what the start found)
        self._copies: dict[str, list[int]] = {}
        # transaction key (UNIQ_KEY, or "@<queue offset>") → done when its end or check is over
        self._busy: dict[str, asyncio.Future[None]] = {}
        self._op_next = -1  # the next op queue offset to read
        self._loaded = False
        # the commit log's end when this broker last became master (start): the ends of
        # halves below it look for a committed message a master before stored without its
        # op; every half is below it while not started as master
        self._incarnation = _NOT_STARTED
        self._task: asyncio.Task[None] | None = None
        self._check_lock = asyncio.Lock()
        self.checks_sent = 0

    # ---- half messages -----------------------------------------------------------------------

    def to_half(self, msg: Message, producer_group: str | None = None) -> Message:
        """Turn a prepared message into the half message stored for it (in place; returned).
        Loop thread."""
        props = msg.properties
        props[PROPERTY_REAL_TOPIC] = msg.topic
        props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        props.pop(PROPERTY_DELAY, None)  # a half is never delayed (its commit is not either)
        if producer_group:
            props[PROPERTY_PRODUCER_GROUP] = producer_group
        msg.sys_flag = (msg.sys_flag & ~SYSFLAG_TRANSACTION_MASK) | TRANSACTION_NOT_TYPE
        msg.topic = TRANS_HALF_TOPIC
        msg.queue_id = 0
        self._ensure_topics()
        return msg

    def _ensure_topics(self) -> None:
        for topic in (TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC):
            if self.broker.topics.select(topic) is None:
                self.broker.create_topic_for_send_back(topic, 1, PERM_READ | PERM_WRITE, 0)

    # ---- ending a transaction ----------------------------------------------------------------

    async def find_half(self, commit_log_offset: int, queue_offset: int) -> MessageExt:
        """The half message at ``queue_offset`` of the half queue, which must be at
        ``commit_log_offset`` in the commit log (so a record forged inside another message's
        body is never taken for one). A half not dispatched to its queue yet (the dispatch
        thread follows the flush) is waited for a moment. TransactionError when there is
        none. Loop thread."""
        store = self.broker.store
        loop = asyncio.get_running_loop()
        give_up = loop.time() + _DISPATCH_WAIT_S
        while (
            queue_offset >= 0
            and store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0) <= queue_offset
            and commit_log_offset < store.max_phy_offset
            and store.dispatch_behind_bytes() > 0
            and loop.time() < give_up
        ):
            await asyncio.sleep(0.002)
        try:
            indexed = store.get_commit_log_offset_in_queue(TRANS_HALF_TOPIC, 0, queue_offset)
            half = (
                store.look_message_by_offset(commit_log_offset)
                if indexed == commit_log_offset and queue_offset >= 0
                else None
            )
        except (StoreError, ValueError) as exc:
            raise TransactionError(
                f"find prepared transaction message failed: {exc}", "unknown"
            ) from None
        if half is None or half.topic != TRANS_HALF_TOPIC or half.queue_offset != queue_offset:
            raise TransactionError(
                f"find prepared transaction message failed: no half message at queue offset "
                f"{queue_offset} and commit-log offset {commit_log_offset}",
                "unknown",
            )
        return half

    async def end(
        self,
        half: MessageExt,
        commit: bool,
        *,
        producer_group: str | None = None,
        message_id: str | None = None,
        from_check: bool = False,
    ) -> PutMessageResult | None:
        """Commit or roll back the transaction of ``half`` (from :meth:`find_half`). Returns the
        commit's put result (None for a rollback or a repeated end). TransactionError when the
        end is refused: another producer group or message id than the half's, the other
        resolution already taken, or a failed put of the committed message. Loop thread."""
        props = half.properties
        expected_group = props.get(PROPERTY_PRODUCER_GROUP)
        if producer_group is not None and expected_group and producer_group != expected_group:
            raise TransactionError(
                f"the producer group {producer_group!r} is not the half message's "
                f"{expected_group!r}",
                "mismatch",
            )
        uniq = props.get(PROPERTY_UNIQ_KEY, "")
        if message_id and uniq and message_id != uniq:
            raise TransactionError(
                f"message id {message_id!r} is not the half message's {uniq!r}", "mismatch"
            )
        self.load()
        key = _key(uniq, half.queue_offset)
        await self._acquire(key)
        try:
            known = self._resolution(half.queue_offset, uniq)
            if known is None:
                known = self._recall_resolution(half, uniq)
            stored = False
            if known is _UNKNOWN and uniq and self._may_be_committed(half):
                stored = await self._committed_copy_exists(half, uniq)
                if stored:
                    known = _UNKNOWN if commit else True
            if known is not _UNKNOWN:
                if known is not None and known != commit:
                    raise TransactionError(
                        f"the transaction of {uniq or half.queue_offset} was already "
                        f"{'committed' if known else 'rolled back'}",
                        "conflict",
                    )
                return None
            result: PutMessageResult | None = None
            if commit and not stored:
                result = await self._put(self._committed(half))
                if not result.ok:
                    raise TransactionError(
                        f"storing the committed message failed: {result.status.name}", "store"
                    )
            # the half and every copy of it known past the progress are done
            done = {half.queue_offset, *self._copies.pop(uniq, ())} if uniq else {half.queue_offset}
            for qo in sorted(done):
                if qo not in self._resolved:
                    await self._write_op(qo, commit)
            if uniq:
                self._ended[uniq] = commit
            log.debug(
                "transaction %s %s%s",
                uniq or half.queue_offset,
                "committed" if commit else "rolled back",
                " (check)" if from_check else "",
            )
            return result
        finally:
            self._release(key)

    def _resolution(self, queue_offset: int, uniq: str) -> object:
        if queue_offset in self._resolved:
            return self._resolved[queue_offset]
        if uniq and uniq in self._ended:
            return self._ended[uniq]
        return _UNKNOWN

    def _recall_resolution(self, half: MessageExt, uniq: str) -> bool | None:
        """How a transaction known to be ended (from an op message only) ended: committed when
        its real topic holds a committed message with its key. Remembered."""
        real_topic = half.properties.get(PROPERTY_REAL_TOPIC)
        if not uniq or not real_topic:
            return None
        try:
            found = self.broker.store.query_message(real_topic, uniq, 32).messages
        except (StoreError, ValueError):
            return None
        committed = any(
            m.sys_flag & SYSFLAG_TRANSACTION_MASK == TRANSACTION_COMMIT_TYPE for m in found
        )
        self._ended[uniq] = committed
        if half.queue_offset in self._resolved:
            self._resolved[half.queue_offset] = committed
        return committed

    def _may_be_committed(self, half: MessageExt) -> bool:
        """Whether a master before this one (this broker before a kill -9, or the one it took
        over from) may have stored the commit of ``half`` and died before its op: the half, or
        the half a check copied it from, is older than this broker's start as master."""
        return half.commitlog_offset < self._incarnation or PROPERTY_CHECK_TIMES in half.properties

    async def _committed_copy_exists(self, half: MessageExt, uniq: str) -> bool:
        """Whether the real topic holds a committed message of ``half`` (its UNIQ_KEY, through
        the key index), once the index has taken in what this broker had when it became
        master. TransactionError (SYSTEM_BUSY: ask again) while the index is behind that."""
        store = self.broker.store
        loop = asyncio.get_running_loop()
        give_up = loop.time() + _INDEX_WAIT_S
        upto = min(self._incarnation, store.max_phy_offset)
        while store.max_phy_offset - store.dispatch_behind_bytes() < upto:
            if loop.time() > give_up:
                raise TransactionError(
                    "the index is still taking in the commit log: end the transaction again",
                    "busy",
                    RC.SYSTEM_BUSY,
                )
            await asyncio.sleep(0.01)
        real_topic = half.properties.get(PROPERTY_REAL_TOPIC)
        if not real_topic:
            return False
        try:
            found = store.query_message(real_topic, uniq, 32).messages
        except (StoreError, ValueError):
            return False
        return any(
            m.sys_flag & SYSFLAG_TRANSACTION_MASK == TRANSACTION_COMMIT_TYPE
            and m.properties.get(PROPERTY_UNIQ_KEY) == uniq
            for m in found
        )

    async def _acquire(self, key: str) -> None:
        while (busy := self._busy.get(key)) is not None:
            await asyncio.shield(busy)
        self._busy[key] = asyncio.get_running_loop().create_future()

    def _release(self, key: str) -> None:
        busy = self._busy.pop(key, None)
        if busy is not None and not busy.done():
            busy.set_result(None)

    @staticmethod
    def _committed(half: MessageExt) -> Message:
        props = dict(half.properties)
        real_topic = props.get(PROPERTY_REAL_TOPIC)
        real_queue = props.get(PROPERTY_REAL_QUEUE_ID)
        if not real_topic or real_queue is None or not real_queue.isdigit():
            raise TransactionError("the half message has no REAL_TOPIC / REAL_QID", "unknown")
        return _copy_of(
            half,
            real_topic,
            int(real_queue),
            props,
            (half.sys_flag & ~SYSFLAG_TRANSACTION_MASK) | TRANSACTION_COMMIT_TYPE,
            prepared_transaction_offset=half.commitlog_offset,
        )

    async def _put(self, msg: Message) -> PutMessageResult:
        fut = self.broker.store.put_message_async(msg)
        return fut.result() if fut.done() else await asyncio.wrap_future(fut)

    async def _write_op(self, half_offset: int, commit: bool | None) -> None:
        """Mark the half at ``half_offset`` done: its op message, and the resolution kept. A
        failed op put is logged and the resolution still kept (as RocketMQ, which answers the
        end all the same): the half may then be checked again after a restart."""
        self._ensure_topics()
        op = Message(
            TRANS_OP_HALF_TOPIC,
            str(half_offset).encode(),
            0,
            properties={PROPERTY_TAGS: OP_TAG},
        )
        result = await self._put(op)
        self._resolved[half_offset] = commit
        if result.ok:
            self._op_of[half_offset] = result.queue_offset
        else:
            log.error(
                "transaction: the op message of half %d failed: %s",
                half_offset,
                result.status.name,
            )

    # ---- state at start ----------------------------------------------------------------------

    def load(self) -> None:
        """Learn what the files say past the progress (once): which halves are done, the keys
        of the transactions they ended, and the open halves of each key. Loop thread (it reads
        the store in the caller's thread: call it before serving)."""
        if self._loaded:
            return
        self._loaded = True
        store = self.broker.store
        if store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0) <= 0:
            self._op_next = self._progress(TRANS_OP_HALF_TOPIC)
            return
        progress = self._progress(TRANS_HALF_TOPIC)
        self._read_ops(progress, learn_keys=True)
        offset = progress
        end = store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0)
        while offset < end:
            r = store.get_message(SYSTEM_GROUP, TRANS_HALF_TOPIC, 0, offset, 256)
            if not r.messages:
                if r.next_begin_offset > offset:
                    offset = r.next_begin_offset
                    continue
                break
            for half in r.messages:
                offset = half.queue_offset + 1
                uniq = half.properties.get(PROPERTY_UNIQ_KEY)
                if uniq and half.queue_offset not in self._resolved:
                    self._copies.setdefault(uniq, []).append(half.queue_offset)

    def _read_ops(self, progress: int, *, learn_keys: bool = False) -> None:
        """Learn the op messages written since the last read: which halves past ``progress``
        are done (and with ``learn_keys``, the keys of every half an op names)."""
        store = self.broker.store
        if self._op_next < 0:
            self._op_next = self._progress(TRANS_OP_HALF_TOPIC)
        end = store.get_max_offset_in_queue(TRANS_OP_HALF_TOPIC, 0)
        while self._op_next < end:
            r = store.get_message(SYSTEM_GROUP, TRANS_OP_HALF_TOPIC, 0, self._op_next, 256)
            if not r.messages:
                if r.next_begin_offset > self._op_next:
                    self._op_next = r.next_begin_offset
                    continue
                break
            for op in r.messages:
                self._op_next = op.queue_offset + 1
                if op.tags != OP_TAG:
                    continue
                try:
                    half_offset = int(bytes(op.body).decode("ascii"))
                except ValueError:
                    log.warning("op message %d has a bad body", op.queue_offset)
                    continue
                if learn_keys:
                    self._learn_key(half_offset)
                if half_offset < progress or half_offset in self._resolved:
                    continue
                self._resolved[half_offset] = None
                self._op_of[half_offset] = op.queue_offset

    def _learn_key(self, half_offset: int) -> None:
        store = self.broker.store
        phys = store.get_commit_log_offset_in_queue(TRANS_HALF_TOPIC, 0, half_offset)
        if phys < 0:
            return
        half = store.look_message_by_offset(phys)
        if half is not None and half.topic == TRANS_HALF_TOPIC:
            uniq = half.properties.get(PROPERTY_UNIQ_KEY)
            if uniq:
                self._ended.setdefault(uniq, None)

    # ---- checks ------------------------------------------------------------------------------

    def start(self) -> None:
        """Learn the state from the files and run the checks every ``check_interval_ms`` (a
        master's). Loop thread."""
        self._incarnation = self.broker.store.max_phy_offset
        self.load()
        if self._task is None:
            self._task = asyncio.create_task(self._check_periodically())

    async def close(self) -> None:
        """Stop the checks (a master that is no longer one). Loop thread."""
        self._incarnation = _NOT_STARTED
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None

    async def _check_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval_ms / 1000.0)
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction check failed")

    async def check(self) -> int:
        """One round of checks (see the module docstring); the number of producers asked. A
        round takes at most ``check_interval_ms`` (and 60 s), giving the loop a turn often."""
        store = self.broker.store
        if store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0) <= 0:
            return 0
        self.load()
        async with self._check_lock:
            loop = asyncio.get_running_loop()
            give_up = loop.time() + min(self.check_interval_ms, _ROUND_MAX_MS) / 1000.0
            progress = self._progress(TRANS_HALF_TOPIC)
            self._read_ops(progress)
            now = self.broker.clock.now_ms()
            end = store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0)
            asked = 0
            offset = progress
            looked = 0
            while offset < end and loop.time() < give_up:
                r = store.get_message(SYSTEM_GROUP, TRANS_HALF_TOPIC, 0, offset, _READ_BATCH)
                if not r.messages:
                    if r.next_begin_offset > offset:
                        offset = r.next_begin_offset  # below the queue's minimum
                        continue
                    break
                stop = False
                for half in r.messages:
                    looked += 1
                    if looked % _YIELD_EVERY == 0:
                        await asyncio.sleep(0)
                    outcome = await self._check_one(half, now)
                    if outcome is None:
                        stop = True
                        break
                    offset = half.queue_offset + 1
                    asked += outcome
                if stop:
                    break
            self._advance(progress, offset)
            self.checks_sent += asked
            return asked

    async def _check_one(self, half: MessageExt, now: int) -> int | None:
        """Look at one half past the progress: None to end the round here (too young, or its
        transaction is being ended right now), else how many producers were asked (0 or 1)
        and the progress may pass it."""
        qo = half.queue_offset
        if qo in self._resolved:
            return 0
        props = half.properties
        uniq = props.get(PROPERTY_UNIQ_KEY, "")
        key = _key(uniq, qo)
        if key in self._busy:
            return None
        if uniq and uniq in self._ended:
            # another copy of it ended
            await self._write_op(qo, self._ended[uniq])
            return 0
        times = _int_prop(props, PROPERTY_CHECK_TIMES)
        if times >= self.check_max:
            log.warning(
                "transaction %s of %s given up after %d checks",
                uniq,
                props.get(PROPERTY_REAL_TOPIC),
                times,
            )
            self._forget_copy(uniq, qo)
            return 0
        age = now - half.born_timestamp
        immunity_s = props.get(PROPERTY_CHECK_IMMUNITY_S)
        if immunity_s is not None:
            immunity = min(max(_int_prop(props, PROPERTY_CHECK_IMMUNITY_S), 0), MAX_IMMUNITY_S)
            if 0 <= age < max(immunity * 1000, self.timeout_ms):
                # not due: moved to the end of the queue, so it holds back nothing behind it
                await self._put_back(half, times, uniq)
                return 0
        elif 0 <= age < self.timeout_ms:
            return None  # the ones behind it are younger still
        copy = await self._put_back(half, times + 1, uniq)
        return 1 if copy is not None and self._ask(copy) else 0

    def _forget_copy(self, uniq: str, qo: int) -> None:
        copies = self._copies.get(uniq)
        if copies is not None and qo in copies:
            copies.remove(qo)
            if not copies:
                del self._copies[uniq]

    async def _put_back(self, half: MessageExt, times: int, uniq: str) -> MessageExt | None:
        """Append ``half`` to the half queue again with its check count; the copy as stored
        (None when the put failed: the half is then given up, as RocketMQ does)."""
        props = dict(half.properties)
        if times:
            props[PROPERTY_CHECK_TIMES] = str(times)
        copy = _copy_of(half, TRANS_HALF_TOPIC, half.queue_id, props, half.sys_flag)
        key = _key(uniq, half.queue_offset)
        await self._acquire(key)
        try:
            result = await self._put(copy)
            if not result.ok:
                log.error("transaction check: re-putting half %s failed", half.queue_offset)
                return None
            self._forget_copy(uniq, half.queue_offset)
            if uniq:
                self._copies.setdefault(uniq, []).append(result.queue_offset)
        finally:
            self._release(key)
        return self.broker.store.look_message_by_offset(result.wrote_offset)

    def _ask(self, half: MessageExt) -> bool:
        props = half.properties
        request = CheckRequest(
            half,
            props.get(PROPERTY_REAL_TOPIC, ""),
            _int_prop(props, PROPERTY_REAL_QUEUE_ID),
            props.get(PROPERTY_PRODUCER_GROUP),
            props.get(PROPERTY_UNIQ_KEY, ""),
        )
        for checker in self.checkers:
            try:
                if checker(request):
                    return True
            except Exception:
                log.exception("transaction check of %s failed", request.transaction_id)
        log.info(
            "transaction %s of %s: no producer to ask", request.transaction_id, request.real_topic
        )
        return False

    # ---- progress ----------------------------------------------------------------------------

    def _progress(self, topic: str) -> int:
        """The stored progress on ``topic`` kept within its queue's [min, max] (a tail lost
        after a power cut, files removed by retention)."""
        store = self.broker.store
        low = max(0, store.get_min_offset_in_queue(topic, 0))
        high = max(low, store.get_max_offset_in_queue(topic, 0))
        stored = self.broker.offsets.query_offset(SYSTEM_GROUP, topic, 0)
        return min(max(stored, low), high)

    def _advance(self, old: int, new: int) -> None:
        """Move the half progress to ``new``, forget what lies below it, and move the op
        progress over the op messages of forgotten halves."""
        offsets = self.broker.offsets
        host = "transaction-check"
        if new > old:
            offsets.commit_offset(host, SYSTEM_GROUP, TRANS_HALF_TOPIC, 0, new)
        for qo in [qo for qo in self._resolved if qo < new]:
            del self._resolved[qo]
            self._op_of.pop(qo, None)
        for uniq in list(self._copies):
            kept = [qo for qo in self._copies[uniq] if qo >= new]
            if kept:
                self._copies[uniq] = kept
            else:
                del self._copies[uniq]
        op_progress = min(self._op_of.values(), default=self._op_next)
        if op_progress > self._progress(TRANS_OP_HALF_TOPIC):
            offsets.commit_offset(host, SYSTEM_GROUP, TRANS_OP_HALF_TOPIC, 0, op_progress)
        if len(self._ended) > _ENDED_KEPT * 2:
            # bounded memory: keep the newest keys
            for key in list(self._ended)[: len(self._ended) - _ENDED_KEPT]:
                del self._ended[key]


_UNKNOWN = object()


def _key(uniq: str, queue_offset: int) -> str:
    """The key of a half's transaction: its UNIQ_KEY, else its place in the half queue."""
    return uniq or f"@{queue_offset}"


def _copy_of(
    half: MessageExt,
    topic: str,
    queue_id: int,
    properties: dict[str, str],
    sys_flag: int,
    *,
    prepared_transaction_offset: int = 0,
) -> Message:
    """A message with ``half``'s body, flag, born time and host and reconsume times."""
    return Message(
        topic,
        bytes(half.body),
        queue_id,
        properties=properties,
        flag=half.flag,
        sys_flag=sys_flag,
        born_timestamp=half.born_timestamp,
        born_host=half.born_host_str,
        reconsume_times=half.reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset,
    )


def _int_prop(props: dict[str, str], name: str) -> int:
    try:
        return int(props.get(name, "0"))
    except ValueError:
        return 0
