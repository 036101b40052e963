"""The broker's request path without sockets: frames fed straight into a server connection.

    python benchmarks/broker_hotpath.py [--what send|pull|all] [--messages N] [--rounds 3]
        [--profile FILE] [--top K] [--flush ASYNC_FLUSH|SYNC_FLUSH] [--clock process|thread]
        [--acl] [--metrics] [--binary] [--instructions]

A BrokerController runs in this process over a temporary store; a server connection with a
transport that only counts what is written gets pre-encoded SEND_MESSAGE_V2 frames (1 KiB
bodies, the header the C++ client sends) or PULL_MESSAGE frames (32 records a pull), one
frame per read as a client waiting for each answer sends them. The figure is CPU µs per
message of this process (``time.process_time``), which is what the broker's loop spends on a
request from the read buffer to the written answer: the frame and header codec, the
processor, the store. Socket system calls and the event loop's own work are left out (see
``rocketstore bench --scenario broker-send`` for the whole). ``--profile`` writes cProfile
stats of one more round (read with ``python -m pstats``); ``--top K`` also prints that round's
K functions with the most own time, in µs a message (the profiler slows Python calls several
fold: the shares say where the time goes). ``--clock thread`` counts the loop thread's CPU
alone (``time.thread_time``), without the store's service threads; it also prints that
thread's user and system share and its page faults a message. ``--acl`` turns the broker's
ACL on (a plain_acl.yml whose account has PUB|SUB on the topic and SUB on the group) and signs
every frame with that account, as RocketMQ's clients sign theirs. The load average is printed
before and after.

The connection is made as the broker's remoting server makes its connections (with the send
frame path where it is built). ``--metrics`` times every request as ``serve`` does with its
metrics endpoint on (its default). ``--binary`` sends the headers in the ROCKETMQ binary
serialize type with every value as text, as RocketMQ's Java benchmark producer and consumer
do. ``--instructions`` counts the instructions a send with
callgrind instead (every thread; it hardly depends on the load): this script runs twice under
``valgrind --tool=callgrind``, feeding 2,000 and 6,000 of the same 6,000 encoded frames, and
the difference is divided by 4,000.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from rocketstore.acl import RequestSigner
from rocketstore.broker._config import BrokerConfig
from rocketstore.remoting import Connection, RemotingCommand
from rocketstore.server import BrokerServer
from rocketstore.store._config import StoreConfig

TOPIC = "BenchHot"
# the ext fields of the C++ client's SEND_MESSAGE_V2 (some JSON numbers, as it sends them)
SEND_EXT: dict[str, Any] = {
    "a": "PID_bench",
    "b": TOPIC,
    "c": "TBW102",
    "d": 4,
    "e": 0,
    "f": 0,
    "g": "1795532961562",
    "h": 0,
    "i": "UNIQ_KEY\u00010100007F0000F44000000000\u0002WAIT\u0001true\u0002",
    "j": "0",
    "k": "false",
    "m": "false",
}


class CountingTransport:
    """Stands in for a socket transport: takes what is written, keeps the byte count."""

    def __init__(self) -> None:
        self.written = 0
        self.writes = 0

    def write(self, data: Any) -> None:
        self.written += len(data)
        self.writes += 1

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def close(self) -> None:
        pass


def _print_top(path: str, messages: int, top: int) -> None:
    """The ``top`` functions of a cProfile dump by own time, in µs a message and share."""
    rows = pstats.Stats(path).stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in rows.values())
    print(f"  profiled round: {total / messages * 1e6:.1f} µs/msg under the profiler")
    print(f"  {'own µs/msg':>10} {'share':>6} {'calls/msg':>9}  function")
    for (file, line, name), (_, calls, own, _, _) in sorted(
        rows.items(), key=lambda kv: kv[1][2], reverse=True
    )[:top]:
        where = f"{os.path.basename(file)}:{line}" if line else file
        print(
            f"  {own / messages * 1e6:10.2f} {own / total:6.1%} {calls / messages:9.2f}  "
            f"{name} ({where})"
        )


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _feed(conn: Connection, frame: bytes) -> None:
    buf = conn.get_buffer(len(frame))
    buf[: len(frame)] = frame
    conn.buffer_updated(len(frame))


ACL_YML = """\
accounts:
  - accessKey: benchAK01
    secretKey: benchSK01
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [BenchHot=PUB|SUB]
    groupPerms: [bench-consumer=SUB]
"""
SIGNER: RequestSigner | None = None  # --acl: every frame signed by the account of ACL_YML


def _encode(cmd: RemotingCommand) -> bytes:
    if SIGNER is not None:
        SIGNER(cmd)
    return cmd.encode()


def _send_frames(n: int, body: bytes, binary: bool = False) -> list[bytes]:
    out = []
    for i in range(n):
        ext = dict(SEND_EXT)
        ext["e"] = i & 3
        if binary:  # as RocketMQ's Java benchmark clients send: every value text
            ext = {k: str(v) for k, v in ext.items()}
        cmd = RemotingCommand.request(310, ext, body)
        cmd.language = "JAVA" if binary else "CPP"
        cmd.version = 405
        cmd.serialize_type = 1 if binary else 0
        out.append(_encode(cmd))
    return out


def _pull_frames(per_queue: int, queues: int, binary: bool = False) -> list[bytes]:
    out = []
    for offset in range(0, per_queue, 32):
        for q in range(queues):
            ext = {
                "consumerGroup": "bench-consumer",
                "topic": TOPIC,
                "queueId": str(q),
                "queueOffset": str(offset),
                "maxMsgNums": "32",
                "sysFlag": "4",
                "commitOffset": "0",
                "suspendTimeoutMillis": "0",
                "subscription": "*",
                "subVersion": "0",
            }
            cmd = RemotingCommand.request(11, ext)
            if binary:  # as RocketMQ's Java benchmark consumer sends
                cmd.language = "JAVA"
                cmd.serialize_type = 1
            out.append(_encode(cmd))
    return out


async def run(args: argparse.Namespace) -> None:
    clock = time.thread_time if args.clock == "thread" else time.process_time
    root = tempfile.mkdtemp(prefix="broker-hotpath-")
    try:
        store_config = StoreConfig(
            store_path_root_dir=root, flush_disk_type=args.flush, ha_listen_port=0
        )
        acl: dict[str, Any] = {}
        if args.acl:
            global SIGNER
            path = os.path.join(root, "plain_acl.yml")
            with open(path, "w") as f:
                f.write(ACL_YML)
            acl = {"acl_enable": True, "acl_file": path}
            SIGNER = RequestSigner("benchAK01", "benchSK01")
        config = BrokerConfig.from_store_config(store_config, listen_port=0, **acl)
        broker = BrokerServer(store_config, config)
        await broker.start()
        try:
            if args.metrics:  # as the metrics endpoint's instrument() does
                handlers = broker.server.handlers
                handlers.update(broker.broker.stats.timed_handlers(handlers))
            frame_path = getattr(broker.server, "frame_path", None)  # (a tree without it)
            extra: dict[str, Any] = {"frame_path": frame_path} if frame_path else {}
            conn = Connection(broker.server.handlers, backpressure=True, **extra)
            transport = CountingTransport()
            conn.connection_made(transport)  # type: ignore[arg-type]
            body = os.urandom(1024)
            n = args.messages
            _feed(conn, _send_frames(1, body)[0])  # creates the topic
            await asyncio.sleep(0.1)
            if args.what in ("send", "all"):
                for r in range(args.rounds + (1 if args.profile else 0)):
                    frames = _send_frames(n, body, args.binary)[: args.feed or n]
                    profiler = cProfile.Profile() if args.profile and r == args.rounds else None
                    if profiler:
                        profiler.enable()
                    usage = resource.getrusage(resource.RUSAGE_THREAD)
                    t = clock()
                    for f in frames:
                        _feed(conn, f)
                        if args.flush == "SYNC_FLUSH":
                            await asyncio.sleep(0)
                    took = clock() - t
                    after = resource.getrusage(resource.RUSAGE_THREAD)
                    if profiler:
                        profiler.disable()
                        profiler.dump_stats(args.profile + ".send")
                        if args.top:
                            _print_top(args.profile + ".send", n, args.top)
                    else:
                        line = f"send: {took / n * 1e6:.1f} µs/msg ({n / took:,.0f} msgs/s of CPU)"
                        if args.clock == "thread":
                            user = (after.ru_utime - usage.ru_utime) / n * 1e6
                            system = (after.ru_stime - usage.ru_stime) / n * 1e6
                            faults = (after.ru_minflt - usage.ru_minflt) / n
                            line += (
                                f" user {user:.1f} sys {system:.1f} µs, {faults:.2f} page faults"
                            )
                        print(line)
            if args.what in ("pull", "all"):
                per_queue = n // 4
                if args.what == "pull":  # the sends above filled the queues otherwise
                    for f in _send_frames(per_queue * 4, body):
                        _feed(conn, f)
                await asyncio.sleep(0.5)  # dispatch
                frames = _pull_frames(per_queue, 4, args.binary)
                for r in range(args.rounds + (1 if args.profile else 0)):
                    profiler = cProfile.Profile() if args.profile and r == args.rounds else None
                    if profiler:
                        profiler.enable()
                    before = transport.written
                    t = clock()
                    for f in frames:
                        _feed(conn, f)
                    took = clock() - t
                    if profiler:
                        profiler.disable()
                        profiler.dump_stats(args.profile + ".pull")
                        if args.top:
                            _print_top(args.profile + ".pull", per_queue * 4, args.top)
                    else:
                        got = (transport.written - before) / 1100
                        print(
                            f"pull: {took / (per_queue * 4) * 1e6:.2f} µs/msg, "
                            f"{took / len(frames) * 1e6:.0f} µs/pull "
                            f"(~{got:,.0f} records' bytes written)"
                        )
        finally:
            await broker.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def instructions(args: argparse.Namespace) -> None:
    counts = []
    for feed in (2000, 6000):
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
        cmd += [sys.executable, __file__, "--what", "send", "--rounds", "1"]
        cmd += ["--messages", "6000", "--feed", str(feed), "--flush", args.flush]
        cmd += ["--metrics"] if args.metrics else []
        cmd += ["--binary"] if args.binary else []
        cmd += ["--acl"] if args.acl else []
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        found = re.search(r"Collected : (\d+)", done.stderr)
        if found is None:
            sys.exit(f"no callgrind summary:\n{done.stderr[-2000:]}")
        counts.append(int(found.group(1)))
    print(f"send: {(counts[1] - counts[0]) / 4000:,.0f} instructions a send (callgrind)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", choices=("send", "pull", "all"), default="all")
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--flush", default="ASYNC_FLUSH", choices=("ASYNC_FLUSH", "SYNC_FLUSH"))
    ap.add_argument("--profile", default=None, help="cProfile stats to FILE.send / FILE.pull")
    ap.add_argument("--top", type=int, default=0, help="with --profile: print the top K")
    ap.add_argument(
        "--clock",
        choices=("process", "thread"),
        default="process",
        help="CPU of the whole process (default) or of the loop thread alone",
    )
    ap.add_argument("--metrics", action="store_true", help="time requests as serve does")
    ap.add_argument(
        "--binary", action="store_true", help="binary headers, as RocketMQ's Java benchmark"
    )
    ap.add_argument("--instructions", action="store_true", help="instructions a send (callgrind)")
    ap.add_argument("--feed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument(
        "--acl", action="store_true", help="ACL on, every frame signed by a permitted account"
    )
    args = ap.parse_args()
    if args.top and not args.profile:
        ap.error("--top needs --profile FILE")
    if args.instructions:
        instructions(args)
        return
    print(f"load average before: {_load()}", flush=True)
    asyncio.run(run(args))
    print(f"load average after: {_load()}")


if __name__ == "__main__":
    main()
