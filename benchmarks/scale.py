"""A broker with many topics and many idle clients: what creating, routing and holding them
costs.

    python benchmarks/scale.py --topics 1000 [--queues 8] [--clients 1000]
        [--idle-seconds 60] [--store DIR] [--json]
    python benchmarks/scale.py --topics 1000 --namesrv HOST:PORT --broker HOST:PORT
        --broker-pid PID [--namesrv-pid PID]        (a broker already running: RocketMQ's)
        [--restart-cmd CMD --kill-cmd CMD --pid-cmd CMD]
    python benchmarks/scale.py --topics 12500 --clients 5000 --idle-store-seconds 60
        --read-back --restart                       (the whole scenario against ``serve``)

Without ``--broker`` it starts ``rocketstore serve`` on its defaults (free ports, gRPC,
metrics and console off) in a scratch store, and stops it at the end: the name server runs
in the broker's process, so the process figures are both together. With ``--broker`` the
figures are those of the process ``--broker-pid`` names (read from ``/proc``, so the broker
must run on this machine).

Steps, each timed:

1. ``--topics`` N topics of ``--queues`` queues, one UPDATE_AND_CREATE_TOPIC each through the
   admin client, one after another (the rate of the first and of the last 250 creates too);
   then how long until the name server routes the last one.
2. One 100-byte send to every queue (``--window`` topics at a time; ``--send-topics K``: the
   queues of the first K topics only), refusals counted.
3. Route queries: GET_ROUTEINFO_BY_TOPIC for 1,000 topics, one after another;
   GET_ALL_TOPIC_LIST_FROM_NAMESERVER.
4. ``--clients`` idle clients, each on its own connection, half producers (groups of 50) and
   half push consumers (groups of up to 1,000, each subscribing one topic), heartbeating
   every 30 s as RocketMQ's clients do; once the membership notices of their joins have settled
   (every join is told to the group's members: n² one-way requests for a group of n), the
   broker's CPU over ``--idle-seconds`` (utime + stime from ``/proc/PID/stat``) and
   GET_CONSUMER_LIST_BY_GROUP for the largest group.

5. ``--idle-store-seconds S``: the broker's CPU over S seconds with no client connected
   (the store's own idle cost: flushes, checkpoints, statistics), after the sends.
6. ``--read-back``: every queue sent to read back from offset 0 (PULL_MESSAGE, ``--window``
   topics at a time), the messages counted per queue; queues that do not hold exactly their
   one message are counted (and the first few named).
7. ``--restart``: a clean restart (SIGTERM, wait for the exit, exec again on the same store
   and ports), then a kill -9 restart: the seconds from the exec to the first route query the
   name server answers for the last topic, and to the first send acknowledged after it; the
   recovery line ``serve`` logged (the store's "... recovery in N s: ..."); the process
   figures after each; then ``--read-back`` again when asked.

After each step: the broker's resident memory, open files and mappings.

Against a broker that is not ``serve`` (RocketMQ 4.9.8: ``--namesrv``, ``--broker``,
``--broker-pid``), the restart step runs the shell commands given: ``--restart-cmd`` after a
clean stop it performs itself (``--stop-cmd``, e.g. ``sh mqshutdown broker``), or ``--kill-cmd``
(e.g. ``kill -9 $(cat broker.pid)``) then ``--restart-cmd`` (e.g. ``nohup sh mqbroker -n
127.0.0.1:9876 -c broker.conf &``); ``--pid-cmd`` prints the new broker's pid (e.g. ``pgrep
-f BrokerStartup``). Without ``--restart-cmd`` the restart step is skipped for such a broker
and its restart is measured separately. RocketMQ's broker logs its recovery in
``~/logs/rocketmqlogs/store.log``, not read here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from rocketstore.client import MessageQueue
from rocketstore.client._admin import AdminClient
from rocketstore.client._async_producer import AsyncProducer
from rocketstore.client._consumer import decode_records
from rocketstore.protocol._heartbeat import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    HeartbeatData,
    MessageModel,
    ProducerData,
    build_subscription,
    encode_heartbeat,
)
from rocketstore.remoting import AsyncRemotingClient, RemotingCommand, RequestCode

HEARTBEAT_INTERVAL_S = 30.0
PRODUCER_GROUP_SIZE = 50
CONSUMER_GROUP_SIZE = 1000
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def proc_figures(pid: int) -> dict[str, Any]:
    """Resident memory (MiB), open files, mappings and threads of ``pid``."""
    rss_kib = 0
    threads = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss_kib = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    with open(f"/proc/{pid}/maps") as f:
        maps = sum(1 for _ in f)
    return {
        "rss_mib": round(rss_kib / 1024, 1),
        "open_files": len(os.listdir(f"/proc/{pid}/fd")),
        "mappings": maps,
        "threads": threads,
    }


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


class Serve:
    """``rocketstore serve`` in a child process on free ports."""

    def __init__(self, store: str) -> None:
        self.namesrv = f"127.0.0.1:{free_port()}"
        port = free_port()
        self.broker = f"127.0.0.1:{port}"
        self.ha = f"127.0.0.1:{free_port()}"
        self.store = store
        self.runs = 0
        self.start()

    def start(self) -> None:
        """Exec ``serve`` (again) on the same store and ports; its output in
        ``serve.out`` (the first run), ``serve-<n>.out`` (the later ones)."""
        name = "serve.out" if not self.runs else f"serve-{self.runs}.out"
        self.runs += 1
        self.log_path = os.path.join(self.store, name)
        self.log = open(self.log_path, "wb")  # noqa: SIM115
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rocketstore.cli",
                "serve",
                "--store",
                os.path.join(self.store, "store"),
                "--namesrv-listen",
                self.namesrv,
                "--listen",
                self.broker,
                "--ha-listen",
                self.ha,
                "--log-dir",
                os.path.join(self.store, "logs"),
                "--grpc-listen",
                "",
                "--metrics-listen",
                "",
                "--console-listen",
                "",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.pid = self.proc.pid

    def wait_registered(self, admin: AdminClient, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}")
            try:
                if admin.route("TBW102") is not None:
                    return
            except Exception:
                pass
            time.sleep(0.2)
        raise TimeoutError("the broker did not register with its name server")

    def stop(self, sig: int = signal.SIGTERM) -> float:
        """Stop it with ``sig``; the seconds until it exited."""
        t0 = time.perf_counter()
        self.proc.send_signal(sig)
        try:
            self.proc.wait(300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        took = time.perf_counter() - t0
        self.log.close()
        return took

    def recovery_line(self) -> str | None:
        """The last recovery line of the log files (the store logs it at INFO)."""
        found = None
        logs = os.path.join(self.store, "logs")
        for name in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
            with open(os.path.join(logs, name), "rb") as f:
                for line in f.read().decode("utf-8", "replace").splitlines():
                    if "recovery in" in line:
                        found = line.strip()[-400:]
        return found


def create_topics(
    admin: AdminClient, broker: str, names: list[str], queues: int
) -> dict[str, float]:
    started = time.perf_counter()
    marks = [started]
    for i, topic in enumerate(names, 1):
        admin.create_topic(broker, topic, read_queue_nums=queues, write_queue_nums=queues)
        if i % 250 == 0 or i == len(names):
            marks.append(time.perf_counter())
    total = marks[-1] - started
    first = (marks[1] - marks[0]) / min(250, len(names))
    last_n = len(names) % 250 or min(250, len(names))
    last = (marks[-1] - marks[-2]) / last_n
    return {
        "create_s": round(total, 2),
        "create_ms_per_topic": round(1000 * total / len(names), 2),
        "create_ms_first_250": round(1000 * first, 2),
        "create_ms_last_250": round(1000 * last, 2),
    }


def wait_routed(admin: AdminClient, topic: str, timeout_s: float = 300.0) -> float:
    started = time.perf_counter()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if admin.route(topic) is not None:
                return time.perf_counter() - started
        except Exception:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{topic} never routed")


async def send_each_queue(
    namesrv: str, names: list[str], queues: int, window: int
) -> dict[str, Any]:
    body = b"x" * 100
    errors: list[str] = []
    producer = AsyncProducer(namesrv, "scale-bench-producer", timeout=10.0, retries=0)
    pending = iter(names)

    async def worker() -> None:
        for topic in pending:
            try:
                route = await producer.route(topic)
            except Exception as exc:  # a route query timed out: the topic's sends are lost
                errors.extend(f"{topic}/{qid}: {exc}" for qid in range(queues))
                continue
            if route is None:
                errors.append(f"{topic}: no route")
                continue
            broker_name = str(route.queue_data[0]["brokerName"])
            for qid in range(queues):
                try:
                    await producer.send(topic, body, queue=MessageQueue(topic, broker_name, qid))
                except Exception as exc:
                    errors.append(f"{topic}/{qid}: {exc}")

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(window)))
    took = time.perf_counter() - started
    producer.close()
    return {
        "send_s": round(took, 2),
        "sends": len(names) * queues,
        "send_errors": len(errors),
        "send_first_errors": errors[:3],
    }


async def route_queries(namesrv: str, names: list[str]) -> dict[str, Any]:
    client = AsyncRemotingClient(signer=None)
    sample = random.Random(7).sample(names, min(1000, len(names)))
    times = []
    for topic in sample:
        cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        t0 = time.perf_counter()
        r = await client.invoke(namesrv, cmd, 10.0)
        times.append(time.perf_counter() - t0)
        if r.code != 0:
            raise RuntimeError(f"route of {topic}: {r.code} {r.remark}")
    all_times = []
    for _ in range(5):
        cmd = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {})
        t0 = time.perf_counter()
        r = await client.invoke(namesrv, cmd, 30.0)
        all_times.append(time.perf_counter() - t0)
    client.close()
    times.sort()
    return {
        "route_ms_mean": round(1000 * statistics.fmean(times), 3),
        "route_ms_p99": round(1000 * times[int(len(times) * 0.99) - 1], 3),
        "all_topics_ms_median": round(1000 * statistics.median(all_times), 2),
    }


def heartbeat_of(i: int, clients: int, names: list[str]) -> tuple[str, bytes, str | None]:
    """Client ``i``'s id, heartbeat body and consumer group (None for a producer)."""
    client_id = f"127.0.0.1@scale-{i}"
    if i % 2 == 0:
        group = f"scale-producers-{i // 2 // PRODUCER_GROUP_SIZE}"
        data = HeartbeatData(client_id, producers=(ProducerData(group),))
        return client_id, encode_heartbeat(data), None
    index = i // 2 // CONSUMER_GROUP_SIZE
    group = f"scale-consumers-{index}"
    topic = names[index % len(names)]
    subs = (
        build_subscription(topic, "*", sub_version=1),
        build_subscription(f"%RETRY%{group}", "*", sub_version=1),
    )
    consumer = ConsumerData(
        group,
        ConsumeType.CONSUME_PASSIVELY,
        MessageModel.CLUSTERING,
        ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        subs,
    )
    return client_id, encode_heartbeat(HeartbeatData(client_id, consumers=(consumer,))), group


async def idle_clients(
    broker: str, broker_pid: int, clients: int, names: list[str], idle_s: float
) -> dict[str, Any]:
    conns: list[tuple[AsyncRemotingClient, bytes]] = []
    groups: dict[str, int] = {}

    async def heartbeat(client: AsyncRemotingClient, body: bytes) -> None:
        cmd = RemotingCommand.request(RequestCode.HEART_BEAT, {}, body)
        r = await client.invoke(broker, cmd, 60.0)
        if r.code != 0:
            raise RuntimeError(f"heartbeat refused: {r.code} {r.remark}")

    before = proc_figures(broker_pid)
    started = time.perf_counter()
    for i in range(clients):
        _, body, group = heartbeat_of(i, clients, names)
        if group is not None:
            groups[group] = groups.get(group, 0) + 1
        client = AsyncRemotingClient(signer=None)
        conns.append((client, body))
    stop = asyncio.Event()

    async def keep_beating(client: AsyncRemotingClient, body: bytes) -> None:
        # every 30 s from its first heartbeat, as a client does (those connected early keep
        # beating while the others connect)
        while not stop.is_set():
            try:
                async with asyncio.timeout(HEARTBEAT_INTERVAL_S):
                    await stop.wait()
            except TimeoutError:
                pass
            if stop.is_set():
                return
            try:
                await heartbeat(client, body)
            except Exception:
                pass

    beats: list[asyncio.Task[None]] = []
    failed = 0
    for at in range(0, clients, 200):
        batch = conns[at : at + 200]
        answers = await asyncio.gather(*(heartbeat(c, b) for c, b in batch), return_exceptions=True)
        failed += sum(1 for a in answers if isinstance(a, BaseException))
        beats += [asyncio.create_task(keep_beating(c, b)) for c, b in batch]
    connect_s = time.perf_counter() - started
    after_connect = proc_figures(broker_pid)
    # every join told the group's members (NOTIFY_CONSUMER_IDS_CHANGED): wait until those
    # notices are written and read (the broker below 10 % of a core over 5 s, at most 180 s)
    settle_started = time.perf_counter()
    while time.perf_counter() - settle_started < 180.0:
        c0 = cpu_seconds(broker_pid)
        await asyncio.sleep(5.0)
        if cpu_seconds(broker_pid) - c0 < 0.5:
            break
    settle_s = time.perf_counter() - settle_started
    await asyncio.sleep(2.0)
    cpu0, t0 = cpu_seconds(broker_pid), time.monotonic()
    await asyncio.sleep(idle_s)
    cpu1, t1 = cpu_seconds(broker_pid), time.monotonic()

    largest = max(groups, key=lambda g: groups[g]) if groups else None
    list_ms = None
    if largest is not None:
        q = AsyncRemotingClient(signer=None)
        times = []
        for _ in range(20):
            cmd = RemotingCommand.request(
                RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": largest}
            )
            t = time.perf_counter()
            r = await q.invoke(broker, cmd, 60.0)
            times.append(time.perf_counter() - t)
            if r.code != 0:
                raise RuntimeError(f"consumer list: {r.code} {r.remark}")
        q.close()
        list_ms = round(1000 * statistics.median(times), 3)
    stop.set()
    await asyncio.gather(*beats)
    for client, _ in conns:
        client.close()
    return {
        "clients": clients,
        "clients_connect_and_first_heartbeat_s": round(connect_s, 2),
        "clients_notices_settled_s": round(settle_s, 1),
        "clients_first_heartbeat_failed": failed,
        "idle_cpu_percent_of_core": round(100 * (cpu1 - cpu0) / (t1 - t0), 2),
        "idle_window_s": round(t1 - t0, 1),
        "largest_group": groups.get(largest, 0) if largest else 0,
        "consumer_list_ms_median": list_ms,
        "rss_mib_with_clients": after_connect["rss_mib"],
        "kib_per_connection": round(
            1024 * (after_connect["rss_mib"] - before["rss_mib"]) / max(clients, 1), 2
        ),
    }


async def read_back(
    broker: str,
    names: list[str],
    queues: int,
    window: int,
    expect: int = 1,
    deadline_s: float = 120.0,
) -> dict[str, Any]:
    """Every queue of ``names`` pulled from offset 0, the messages counted per queue; the
    queues that came up short pulled again until each holds ``expect`` or ``deadline_s``
    passed (a broker that answers a send before its dispatch has made the queue shows the
    message a moment later: RocketMQ does, and so does rocketstore for a new queue)."""
    client = AsyncRemotingClient(signer=None)
    counts: dict[tuple[str, int], int] = {}
    errors: dict[tuple[str, int], str] = {}

    async def pull(topic: str, qid: int) -> None:
        ext = {
            "consumerGroup": "scale-bench-reader",
            "topic": topic,
            "queueId": str(qid),
            "queueOffset": "0",
            "maxMsgNums": "32",
            "sysFlag": "4",  # the subscription given below
            "commitOffset": "0",
            "suspendTimeoutMillis": "0",
            "subscription": "*",
            "subVersion": "0",
        }
        cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, ext)
        try:
            r = await client.invoke(broker, cmd, 30.0)
            counts[(topic, qid)] = len(decode_records(r.body)) if r.code == 0 and r.body else 0
        except Exception as exc:
            counts[(topic, qid)] = -1
            errors[(topic, qid)] = str(exc)

    async def run(todo: list[tuple[str, int]]) -> None:
        pending = iter(todo)

        async def worker() -> None:
            for topic, qid in pending:
                await pull(topic, qid)

        await asyncio.gather(*(worker() for _ in range(window)))

    started = time.perf_counter()
    todo = [(topic, qid) for topic in names for qid in range(queues)]
    await run(todo)
    first_s = time.perf_counter() - started
    short_first = [q for q in todo if counts[q] != expect]
    passes = 1
    short = short_first
    while short and time.perf_counter() - started < deadline_s:
        await asyncio.sleep(0.2)
        await run(short)
        passes += 1
        short = [q for q in short if counts[q] != expect]
    took = time.perf_counter() - started
    client.close()
    return {
        "read_s": round(first_s, 2),
        "read_queues": len(todo),
        "read_short_first_pass": len(short_first),
        "read_all_s": round(took, 2) if not short else None,
        "read_passes": passes,
        "read_wrong_queues": len(short),
        "read_first_wrong": [
            f"{t}/{q}: {errors.get((t, q)) or f'{counts[(t, q)]} messages'}" for t, q in short[:3]
        ],
    }


async def first_answers(
    namesrv: str, broker: str, topic: str, started: float, timeout_s: float = 900.0
) -> dict[str, Any]:
    """Seconds from ``started`` (perf_counter at the exec) to the first route of ``topic`` the
    name server answers with the broker in it, then to the first send acknowledged."""
    deadline = time.monotonic() + timeout_s
    routed = sent = None
    while routed is None and time.monotonic() < deadline:
        client = AsyncRemotingClient(signer=None)
        try:
            cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            r = await client.invoke(namesrv, cmd, 5.0)
            if r.code == 0 and r.body:
                routed = time.perf_counter() - started
        except Exception:
            pass
        finally:
            client.close()
        if routed is None:
            await asyncio.sleep(0.05)
    while routed is not None and sent is None and time.monotonic() < deadline:
        producer = AsyncProducer(namesrv, "scale-bench-restart", timeout=5.0, retries=0)
        try:
            route = await producer.route(topic, refresh=True)
            if route is not None:
                name = str(route.queue_data[0]["brokerName"])
                await producer.send(topic, b"y" * 100, queue=MessageQueue(topic, name, 0))
                sent = time.perf_counter() - started
        except Exception:
            await asyncio.sleep(0.05)
        finally:
            producer.close()
    return {
        "first_route_s": None if routed is None else round(routed, 2),
        "first_send_s": None if sent is None else round(sent, 2),
    }


def restart_serve(serve: Serve, kill: bool, topic: str) -> dict[str, Any]:
    """Stop ``serve`` (SIGTERM, or SIGKILL), exec it again, time its first answers."""
    stop_s = serve.stop(signal.SIGKILL if kill else signal.SIGTERM)
    serve.start()
    out = asyncio.run(first_answers(serve.namesrv, serve.broker, topic, serve.started))
    out["stop_s"] = round(stop_s, 2)
    out["recovery_line"] = serve.recovery_line()
    out["after"] = proc_figures(serve.pid)
    return out


def restart_other(
    namesrv: str, broker: str, topic: str, kill: bool, args: argparse.Namespace
) -> tuple[dict[str, Any], int]:
    """A broker that is not ``serve``: ``--stop-cmd`` or ``--kill-cmd``, then
    ``--restart-cmd``; timed from the restart command to its first answers; the new pid from
    ``--pid-cmd``."""
    how = args.kill_cmd if kill else args.stop_cmd
    if how:
        subprocess.run(how, shell=True, check=False)
    started = time.perf_counter()
    subprocess.Popen(args.restart_cmd, shell=True, start_new_session=True)
    out = asyncio.run(first_answers(namesrv, broker, topic, started))
    pid = args.broker_pid
    if args.pid_cmd:
        found = subprocess.run(args.pid_cmd, shell=True, capture_output=True, text=True)
        pid = int(found.stdout.split()[0]) if found.stdout.split() else pid
    out["after"] = proc_figures(pid)
    return out, pid


def idle_store_cpu(pid: int, idle_s: float) -> dict[str, Any]:
    """The broker's CPU over ``idle_s`` with no client connected (% of one core)."""
    time.sleep(2.0)
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(idle_s)
    c1, t1 = cpu_seconds(pid), time.monotonic()
    return {
        "idle_store_cpu_percent_of_core": round(100 * (c1 - c0) / (t1 - t0), 2),
        "idle_store_window_s": round(t1 - t0, 1),
        "idle_store_load": load(),
    }


def raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topics", type=int, required=True)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--clients", type=int, default=None, help="default: --topics, at most 5000")
    ap.add_argument("--idle-seconds", type=float, default=60.0)
    ap.add_argument("--window", type=int, default=16, help="topics sent to at once")
    ap.add_argument("--store", default=None, help="scratch directory (default: a new one)")
    ap.add_argument("--namesrv", default=None)
    ap.add_argument("--broker", default=None)
    ap.add_argument("--broker-pid", type=int, default=None)
    ap.add_argument("--prefix", default="ScaleTopic")
    ap.add_argument(
        "--send-topics",
        type=int,
        default=None,
        help="send to the queues of the first K topics only (default: every topic)",
    )
    ap.add_argument(
        "--idle-store-seconds",
        type=float,
        default=0.0,
        help="the broker's CPU with no client, after the sends (0: not measured)",
    )
    ap.add_argument("--read-back", action="store_true", help="pull every queue sent to")
    ap.add_argument("--restart", action="store_true", help="clean and kill -9 restarts")
    ap.add_argument("--stop-cmd", default=None, help="another broker: how to stop it cleanly")
    ap.add_argument("--kill-cmd", default=None, help="another broker: how to kill -9 it")
    ap.add_argument("--restart-cmd", default=None, help="another broker: how to start it again")
    ap.add_argument("--pid-cmd", default=None, help="another broker: prints its pid")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    raise_nofile()
    clients = args.clients if args.clients is not None else min(args.topics, 5000)

    scratch = None
    serve: Serve | None = None
    if args.broker:
        if not (args.namesrv and args.broker_pid):
            ap.error("--broker needs --namesrv and --broker-pid")
        namesrv, broker, pid = args.namesrv, args.broker, args.broker_pid
    else:
        scratch = args.store or tempfile.mkdtemp(prefix="scale-bench-")
        os.makedirs(scratch, exist_ok=True)
        serve = Serve(scratch)
        namesrv, broker, pid = serve.namesrv, serve.broker, serve.pid
    admin = AdminClient(namesrv, timeout=30.0, signer=None)
    out: dict[str, Any] = {"topics": args.topics, "queues": args.queues, "load_start": load()}
    try:
        if serve is not None:
            serve.wait_registered(admin)
        out["at_start"] = proc_figures(pid)
        names = [f"{args.prefix}{i}" for i in range(args.topics)]
        out.update(create_topics(admin, broker, names, args.queues))
        out["routed_after_last_create_s"] = round(wait_routed(admin, names[-1]), 3)
        out["after_creates"] = proc_figures(pid)
        send_to = names if args.send_topics is None else names[: args.send_topics]
        if send_to:
            out.update(asyncio.run(send_each_queue(namesrv, send_to, args.queues, args.window)))
            out["after_sends"] = proc_figures(pid)
        out.update(asyncio.run(route_queries(namesrv, names)))
        if args.idle_store_seconds > 0:
            out.update(idle_store_cpu(pid, args.idle_store_seconds))
        if args.read_back and send_to:
            out.update(asyncio.run(read_back(broker, send_to, args.queues, args.window)))
        if args.restart and (serve is not None or args.restart_cmd):
            for kill in (False, True):
                step = "kill9_restart" if kill else "clean_restart"
                if serve is not None:
                    out[step] = restart_serve(serve, kill, names[-1])
                    pid = serve.pid
                else:
                    out[step], pid = restart_other(namesrv, broker, names[-1], kill, args)
                if args.read_back and send_to:
                    # each restart's probe added one message to queue 0 of the last topic
                    back = asyncio.run(read_back(broker, send_to[:-1], args.queues, args.window))
                    out[step].update(back)
        if clients:
            out.update(asyncio.run(idle_clients(broker, pid, clients, names, args.idle_seconds)))
            out["after_clients"] = proc_figures(pid)
        out["load_end"] = load()
    finally:
        admin.close()
        if serve is not None:
            serve.stop()
        if scratch is not None and args.store is None:
            shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        print(json.dumps(out))
        return
    for key, value in out.items():
        print(f"{key:42} {value}")


if __name__ == "__main__":
    main()
