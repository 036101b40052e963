"""Replication of a large log with and without TLS on the HA port, in alternated rounds.

    python benchmarks/ha_tls.py [--mb 200] [--pairs 3] [--work-dir DIR]

A master store (ASYNC_MASTER, one 256 MiB commit-log file: a new slave asks for the master's
last file, here the whole log) is filled once with ``--mb`` MiB of 4 KiB messages. Each round opens it again with the HA port plain, then with
``haTlsMode=enforcing`` (client certificates required, certificates made with openssl), and
starts a slave in a process of its own on an empty store (TLS to its master in the TLS half,
the master's certificate checked): the figure is the time from the slave's connection to its
acknowledgement of the master's whole log, with the CPU seconds the master's process and the
slave's process spent. The load average is printed beside each figure: on a shared machine it
moves them more than anything else.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.remoting._tls import TlsServerConfig, client_context_for
from rocketstore.store.ha import HAGuard
from rocketstore.store.ha._tls import HATls
from support.certs import make_certs

FILE = 256 * 1024 * 1024  # the whole log in one file: an empty slave asks for all of it

SLAVE = r"""
import json, sys, time
from rocketstore import MessageStore, StoreConfig
from rocketstore.remoting._tls import TlsServerConfig, client_context_for
from rocketstore.store.ha import HAGuard
from rocketstore.store.ha._tls import HATls
root, master, certs, tls = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "tls"
guard = HAGuard()
if tls:
    server = TlsServerConfig("enforcing", certs + "/server.pem", certs + "/server.key").context()
    client = client_context_for(certs + "/ca.pem", certs + "/server.pem", certs + "/server.key")
    guard = HAGuard(tls=HATls("enforcing", server, client))
config = StoreConfig(store_path_root_dir=root, broker_role="SLAVE", ha_master_address=master,
                     mapped_file_size_commit_log=FILE_SIZE, ha_listen_port=0)
store = MessageStore(config, ha_guard=guard)
store.load()
store.start()
while True:
    time.sleep(1)
""".replace("FILE_SIZE", str(FILE))


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.1f} {five:.1f} {fifteen:.1f}"


def master_guard(certs: Path, tls: bool) -> HAGuard:
    if not tls:
        return HAGuard()
    server = TlsServerConfig(
        "enforcing",
        str(certs / "server.pem"),
        str(certs / "server.key"),
        "require",
        str(certs / "ca.pem"),
    ).context()
    client = client_context_for(
        str(certs / "ca.pem"), str(certs / "server.pem"), str(certs / "server.key")
    )
    return HAGuard(tls=HATls("enforcing", server, client))


def open_master(root: Path, guard: HAGuard) -> MessageStore:
    config = StoreConfig(
        store_path_root_dir=str(root),
        broker_role="ASYNC_MASTER",
        ha_enable=True,
        ha_listen_port=0,
        mapped_file_size_commit_log=FILE,
    )
    store = MessageStore(config, ha_guard=guard)
    store.load()
    store.start()
    return store


def fill(root: Path, mb: int) -> None:
    store = open_master(root, HAGuard())
    try:
        body = os.urandom(4096)
        while store.max_phy_offset < mb * 1024 * 1024:
            r = store.put_message(Message("Bench", body))
            assert r.status.name == "PUT_OK", r
    finally:
        store.shutdown()


def one(work: Path, certs: Path, tls: bool, n: int) -> dict[str, float]:
    master = open_master(work / "master", master_guard(certs, tls))
    slave_root = work / f"slave-{n}"
    child = None
    try:
        end = master.max_phy_offset
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        child = subprocess.Popen(
            [
                sys.executable, "-c", SLAVE, str(slave_root),
                f"127.0.0.1:{master.ha.listen_port}", str(certs), "tls" if tls else "plain",
            ],
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 600
        while not master.ha.connections:
            assert time.monotonic() < deadline and child.poll() is None, "no slave"
            time.sleep(0.0005)
        start = time.monotonic()
        link = master.ha.connections[0]
        while link.ack_offset < end:
            assert time.monotonic() < deadline and not link.closed, link.close_reason
            time.sleep(0.001)
        seconds = time.monotonic() - start
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        assert (link.tls_version != "") is tls, link.tls_version
        child.send_signal(signal.SIGKILL)
        _, _, usage = os.wait4(child.pid, 0)
        child = None
        return {
            "seconds": seconds,
            "mb_s": end / seconds / 1e6,
            "master_cpu": (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime),
            "slave_cpu": usage.ru_utime + usage.ru_stime,
        }
    finally:
        if child is not None:
            child.kill()
            child.wait(30)
        master.shutdown()
        shutil.rmtree(slave_root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--work-dir", default=None)
    args = parser.parse_args()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="ha-tls-bench-"))
    try:
        (work / "certs").mkdir(parents=True, exist_ok=True)
        certs = make_certs(work / "certs")
        fill(work / "master", args.mb)
        print(f"log of {args.mb} MiB made; {load()}", flush=True)
        n = 0
        for pair in range(args.pairs):
            for tls in (False, True):
                n += 1
                r = one(work, certs, tls, n)
                side = "tls  " if tls else "plain"
                print(
                    f"pair {pair + 1} {side}: {r['seconds']:.2f} s, {r['mb_s']:.0f} MB/s, "
                    f"master CPU {r['master_cpu']:.2f} s, slave CPU {r['slave_cpu']:.2f} s; "
                    f"{load()}",
                    flush=True,
                )
                print(json.dumps({"tls": tls, **r}), file=sys.stderr)
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
