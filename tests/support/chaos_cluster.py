"""The group the fault harness runs: a name server, RocketMQ 5's controller (one over the file
backend, or three over a 3-member etcd cluster on loopback), and three rocketstore brokers (or
``brokers``) of one group in controller mode (``allAckInSyncStateSet=true``,
``minInSyncReplicas=2``), each in its network namespace where the machine allows (see
``support.chaos_net``). Every process is a subprocess with its own log file; each keeps its
ports and store across restarts, so clients and the controller find it again. ``stop`` ends
them all (SIGTERM, then SIGKILL) and removes the namespaces, whatever happened before.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rocketstore.client._controller import ControllerAdmin

from .chaos_net import LoopbackTopology, NetnsTopology, make_topology
from .ports import free_port

CLUSTER = "DefaultCluster"
GROUP = "broker-a"
BROKERS = 3
CLI = [sys.executable, "-c", "from rocketstore.cli import main; main()"]


class Node:
    """One server process, started (and started again) with the same command line."""

    def __init__(self, name: str, argv: list[str], log: Path) -> None:
        self.name = name
        self.argv = argv
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        with open(self.log, "ab") as out:
            out.write(f"\n==== start {self.starts} at {time.time():.3f}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        self.paused = False

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.running:
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def kill(self) -> None:
        """kill -9, and wait for the process to be gone."""
        if self.proc is None:
            return
        self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(20)
        self.paused = False

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def stop(self, grace: float = 20.0) -> None:
        if self.proc is None:
            return
        if self.paused:
            self.resume()
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.kill()

    def output(self) -> str:
        try:
            return self.log.read_text("utf-8", "replace")
        except FileNotFoundError:
            return ""


class ChaosCluster:
    def __init__(
        self,
        work: Path,
        *,
        backend: str = "file",
        netns: bool = True,
        broker_conf: dict[str, str] | None = None,
        brokers: int = BROKERS,
    ) -> None:
        self.work = work
        self.backend = backend
        self.count = brokers
        controllers = 3 if backend == "etcd" else 1
        self.topology: LoopbackTopology | NetnsTopology = make_topology(
            brokers, controllers, netns=netns
        )
        self.etcd: Any = None
        self.namesrv: Node | None = None
        self.controllers: list[Node] = []
        self.brokers: list[Node] = []
        self.broker_addrs: list[str] = []
        self.controller_addrs: list[str] = []
        self.namesrv_addr = ""
        self.extra_conf = dict(broker_conf or {})

    # ---- start and stop ---------------------------------------------------------------------

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        t = self.topology
        t.setup()
        logs = self.work / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        ns_port = free_port(t.host_ip)
        self.namesrv_addr = f"{t.host_ip}:{ns_port}"
        self.namesrv = Node(
            "namesrv",
            [*CLI, "namesrv", "--listen", self.namesrv_addr, "--log-dir", str(logs / "namesrv")],
            logs / "namesrv.out",
        )
        self.namesrv.start()
        endpoints: list[str] = []
        if self.backend == "etcd":
            from .etcd import EtcdCluster

            (self.work / "etcd").mkdir(parents=True, exist_ok=True)
            self.etcd = EtcdCluster(self.work / "etcd").start()
            endpoints = self.etcd.endpoints
        for i, cip in enumerate(t.controller_ips):
            port = free_port(cip)
            addr = f"{cip}:{port}"
            self.controller_addrs.append(addr)
            argv = [*CLI, "controller", "--listen", addr, "--self-id", f"n{i}"]
            argv += ["--metrics-listen", "", "--log-dir", str(logs / f"controller{i}")]
            if self.backend == "etcd":
                argv += ["--backend", "etcd", "--etcd-endpoints", ",".join(endpoints)]
            else:
                argv += ["--store", str(self.work / f"controller{i}")]
            node = Node(f"controller{i}", argv, logs / f"controller{i}.out")
            node.start()
            self.controllers.append(node)
        for i, bip in enumerate(t.broker_ips):
            port = 30911 + 10 * i if isinstance(t, NetnsTopology) else free_port(bip)
            ha_port = port + 1 if isinstance(t, NetnsTopology) else free_port(bip)
            self.broker_addrs.append(f"{bip}:{port}")
            conf = self.work / f"broker{i}.conf"
            values = {
                "brokerClusterName": CLUSTER,
                "brokerName": GROUP,
                "brokerId": "-1",
                "brokerRole": "SLAVE",
                "enableControllerMode": "true",
                "controllerAddr": ";".join(self.controller_addrs),
                "allAckInSyncStateSet": "true",
                "minInSyncReplicas": "2",
                "namesrvAddr": self.namesrv_addr,
                "storePathRootDir": str(self.work / f"store{i}"),
                "mappedFileSizeCommitLog": str(16 * 1024 * 1024),
                "flushDiskType": "ASYNC_FLUSH",
                **self.extra_conf,
            }
            conf.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
            argv = [*t.prefix(i), *CLI, "broker", "-c", str(conf)]
            argv += ["--listen", f"{bip}:{port}", "--ha-listen", f"{bip}:{ha_port}"]
            argv += ["--grpc-listen", "", "--metrics-listen", "", "--log-dir", str(logs / f"b{i}")]
            node = Node(f"broker{i}", argv, logs / f"broker{i}.out")
            self.brokers.append(node)
        for node in self.brokers:
            node.start()

    def stop(self) -> None:
        for node in [*self.brokers, *self.controllers]:
            with contextlib.suppress(Exception):
                node.stop()
        if self.namesrv is not None:
            with contextlib.suppress(Exception):
                self.namesrv.stop()
        if self.etcd is not None:
            with contextlib.suppress(Exception):
                self.etcd.stop()
        self.topology.teardown()

    # ---- what the controller says -----------------------------------------------------------

    def state(self) -> tuple[int | None, frozenset[int], dict[int, bool], int]:
        """(master index, SyncStateSet as indexes, alive by index, master epoch) from the
        controllers; (None, {}, {}, -1) when none answers."""
        for addr in self.controller_addrs:
            try:
                with ControllerAdmin(addr, timeout=2.0) as admin:
                    info = admin.sync_state([GROUP]).table.get(GROUP)
            except Exception:
                continue
            if info is None:
                return None, frozenset(), {}, -1
            by_addr = {a: i for i, a in enumerate(self.broker_addrs)}
            master = by_addr.get(info.master_address or "")
            in_sync = frozenset(
                by_addr[r.broker_address]
                for r in info.in_sync_replicas
                if r.broker_address in by_addr
            )
            alive = {
                by_addr[r.broker_address]: bool(r.alive)
                for r in (*info.in_sync_replicas, *info.not_in_sync_replicas)
                if r.broker_address in by_addr
            }
            return master, in_sync, alive, info.master_epoch or 0
        return None, frozenset(), {}, -1

    def master(self) -> int | None:
        return self.state()[0]

    def healthy(self) -> bool:
        """A master, every broker in the SyncStateSet and alive, every process running."""
        master, in_sync, alive, _epoch = self.state()
        return (
            master is not None
            and in_sync == frozenset(range(self.count))
            and all(alive.get(i, False) for i in range(self.count))
            and all(n.running and not n.paused for n in self.brokers)
        )

    def wait(self, cond: Any, timeout: float, poll: float = 0.2) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return True
            time.sleep(poll)
        return bool(cond())

    def active_controller(self) -> int | None:
        for i, addr in enumerate(self.controller_addrs):
            try:
                with ControllerAdmin(addr, timeout=2.0) as admin:
                    meta = admin.metadata()
            except Exception:
                continue
            if meta.is_leader:
                return i
        return None
