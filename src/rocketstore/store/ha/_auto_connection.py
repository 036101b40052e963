"""AutoConnection: a controller-mode master's side of one slave's connection (RocketMQ 5's
AutoSwitchHAConnection), in the frames of ``_auto_wire``. The threads, the proof, the idle
waits and the frames' batching are ``Link``'s; this module adds the AutoSwitch parts:

- the reader takes the slave's HANDSHAKE (its broker id and flags: the id is held for this
  connection alone, and must be the one the slave proved with authentication on; a second
  handshake under another id is refused), then TRANSFER reports of its max offset: each one
  acknowledges what the slave holds and goes to the SyncStateSet (``InSyncReplicas.on_ack``,
  with whether the slave had caught up). A frame in an unknown state closes the connection;
- the writer answers a HANDSHAKE with this master's epoch entries and max offset, then sends
  TRANSFER frames from the slave's first report on (0: from the log's start, or its last file
  with syncFromLastFile), each within one epoch, with the epoch, its start and the confirm
  offset; with nothing to send it notes the slave as caught up.

Only the connection holding an id reports for it, and only its closing takes the replica out
of the acks (and proposes it out of the SyncStateSet): a refused peer changes nothing.
"""

from __future__ import annotations

import logging
import socket
import threading

from ._auth import PROTOCOL_AUTO_SWITCH
from ._auto_wire import (
    HANDSHAKE,
    MASTER_HANDSHAKE,
    MASTER_TRANSFER,
    MAX_EPOCH_ENTRIES,
    SLAVE_HANDSHAKE,
    SLAVE_HANDSHAKE_SIZE,
    SLAVE_TRANSFER,
    SLAVE_TRANSFER_SIZE,
    STATE,
    TRANSFER,
    encode_entries,
    state_name,
)
from ._epoch import OPEN_END, EpochFile
from ._in_sync import InSyncReplicas
from ._link import FrameHead, Link, LinkSettings

log = logging.getLogger(__name__)


class AutoConnection(Link):
    """One slave. Created by the accept thread, which calls ``start()``."""

    protocol = PROTOCOL_AUTO_SWITCH
    name = "AutoConnection"

    def __init__(
        self,
        sock: socket.socket,
        settings: LinkSettings,
        epochs: EpochFile,
        in_sync: InSyncReplicas,
    ) -> None:
        super().__init__(sock, settings)
        self.epochs = epochs
        self.in_sync = in_sync
        self.sync_from_last_file = False
        self.async_learner = False
        self.last_master_max = -1  # the master's end when the last frame went out
        self.last_transfer_at = self.opened
        self._handshake_asked = threading.Event()

    # ---- reader -----------------------------------------------------------------------------

    def _frames(self, buf: bytes) -> int:
        pos = 0
        last_ack = -1
        while len(buf) - pos >= STATE.size:
            (state,) = STATE.unpack_from(buf, pos)
            if state == HANDSHAKE:
                if len(buf) - pos < SLAVE_HANDSHAKE_SIZE:
                    break
                _s, from_last, learner, slave_id = SLAVE_HANDSHAKE.unpack_from(buf, pos)
                pos += SLAVE_HANDSHAKE_SIZE
                if not self._on_handshake(slave_id, from_last == 1, learner == 1):
                    return -1
            elif state == TRANSFER:
                if len(buf) - pos < SLAVE_TRANSFER_SIZE:
                    break
                _s, offset = SLAVE_TRANSFER.unpack_from(buf, pos)
                pos += SLAVE_TRANSFER_SIZE
                last_ack = offset
            else:
                self.close(f"a frame in {state_name(state)} state")
                return -1
        if last_ack >= 0 and not self._on_report(last_ack):
            return -1
        return pos

    def _on_handshake(self, slave_id: int, from_last: bool, learner: bool) -> bool:
        claimed = f"replica:{slave_id} (AutoSwitch HA)"
        if self.holds_id:
            if slave_id != self.slave_id:
                self.refuse(
                    "", claimed, f"a handshake as {slave_id} on the connection of {self.slave_id}"
                )
                return False
        elif not self.hold(slave_id, claimed):
            return False
        self.sync_from_last_file = from_last
        self.async_learner = learner
        self.request_offset = -1
        self.next_transfer = -1
        log.info(
            "slave %d (%s) handshakes: syncFromLastFile=%s asyncLearner=%s",
            slave_id,
            self.client_addr,
            from_last,
            learner,
        )
        self.in_sync.connection_opened(slave_id)
        self._handshake_asked.set()
        self._release_writer()
        return True

    def _on_report(self, offset: int) -> bool:
        if not self.holds_id:
            self.close("a report before the handshake")
            return False
        if not self._check_report(offset):
            return False
        caught_up_at: float | None = None
        if not self.async_learner and offset >= self.last_master_max:
            now = self.clock.monotonic()
            caught_up_at = now if offset == self.commit_log.max_offset else self.last_transfer_at
        if not self.async_learner:
            self.in_sync.on_ack(self.slave_id, offset, caught_up_at)
        return True

    def _let_go(self, slave_id: int) -> None:
        self.in_sync.connection_closed(slave_id)

    # ---- writer -----------------------------------------------------------------------------

    def close(self, reason: str) -> None:
        self._handshake_asked.set()
        super().close(reason)

    def _before_request(self) -> bool:
        if not self._handshake_asked.is_set():
            return False
        self._handshake_asked.clear()
        if not self._closed:
            self._send_handshake()
        return True

    def _send_handshake(self) -> None:
        entries = self.epochs.entries()[-MAX_EPOCH_ENTRIES:]
        body = encode_entries([(e.epoch, e.start_offset) for e in entries])
        last = entries[-1].epoch if entries else -1
        head = MASTER_HANDSHAKE.pack(HANDSHAKE, len(body), self.commit_log.max_offset, last)
        log.info(
            "master answers slave %d's handshake: max offset %d, epochs %s",
            self.slave_id,
            self.commit_log.max_offset,
            [(e.epoch, e.start_offset) for e in entries],
        )
        self._send([head, body])

    def _start_offset(self) -> int:
        cl = self.commit_log
        if self.request_offset != 0:
            return self.request_offset
        if self.sync_from_last_file:
            end = cl.max_offset
            return max(0, end - end % cl.file_size)
        return max(cl.min_offset, 0)

    def _frame_head(self, offset: int) -> tuple[int, FrameHead]:
        """The epoch of the data at ``offset`` bounds the frames; each carries it, its start
        and the confirm offset."""
        entry = self.epochs.find_by_offset(offset)
        if entry is None:
            entries = self.epochs.entries()
            entry = entries[0] if entries else None
        if entry is None:
            epoch, start, end = -1, 0, OPEN_END
        else:
            epoch, start, end = entry.epoch, entry.start_offset, self.epochs.end_of(entry.epoch)
        confirm = self.in_sync.confirm_offset()

        def head(at: int, size: int) -> bytes:
            return MASTER_TRANSFER.pack(TRANSFER, size, at, epoch, start, confirm)

        return end, head

    def _on_idle(self, now: float) -> None:
        if self.holds_id:
            self.in_sync.note_caught_up(self.slave_id, now)

    def _on_transfer(self, now: float) -> None:
        self.last_master_max = self.commit_log.max_offset
        self.last_transfer_at = now
