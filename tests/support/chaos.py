"""The fault harness of controller mode, read like a Jepsen / OpenMessaging Chaos test: a
workload, a nemesis on a seeded schedule, a history of operations with their outcomes, and a
checker that judges the history afterwards, never trusting the system's own account of itself.

- workload: producers send unique keys (the body and KEYS of each message) one after another:
  the project's client in a thread (``PyProducer``) and the official RocketMQ 4.x client in its
  own virtualenv (``Rmq4Producer``, tests/support/rmq4_client.py ``stream``); a pull consumer
  (``Reader``) reads every queue from the master in order, keeping its own offsets;
- history: every send as (client, key, start, end, outcome: ok / unknown, the broker that
  answered), every fault as (kind, target, start, healed);
- nemesis (``Nemesis``): kill -9 of the master, of a slave, of the active controller; SIGSTOP of
  the master past the election timeout, then SIGCONT; a partition cutting the master off from
  the controllers and the slaves (not from producers); kill -9 of every broker, controller and
  the name server at once, then all started again. One fault at a time, each healed before the next, the kinds
  chosen by a seeded random generator;
- checker (``check``), once the faults are healed and the replicas caught up, from the stores'
  files themselves (the processes stopped): every acknowledged key is in the master's log
  (duplicates from retries counted, not hidden), the replicas' commit logs are byte-identical
  up to the confirmed offset, every (queue, offset) the reader was given holds the same message
  in the final log and no queue the reader saw ever got shorter, and per fault on the master,
  the time from the fault to the first acknowledged send answered by another broker.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocketstore.client import Producer
from rocketstore.client._consumer import FOUND, PullConsumer
from rocketstore.client._route import MessageQueue
from rocketstore.store.log._record import (
    BLANK,
    BLANK_MAGIC,
    decode_message,
    decode_msg_id,
)

from .chaos_cluster import BROKERS, ChaosCluster

TOPIC = "ChaosTopic"
FAULT_KINDS = (
    "kill_master",
    "kill_slave",
    "pause_master",
    "partition_master",
    "kill_controller",
    "restart_all",
)


# ---- the history ------------------------------------------------------------------------------


@dataclass
class Op:
    client: str
    key: str
    t0: float
    t1: float = 0.0
    outcome: str = "pending"  # ok, unknown
    broker: str = ""  # the store address of the broker that acknowledged it
    detail: str = ""


@dataclass
class Fault:
    kind: str
    target: str
    t0: float
    healed: float = 0.0
    old_master: int | None = None
    new_master: int | None = None
    note: str = ""


@dataclass
class History:
    ops: list[Op] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    reads: dict[tuple[int, int], str] = field(default_factory=dict)  # (queue, offset) → key
    read_problems: list[str] = field(default_factory=list)
    slave_behind: int = 0  # pulls a slave answered with a queue shorter than the reader's offset
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, op: Op) -> None:
        with self.lock:
            self.ops.append(op)

    def acked(self) -> list[Op]:
        return [o for o in self.ops if o.outcome == "ok"]


# ---- the workload -----------------------------------------------------------------------------


class PyProducer(threading.Thread):
    """The project's client: send, record, next; a failed send leaves its key unknown."""

    def __init__(self, history: History, namesrv: str, *, interval: float = 0.005) -> None:
        super().__init__(name="chaos-py-producer", daemon=True)
        self.history = history
        self.producer = Producer(namesrv, "chaos-py", timeout=3.0, retries=2)
        self.interval = interval
        self.stopping = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            key = f"py-{n}"
            n += 1
            op = Op("py", key, time.monotonic())
            try:
                r = self.producer.send(TOPIC, key.encode(), keys=key)
            except Exception as exc:
                op.outcome, op.detail = "unknown", str(exc)[:160]
                time.sleep(0.05)
            else:
                op.outcome = "ok" if r.status == "SEND_OK" else "unknown"
                op.detail = r.status
                with contextlib.suppress(ValueError):
                    host, _phys = decode_msg_id(r.offset_msg_id)
                    op.broker = host
            op.t1 = time.monotonic()
            self.history.add(op)
            if self.interval:
                time.sleep(self.interval)
        self.producer.close()


class Rmq4Producer:
    """The official RocketMQ 4.x client (the ``rocketmq`` C++ package), ``stream`` command."""

    def __init__(self, history: History, python: Path, home: Path, namesrv: str) -> None:
        from .interop import Rmq4Client

        self.history = history
        client = Rmq4Client(python, home)
        args = client.command(
            "stream", namesrv, "chaos-rmq4", TOPIC, count=10_000_000, interval=0.01
        )
        env = client._env()
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=home,
            env=env,
            text=True,
        )
        self.pending: dict[str, Op] = {}
        self.reader = threading.Thread(target=self._read, name="chaos-rmq4", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            now = time.monotonic()
            if "sending" in doc:
                self.pending[doc["sending"]] = Op("rmq4", doc["sending"], now)
            elif "key" in doc:
                op = self.pending.pop(doc["key"], None) or Op("rmq4", doc["key"], now)
                op.t1 = now
                status = doc.get("status")
                op.outcome = "ok" if status in ("OK", "SEND_OK") else "unknown"
                op.detail = status or doc.get("error", "")
                self.history.add(op)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.reader.join(10)
        for op in self.pending.values():  # sent, never answered
            op.outcome, op.t1 = "unknown", time.monotonic()
            self.history.add(op)
        self.pending.clear()


class Reader(threading.Thread):
    """A pull consumer with offsets of its own: what it reads at each (queue, offset), and
    whether a queue ever ends before an offset it was already given."""

    def __init__(self, history: History, namesrv: str) -> None:
        super().__init__(name="chaos-reader", daemon=True)
        self.history = history
        self.consumer = PullConsumer(namesrv, "chaos-reader", timeout=3.0)
        self.stopping = threading.Event()
        self.next: dict[int, int] = {}

    def run(self) -> None:
        queues: list[MessageQueue] = []
        while not self.stopping.is_set():
            try:
                if not queues:
                    queues = [q for q in self.consumer.queues(TOPIC)]
                got = 0
                for mq in queues:
                    got += self._pull(mq)
                if not got:
                    time.sleep(0.05)
            except Exception:
                queues = []
                with contextlib.suppress(Exception):
                    self.consumer.routes.get(TOPIC, refresh=True, allow_missing=True)
                time.sleep(0.2)
        self.consumer.close()

    def _pull(self, mq: MessageQueue) -> int:
        q = mq.queue_id
        offset = self.next.get(q, 0)
        route = self.consumer.routes.get(TOPIC)
        # a route naming no master (a failover under way) sends the pull to a slave, which may
        # be behind: only the master's answer tells whether a queue got shorter
        from_master = route is not None and route.master(mq.broker_name) is not None
        r = self.consumer.pull(mq, offset, 32)
        if r.max_offset < offset:
            if from_master:
                self.history.read_problems.append(
                    f"queue {q}: its end went back to {r.max_offset}, the reader had {offset}"
                )
            else:
                self.history.slave_behind += 1
        if r.status != FOUND:
            return 0
        for m in r.messages:
            key = m.body.decode("utf-8", "replace")
            where = (q, m.queue_offset)
            with self.history.lock:
                seen = self.history.reads.get(where)
                if seen is not None and seen != key:
                    self.history.read_problems.append(
                        f"queue {q} offset {m.queue_offset}: {seen} before, {key} now"
                    )
                self.history.reads[where] = key
            if m.queue_offset < offset:
                self.history.read_problems.append(
                    f"queue {q}: offset {m.queue_offset} handed out after {offset}"
                )
        self.next[q] = r.next_begin_offset
        return len(r.messages)


# ---- the nemesis ------------------------------------------------------------------------------


class Nemesis:
    """One fault at a time on a seeded schedule; each healed (the group whole again) before the
    next. ``hold`` bounds how long a fault lasts once its effect is seen."""

    def __init__(
        self,
        cluster: ChaosCluster,
        history: History,
        seed: int,
        kinds: tuple[str, ...] = FAULT_KINDS,
        *,
        heal_timeout: float = 120.0,
        election_wait: float = 40.0,
    ) -> None:
        self.cluster = cluster
        self.history = history
        self.random = random.Random(seed)
        usable = list(kinds)
        if not cluster.topology.can_partition and "partition_master" in usable:
            usable.remove("partition_master")
        self.kinds = tuple(usable)
        self.heal_timeout = heal_timeout
        self.election_wait = election_wait
        self.stuck: list[str] = []

    def schedule(self, count: int) -> list[str]:
        return [self.random.choice(self.kinds) for _ in range(count)]

    def run(
        self,
        kinds: list[str],
        pause: float = 2.0,
        log: Any = None,
        deadline: float | None = None,
    ) -> None:
        """Inject ``kinds`` in order; none is begun after ``deadline`` (time.monotonic())."""
        for i, kind in enumerate(kinds):
            if deadline is not None and time.monotonic() >= deadline:
                if log is not None:
                    log(f"time is up: {i} of {len(kinds)} faults injected")
                return
            if not self.cluster.wait(self.cluster.healthy, self.heal_timeout):
                self.stuck.append(f"before fault {i} ({kind}): the group is not whole")
                self._restart_everything()
                self.cluster.wait(self.cluster.healthy, self.heal_timeout)
            time.sleep(pause)
            fault = self.inject(kind)
            if log is not None:
                log(
                    f"fault {i + 1}/{len(kinds)} {fault.kind} {fault.target}: master "
                    f"{fault.old_master} -> {fault.new_master} {fault.note}"
                )

    def _new_master(self, old: int | None) -> int | None:
        found: list[int] = []

        def changed() -> bool:
            m = self.cluster.master()
            if m is not None and m != old:
                found.append(m)
                return True
            return False

        self.cluster.wait(changed, self.election_wait, poll=0.1)
        return found[-1] if found else None

    def inject(self, kind: str) -> Fault:
        c = self.cluster
        master = c.master()
        fault = Fault(kind, "", time.monotonic(), old_master=master)
        self.history.faults.append(fault)
        if kind == "kill_master" and master is not None:
            fault.target = f"broker{master}"
            fault.t0 = time.monotonic()
            c.brokers[master].kill()
            fault.new_master = self._new_master(master)
            time.sleep(1.0)
            c.brokers[master].start()
        elif kind == "kill_slave" and master is not None:
            slave = self.random.choice([i for i in range(BROKERS) if i != master])
            fault.target = f"broker{slave}"
            fault.t0 = time.monotonic()
            c.brokers[slave].kill()
            time.sleep(3.0)
            c.brokers[slave].start()
            fault.new_master = c.master()
        elif kind == "pause_master" and master is not None:
            fault.target = f"broker{master}"
            fault.t0 = time.monotonic()
            c.brokers[master].pause()
            fault.new_master = self._new_master(master)
            time.sleep(2.0)  # the old master stays paused after the election
            c.brokers[master].resume()
        elif kind == "partition_master" and master is not None:
            fault.target = f"broker{master}"
            fault.t0 = time.monotonic()
            c.topology.partition(master)
            fault.new_master = self._new_master(master)
            time.sleep(2.0)
            c.topology.heal(master)
        elif kind == "kill_controller":
            active = c.active_controller()
            target = active if active is not None else 0
            fault.target = f"controller{target}"
            fault.t0 = time.monotonic()
            c.controllers[target].kill()
            time.sleep(3.0)
            c.controllers[target].start()
            c.wait(lambda: c.master() is not None, self.election_wait)
            fault.new_master = c.master()
        elif kind == "restart_all" or master is None:
            fault.kind = "restart_all"
            fault.target = "everything"
            fault.t0 = time.monotonic()
            self._restart_everything()
            c.wait(lambda: c.master() is not None, self.election_wait)
            fault.new_master = c.master()
        if not c.wait(c.healthy, self.heal_timeout):
            fault.note = "not healed in time"
            self.stuck.append(f"{kind} on {fault.target}: not healed within {self.heal_timeout} s")
        fault.healed = time.monotonic()
        return fault

    def _restart_everything(self) -> None:
        """kill -9 of every broker, controller and the name server, then all started again."""
        c = self.cluster
        others = [c.namesrv] if c.namesrv is not None else []
        for node in [*c.brokers, *c.controllers, *others]:
            node.kill()
        for i in range(BROKERS):
            c.topology.heal(i)
        for node in [*others, *c.controllers]:
            node.start()
        for node in c.brokers:
            node.start()


# ---- the checker ------------------------------------------------------------------------------


@dataclass
class LogRecord:
    phys: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    key: str


def read_commit_log(store: Path) -> tuple[list[LogRecord], bytes]:
    """Every message record of a store's commit log (from its files, not through a broker),
    and the log's bytes up to the end of the last record."""
    files = sorted((store / "commitlog").iterdir())
    records: list[LogRecord] = []
    data = bytearray()
    for path in files:
        start = int(path.name)
        raw = path.read_bytes()
        pos = 0
        while pos + 8 <= len(raw):
            total, magic = BLANK.unpack_from(raw, pos)
            if magic == BLANK_MAGIC:
                pos = len(raw)
                break
            if total <= 0 or pos + total > len(raw):
                break
            try:
                m = decode_message(raw, pos, pos + total, check_crc=True)
            except Exception:
                break
            records.append(
                LogRecord(
                    start + pos,
                    total,
                    m.topic,
                    m.queue_id,
                    m.queue_offset,
                    m.body.decode("utf-8", "replace"),
                )
            )
            pos += total
        if len(data) < start:
            data += bytes(start - len(data))
        data[start:] = raw[:pos]
        if pos < len(raw) and (pos + 8 > len(raw) or BLANK.unpack_from(raw, pos)[1] != BLANK_MAGIC):
            break  # the log ends in this file
    return records, bytes(data)


@dataclass
class Verdict:
    faults: int
    fault_kinds: dict[str, int]
    sends: int
    acked: int
    unknown: int
    acked_lost: list[str]
    duplicates: int
    divergent_replicas: list[str]
    read_problems: list[str]
    reads: int
    slave_behind: int
    failover_s: list[tuple[str, float]]  # per fault on the master: fault → first ack elsewhere
    unhealed: list[str]
    notes: list[str]
    # per fault on the master and client: fault → that client's first ack elsewhere
    failover_by_client_s: list[tuple[str, str, float]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.acked_lost or self.divergent_replicas or self.read_problems)

    def summary(self) -> dict[str, Any]:
        def pct(times: list[float], p: float) -> float | None:
            if not times:
                return None
            times = sorted(times)
            return round(times[min(len(times) - 1, int(p * len(times)))], 3)

        by_kind: dict[str, dict[str, Any]] = {}
        for kind in sorted({k for k, _ in self.failover_s}):
            times = [t for k, t in self.failover_s if k == kind]
            by_kind[kind] = {
                "n": len(times),
                "p50": pct(times, 0.5),
                "p99": pct(times, 0.99),
                "max": round(max(times), 3),
            }
        by_client: dict[str, dict[str, Any]] = {}
        for kind, client, _t in self.failover_by_client_s:
            times = [t for k, c, t in self.failover_by_client_s if k == kind and c == client]
            by_client.setdefault(kind, {})[client] = {
                "n": len(times),
                "p50": pct(times, 0.5),
                "p99": pct(times, 0.99),
                "max": round(max(times), 3),
            }
        return {
            "faults": self.faults,
            "fault_kinds": self.fault_kinds,
            "sends": self.sends,
            "acked": self.acked,
            "unknown": self.unknown,
            "acked_lost": len(self.acked_lost),
            "duplicates": self.duplicates,
            "divergent_replicas": len(self.divergent_replicas),
            "read_problems": len(self.read_problems),
            "reads": self.reads,
            "slave_behind": self.slave_behind,
            "failover_s": by_kind,
            "failover_s_by_client": by_client,
            "unhealed": self.unhealed,
            "notes": self.notes[:20],
            "read_problem_samples": self.read_problems[:10],
            "lost_samples": self.acked_lost[:10],
        }


def check(
    cluster: ChaosCluster, history: History, master: int, confirm: int, stuck: list[str]
) -> Verdict:
    """Judge the history against the stopped replicas' files (``master``: the final master,
    ``confirm``: the confirm offset it reported before it stopped)."""
    logs = {i: read_commit_log(cluster.work / f"store{i}") for i in range(BROKERS)}
    records, master_bytes = logs[master]
    mine = [r for r in records if r.topic == TOPIC]
    present = Counter(r.key for r in mine)
    acked = history.acked()
    lost = sorted({o.key for o in acked if o.key not in present})
    duplicates = sum(n - 1 for n in present.values() if n > 1)
    divergent = []
    notes = []
    for i, (_recs, data) in logs.items():
        if i == master:
            continue
        upto = min(confirm, len(master_bytes))
        if data[:upto] != master_bytes[:upto]:
            first = next(
                (k for k in range(min(len(data), upto)) if data[k] != master_bytes[k]),
                min(len(data), upto),
            )
            divergent.append(f"broker{i} differs from the master at byte {first} (< {upto})")
        if len(data) != len(master_bytes):
            notes.append(f"broker{i} holds {len(data)} bytes, the master {len(master_bytes)}")
    by_queue = {(r.queue_id, r.queue_offset): r.key for r in mine}
    problems = list(history.read_problems)
    for where, key in sorted(history.reads.items()):
        final = by_queue.get(where)
        if final != key:
            problems.append(f"queue {where[0]} offset {where[1]}: read {key}, the log has {final}")
    failovers = []
    by_client = []
    addrs = cluster.broker_addrs
    for f in history.faults:
        if f.kind not in ("kill_master", "pause_master", "partition_master"):
            continue
        if f.old_master is None:
            continue
        old = addrs[f.old_master]
        after = [o.t1 for o in acked if o.t1 > f.t0 and o.broker and o.broker != old]
        # per client: the official client does not say which broker answered, so its first
        # acknowledged send begun after the fault (the old master dead, paused or cut off from
        # every replica cannot acknowledge one)
        for client in sorted({o.client for o in acked}):
            mine = [
                o.t1
                for o in acked
                if o.client == client
                and o.t1 > f.t0
                and (o.broker != old if o.broker else o.t0 > f.t0)
            ]
            if mine:
                by_client.append((f.kind, client, min(mine) - f.t0))
        if after:
            failovers.append((f.kind, min(after) - f.t0))
            if min(after) - f.t0 > 20:
                notes.append(
                    f"{f.kind} on {f.target} (master {f.old_master} -> {f.new_master}): "
                    f"first acknowledgement elsewhere {min(after) - f.t0:.1f} s after the fault"
                )
        else:
            notes.append(f"{f.kind} at {f.t0:.1f}: no acknowledged send on another broker")
    kinds = Counter(f.kind for f in history.faults)
    unknown = sum(1 for o in history.ops if o.outcome != "ok")
    return Verdict(
        len(history.faults),
        dict(kinds),
        len(history.ops),
        len(acked),
        unknown,
        lost,
        duplicates,
        divergent,
        problems,
        len(history.reads),
        history.slave_behind,
        failovers,
        stuck,
        notes,
        by_client,
    )


def final_master_and_confirm(cluster: ChaosCluster) -> tuple[int, int]:
    """The master now and its confirm offset (its runtime figures)."""
    from rocketstore.client._admin import AdminClient

    master = cluster.master()
    if master is None:
        raise AssertionError("no master at the end")
    with AdminClient(cluster.namesrv_addr) as admin:
        info = admin.runtime_info(cluster.broker_addrs[master])
    return master, int(info.get("confirmOffset", "0"))


def caught_up(cluster: ChaosCluster) -> bool:
    """Every broker's commit log as long as the master's (their runtime figures)."""
    from rocketstore.client._admin import AdminClient

    ends = []
    try:
        with AdminClient(cluster.namesrv_addr) as admin:
            for addr in cluster.broker_addrs:
                ends.append(int(admin.runtime_info(addr).get("commitLogMaxOffset", "-1")))
    except Exception:
        return False
    return len(set(ends)) == 1


def env_ok() -> str | None:
    """None when the harness can run here."""
    if os.environ.get("ROCKETSTORE_SKIP_CHAOS"):
        return "ROCKETSTORE_SKIP_CHAOS is set"
    return None


def run_chaos(
    work: Path,
    kinds: list[str],
    *,
    backend: str,
    seed: int = 30,
    official_client: bool = True,
    log: Any = print,
    max_seconds: float | None = None,
) -> tuple[Verdict, History, ChaosCluster]:
    """Form the group, run the workload under ``kinds`` of faults (in that order; none begun
    once ``max_seconds`` have passed since the start), heal, stop everything and judge. Every
    process is stopped on the way out, whatever happened."""
    from rocketstore.client._admin import AdminClient

    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    cluster = ChaosCluster(work, backend=backend)
    history = History()
    producer: PyProducer | None = None
    rmq4: Rmq4Producer | None = None
    reader: Reader | None = None
    try:
        cluster.start()
        if not cluster.wait(cluster.healthy, 120):
            raise AssertionError(
                "the group did not form:\n" + "\n".join(n.output()[-1500:] for n in cluster.brokers)
            )
        with AdminClient(cluster.namesrv_addr) as admin:
            master = cluster.master()
            assert master is not None
            admin.create_topic(
                cluster.broker_addrs[master], TOPIC, read_queue_nums=4, write_queue_nums=4
            )
            # every replica knows the topic (copied from the master) before a failover
            if not cluster.wait(
                lambda: all(TOPIC in admin.topic_configs(a) for a in cluster.broker_addrs), 60
            ):
                raise AssertionError("the slaves did not copy the topic")
        producer = PyProducer(history, cluster.namesrv_addr)
        reader = Reader(history, cluster.namesrv_addr)
        producer.start()
        reader.start()
        if official_client:
            from .interop import InteropUnavailable, rmq4_python

            try:
                python = rmq4_python()
            except InteropUnavailable as exc:
                log(f"official 4.x client unavailable: {exc}")
            else:
                rmq4 = Rmq4Producer(history, python, work / "rmq4-home", cluster.namesrv_addr)
        time.sleep(3.0)
        nemesis = Nemesis(cluster, history, seed=seed)
        if not cluster.topology.can_partition:
            log(f"partition skipped: {cluster.topology.why_not}")
        nemesis.run([k for k in kinds if k in nemesis.kinds], log=log, deadline=deadline)
        time.sleep(3.0)
        producer.stopping.set()
        if rmq4 is not None:
            rmq4.stop()
        producer.join(30)
        if not cluster.wait(cluster.healthy, 120):
            raise AssertionError("the group did not heal")
        if not cluster.wait(lambda: caught_up(cluster), 60):
            raise AssertionError("the replicas did not catch up")
        time.sleep(2.0)  # the reader takes what the confirm offset lets it see
        reader.stopping.set()
        reader.join(30)
        master, confirm = final_master_and_confirm(cluster)
        cluster.stop()
        return check(cluster, history, master, confirm, nemesis.stuck), history, cluster
    finally:
        if producer is not None:
            producer.stopping.set()
        if rmq4 is not None:
            rmq4.stop()
        if reader is not None:
            reader.stopping.set()
        cluster.stop()
