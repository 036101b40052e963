"""How fast the controller fails over, on loopback.

    python benchmarks/controller_failover.py [--what close|silent|takeover|writes|all]
        [--backend file|etcd|both] [--repeat N]

``close``: a group of two brokers (1 master, both in the SyncStateSet, both beating); the
master's connection closes (a killed broker); the time until broker 2 holds the notice that it
is master (NOTIFY_BROKER_ROLE_CHANGED). ``--repeat`` rounds, each on a new controller.

``silent``: the same group, but the master stays connected and stops beating (a paused
process), with RocketMQ's default timings (heartbeat timeout 10 s, scans every 5 s): the time
from its last heartbeat to broker 2's notice.

``takeover`` (etcd): two controllers in subprocesses (``rocketstore controller``, lease TTL 5 s,
RocketMQ's default scans); the active one is killed with -9; the time until the other answers
GET_METADATA_INFO as the active controller.

``writes``: designated elections, each followed by the new master's SyncStateSet change back to
both brokers: changes of a group a second through one controller (each one compare-and-set in
the backend: an fsynced file, or an etcd transaction).

etcd runs as a 3-member cluster (Debian's ``etcd`` on PATH) with its data in a temporary
directory, killed at the end. Prints one line per measurement with the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from rocketstore.controller import ControllerConfig
from rocketstore.protocol._controller_bodies import SyncStateSet
from rocketstore.protocol._controller_client import ControllerClient
from rocketstore.protocol._controller_headers import BrokerHeartbeatRequest
from rocketstore.remoting import (
    AsyncRemotingClient,
    RemotingCommand,
    RemotingServer,
    RequestCode,
    ResponseCode,
)
from rocketstore.server import ControllerServer

CLUSTER, GROUP = "DefaultCluster", "broker-a"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def etcd_cluster(root: Path, size: int = 3) -> Iterator[list[str]]:
    """A ``size``-member etcd cluster on loopback; its client URLs."""
    binary = shutil.which("etcd")
    if binary is None:
        raise SystemExit("etcd is not on PATH (Debian: apt-get install etcd-server)")
    clients = [free_port() for _ in range(size)]
    peers = [free_port() for _ in range(size)]
    initial = ",".join(f"m{i}=http://127.0.0.1:{p}" for i, p in enumerate(peers))
    procs = []
    try:
        for i in range(size):
            log = open(root / f"etcd-m{i}.log", "wb")  # noqa: SIM115 - the process owns it
            procs.append(subprocess.Popen(
                [binary, "--name", f"m{i}", "--data-dir", str(root / f"etcd-m{i}"),
                 "--listen-client-urls", f"http://127.0.0.1:{clients[i]}",
                 "--advertise-client-urls", f"http://127.0.0.1:{clients[i]}",
                 "--listen-peer-urls", f"http://127.0.0.1:{peers[i]}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{peers[i]}",
                 "--initial-cluster", initial, "--initial-cluster-state", "new"],
                stdout=log, stderr=subprocess.STDOUT,
            ))  # fmt: skip
            log.close()
        urls = [f"http://127.0.0.1:{p}" for p in clients]
        deadline = time.monotonic() + 30
        while not all(_healthy(u) for u in urls):
            if time.monotonic() > deadline:
                raise SystemExit("etcd did not become healthy in 30 s")
            time.sleep(0.1)
        yield urls
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=1) as r:
            return bool(json.loads(r.read()).get("health") == "true")
    except OSError:
        return False


def config(backend: str, store: Path, etcd: list[str], **overrides: object) -> ControllerConfig:
    values: dict[str, object] = {"listen_port": 0, "store_path": str(store), "backend": backend}
    if backend == "etcd":
        values["etcd_endpoints"] = tuple(etcd)
        values["etcd_prefix"] = f"/bench/{time.monotonic_ns()}"
    values.update(overrides)
    return ControllerConfig(**values)  # type: ignore[arg-type]


class Broker:
    """A broker as the controller sees it: a client, a port for notices."""

    def __init__(self, controller: str) -> None:
        self.client = ControllerClient([controller], client=AsyncRemotingClient(signer=None))
        self.noticed: asyncio.Event = asyncio.Event()
        self.notice_master: int | None = None
        self.server = RemotingServer({int(RequestCode.NOTIFY_BROKER_ROLE_CHANGED): self._notice})
        self.broker_id = 0
        self.beating = True

    def _notice(self, cmd: RemotingCommand, _conn: object) -> None:
        self.notice_master = int(cmd.ext_fields["masterBrokerId"])
        self.noticed.set()

    async def start(self) -> Broker:
        await self.server.start()
        self.broker_id = await self.client.next_broker_id(CLUSTER, GROUP)
        check = f"{self.server.address};{time.time_ns()}"
        await self.client.apply_broker_id(CLUSTER, GROUP, self.broker_id, check)
        await self.client.register(CLUSTER, GROUP, self.broker_id, self.server.address)
        return self

    async def beat(self, timeout_ms: int) -> None:
        while True:
            if self.beating:
                header = BrokerHeartbeatRequest(
                    CLUSTER, self.server.address, GROUP, self.broker_id, 1, 100, 100, timeout_ms
                )
                await self.client.heartbeat(header)
            await asyncio.sleep(0.5)

    async def close(self) -> None:
        self.client.close()
        await self.server.close()


async def group_of_two(
    address: str, timeout_ms: int
) -> tuple[Broker, Broker, list[asyncio.Task[None]]]:
    a, b = await Broker(address).start(), await Broker(address).start()
    tasks = [asyncio.create_task(a.beat(timeout_ms)), asyncio.create_task(b.beat(timeout_ms))]
    await asyncio.sleep(0.3)
    elected = await a.client.elect(CLUSTER, GROUP, a.broker_id)
    assert elected.code == ResponseCode.SUCCESS, elected
    await a.client.alter_sync_state_set(GROUP, a.broker_id, 1, SyncStateSet(frozenset({1, 2}), 1))
    b.noticed.clear()
    return a, b, tasks


def report(what: str, backend: str, seconds: list[float]) -> None:
    seconds = sorted(seconds)
    p99 = seconds[min(len(seconds) - 1, int(len(seconds) * 0.99))]
    print(
        f"{what:<9} {backend:<5} n={len(seconds):<3} p50 {statistics.median(seconds) * 1000:8.1f} ms"
        f"  p99 {p99 * 1000:8.1f} ms  max {seconds[-1] * 1000:8.1f} ms"
        f"  (load {os.getloadavg()[0]:.2f})"
    )


async def close_round(backend: str, root: Path, etcd: list[str]) -> float:
    server = ControllerServer(config(backend, root / f"c{time.monotonic_ns()}", etcd))
    await server.start()
    try:
        a, b, tasks = await group_of_two(server.address, 10_000)
        start = time.perf_counter()
        await a.close()  # its connections close, as a killed broker's do
        await asyncio.wait_for(b.noticed.wait(), 30)
        took = time.perf_counter() - start
        assert b.notice_master == b.broker_id
        for task in tasks:
            task.cancel()
        await b.close()
        return took
    finally:
        await server.shutdown()


async def silent_round(backend: str, root: Path, etcd: list[str]) -> float:
    server = ControllerServer(config(backend, root / f"c{time.monotonic_ns()}", etcd))
    await server.start()
    try:
        a, b, tasks = await group_of_two(server.address, 10_000)
        await asyncio.sleep(11)  # the controller has listened for a whole heartbeat timeout
        a.beating = False
        start = time.perf_counter()  # its last heartbeat went out at most 0.5 s ago
        await asyncio.wait_for(b.noticed.wait(), 60)
        took = time.perf_counter() - start
        for task in tasks:
            task.cancel()
        await a.close()
        await b.close()
        return took
    finally:
        await server.shutdown()


async def writes(backend: str, root: Path, etcd: list[str], count: int) -> float:
    server = ControllerServer(config(backend, root / f"c{time.monotonic_ns()}", etcd))
    await server.start()
    try:
        a, b, tasks = await group_of_two(server.address, 10_000)
        brokers = {a.broker_id: a, b.broker_id: b}
        master, master_epoch, set_epoch = a.broker_id, 1, 2
        start = time.perf_counter()
        for _ in range(count):
            target = b.broker_id if master == a.broker_id else a.broker_id
            elected = await a.client.elect(CLUSTER, GROUP, target, designate=True)
            assert elected.code == ResponseCode.SUCCESS, elected
            master, master_epoch = target, int(elected.header.master_epoch or 0)
            set_epoch = int(elected.header.sync_state_set_epoch or 0)
            state = await brokers[master].client.alter_sync_state_set(
                GROUP, master, master_epoch, SyncStateSet(frozenset({1, 2}), set_epoch)
            )
            set_epoch = state.epoch
        took = time.perf_counter() - start
        for task in tasks:
            task.cancel()
        await a.close()
        await b.close()
        return took
    finally:
        await server.shutdown()


def takeover(root: Path, etcd: list[str], repeat: int) -> None:
    taken: list[float] = []
    for round_ in range(repeat):
        prefix = f"/bench-takeover/{round_}-{time.monotonic_ns()}"
        procs, addresses = [], []
        try:
            for self_id in ("n0", "n1"):
                port = free_port()
                conf = root / f"{self_id}-{round_}.conf"
                conf.write_text(
                    f"controllerDLegerSelfId={self_id}\ncontrollerListen=127.0.0.1:{port}\n"
                    f"controllerBackend=etcd\ncontrollerEtcdEndpoints={','.join(etcd)}\n"
                    f"controllerEtcdPrefix={prefix}\n"
                )
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "rocketstore.cli", "controller", "-c", str(conf),
                     "--metrics-listen", "", "--log-dir", str(root / "logs")],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                ))  # fmt: skip
                addresses.append(f"127.0.0.1:{port}")
            active = asyncio.run(_wait_active(addresses, 30))
            i = addresses.index(active)
            procs[i].send_signal(signal.SIGKILL)
            procs[i].wait(10)
            start = time.perf_counter()
            asyncio.run(_wait_active([addresses[1 - i]], 30))
            taken.append(time.perf_counter() - start)
        finally:
            for proc in procs:
                proc.kill()
                proc.wait(10)
    report("takeover", "etcd", taken)


async def _wait_active(addresses: list[str], timeout: float) -> str:
    client = AsyncRemotingClient(signer=None)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for address in addresses:
                cmd = RemotingCommand.request(RequestCode.CONTROLLER_GET_METADATA_INFO)
                try:
                    r = await client.invoke(address, cmd, 1.0)
                except Exception:
                    continue
                if r.ext_fields.get("isLeader") == "true":
                    return address
            await asyncio.sleep(0.02)
        raise SystemExit(f"no active controller among {addresses} in {timeout} s")
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--what", choices=["close", "silent", "takeover", "writes", "all"],
                        default="all")  # fmt: skip
    parser.add_argument("--backend", choices=["file", "etcd", "both"], default="both")
    parser.add_argument("--repeat", type=int, default=20, help="rounds of close (and 3 of silent)")
    args = parser.parse_args()
    logging.getLogger("rocketstore").setLevel(logging.ERROR)  # the elections' log lines
    backends = ["file", "etcd"] if args.backend == "both" else [args.backend]
    whats = ["close", "silent", "takeover", "writes"] if args.what == "all" else [args.what]
    with tempfile.TemporaryDirectory(prefix="controller-bench-") as tmp:
        root = Path(tmp)
        with contextlib.ExitStack() as stack:
            etcd: list[str] = []
            if "etcd" in backends or "takeover" in whats:
                etcd = stack.enter_context(etcd_cluster(root))
            for what in whats:
                if what == "takeover":
                    takeover(root, etcd, min(args.repeat, 5))
                    continue
                for backend in backends:
                    if what == "close":
                        rounds = [
                            asyncio.run(close_round(backend, root, etcd))
                            for _ in range(args.repeat)
                        ]
                        report("close", backend, rounds)
                    elif what == "silent":
                        rounds = [asyncio.run(silent_round(backend, root, etcd)) for _ in range(3)]
                        report("silent", backend, rounds)
                    else:
                        count = 200
                        took = asyncio.run(writes(backend, root, etcd, count))
                        print(
                            f"writes    {backend:<5} {count * 2} changes in {took:.2f} s: "
                            f"{count * 2 / took:,.0f} changes/s (an election and a SyncStateSet "
                            f"change each round; load {os.getloadavg()[0]:.2f})"
                        )


if __name__ == "__main__":
    main()
