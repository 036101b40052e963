"""AutoClient: a controller-mode slave's replication from its master (RocketMQ 5's
AutoSwitchHAClient), in the frames of ``_auto_wire``. The connection, the proof, the reports
and the appending loop are ``Follower``'s; the AutoSwitch parts:

1. it sends its HANDSHAKE (its broker id, syncFromLastFile, asyncLearner);
2. it reads the master's HANDSHAKE (the master's epoch entries and max offset) and cuts its own
   log at the consistent point (``_epoch.consistent_point``: the end of the newest epoch both
   logs record with one start offset); with no epoch entries of its own it keeps its log as it
   is (a new replica). The cut goes through ``truncate`` (commit log, consume queues, index)
   and the epoch file forgets the epochs after it. A log that shares no epoch with the
   master's is not touched: the connection is closed and tried again later, with an error;
3. it reports its max offset (TRANSFER) and appends every TRANSFER frame exactly at its end of
   the log, recording a new epoch (with its start offset) before the first bytes of it; it
   takes the master's confirm offset (up to its own end), and after each read lets the store
   dispatch what the confirm offset now covers (``on_append``).

A frame in another state, or with bytes at another offset than the log's end, ends the
connection.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._clock import Clock
from ._auth import OPEN, PROTOCOL_AUTO_SWITCH, HAGuard
from ._auto_wire import (
    HANDSHAKE,
    MASTER_HANDSHAKE,
    MASTER_HANDSHAKE_SIZE,
    MASTER_TRANSFER,
    MASTER_TRANSFER_SIZE,
    SLAVE_HANDSHAKE,
    SLAVE_TRANSFER,
    STATE,
    TRANSFER,
    decode_entries,
    state_name,
)
from ._epoch import EpochEntry, EpochFile, consistent_point
from ._follower import HANDSHAKE_WAIT_S, ClientState, Follower, ProtocolError
from ._tls import Stream

if TYPE_CHECKING:
    from ..log._commit_log import CommitLog
    from ._in_sync import InSyncReplicas

log = logging.getLogger(__name__)


class AutoClient(Follower):
    protocol = PROTOCOL_AUTO_SWITCH
    head_size = MASTER_TRANSFER_SIZE

    def __init__(
        self,
        commit_log: CommitLog,
        epochs: EpochFile,
        in_sync: InSyncReplicas,
        clock: Clock,
        *,
        broker_id: int,
        truncate: Callable[[int], int],
        on_append: Callable[[], None],
        heartbeat_s: float,
        housekeeping_s: float,
        reconnect_s: float,
        sync_from_last_file: bool = False,
        guard: HAGuard = OPEN,
    ) -> None:
        super().__init__(
            "AutoSwitchHAClient",
            commit_log,
            clock,
            broker_id=broker_id,
            heartbeat_s=heartbeat_s,
            housekeeping_s=housekeeping_s,
            reconnect_s=reconnect_s,
            guard=guard,
        )
        self.epochs = epochs
        self.in_sync = in_sync
        self.truncate = truncate
        self.on_append = on_append
        self.sync_from_last_file = sync_from_last_file
        self.truncations = 0
        self.received_epoch = -1

    def _report_frame(self, offset: int) -> bytes:
        return SLAVE_TRANSFER.pack(TRANSFER, offset)

    def _serve(self, sock: Stream) -> None:
        self._phase = ClientState.HANDSHAKE
        flags = 1 if self.sync_from_last_file else 0
        self._send(SLAVE_HANDSHAKE.pack(HANDSHAKE, flags, 0, self.broker_id))
        deadline = self.clock.monotonic() + max(HANDSHAKE_WAIT_S, self.housekeeping_s)
        head = self._recv_exactly(sock, MASTER_HANDSHAKE_SIZE, deadline)
        state, size, master_max, _last_epoch = MASTER_HANDSHAKE.unpack(head)
        if state != HANDSHAKE or size < 0 or size % 12:
            raise ProtocolError(f"expected the master's handshake, got {state_name(state)}")
        body = self._recv_exactly(sock, size, deadline) if size else b""
        theirs = [EpochEntry(e, s) for e, s in decode_entries(body)]
        start = self._cut(theirs, master_max)
        self.received_epoch = -1
        self._report(sock, start)
        self._receive(sock)

    def _cut(self, theirs: list[EpochEntry], master_max: int) -> int:
        """Cut this log where it stops matching the master's; where to replicate from."""
        cl = self.commit_log
        mine = self.epochs.entries()
        my_end = cl.max_offset
        if not mine:
            log.info(
                "HA client: no epoch entries here (a new replica): the log is kept to %d",
                my_end,
            )
            return my_end
        point = consistent_point(mine, my_end, theirs, master_max)
        log.info(
            "HA client: master epochs %s (max %d), mine %s (max %d): consistent point %d",
            [tuple(e) for e in theirs],
            master_max,
            [tuple(e) for e in mine],
            my_end,
            point,
        )
        if point < 0:
            raise ProtocolError(
                f"this log shares no epoch with the master's (mine {[tuple(e) for e in mine]}, "
                f"the master's {[tuple(e) for e in theirs]}): not replicating"
            )
        if point < my_end:
            log.warning(
                "HA client: cutting the log from %d to %d (%d bytes the master does not hold)",
                my_end,
                point,
                my_end - point,
            )
            self.truncate(point)
            self.truncations += 1
        self.epochs.truncate_suffix_by_offset(point)
        return min(point, cl.max_offset)

    def _frame_head(self, buf: bytearray, start: int) -> tuple[int, int]:
        (state,) = STATE.unpack_from(buf, start)
        if state != TRANSFER:
            raise ProtocolError(f"a frame in {state_name(state)} state while in TRANSFER")
        _s, size, offset, _epoch, _epoch_start, _confirm = MASTER_TRANSFER.unpack_from(buf, start)
        return size, offset

    def _before_append(self, buf: bytearray, start: int, offset: int) -> None:
        cl = self.commit_log
        mine = cl.max_offset
        if cl.queue.files and offset != mine:
            raise ProtocolError(f"the master sends from {offset}, this slave's log ends at {mine}")
        _s, _size, _offset, epoch, epoch_start, _confirm = MASTER_TRANSFER.unpack_from(buf, start)
        if epoch != self.received_epoch:
            self._new_epoch(epoch, epoch_start)

    def _after_frame(self, buf: bytearray, start: int) -> None:
        confirm = MASTER_TRANSFER.unpack_from(buf, start)[5]
        self.in_sync.set_confirm(min(confirm, self.commit_log.max_offset))

    def _after_read(self) -> None:
        self.on_append()

    def _new_epoch(self, epoch: int, start: int) -> None:
        self.received_epoch = epoch
        last = self.epochs.last_entry()
        if last is not None and (last.epoch > epoch or (last.epoch == epoch)):
            return
        if self.epochs.append(epoch, start):
            log.info("HA client: epoch %d starts at %d", epoch, start)
