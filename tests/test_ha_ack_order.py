"""SYNC_MASTER's guarantee under many concurrent waits, through the real broker: no send is
answered SUCCESS before a slave has acknowledged the whole of its record.

The slave is the test's own (``HeldSlave``: the HA wire protocol over a socket): it keeps the
bytes the master sends and acknowledges them only when the test says so, in uneven steps that
end inside records as often as between them. Producers pipeline plain sends on several
connections at once (every send goes out before the first acknowledgement), so hundreds of
sends wait together; with the compiled build they are served by the send frame path and wait
on the broker's loop (``broker/messaging/_slave_waits.py``), in the pure-Python build they wait
on the store's futures. The checker reads every answer as it arrives, with the offset the slave
had acknowledged by then, and judges afterwards from that history alone: the record an answer
names (its offset message id) must lie wholly below that offset. Sends the slave never
acknowledges end FLUSH_SLAVE_TIMEOUT, stored all the same.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore import StoreConfig
from rocketstore.broker._config import BrokerConfig
from rocketstore.client._producer import message_properties, send_header
from rocketstore.remoting import RemotingCommand, ResponseCode
from rocketstore.remoting._command import decode_frame
from rocketstore.server import BrokerServer
from rocketstore.store.ha._wire import HEADER, HEADER_SIZE, REPORT
from support.waits import wait_until

TOPIC = "AckOrder"
CONNECTIONS = 8
PER_CONNECTION = 120
_PREFIX = struct.Struct(">i")


class HeldSlave:
    """A slave that reads what the master sends on its own thread and acknowledges only what
    ``ack`` says (``auto``: everything it holds, as it arrives)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.data = bytearray()  # the master's commit log from offset 0, as received
        self.acked = 0  # the newest offset acknowledged (set before it is sent)
        self.auto = True
        self.error: BaseException | None = None
        self._send_lock = threading.Lock()
        self.sock.sendall(REPORT.pack(0))  # where to start: the first (and last) file
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the master closed the connection")
            out += chunk
        return bytes(out)

    def _read(self) -> None:
        try:
            while True:
                offset, size = HEADER.unpack(self._exact(HEADER_SIZE))
                data = self._exact(size)
                if offset != len(self.data):
                    raise AssertionError(f"frame at {offset}, expected {len(self.data)}")
                self.data += data
                if self.auto and data:
                    self.ack(len(self.data))
        except OSError:
            pass  # closed at the end
        except BaseException as exc:  # seen by the test
            self.error = exc

    def ack(self, offset: int) -> None:
        with self._send_lock:
            if offset > self.acked:
                self.acked = offset  # before the master can read it
                self.sock.sendall(REPORT.pack(offset))

    def record_end(self, phys: int) -> int | None:
        """The end of the record at ``phys`` as the slave received it (None: not received)."""
        if phys + 4 > len(self.data):
            return None
        return phys + _PREFIX.unpack_from(self.data, phys)[0]

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._thread.join(10)


class Master:
    """A SYNC_MASTER broker (its own name server off) on a loop thread."""

    def __init__(self, root: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        store = StoreConfig(
            store_path_root_dir=str(root / "master"),
            mapped_file_size_commit_log=4 * 1024 * 1024,
            broker_role="SYNC_MASTER",
            flush_disk_type="ASYNC_FLUSH",
            ha_listen_port=0,
            sync_flush_timeout=120_000,  # the sends wait for the test's acknowledgements
        )
        self.server = BrokerServer(store, BrokerConfig(listen_port=0))
        self.run(self.server.start())

    def run(self, coro: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        try:
            self.run(self.server.shutdown())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


@pytest.fixture
def master(tmp_path: Path) -> Iterator[Master]:
    m = Master(tmp_path)
    try:
        yield m
    finally:
        m.close()


def send_frame(opaque: int, body: bytes, queue_id: int) -> bytes:
    cmd = RemotingCommand.request(
        310, send_header("ack-order", TOPIC, queue_id, message_properties(None, None, None)), body
    )
    cmd.opaque = opaque
    return cmd.encode()


def phys_of(msg_id: str) -> int:
    """The commit-log offset in an offset message id (IPv4 host, port, offset)."""
    return int(msg_id[16:32], 16)


async def pipeline(
    address: str, slave: HeldSlave, frames: list[list[bytes]], expect: int
) -> list[tuple[int, str, int]]:
    """Write every connection's frames at once, then read ``expect`` answers on each; each
    answer as (code, offset message id or "", the slave's acknowledged offset on arrival)."""
    host, port = address.rsplit(":", 1)
    streams = [await asyncio.open_connection(host, int(port)) for _ in frames]
    history: list[tuple[int, str, int]] = []

    async def read(reader: asyncio.StreamReader) -> None:
        for _ in range(expect):
            (length,) = _PREFIX.unpack(await reader.readexactly(4))
            frame = await reader.readexactly(length)
            acked = slave.acked  # what the slave had acknowledged when the answer came
            answer = decode_frame(frame)
            history.append((answer.code, answer.ext_fields.get("msgId") or "", acked))

    try:
        for (_reader, writer), mine in zip(streams, frames, strict=True):
            writer.write(b"".join(mine))
        await asyncio.wait_for(asyncio.gather(*(read(r) for r, _w in streams)), 120)
    finally:
        for _reader, writer in streams:
            writer.close()
    return history


def test_no_send_is_answered_before_the_slave_holds_it(master: Master) -> None:
    store = master.server.store
    slave = HeldSlave(store.ha.listen_port)
    try:
        assert wait_until(lambda: store.ha.connection_count() == 1)
        # the topic, created by a first send, acknowledged as it arrives
        (first,) = asyncio.run(
            pipeline(master.server.address, slave, [[send_frame(1, b"first", 0)]], 1)
        )
        assert first[0] == ResponseCode.SUCCESS
        slave.auto = False
        rng = random.Random(29)
        frames = [
            [
                send_frame(1000 * c + i, rng.randbytes(rng.randrange(1, 600)), (c + i) % 4)
                for i in range(PER_CONNECTION)
            ]
            for c in range(CONNECTIONS)
        ]
        total = CONNECTIONS * PER_CONNECTION
        stop = threading.Event()

        def acker() -> None:
            # held back until every send is stored, then released in uneven steps
            wait_until(lambda: len(slave.data) >= store.max_phy_offset > 0 and stored(total))
            while not stop.is_set() and slave.acked < len(slave.data):
                step = rng.randrange(1, 24 * 1024)
                slave.ack(min(len(slave.data), slave.acked + step))
                time.sleep(0.002)

        def stored(n: int) -> bool:
            return (
                store.get_max_offset_in_queue(TOPIC, 0)
                + sum(store.get_max_offset_in_queue(TOPIC, q) for q in range(1, 4))
                >= n + 1
            )

        thread = threading.Thread(target=acker, daemon=True)
        thread.start()
        try:
            history = asyncio.run(pipeline(master.server.address, slave, frames, PER_CONNECTION))
        finally:
            stop.set()
            thread.join(30)
        assert slave.error is None
        assert len(history) == total
        assert {code for code, _id, _acked in history} == {ResponseCode.SUCCESS}
        ids = {msg_id for _code, msg_id, _acked in history}
        assert len(ids) == total
        for _code, msg_id, acked in history:
            end = slave.record_end(phys_of(msg_id))
            assert end is not None and end <= acked, (msg_id, end, acked)
        frame_path = master.server.broker.send_frame_path
        if frame_path is not None:  # the compiled build: they waited on the broker's loop
            assert frame_path.served >= total

        # a slave that acknowledges nothing more: FLUSH_SLAVE_TIMEOUT, the sends stored
        store.ha.transfer.timeout_s = 1.5
        before = store.max_phy_offset
        late = [[send_frame(90_000 + i, b"late-%d" % i, i % 4) for i in range(20)]]
        history = asyncio.run(pipeline(master.server.address, slave, late, 20))
        assert {code for code, _id, _acked in history} == {ResponseCode.FLUSH_SLAVE_TIMEOUT}
        assert store.max_phy_offset > before
        assert slave.acked <= before
    finally:
        slave.close()
