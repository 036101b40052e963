"""Loopback ports for the servers tests start, never the same one twice, whichever pytest-xdist
worker asks.

A server a test starts in its own process should listen on port 0 and say which port it took;
these are for the ports a test must name before the server starts (a subprocess's command line,
a configuration file, a Java broker).

- Ports come from below the kernel's ephemeral range (``ip_local_port_range``: what a bind to
  port 0 and the source port of every outgoing connection take), so no connection another test
  opens meanwhile lands on a port handed out here.
- Each xdist worker (``PYTEST_XDIST_WORKER`` gw0, gw1, ...) takes ports from a block of its own,
  so two workers never hand out the same port; within a worker, ports are handed out in turn.
  Two runs side by side give each other room with ``ROCKETSTORE_TEST_PORTS=LOW-HIGH``.
- A port is handed out only when it binds now, together with the ports a server derives from it
  (``also``: offsets such as +1 for the HA port, -2 for RocketMQ's fast channel).
"""

from __future__ import annotations

import itertools
import os
import random
import socket
import threading
from collections.abc import Iterator

LOW = 20_000  # above the well-known servers' defaults (9876, 10911, 8080, 5557, 2379)


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _run_range() -> tuple[int, int]:
    """The ports of this run: ``ROCKETSTORE_TEST_PORTS=LOW-HIGH`` (two runs side by side, as
    scripts/test starts them, each get a range of their own), else from LOW up to the
    ephemeral range."""
    given = os.environ.get("ROCKETSTORE_TEST_PORTS", "")
    if given:
        low, _, high = given.partition("-")
        return int(low), int(high)
    return LOW, max(_ephemeral_low(), LOW + 2_000)


def _worker_block() -> range:
    """This process's block of ports: the run's range split among the workers of the run."""
    low, high = _run_range()
    low, high = low + 2, high - 2  # room for the derived ports (-2, +1)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1), index + 1)
    size = (high - low) // count
    return range(low + index * size, low + (index + 1) * size)


def _candidates() -> Iterator[int]:
    block = _worker_block()
    start = random.randrange(len(block))  # two runs side by side start apart
    return (block[(start + i) % len(block)] for i in itertools.count())


_lock = threading.Lock()
_next = _candidates()
_given: set[int] = set()  # every port handed out, with its derived ones


def _binds(host: str, port: int) -> bool:
    if not 0 < port < 65_536:
        return False
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1", *, also: tuple[int, ...] = ()) -> int:
    """A port that binds on ``host`` now, with ``port + offset`` for each offset in ``also``
    binding too; never handed out before in this process, nor by another worker."""
    with _lock:
        for _ in range(2):  # the block used up: start again over ports long since released
            for _ in range(len(_worker_block())):
                port = next(_next)
                wanted = {port + offset for offset in (0, *also)}
                if not wanted & _given and all(_binds(host, p) for p in wanted):
                    _given.update(wanted)
                    return port
            _given.clear()
    raise OSError(f"no free port on {host} in {_worker_block()}")


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct free ports."""
    return [free_port(host) for _ in range(count)]


def free_broker_port(host: str = "127.0.0.1") -> int:
    """A port P for a RocketMQ Java broker, which also binds P-2 (its fast channel) and P+1
    (HA)."""
    return free_port(host, also=(-2, 1))
