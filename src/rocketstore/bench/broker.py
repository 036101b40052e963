"""Broker benchmarks over the remoting protocol: sends from one producer and from
many, a consumer draining a topic through PULL_MESSAGE, and long-poll latency.

The broker runs as a separate process (``rocketstore serve`` on free loopback ports over a
temporary store, always stopped at the end), so the clients here and the broker do not share
an interpreter lock. Besides the client-side figures each scenario reports the broker's own
CPU time per message (``broker_cpu_us_per_msg``), which does not depend on how fast the
clients are.

``broker-send`` also times, in the same run, redis-py's XADD against Debian's redis-server
(started and stopped here; skipped with a note when either is missing) and the official
RocketMQ client's ``send_sync`` (the ``rocketmq`` 0.4.4 package, C++ inside, in a virtual
environment of its own: ``$ROCKETSTORE_BENCH_RMQ_VENV``, else one made under
``~/.cache/rocketstore``; skipped with a note when none can be had).

Knobs beyond ``--messages``: ``ROCKETSTORE_BENCH_BROKER_LOOP`` (``asyncio`` or ``uvloop``, the
broker's event loop) and ``ROCKETSTORE_BENCH_PIN=1`` (broker on CPU 0, this process on CPU 1).
``benchmarks/broker_compare.py`` runs the scenarios with the knobs alternated.

The functions here run on the calling thread (the scenarios' own event loops inside).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from ..client._async_producer import AsyncProducer
from ..client._producer import message_properties, send_header
from ..remoting import AsyncRemotingClient, RemotingClient, RemotingCommand, ResponseCode
from ..server._addresses import free_port
from . import Figures, scenario

BODY_SIZE = 1024
TOPIC = "BenchBroker"
GROUP = "bench-producer"
CONSUMER_GROUP = "bench-consumer"
PULL_MESSAGE = 11
GET_MAX_OFFSET = 30
SEND_MESSAGE_V2 = 310
GET_ROUTEINFO_BY_TOPIC = 105
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
RMQ_VERSION = "0.4.4"

_LAUNCH = "from rocketstore.cli import main; main()"
_LAUNCH_UVLOOP = "import uvloop; uvloop.install(); from rocketstore.cli import main; main()"


# ---- the broker process ---------------------------------------------------------------------


@dataclasses.dataclass
class BrokerServer:
    """A ``rocketstore serve`` process: its name server's and broker's addresses."""

    proc: subprocess.Popen[bytes]
    namesrv: str
    address: str
    loop: str
    flush: str
    ha_address: str = ""  # where its slaves replicate from (announced by serve)

    def cpu_seconds(self) -> float:
        """User + system CPU time of the broker process so far (all its threads)."""
        return process_cpu_seconds(self.proc.pid)


def process_cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


def _env_loop() -> str:
    loop = os.environ.get("ROCKETSTORE_BENCH_BROKER_LOOP", "asyncio")
    if loop not in ("asyncio", "uvloop"):
        raise ValueError(f"ROCKETSTORE_BENCH_BROKER_LOOP: asyncio or uvloop, not {loop!r}")
    return loop


def _env_pin() -> bool:
    return os.environ.get("ROCKETSTORE_BENCH_PIN", "") not in ("", "0")


def _cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


@contextlib.contextmanager
def pinned(enabled: bool) -> Iterator[int | None]:
    """Pin this process to its last CPU while the block runs (the broker takes the first);
    yields the broker's CPU, or None when not pinned (off, or fewer than two CPUs)."""
    cpus = _cpus()
    if not enabled or len(cpus) < 2:
        yield None
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpus[-1]})
    try:
        yield cpus[0]
    finally:
        os.sched_setaffinity(0, before)


@contextlib.contextmanager
def broker_server(
    store: str,
    *,
    flush: str = "ASYNC_FLUSH",
    loop: str = "asyncio",
    cpu: int | None = None,
    start_timeout: float = 60.0,
    role: str = "ASYNC_MASTER",
    want_ha: bool = False,
) -> Iterator[BrokerServer]:
    """Run ``rocketstore serve`` over ``store`` on free loopback ports (``loop``: the event
    loop, ``asyncio`` or ``uvloop``; ``cpu``: pin it there; ``role``: the broker's role, a
    master's; ``want_ha``: wait for its HA port too, for a slave) until the block ends, then stop
    it with SIGTERM (SIGKILL when it has not stopped within 30 s)."""
    launch = _LAUNCH_UVLOOP if loop == "uvloop" else _LAUNCH
    conf = Path(store).parent / f"{Path(store).name}.conf"  # HA on a free port, not 10912
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(f"haListenPort=0\nbrokerRole={role}\n")
    args = [sys.executable, "-c", launch, "serve", "--store", store, "--conf", str(conf)]
    args += ["--namesrv-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--flush", flush]
    args += ["--grpc-listen", ""]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err)
        try:
            if cpu is not None:
                os.sched_setaffinity(proc.pid, {cpu})
            assert proc.stdout is not None
            namesrv, address, ha = _addresses(
                _line_reader(proc.stdout), start_timeout, err, want_ha=want_ha
            )
            yield BrokerServer(proc, namesrv, address, loop, flush, ha)
        finally:
            _stop(proc)


def _addresses(
    lines: queue.Queue[str | None], timeout: float, err: IO[bytes], *, want_ha: bool = False
) -> tuple[str, str, str]:
    """The name server's, the broker's and (``want_ha``: waited for too) its HA port's
    addresses from what ``serve`` announces."""
    namesrv = address = ha = ""
    deadline = time.monotonic() + timeout
    while not address or (want_ha and not ha):
        try:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            line = None
        if line is None:
            err.seek(0)
            tail = err.read()[-2000:].decode(errors="replace")
            raise RuntimeError(f"rocketstore serve did not start: {tail}")
        if line.startswith("name server listening on "):
            namesrv = line.rsplit(" ", 1)[1]
        elif line.startswith("HA port of broker ") and " listening on " in line:
            ha = line.rsplit(" ", 1)[1]
        elif line.startswith("broker ") and " listening on " in line:
            address = line.split(" listening on ", 1)[1].split(",", 1)[0]
    return namesrv, address, ha


def _line_reader(stream: IO[bytes]) -> queue.Queue[str | None]:
    """The lines of ``stream`` as they come (None at its end), read by a daemon thread that
    keeps draining it so the process never blocks on a full pipe."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for raw in stream:
            lines.put(raw.decode(errors="replace").rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, name="bench-broker-stdout", daemon=True).start()
    return lines


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- figures --------------------------------------------------------------------------------


def percentiles(latencies: list[float]) -> dict[str, float]:
    """p50 / p99 / max in milliseconds of latencies in seconds."""
    if not latencies:
        return {}
    s = sorted(latencies)
    n = len(s)
    return {
        "p50_ms": round(s[n // 2] * 1000, 3),
        "p99_ms": round(s[min(n - 1, (n * 99) // 100)] * 1000, 3),
        "max_ms": round(s[-1] * 1000, 3),
    }


def _cpu_per_msg(server: BrokerServer, cpu_before: float, n: int) -> float:
    return round((server.cpu_seconds() - cpu_before) / max(n, 1) * 1e6, 1)


def _body() -> bytes:
    return os.urandom(BODY_SIZE)


# ---- one producer, blocking client ----------------------------------------------------------


def send_one_by_one(
    address: str, n: int, body: bytes, topic: str = TOPIC
) -> tuple[float, list[float]]:
    """``n`` SEND_MESSAGE_V2 requests from one blocking client, one per round trip, each built
    as the producer builds it (its own UNIQ_KEY and born time), over the queues in turn.
    Returns (seconds, per-send latencies)."""
    latencies: list[float] = []
    clock = time.perf_counter
    with RemotingClient() as client:
        invoke = client.invoke
        start = clock()
        for i in range(n):
            t = clock()
            props = message_properties(None, None, None)
            cmd = RemotingCommand.request(
                SEND_MESSAGE_V2, send_header(GROUP, topic, i & 3, props), body
            )
            r = invoke(address, cmd)
            latencies.append(clock() - t)
            if r.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"send failed: code {r.code} {r.remark}")
        return clock() - start, latencies


def _create_topic(server: BrokerServer, topic: str = TOPIC, timeout: float = 30.0) -> None:
    """The first send creates the topic from TBW102 (4 queues); the broker registers it with
    the name server at once, which is waited for here, and so is the send's dispatch to its
    queue (a pull of the queue's end looks past it only then)."""
    send_one_by_one(server.address, 1, b"warm-up", topic)
    deadline = time.monotonic() + timeout
    with RemotingClient() as client:
        while True:
            cmd = RemotingCommand.request(GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            if client.invoke(server.namesrv, cmd).code == ResponseCode.SUCCESS:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the name server has no route for {topic}")
            time.sleep(0.02)
    wait_queued(server.address, 4, 1, topic, timeout)


# ---- redis-py XADD against redis-server -----------------------------------------------------


@contextlib.contextmanager
def redis_server(cpu: int | None = None) -> Iterator[int]:
    """A redis-server on a free loopback port, no persistence, stopped at the end."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise FileNotFoundError("redis-server is not installed (apt-get install redis-server)")
    port = free_port("127.0.0.1")
    args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if cpu is not None:
            os.sched_setaffinity(proc.pid, {cpu})
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.02)
        yield port
    finally:
        _stop(proc)


def _redis_missing() -> str | None:
    """Why redis cannot be timed here, or None when it can."""
    if shutil.which("redis-server") is None:
        return "redis-server is not installed (apt-get install redis-server)"
    try:
        import redis  # noqa: F401
    except ImportError:
        return "redis-py is not installed (pip install redis)"
    return None


def redis_xadd(port: int, n: int, body: bytes) -> tuple[float, list[float]]:
    """``n`` XADDs of one 1 KiB field from redis-py, one per round trip."""
    import redis

    r = redis.Redis(host="127.0.0.1", port=port)
    try:
        r.delete("bench")
        xadd = r.xadd
        latencies: list[float] = []
        clock = time.perf_counter
        start = clock()
        for _ in range(n):
            t = clock()
            xadd("bench", {"body": body})
            latencies.append(clock() - t)
        return clock() - start, latencies
    finally:
        r.close()


# ---- the official client (rocketmq 0.4.4, C++ inside) ----------------------------------------

_OFFICIAL_SCRIPT = r"""
import json, os, sys, time
from rocketmq.client import Producer, Message
ns, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
body = os.urandom(1024)
p = Producer("PID_bench_official")
p.set_namesrv_addr(ns)
p.start()
try:
    for _ in range(200):
        m = Message(topic); m.set_body(body); p.send_sync(m)
    lat = []
    clock = time.perf_counter
    start = clock()
    for _ in range(n):
        t = clock()
        m = Message(topic); m.set_body(body)
        r = p.send_sync(m)
        lat.append(clock() - t)
    took = clock() - start
finally:
    p.shutdown()
print(json.dumps({"seconds": took, "latencies": lat}))
"""


def official_python(create: bool = True) -> tuple[str | None, str]:
    """The python of a virtual environment with ``rocketmq`` 0.4.4, and a note on where it
    came from or why there is none."""
    candidates = []
    env = os.environ.get("ROCKETSTORE_BENCH_RMQ_VENV")
    if env:
        candidates.append(Path(env))
    cache = Path.home() / ".cache" / "rocketstore" / f"rocketmq-{RMQ_VERSION}-venv"
    candidates.append(cache)
    check = "import rocketmq.client"
    for venv in candidates:
        py = venv / "bin" / "python"
        if py.exists() and subprocess.run([py, "-c", check], capture_output=True).returncode == 0:
            return str(py), f"rocketmq {RMQ_VERSION} in {venv}"
    if not create:
        return None, "no virtual environment with rocketmq installed"
    try:
        subprocess.run([sys.executable, "-m", "venv", str(cache)], check=True, capture_output=True)
        py = cache / "bin" / "python"
        subprocess.run(
            [py, "-m", "pip", "install", "-q", f"rocketmq=={RMQ_VERSION}"],
            check=True,
            capture_output=True,
            timeout=600,
        )
        subprocess.run([py, "-c", check], check=True, capture_output=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"cannot make a virtual environment with rocketmq {RMQ_VERSION}: {exc}"
    return str(py), f"rocketmq {RMQ_VERSION} installed in {cache}"


def official_send_sync(python: str, namesrv: str, n: int, topic: str = TOPIC) -> dict[str, Any]:
    """The official client's send_sync in a subprocess: msgs/s and latencies."""
    with tempfile.TemporaryDirectory() as home:  # the C++ client logs under $HOME/logs
        out = subprocess.run(
            [python, "-c", _OFFICIAL_SCRIPT, namesrv, topic, str(n)],
            capture_output=True,
            timeout=300,
            env={**os.environ, "HOME": home},
            check=False,
        )
    if out.returncode != 0:
        raise RuntimeError(f"official client failed: {out.stderr.decode(errors='replace')[-500:]}")
    doc = json.loads(out.stdout.decode().strip().splitlines()[-1])
    return {"msgs_per_s": round(n / doc["seconds"]), **percentiles(doc["latencies"])}


# ---- scenarios ------------------------------------------------------------------------------


@scenario(
    "broker-send",
    "broker",
    "one producer, one send per round trip, 1 KiB, vs redis-py XADD and the official client",
)
def bench_broker_send(root: str, count: int | None) -> Figures:
    """Rounds alternate between the broker (our blocking remoting client) and Redis, the best
    of each counting; the official client's send_sync runs once after them."""
    n = count or 10_000
    rounds = 3
    body = _body()
    out: Figures = {"messages_per_round": n, "rounds": rounds}
    with (
        pinned(_env_pin()) as cpu,
        broker_server(os.path.join(root, "store"), loop=_env_loop(), cpu=cpu) as server,
    ):
        out["broker_loop"] = server.loop
        _create_topic(server)
        send_one_by_one(server.address, min(n, 2000), body)  # warm-up
        redis_note = _redis_missing()
        if redis_note:
            out["redis_note"] = f"skipped: {redis_note}"
        with contextlib.ExitStack() as stack:
            port = None if redis_note else stack.enter_context(redis_server(cpu))
            if port is not None:
                redis_xadd(port, min(n, 2000), body)  # warm-up
            best: tuple[float, list[float], float] | None = None
            best_redis: tuple[float, list[float]] | None = None
            for _ in range(rounds):
                cpu_before = server.cpu_seconds()
                took, lat = send_one_by_one(server.address, n, body)
                cpu_us = _cpu_per_msg(server, cpu_before, n)
                if best is None or took < best[0]:
                    best = (took, lat, cpu_us)
                if port is not None:
                    took_r, lat_r = redis_xadd(port, n, body)
                    if best_redis is None or took_r < best_redis[0]:
                        best_redis = (took_r, lat_r)
        assert best is not None
        rate = n / best[0]
        out["send_msgs_per_s"] = round(rate)
        out.update({f"send_{k}": v for k, v in percentiles(best[1]).items()})
        out["broker_cpu_us_per_msg"] = best[2]
        if best_redis is not None:
            rate_r = n / best_redis[0]
            out["redis_xadd_msgs_per_s"] = round(rate_r)
            out.update({f"redis_{k}": v for k, v in percentiles(best_redis[1]).items()})
            out["ratio_to_redis"] = round(rate / rate_r, 3)
        python, note = official_python()
        out["official_note"] = note
        if python is not None:
            try:
                official = official_send_sync(python, server.namesrv, min(n, 10_000))
                out.update({f"official_send_sync_{k}": v for k, v in official.items()})
            except (RuntimeError, subprocess.SubprocessError, ValueError) as exc:
                out["official_note"] = f"{note}; failed: {exc}"
    return out


# ---- many producers, async client -----------------------------------------------------------


def _client_runner() -> asyncio.Runner:
    """The clients' event loop: uvloop when installed (the client side is the harness)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


async def send_concurrently(
    namesrv: str,
    producers: int,
    per_producer: int,
    body: bytes,
    topic: str = TOPIC,
    in_flight: int = 1,
) -> float:
    """``producers`` AsyncProducers (one connection each) sending ``per_producer`` messages
    each, ``in_flight`` sends outstanding on each (1: send_sync's way; more: send_async's with
    a window); the seconds the whole took."""
    clients = [AsyncProducer(namesrv, GROUP) for _ in range(producers)]
    try:
        for c in clients:  # routes first, so the timed part is sends only
            await c.route(topic)

        async def one(c: AsyncProducer, count: int) -> None:
            send = c.send
            for _ in range(count):
                await send(topic, body)

        lanes = [
            one(c, per_producer // in_flight + (1 if k < per_producer % in_flight else 0))
            for c in clients
            for k in range(in_flight)
        ]
        start = time.perf_counter()
        await asyncio.gather(*lanes)
        return time.perf_counter() - start
    finally:
        for c in clients:
            c.close()


class _RawSender(asyncio.Protocol):
    """One connection sending pre-encoded frames with ``window`` of them outstanding; counts
    the responses by their length prefixes and checks each one's code is SUCCESS (0)."""

    def __init__(self, frames: list[bytes], window: int, done: asyncio.Future[None]) -> None:
        self.frames = frames
        self.window = window
        self.done = done
        self.sent = 0
        self.answered = 0
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def start(self) -> None:
        first = min(self.window, len(self.frames))
        assert self.transport is not None
        self.transport.write(b"".join(self.frames[:first]))
        self.sent = first
        if not self.frames:
            self.done.set_result(None)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos = 0
        got = 0
        while len(buf) - pos >= 4:
            length = int.from_bytes(buf[pos : pos + 4], "big")
            if len(buf) - pos - 4 < length:
                break
            at = buf.find(b'"code":', pos + 8, pos + 4 + length)
            if at < 0 or buf[at + 7 : at + 9] != b"0,":
                if not self.done.done():
                    head = bytes(buf[pos + 8 : pos + 4 + min(length, 300)])
                    self.done.set_exception(RuntimeError(f"send failed: {head!r}"))
                return
            pos += 4 + length
            got += 1
        del buf[:pos]
        self.answered += got
        if got and self.sent < len(self.frames):
            more = self.frames[self.sent : self.sent + got]
            self.sent += len(more)
            assert self.transport is not None
            self.transport.write(b"".join(more))
        if self.answered == len(self.frames) and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(RuntimeError(f"connection lost: {exc}"))


def send_frames(n: int, body: bytes, topic: str = TOPIC) -> list[bytes]:
    """``n`` SEND_MESSAGE_V2 frames as the producer encodes them, each its own UNIQ_KEY."""
    out = []
    for i in range(n):
        props = message_properties(None, None, None)
        cmd = RemotingCommand.request(
            SEND_MESSAGE_V2, send_header(GROUP, topic, i & 3, props), body
        )
        out.append(cmd.encode())
    return out


async def send_raw(address: str, connections: int, window: int, frames: list[bytes]) -> float:
    """The frames over ``connections`` connections, ``window`` outstanding on each; the
    seconds from the first write to the last answer."""
    loop = asyncio.get_running_loop()
    host, port = address.rsplit(":", 1)
    per = len(frames) // connections
    senders: list[_RawSender] = []
    for k in range(connections):
        sender = _RawSender(frames[k * per : (k + 1) * per], window, loop.create_future())
        await loop.create_connection(functools.partial(_same, sender), host, int(port))
        senders.append(sender)
    try:
        start = time.perf_counter()
        for s in senders:
            s.start()
        await asyncio.gather(*(s.done for s in senders))
        return time.perf_counter() - start
    finally:
        for s in senders:
            if s.transport is not None:
                s.transport.close()


def _same(sender: _RawSender) -> _RawSender:
    return sender


def _many_round(
    server: BrokerServer, producers: int, n: int, body: bytes, in_flight: int = 1
) -> tuple[float, float, float]:
    """(msgs/s, broker CPU µs a message, this process's CPU µs a message) of ``producers``
    AsyncProducers sending ``n`` in all."""
    per = max(n // producers, 1)
    cpu_before = server.cpu_seconds()
    mine = time.process_time()
    with _client_runner() as runner:
        took = runner.run(send_concurrently(server.namesrv, producers, per, body, TOPIC, in_flight))
    total = per * producers
    client_us = round((time.process_time() - mine) / total * 1e6, 1)
    return total / took, _cpu_per_msg(server, cpu_before, total), client_us


def _raw_round(
    server: BrokerServer, connections: int, n: int, body: bytes, window: int
) -> tuple[float, float]:
    """(msgs/s, broker CPU µs a message) of pre-encoded sends over ``connections``."""
    frames = send_frames(n - n % connections, body)
    cpu_before = server.cpu_seconds()
    with _client_runner() as runner:
        took = runner.run(send_raw(server.address, connections, window, frames))
    return len(frames) / took, _cpu_per_msg(server, cpu_before, len(frames))


@scenario(
    "broker-send-many",
    "broker",
    "64 producers (async client, a connection each), 1 KiB, ASYNC_FLUSH and SYNC_FLUSH, vs one",
)
def bench_broker_send_many(root: str, count: int | None) -> Figures:
    """Per flush type, on one broker: one AsyncProducer (one send in flight), then 64 of them
    with one send in flight each (64 send_sync callers; ``ratio_to_one`` is theirs), then the
    broker's ceiling for the same load without the client's costs: 64 connections sending
    pre-encoded frames, one outstanding on each (``raw``) and eight (``raw_window``)."""
    n = count or 64_000
    producers = 64
    window = 8
    body = _body()
    out: Figures = {"producers": producers, "messages": n, "window": window}
    with pinned(_env_pin()) as cpu:
        for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
            tag = flush.split("_")[0].lower()
            store = os.path.join(root, f"store-{tag}")
            with broker_server(store, flush=flush, loop=_env_loop(), cpu=cpu) as server:
                out["broker_loop"] = server.loop
                _create_topic(server)
                _many_round(server, producers, min(n, 6400), body)  # warm-up
                one, _, _ = _many_round(server, 1, max(n // 16, 2000), body)
                many, many_cpu, client_cpu = _many_round(server, producers, n, body)
                raw, raw_cpu = _raw_round(server, producers, n, body, 1)
                windowed, windowed_cpu = _raw_round(server, producers, n, body, window)
            out[f"{tag}_one_msgs_per_s"] = round(one)
            out[f"{tag}_many_msgs_per_s"] = round(many)
            out[f"{tag}_ratio_to_one"] = round(many / one, 2)
            out[f"{tag}_broker_cpu_us_per_msg"] = many_cpu
            out[f"{tag}_client_cpu_us_per_msg"] = client_cpu
            out[f"{tag}_raw_msgs_per_s"] = round(raw)
            out[f"{tag}_raw_broker_cpu_us_per_msg"] = raw_cpu
            out[f"{tag}_raw_window_msgs_per_s"] = round(windowed)
            out[f"{tag}_raw_window_broker_cpu_us_per_msg"] = windowed_cpu
    return out


# ---- pull -----------------------------------------------------------------------------------


async def fill(namesrv: str, n: int, body: bytes, topic: str = TOPIC, batch: int = 32) -> float:
    """``n`` messages into the topic's 4 queues in batches (SEND_BATCH_MESSAGE), a producer
    per queue; the seconds it took."""
    queues = 4
    clients = [AsyncProducer(namesrv, GROUP) for _ in range(queues)]
    try:
        route = await clients[0].route(topic)
        assert route is not None
        mqs = route.queues(write=True)[:queues]

        async def one(c: AsyncProducer, k: int) -> None:
            mq = mqs[k]
            left = n // queues + (1 if k < n % queues else 0)
            while left > 0:
                size = min(batch, left)
                await c.send_batch(topic, [body] * size, queue=mq)
                left -= size

        start = time.perf_counter()
        await asyncio.gather(*(one(c, k) for k, c in enumerate(clients)))
        return time.perf_counter() - start
    finally:
        for c in clients:
            c.close()


def pull_header(topic: str, queue_id: int, offset: int, *, suspend_ms: int = 0) -> dict[str, str]:
    flag = FLAG_SUBSCRIPTION | (FLAG_SUSPEND if suspend_ms else 0)
    return {
        "consumerGroup": CONSUMER_GROUP,
        "topic": topic,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": str(flag),
        "commitOffset": "0",
        "suspendTimeoutMillis": str(suspend_ms),
        "subscription": "*",
        "subVersion": "0",
    }


def wait_queued(
    address: str, queues: int, n: int, topic: str = TOPIC, timeout: float = 600.0
) -> None:
    """Wait until the topic's first ``queues`` queues hold ``n`` messages: the broker answers
    a send to a new queue before its dispatch puts it there, and a drain reads up to the
    queues' ends."""
    deadline = time.monotonic() + timeout
    with RemotingClient(timeout=10.0) as client:
        while True:
            held = 0
            for queue_id in range(queues):
                ext = {"topic": topic, "queueId": str(queue_id)}
                r = client.invoke(address, RemotingCommand.request(GET_MAX_OFFSET, ext))
                if r.code != ResponseCode.SUCCESS:
                    raise RuntimeError(f"max offset failed: code {r.code} {r.remark}")
                held += int(r.ext_fields["offset"])
            if held >= n:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the queues hold {held} messages of {n} after {timeout} s")
            time.sleep(0.01)


async def drain(address: str, queues: int, topic: str = TOPIC) -> tuple[float, int, int]:
    """One consumer (one connection) pulling every queue from offset 0 until the broker has
    nothing more, one pull in flight per queue, as a push consumer pulls. Records are counted,
    not decoded. Returns (seconds, messages, bytes)."""
    client = AsyncRemotingClient()
    try:
        conn = await client.connection(address)
        got = [0, 0]

        async def one(queue_id: int) -> None:
            offset = 0
            while True:
                cmd = RemotingCommand.request(PULL_MESSAGE, pull_header(topic, queue_id, offset))
                r = await conn.invoke(cmd, 10.0)
                if r.code == ResponseCode.PULL_NOT_FOUND:
                    return
                if r.code != ResponseCode.SUCCESS:
                    raise RuntimeError(f"pull failed: code {r.code} {r.remark}")
                nxt = int(r.ext_fields["nextBeginOffset"])
                got[0] += nxt - offset
                got[1] += len(r.body)
                offset = nxt

        start = time.perf_counter()
        await asyncio.gather(*(one(q) for q in range(queues)))
        return time.perf_counter() - start, got[0], got[1]
    finally:
        client.close()


def drain_blocking(address: str, queues: int, topic: str = TOPIC) -> tuple[float, int]:
    """The same drain from a blocking client, one pull per round trip, queue after queue."""
    n = 0
    with RemotingClient(timeout=10.0) as client:
        start = time.perf_counter()
        for queue_id in range(queues):
            offset = 0
            while True:
                cmd = RemotingCommand.request(PULL_MESSAGE, pull_header(topic, queue_id, offset))
                r = client.invoke(address, cmd)
                if r.code != ResponseCode.SUCCESS:
                    break
                nxt = int(r.ext_fields["nextBeginOffset"])
                n += nxt - offset
                offset = nxt
        return time.perf_counter() - start, n


@scenario(
    "broker-pull",
    "broker",
    "fill N 1 KiB messages (batches), then one consumer drains them through PULL_MESSAGE",
)
def bench_broker_pull(root: str, count: int | None) -> Figures:
    n = count or 200_000
    queues = 4
    body = _body()
    out: Figures = {"messages": n}
    with (
        pinned(_env_pin()) as cpu,
        broker_server(os.path.join(root, "store"), loop=_env_loop(), cpu=cpu) as server,
    ):
        out["broker_loop"] = server.loop
        _create_topic(server)
        with _client_runner() as runner:
            took_fill = runner.run(fill(server.namesrv, n - 1, body))
            out["fill_msgs_per_s"] = round(n / took_fill)
            wait_queued(server.address, queues, n)
            cpu_before = server.cpu_seconds()
            took, got, size = runner.run(drain(server.address, queues))
        if got != n:
            raise RuntimeError(f"drained {got} messages of {n}")
        out["drain_msgs_per_s"] = round(got / took)
        out["drain_mb_per_s"] = round(size / took / 1e6, 1)
        out["broker_cpu_us_per_msg"] = _cpu_per_msg(server, cpu_before, got)
        took_b, got_b = drain_blocking(server.address, queues)
        if got_b != n:
            raise RuntimeError(f"drained {got_b} messages of {n} (blocking)")
        out["drain_blocking_msgs_per_s"] = round(got_b / took_b)
    return out


# ---- long-poll latency ----------------------------------------------------------------------


async def long_poll_latencies(
    namesrv: str, address: str, n: int, idle_s: float, topic: str = TOPIC
) -> list[float]:
    """``n`` times: a pull of queue 0 waits in a long poll (held ``idle_s`` seconds with
    nothing to read), then a producer sends to queue 0; the time from just before the send
    until the pull's answer is back."""
    producer = AsyncProducer(namesrv, GROUP)
    client = AsyncRemotingClient()
    try:
        route = await producer.route(topic)
        assert route is not None
        mq = route.queues(write=True)[0]
        conn = await client.connection(address)
        probe = RemotingCommand.request(PULL_MESSAGE, pull_header(topic, 0, 1 << 40))
        r = await conn.invoke(probe, 3.0)  # an offset far beyond: the queue's max in the answer
        offset = int(r.ext_fields.get("maxOffset", 0))
        body = _body()
        latencies: list[float] = []
        for _ in range(n):
            cmd = RemotingCommand.request(
                PULL_MESSAGE, pull_header(topic, 0, offset, suspend_ms=15_000)
            )
            received = asyncio.get_running_loop().create_future()

            async def pull(
                cmd: RemotingCommand = cmd, done: asyncio.Future[Any] = received
            ) -> None:
                r = await conn.invoke(cmd, 20.0)
                done.set_result((time.perf_counter(), r))

            task = asyncio.ensure_future(pull())
            await asyncio.sleep(idle_s)
            if received.done():
                raise RuntimeError("the pull was answered before any message was sent")
            sent_at = time.perf_counter()
            await producer.send(topic, body, queue=mq)
            at, r = await received
            await task
            if r.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"pull failed: code {r.code} {r.remark}")
            latencies.append(at - sent_at)
            offset = int(r.ext_fields["nextBeginOffset"])
        return latencies
    finally:
        producer.close()
        client.close()


@scenario(
    "broker-longpoll",
    "broker",
    "an idle consumer held in a long poll; send-to-receive latency (p50, p99)",
)
def bench_broker_longpoll(root: str, count: int | None) -> Figures:
    n = count or 300
    out: Figures = {"messages": n}
    with (
        pinned(_env_pin()) as cpu,
        broker_server(os.path.join(root, "store"), loop=_env_loop(), cpu=cpu) as server,
    ):
        out["broker_loop"] = server.loop
        _create_topic(server)
        with _client_runner() as runner:
            runner.run(long_poll_latencies(server.namesrv, server.address, 20, 0.005))
            lat = runner.run(long_poll_latencies(server.namesrv, server.address, n, 0.01))
    out.update(percentiles(lat))
    return out
