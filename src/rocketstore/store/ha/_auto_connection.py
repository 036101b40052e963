"""AutoConnection: a controller-mode master's side of one slave's connection (RocketMQ 5's
AutoSwitchHAConnection), in the frames of ``_auto_wire``.

Two threads share the socket (blocking, with a one-second timeout so each can look up):

- the reader takes the slave's frames: its HANDSHAKE (its broker id and flags; the writer
  answers it), then TRANSFER reports of its max offset: the first says where to send from,
  each one acknowledges what the slave holds and goes to the SyncStateSet (``InSyncReplicas
  .on_ack``, with whether the slave had caught up). A report above this master's max offset,
  a frame in an unknown state, or silence for ``housekeeping_s`` closes the connection;
- the writer answers a HANDSHAKE with this master's epoch entries and max offset, then sends
  TRANSFER frames from the slave's first report on (0: from the log's start, or its last file
  with syncFromLastFile): at most ``batch_size`` bytes of one file and one epoch each, with
  the epoch, its start and the confirm offset, several frames to one system call. With
  nothing to send it waits for ``wake()`` (a put) or a few milliseconds, notes the slave as
  caught up, and sends an empty frame (a heartbeat) when nothing went out for ``heartbeat_s``.

Whichever thread ends first closes the connection; the other one follows.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._clock import Clock
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
from ._connection import IDLE_MAX_S, IDLE_MIN_S, IO_TIMEOUT_S, SEND_MAX, _Loop
from ._epoch import OPEN_END, EpochFile
from ._in_sync import InSyncReplicas
from ._wire import send_all

if TYPE_CHECKING:
    from ..log._commit_log import CommitLog

log = logging.getLogger(__name__)

REQUEST_WAIT_S = 0.1
MAX_FRAMES_PER_SEND = 256


class AutoConnection:
    """One slave. Created by the accept thread, which calls ``start()``."""

    def __init__(
        self,
        sock: socket.socket,
        commit_log: CommitLog,
        epochs: EpochFile,
        in_sync: InSyncReplicas,
        clock: Clock,
        *,
        batch_size: int,
        heartbeat_s: float,
        housekeeping_s: float,
        on_closed: Callable[[AutoConnection], None],
    ) -> None:
        self.sock = sock
        try:
            host, port = sock.getpeername()[:2]
            self.client_addr = f"{host}:{port}"
        except OSError:
            self.client_addr = "?"
        sock.settimeout(IO_TIMEOUT_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.commit_log = commit_log
        self.epochs = epochs
        self.in_sync = in_sync
        self.clock = clock
        self.batch_size = batch_size
        self.send_max = max(batch_size, min(SEND_MAX, batch_size * MAX_FRAMES_PER_SEND))
        self.heartbeat_s = heartbeat_s
        self.housekeeping_s = housekeeping_s
        self.on_closed = on_closed
        self.slave_id = -1
        self.sync_from_last_file = False
        self.async_learner = False
        self.request_offset = -1
        self.ack_offset = -1
        self.next_transfer = -1
        self.state = HANDSHAKE
        self.bytes_sent = 0
        self.frames_sent = 0
        self.connected_at = clock.now_ms()
        now = clock.monotonic()
        self.last_read = now
        self.last_write = now
        self.last_master_max = -1  # the master's end when the last frame went out
        self.last_transfer_at = now
        self.close_reason = ""
        self._lock = threading.Lock()
        self._closed = False
        self._threads_left = 2
        self._handshake_asked = threading.Event()
        self._wake = threading.Lock()
        self._wake.acquire()
        self.idle = False
        self.reader = _Loop(f"AutoConnection-read-{self.client_addr}", self._read_loop)
        self.writer = _Loop(f"AutoConnection-write-{self.client_addr}", self._write_loop)

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self.reader.start()
        self.writer.start()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, reason: str) -> None:
        """End the connection (idempotent). Any thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.close_reason = reason
        log.info(
            "HA connection of slave %d (%s) closed: %s", self.slave_id, self.client_addr, reason
        )
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._handshake_asked.set()
        self._release_writer()
        self.reader.stop(join=False)
        self.writer.stop(join=False)
        if self.slave_id >= 0:
            self.in_sync.connection_closed(self.slave_id)
        try:
            self.on_closed(self)
        except Exception:
            log.exception("HA connection close callback failed")

    def join(self, timeout: float) -> None:
        for t in (self.reader._thread, self.writer._thread):
            if t is not None and t is not threading.current_thread():
                t.join(timeout)

    def _thread_done(self) -> None:
        with self._lock:
            self._threads_left -= 1
            last = self._threads_left == 0
        if last:
            self.sock.close()

    def wake(self) -> None:
        if self.idle:
            self._release_writer()

    def _release_writer(self) -> None:
        try:
            self._wake.release()
        except RuntimeError:
            pass

    def lag(self, master_max: int) -> int:
        return max(0, master_max - max(self.ack_offset, 0))

    # ---- reader -----------------------------------------------------------------------------

    def _read_loop(self) -> None:
        buf = b""
        clock = self.clock
        try:
            while not self._closed:
                try:
                    data = self.sock.recv(4096)
                except TimeoutError:
                    if clock.monotonic() - self.last_read > self.housekeeping_s:
                        self.close(f"silent for more than {self.housekeeping_s:g} s")
                    continue
                except OSError as exc:
                    self.close(f"read failed: {exc}")
                    break
                if not data:
                    self.close("closed by the slave")
                    break
                self.last_read = clock.monotonic()
                buf += data
                used = self._frames(buf)
                if used < 0:
                    break
                buf = buf[used:]
        except Exception as exc:
            log.exception("HA connection reader of %s failed", self.client_addr)
            self.close(f"reader failed: {exc!r}")
        finally:
            self._thread_done()

    def _frames(self, buf: bytes) -> int:
        """Handle the complete frames at the start of ``buf``; the bytes used, -1 when the
        connection was closed."""
        pos = 0
        last_ack = -1
        while len(buf) - pos >= STATE.size:
            (state,) = STATE.unpack_from(buf, pos)
            if state == HANDSHAKE:
                if len(buf) - pos < SLAVE_HANDSHAKE_SIZE:
                    break
                _s, from_last, learner, slave_id = SLAVE_HANDSHAKE.unpack_from(buf, pos)
                pos += SLAVE_HANDSHAKE_SIZE
                self._on_handshake(slave_id, from_last == 1, learner == 1)
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

    def _on_handshake(self, slave_id: int, from_last: bool, learner: bool) -> None:
        if self.slave_id >= 0 and slave_id != self.slave_id:
            self.in_sync.connection_closed(self.slave_id)
        self.slave_id = slave_id
        self.sync_from_last_file = from_last
        self.async_learner = learner
        self.state = HANDSHAKE
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

    def _on_report(self, offset: int) -> bool:
        master_max = self.commit_log.max_offset
        if offset < 0 or offset > master_max:
            self.close(f"reported offset {offset} is beyond the master's max offset {master_max}")
            return False
        self.ack_offset = offset
        if self.request_offset < 0:
            self.request_offset = offset
            self.state = TRANSFER
            log.info("slave %d requests the commit log from %d", self.slave_id, offset)
            self._release_writer()
        caught_up_at: float | None = None
        if not self.async_learner and offset >= self.last_master_max:
            now = self.clock.monotonic()
            caught_up_at = now if offset == master_max else self.last_transfer_at
        if self.slave_id >= 0 and not self.async_learner:
            self.in_sync.on_ack(self.slave_id, offset, caught_up_at)
        return True

    # ---- writer -----------------------------------------------------------------------------

    def _keep_trying(self) -> bool:
        if self._closed:
            return False
        if self.clock.monotonic() - self.last_write > self.housekeeping_s:
            self.close(f"the slave read nothing for more than {self.housekeeping_s:g} s")
            return False
        return True

    def _send(self, parts: list[bytes | memoryview]) -> None:
        send_all(self.sock, parts, self._keep_trying)
        self.last_write = self.clock.monotonic()

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

    def _epoch_at(self, offset: int) -> tuple[int, int, int]:
        """(epoch, its start, its end) of the data at ``offset``."""
        entry = self.epochs.find_by_offset(offset)
        if entry is None:
            entries = self.epochs.entries()
            if not entries:
                return -1, 0, OPEN_END
            entry = entries[0]
        return entry.epoch, entry.start_offset, self.epochs.end_of(entry.epoch)

    def _idle_wait(self, seconds: float) -> None:
        self.idle = True
        try:
            if self.commit_log.max_offset <= self.next_transfer and not self._closed:
                self._wake.acquire(timeout=seconds)
            else:
                self._wake.acquire(blocking=False)
        finally:
            self.idle = False

    def _write_loop(self) -> None:
        clock = self.clock
        cl = self.commit_log
        idle_s = IDLE_MIN_S
        try:
            while not self._closed:
                if self._handshake_asked.is_set():
                    self._handshake_asked.clear()
                    if self._closed:
                        break
                    self._send_handshake()
                    continue
                if self.request_offset < 0:  # the handshake or the first report wakes it
                    self._wake.acquire(timeout=REQUEST_WAIT_S)
                    continue
                if self.next_transfer < 0:
                    self.next_transfer = self._start_offset()
                    log.info(
                        "master sends to slave %d (%s) from %d (it asked for %d)",
                        self.slave_id,
                        self.client_addr,
                        self.next_transfer,
                        self.request_offset,
                    )
                offset = self.next_transfer
                epoch, epoch_start, epoch_end = self._epoch_at(offset)
                selected = cl.get_data(offset) if offset < epoch_end else None
                if selected is not None and selected.size == 0:
                    selected.release()
                    selected = None
                if selected is None:
                    now = clock.monotonic()
                    if self.slave_id >= 0:
                        self.in_sync.note_caught_up(self.slave_id, now)
                    if now - self.last_write >= self.heartbeat_s:
                        confirm = self.in_sync.confirm_offset()
                        head = MASTER_TRANSFER.pack(
                            TRANSFER, 0, offset, epoch, epoch_start, confirm
                        )
                        self._send([head])
                    self._idle_wait(idle_s)
                    idle_s = min(idle_s * 2, IDLE_MAX_S)
                    continue
                idle_s = IDLE_MIN_S
                try:
                    size = min(selected.size, self.send_max, epoch_end - offset)
                    self.last_master_max = cl.max_offset
                    self.last_transfer_at = clock.monotonic()
                    confirm = self.in_sync.confirm_offset()
                    parts: list[bytes | memoryview] = []
                    view = selected.buffer
                    batch = self.batch_size
                    for pos in range(0, size, batch):
                        n = min(batch, size - pos)
                        parts.append(
                            MASTER_TRANSFER.pack(
                                TRANSFER, n, offset + pos, epoch, epoch_start, confirm
                            )
                        )
                        parts.append(view[pos : pos + n])
                    self._send(parts)
                    del parts, view
                finally:
                    selected.release()
                self.next_transfer = offset + size
                self.bytes_sent += size
                self.frames_sent += -(-size // self.batch_size)
        except OSError as exc:
            self.close(f"write failed: {exc}")
        except Exception as exc:
            log.exception("HA connection writer of %s failed", self.client_addr)
            self.close(f"writer failed: {exc!r}")
        finally:
            self._thread_done()
