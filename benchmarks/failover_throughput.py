"""A steady three-replica group's send rate in controller mode against the same group in RocketMQ
4.x's SYNC_MASTER mode, alternated (A B A B ...), with the ratio of each pair:

    python benchmarks/failover_throughput.py [--pairs 3] [--messages 40000] [--producers 16]
        [--size 1024] [--controller-acks all|two] [--work-dir DIR] [--keep]

A: a name server, the project's controller (file backend) and three rocketstore brokers of one
group in controller mode, ``allAckInSyncStateSet=true`` and ``minInSyncReplicas=2`` (a send is
acknowledged once all three hold it; ``--controller-acks two``: once two do, this master
counted). B: the same name server and three rocketstore brokers in
4.x mode: a SYNC_MASTER (acknowledged once a slave holds it) and two SLAVEs. Both ASYNC_FLUSH,
128 MiB commit-log files, every process started afresh on empty stores for each run, each one a
process of its own. Each run waits for the group to be whole (A: the SyncStateSet holds all
three; B: the master has both slaves connected), sends 2,000 messages to warm up, then times
``--messages`` sends of ``--size`` bytes from ``--producers`` asyncio producers (one connection
each, one send in flight each: RocketMQ's send_sync). The machine's speed drifts: compare
within a pair; the load average is printed with each run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from rocketstore.bench.broker import send_concurrently
from rocketstore.client._admin import AdminClient
from rocketstore.client._controller import ControllerAdmin
from support.chaos_cluster import CLI, Node
from support.ports import free_port

TOPIC = "ThroughputTopic"
GROUP = "broker-t"


def _broker_conf(root: Path, name: str, namesrv: str, extra: dict[str, str]) -> Path:
    values = {
        "brokerClusterName": "DefaultCluster",
        "brokerName": GROUP,
        "namesrvAddr": namesrv,
        "storePathRootDir": str(root / name),
        "mappedFileSizeCommitLog": str(128 * 1024 * 1024),
        "flushDiskType": "ASYNC_FLUSH",
        **extra,
    }
    conf = root / f"{name}.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return conf


def _broker(root: Path, name: str, conf: Path) -> tuple[Node, str]:
    port = free_port("127.0.0.1")
    argv = [*CLI, "broker", "-c", str(conf), "--listen", f"127.0.0.1:{port}"]
    argv += ["--ha-listen", f"127.0.0.1:{free_port('127.0.0.1')}", "--grpc-listen", ""]
    argv += ["--metrics-listen", "", "--log-dir", str(root / f"{name}-logs")]
    node = Node(name, argv, root / f"{name}.out")
    node.start()
    return node, f"127.0.0.1:{port}"


def _wait(cond: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if cond():  # type: ignore[operator]
                return
        except Exception:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"not within {timeout} s: {what}")


def run_once(
    root: Path, mode: str, messages: int, producers: int, size: int, all_ack: bool = True
) -> float:
    """One run of ``mode`` (controller / sync_master) on fresh stores; messages a second."""
    nodes: list[Node] = []
    try:
        ns_addr = f"127.0.0.1:{free_port('127.0.0.1')}"
        namesrv = Node("namesrv", [*CLI, "namesrv", "--listen", ns_addr], root / "namesrv.out")
        namesrv.start()
        nodes.append(namesrv)
        master_addr: list[str] = []
        if mode == "controller":
            ctl = f"127.0.0.1:{free_port('127.0.0.1')}"
            argv = [*CLI, "controller", "--listen", ctl, "--store", str(root / "controller")]
            controller = Node("controller", [*argv, "--metrics-listen", ""], root / "ctl.out")
            controller.start()
            nodes.append(controller)
            extra = {
                "enableControllerMode": "true",
                "controllerAddr": ctl,
                "brokerId": "-1",
                "allAckInSyncStateSet": "true" if all_ack else "false",
                "minInSyncReplicas": "2",
            }
            for i in range(3):
                node, _addr = _broker(root, f"b{i}", _broker_conf(root, f"b{i}", ns_addr, extra))
                nodes.append(node)

            def whole() -> bool:
                with ControllerAdmin(ctl, timeout=2.0) as admin:
                    info = admin.sync_state([GROUP]).table.get(GROUP)
                if info is None or len(info.in_sync_replicas) != 3 or not info.master_address:
                    return False
                master_addr[:] = [info.master_address]
                return True

            _wait(whole, 120, "the controller-mode group to be whole")
        else:
            roles = [("SYNC_MASTER", "0"), ("SLAVE", "1"), ("SLAVE", "2")]
            addrs = []
            for i, (role, broker_id) in enumerate(roles):
                conf = _broker_conf(
                    root, f"b{i}", ns_addr, {"brokerRole": role, "brokerId": broker_id}
                )
                node, addr = _broker(root, f"b{i}", conf)
                nodes.append(node)
                addrs.append(addr)
            master_addr[:] = [addrs[0]]

            def connected() -> bool:
                with AdminClient(ns_addr) as admin:
                    info = admin.runtime_info(addrs[0])
                return info.get("haConnectionCount") == "2"

            _wait(connected, 120, "the SYNC_MASTER to have both slaves")
        with AdminClient(ns_addr) as admin:
            admin.create_topic(master_addr[0], TOPIC, read_queue_nums=8, write_queue_nums=8)
        body = os.urandom(size)
        runner = asyncio.Runner()
        with runner:

            async def timed(n: int) -> float:
                return await send_concurrently(ns_addr, producers, n // producers, body, TOPIC)

            _wait(lambda: runner.run(timed(producers * 10)) >= 0, 60, "the route")
            runner.run(timed(2000))
            seconds = runner.run(timed(messages))
        return (messages // producers * producers) / seconds
    finally:
        for node in reversed(nodes):
            with contextlib.suppress(Exception):
                node.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=40_000)
    parser.add_argument("--producers", type=int, default=16)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument(
        "--controller-acks",
        choices=("all", "two"),
        default="all",
        help="controller mode waits for every replica of the SyncStateSet (all, the default), "
        "or for two of them, this master counted (two: allAckInSyncStateSet=false, as "
        "SYNC_MASTER waits for one slave)",
    )
    args = parser.parse_args()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="failover-throughput-"))
    ratios = []
    totals = {"controller": 0.0, "sync_master": 0.0}
    try:
        for pair in range(args.pairs):
            rates = {}
            for mode in ("controller", "sync_master"):
                root = work / f"pair{pair}-{mode}"
                root.mkdir(parents=True, exist_ok=True)
                rate = run_once(
                    root,
                    mode,
                    args.messages,
                    args.producers,
                    args.size,
                    all_ack=args.controller_acks == "all",
                )
                rates[mode] = rate
                totals[mode] += rate
                print(
                    f"pair {pair + 1} {mode:12s} {rate:10.0f} msg/s  "
                    f"(load {os.getloadavg()[0]:.2f})",
                    flush=True,
                )
                if not args.keep:
                    shutil.rmtree(root, ignore_errors=True)
            ratio = rates["controller"] / rates["sync_master"]
            ratios.append(ratio)
            print(f"pair {pair + 1} controller / sync_master = {ratio:.2f}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    overall = totals["controller"] / totals["sync_master"]
    print(
        f"controller mode / SYNC_MASTER: {overall:.2f} over {args.pairs} pairs "
        f"(per pair {', '.join(f'{r:.2f}' for r in ratios)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
