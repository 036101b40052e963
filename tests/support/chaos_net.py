"""Where the fault harness's processes live on the network: each broker in a network namespace of
its own (as root, with ``ip``), or everything on loopback.

With namespaces (``NetnsTopology``)::

    root namespace                     bridge <prefix>br   10.213.X.1     name server, clients
                                                           10.213.X.100+  a controller each
      │ veth                │ veth               │ veth
    ns <prefix>b0          ns <prefix>b1        ns <prefix>b2
    broker 0: 10.213.X.11  broker 1: 10.213.X.12  broker 2: 10.213.X.13

One subnet on one bridge: brokers reach each other and the controllers without routing (no
ip_forward). ``partition(i)`` cuts broker i off from the controllers and the other brokers with
blackhole routes inside its namespace (its answers to them are dropped; the name server and the
producers, which reach it from 10.213.X.1, still get answers); ``heal(i)`` removes them.
``teardown`` deletes the namespaces, the veth pairs and the bridge, also after a failure.

Without root or ``ip`` (``LoopbackTopology``) everything listens on 127.0.0.1 and there is no
partition (``can_partition`` is False, with the reason).
"""

from __future__ import annotations

import os
import shutil
import subprocess


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = ["ip", *args] if ns is None else ["ip", "netns", "exec", ns, "ip", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    if check and done.returncode != 0:
        raise OSError(f"{' '.join(cmd)}: {done.stderr.strip()}")
    return done


class LoopbackTopology:
    can_partition = False
    why_not = "no network namespaces here"

    def __init__(self, brokers: int, controllers: int) -> None:
        self.host_ip = "127.0.0.1"
        self.broker_ips = ["127.0.0.1"] * brokers
        self.controller_ips = ["127.0.0.1"] * controllers

    def setup(self) -> None:
        pass

    def prefix(self, broker: int) -> list[str]:
        return []

    def partition(self, broker: int) -> None:
        raise RuntimeError(self.why_not)

    def heal(self, broker: int) -> None:
        pass

    def teardown(self) -> None:
        pass


class NetnsTopology:
    can_partition = True
    why_not = ""

    def __init__(self, brokers: int, controllers: int) -> None:
        tag = os.getpid() % 100000
        self.name = f"rsc{tag}"
        self.subnet = self._free_subnet(tag)
        self.bridge = f"{self.name}br"
        self.namespaces = [f"{self.name}b{i}" for i in range(brokers)]
        self.veths = [f"{self.name}v{i}" for i in range(brokers)]
        self.host_ip = f"{self.subnet}.1"
        self.broker_ips = [f"{self.subnet}.{11 + i}" for i in range(brokers)]
        self.controller_ips = [f"{self.subnet}.{100 + i}" for i in range(controllers)]
        self.partitioned: set[int] = set()

    @staticmethod
    def _free_subnet(tag: int) -> str:
        used = _ip("-4", "addr", check=False).stdout
        for n in range(256):
            third = (tag + n) % 200 + 20
            candidate = f"10.213.{third}"
            if f"{candidate}." not in used:
                return candidate
        raise OSError("no free 10.213.X.0/24 subnet")

    @staticmethod
    def available() -> str | None:
        """None when namespaces can be made here, else why not."""
        if os.geteuid() != 0:
            return "network namespaces need root"
        if shutil.which("ip") is None:
            return "no ip command (iproute2)"
        probe = f"rscprobe{os.getpid() % 100000}"
        made = _ip("netns", "add", probe, check=False)
        if made.returncode != 0:
            return f"ip netns add refused: {made.stderr.strip()}"
        _ip("netns", "del", probe, check=False)
        return None

    def setup(self) -> None:
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.host_ip}/24", "dev", self.bridge)
            for cip in self.controller_ips:
                _ip("addr", "add", f"{cip}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for ns, veth, bip in zip(self.namespaces, self.veths, self.broker_ips, strict=True):
                _ip("netns", "add", ns)
                _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
                _ip("link", "set", veth, "master", self.bridge)
                _ip("link", "set", veth, "up")
                _ip("addr", "add", f"{bip}/24", "dev", "eth0", ns=ns)
                _ip("link", "set", "eth0", "up", ns=ns)
                _ip("link", "set", "lo", "up", ns=ns)
        except BaseException:
            self.teardown()
            raise

    def prefix(self, broker: int) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[broker]]

    def _cut(self, broker: int) -> list[str]:
        others = [ip for i, ip in enumerate(self.broker_ips) if i != broker]
        return others + self.controller_ips

    def partition(self, broker: int) -> None:
        ns = self.namespaces[broker]
        for ip in self._cut(broker):
            _ip("route", "add", "blackhole", f"{ip}/32", ns=ns)
        self.partitioned.add(broker)

    def heal(self, broker: int) -> None:
        ns = self.namespaces[broker]
        for ip in self._cut(broker):
            _ip("route", "del", "blackhole", f"{ip}/32", ns=ns, check=False)
        self.partitioned.discard(broker)

    def teardown(self) -> None:
        for ns in self.namespaces:
            _ip("netns", "del", ns, check=False)
        for veth in self.veths:
            _ip("link", "del", veth, check=False)
        _ip("link", "del", self.bridge, check=False)


def make_topology(
    brokers: int, controllers: int, *, netns: bool
) -> LoopbackTopology | NetnsTopology:
    """Namespaces when asked for and possible, else loopback (``why_not`` says why)."""
    if netns:
        reason = NetnsTopology.available()
        if reason is None:
            return NetnsTopology(brokers, controllers)
        loop = LoopbackTopology(brokers, controllers)
        loop.why_not = reason
        return loop
    return LoopbackTopology(brokers, controllers)
