"""The asyncio producer against a broker in this process (sends, batches with SEND_MESSAGE_V2's
header names, puts answered after a sync flush), and the broker benchmarks' helpers and
scenarios at a tiny size (a broker subprocess each)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rocketstore.bench import broker as bench
from rocketstore.broker._config import BrokerConfig
from rocketstore.client import decode_records
from rocketstore.client._async_producer import AsyncProducer
from rocketstore.namesrv import NameServer
from rocketstore.remoting import AsyncRemotingClient, Connection, RemotingCommand, ResponseCode
from rocketstore.server import BrokerServer
from rocketstore.store._config import StoreConfig
from rocketstore.store.log._message import PutMessageResult

pytestmark = pytest.mark.timeout(60)


@contextlib.asynccontextmanager
async def cluster(root: Path, flush: str) -> AsyncIterator[tuple[NameServer, BrokerServer]]:
    ns = NameServer("127.0.0.1", 0)
    await ns.start()
    store_config = StoreConfig(
        store_path_root_dir=str(root), flush_disk_type=flush, ha_listen_port=0
    )
    config = BrokerConfig.from_store_config(store_config, listen_port=0, namesrv_addr=ns.address)
    broker = BrokerServer(store_config, config)
    try:
        await broker.start()
        try:
            yield ns, broker
        finally:
            await broker.shutdown()
    finally:
        await ns.close()


async def pull_all(address: str, topic: str, queue_id: int, want: int = 0) -> list[bytes]:
    """Every message of the queue; waits (up to 10 s) for ``want`` of them: dispatch into the
    consume queue follows the acknowledgement of a send, it does not precede it."""
    client = AsyncRemotingClient()
    bodies: list[bytes] = []
    deadline = time.monotonic() + 10.0
    try:
        while True:
            ext = bench.pull_header(topic, queue_id, len(bodies))
            r = await client.invoke(address, RemotingCommand.request(bench.PULL_MESSAGE, ext))
            if r.code == ResponseCode.PULL_NOT_FOUND:
                if len(bodies) < want and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                    continue
                return bodies
            assert r.code == ResponseCode.SUCCESS, r.remark
            bodies += [m.body for m in decode_records(r.body)]
    finally:
        client.close()


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_async_producer_sends_single_messages_and_batches(tmp_path: Path, flush: str) -> None:
    async def main() -> None:
        async with cluster(tmp_path / "store", flush) as (ns, broker):
            async with AsyncProducer(ns.address, "PID_t") as producer:
                first = await producer.send("TAsync", b"first", tags="TagA")
                assert first.status == "SEND_OK"
                assert first.queue.topic == "TAsync"
                route = await producer.route("TAsync")
                assert route is not None  # registered with the name server at once
                mq = first.queue
                batch = await producer.send_batch("TAsync", [b"b1", b"b2", b"b3"], queue=mq)
                assert batch.status == "SEND_OK"
                assert len(batch.msg_id.split(",")) == 3
                assert len(batch.offset_msg_id.split(",")) == 3
                assert batch.queue_offset == first.queue_offset + 1
                # many waiting at once: under SYNC_FLUSH they are answered after group commits
                results = await asyncio.gather(
                    *(producer.send("TAsync", f"m{i}".encode(), queue=mq) for i in range(50))
                )
                assert {r.status for r in results} == {"SEND_OK"}
                offsets = sorted(r.queue_offset for r in results)
                assert offsets == list(range(first.queue_offset + 4, first.queue_offset + 54))
                # without a queue named: the topic's own queues in turn (its route is cached)
                spread = [await producer.send("TAsync", b"rr") for _ in range(8)]
                assert sorted({r.queue.queue_id for r in spread}) == [0, 1, 2, 3]
            if flush == "SYNC_FLUSH":
                flushed = broker.store.commit_log.queue.flushed_where  # type: ignore[attr-defined]
                assert flushed >= broker.store.commit_log.max_offset  # type: ignore[attr-defined]
            bodies = await pull_all(broker.address, "TAsync", mq.queue_id, want=54)
            assert bodies[:4] == [b"first", b"b1", b"b2", b"b3"]
            rest = [b for b in bodies[4:] if b != b"rr"]
            assert sorted(rest) == sorted(f"m{i}".encode() for i in range(50))

    asyncio.run(main())


class _Transport:
    """Counts the answer frames written (several may go out in one write: a loop turn's
    answers are written together)."""

    def __init__(self) -> None:
        self.answers = 0
        self._pending = b""

    def write(self, data: bytes) -> None:
        self._pending += bytes(data)
        while len(self._pending) >= 4:
            size = 4 + int.from_bytes(self._pending[:4], "big")
            if len(self._pending) < size:
                break
            self._pending = self._pending[size:]
            self.answers += 1

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass


def test_sends_waiting_for_a_sync_flush_leave_no_cyclic_garbage(tmp_path: Path) -> None:
    """Each waiting put once left a reference cycle (its future's done callback held the
    future), so every message's command, result and answer waited for the collector."""
    n = 200

    async def main() -> list[object]:
        async with cluster(tmp_path / "store", "SYNC_FLUSH") as (_ns, broker):
            conn = Connection(broker.server.handlers, backpressure=True)
            transport = _Transport()
            conn.connection_made(transport)  # type: ignore[arg-type]
            body = os.urandom(1024)
            frames = []
            for i in range(n + 1):
                ext = bench.send_header("PID_t", "TCycles", i & 3, {"UNIQ_KEY": f"{i:032X}"})
                frames.append(RemotingCommand.request(310, ext, body).encode())

            async def feed(frame: bytes) -> None:
                buf = conn.get_buffer(len(frame))
                buf[: len(frame)] = frame
                conn.buffer_updated(len(frame))

            await feed(frames[0])  # creates the topic
            while transport.answers < 1:
                await asyncio.sleep(0.01)
            gc.collect()
            gc.disable()
            try:
                for frame in frames[1:]:
                    await feed(frame)
                    await asyncio.sleep(0)
                for _ in range(500):
                    if transport.answers >= n + 1:
                        break
                    await asyncio.sleep(0.01)
                assert transport.answers == n + 1
                gc.set_debug(gc.DEBUG_SAVEALL)
                gc.collect()
                garbage = list(gc.garbage)
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
                gc.enable()
            return garbage

    garbage = asyncio.run(main())
    leaked = [o for o in garbage if isinstance(o, (PutMessageResult, RemotingCommand))]
    assert leaked == []


def test_percentiles() -> None:
    lat = [i / 1000 for i in range(1, 101)]  # 1 .. 100 ms
    p = bench.percentiles(lat)
    assert p == {"p50_ms": 51.0, "p99_ms": 100.0, "max_ms": 100.0}
    assert bench.percentiles([]) == {}


def test_pull_and_long_poll_scenarios_run_small(tmp_path: Path) -> None:
    pull = bench.bench_broker_pull(str(tmp_path / "pull"), 2000)
    assert pull["messages"] == 2000
    assert pull["drain_msgs_per_s"] > 0 and pull["drain_blocking_msgs_per_s"] > 0
    poll = bench.bench_broker_longpoll(str(tmp_path / "poll"), 20)
    assert 0 < poll["p50_ms"] <= poll["p99_ms"] <= poll["max_ms"]


def test_send_scenario_runs_small_without_the_extras(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench, "official_python", lambda create=True: (None, "not here"))
    monkeypatch.setattr(bench.shutil, "which", lambda name: None)  # no redis-server
    out = bench.bench_broker_send(str(tmp_path), 300)
    assert out["send_msgs_per_s"] > 0
    assert out["send_p50_ms"] <= out["send_p99_ms"]
    assert out["official_note"] == "not here"
    assert "redis_xadd_msgs_per_s" not in out and "skipped" in out["redis_note"]


def test_broker_process_is_stopped(tmp_path: Path) -> None:
    with bench.broker_server(str(tmp_path / "s")) as server:
        proc = server.proc
        assert server.namesrv and server.address
        assert server.cpu_seconds() > 0
    assert proc.poll() is not None


@pytest.mark.timeout(240)
def test_sync_master_scenario_runs_small_and_every_send_is_acknowledged(tmp_path: Path) -> None:
    from rocketstore.bench.ha import bench_ha_broker_sync_master

    # the raw rounds check that every answer is SUCCESS (a SYNC_MASTER's only once its slave
    # holds the message): the round raises otherwise
    out = bench_ha_broker_sync_master(str(tmp_path), 640)
    assert out["messages"] == 640
    for tag in ("async", "sync"):
        assert out[f"{tag}_raw_msgs_per_s"] > 0 and out[f"{tag}_producers_msgs_per_s"] > 0
