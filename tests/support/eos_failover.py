"""A controller-mode broker group for the exactly-once tests across failovers (two brokers of
one group, each a process of its own, ``support.chaos_cluster``), and the rounds they run: the
master killed with kill -9 while a query holds at a point, the killed broker back as the
slave, the query run again from its checkpoint until it finishes."""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rocketstore.client import MessageQueue, Producer
from rocketstore.client._admin import AdminClient
from rocketstore.spark._eos import DECISION_TOPIC, ensure_decision_topic
from support.chaos_cluster import GROUP, ChaosCluster
from support.eos_cluster import read_topic
from support.eos_spark import WarmChild

QUEUES = 4
WAIT_S = 180.0
RUNS = 4  # runs of the query after a failover before it must have finished


@contextlib.contextmanager
def failover_group(root: Path) -> Iterator[ChaosCluster]:
    """Controllers, a name server and the group's two brokers, healthy, with the decision
    topic on both brokers; stopped when the block ends."""
    c = ChaosCluster(
        root,
        netns=False,
        brokers=2,
        # the master that is left takes writes alone until the other is back
        broker_conf={"minInSyncReplicas": "1"},
    )
    try:
        c.start()
        assert c.wait(c.healthy, WAIT_S), "\n".join(n.output()[-2000:] for n in c.brokers)
        with AdminClient(c.namesrv_addr) as admin:
            ensure_decision_topic(admin)
        _on_every_broker(c, DECISION_TOPIC)
        yield c
    finally:
        c.stop()


def _on_every_broker(c: ChaosCluster, topic: str) -> None:
    with AdminClient(c.namesrv_addr) as admin:
        assert c.wait(
            lambda: all(topic in admin.topic_configs(a) for a in c.broker_addrs), WAIT_S
        ), f"the slave did not copy {topic}"


def create_topic(c: ChaosCluster, topic: str) -> None:
    master = c.master()
    assert master is not None
    with AdminClient(c.namesrv_addr) as admin:
        admin.create_topic(
            c.broker_addrs[master], topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES
        )
        assert c.wait(lambda: admin.route(topic) is not None, WAIT_S)
    _on_every_broker(c, topic)


def fill(c: ChaosCluster, topic: str, prefix: str, rows: int) -> set[bytes]:
    """``rows`` messages, each body a unique id (``prefix`` and the row's number), spread over
    the group's queues 16 at a time."""
    bodies = [f"{prefix}-{i:06d}".encode() for i in range(rows)]
    with Producer(c.namesrv_addr) as p:
        for i, lo in enumerate(range(0, rows, 16)):
            mq = MessageQueue(topic, GROUP, i % QUEUES)
            p.send_batch(topic, bodies[lo : lo + 16], queue=mq)
    return set(bodies)


def fail_over(c: ChaosCluster, killed: list[int]) -> None:
    """kill -9 the master; wait until the controller names the other broker."""
    old = c.master()
    assert old is not None
    c.brokers[old].kill()
    killed.append(old)
    assert c.wait(lambda: c.master() not in (None, old), WAIT_S), "no new master"


def run_round(c: ChaosCluster, child: WarmChild, args: list[str], hold: str) -> dict[str, Any]:
    """One failover at ``hold``, the killed broker back, the query run again to its end."""
    killed: list[int] = []
    child.run(args, hold=hold, at_hold=lambda: fail_over(c, killed), may_fail=True)
    first = child.returncode
    c.brokers[killed[0]].start()
    assert c.wait(c.healthy, WAIT_S), "the killed broker did not come back"
    runs = 0
    while True:
        runs += 1
        child.run(args, may_fail=True)
        if child.returncode == 0:
            break
        assert runs < RUNS, child.log.read_text()[-4000:]
    return {"hold": hold, "first run": "finished" if first == 0 else "failed", "runs": runs}


def count(c: ChaosCluster, topic: str, expected: set[bytes]) -> collections.Counter[bytes]:
    """The bodies a consumer reads (waiting, bounded, for the replicas' confirmation)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        got = collections.Counter(bytes(m.body) for m in read_topic(c.namesrv_addr, topic))
        if set(got) >= expected or time.monotonic() > deadline:
            return got
        time.sleep(0.5)
