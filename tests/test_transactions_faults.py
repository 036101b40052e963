"""Transactional messages under faults: a broker under SYNC_FLUSH killed with kill -9 between
acknowledged ends (every acknowledged commit is in its topic exactly once after the restart, no
rolled-back message is, open halves are still checked and nothing ended is asked about again),
forged and corrupted END_TRANSACTION requests (refused, the half untouched, the broker serving),
and the bookkeeping of ended transactions: a record forged inside a body, halves not due yet,
ends repeated after a restart, check copies of ended halves, prepared batches, ends without a
producer group."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import itertools
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from rocketstore import MessageStore, StoreConfig
from rocketstore.client._producer import encode_batch
from rocketstore.remoting._client import AsyncRemotingClient
from rocketstore.remoting._codes import RequestCode
from rocketstore.remoting._codes import ResponseCode as RC
from rocketstore.remoting._command import RemotingCommand, decode_frame
from rocketstore.store.log._record import (
    SYSFLAG_TRANSACTION_MASK,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    MessageExt,
    decode_msg_id,
    decode_stored,
    encode_record,
    properties_to_string,
)
from support.grpc_broker import BrokerThread
from support.transactions import (
    check,
    end_header,
    half_header,
    half_properties,
    heartbeat_request,
    queue_messages,
    quiet_broker,
)

T = TypeVar("T")

HALF = "RMQ_SYS_TRANS_HALF_TOPIC"
OP = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
PG = "TxFaultGroup"
COMMIT, ROLLBACK, UNKNOWN = 8, 12, 0
_ids = itertools.count()


# ---- a producer speaking remoting by hand, on its own event loop --------------------------------


class LoopThread:
    """An asyncio loop in a daemon thread; ``call`` runs a coroutine function on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, fn: Callable[[], Coroutine[Any, Any, T]], timeout: float = 10.0) -> T:
        return asyncio.run_coroutine_threadsafe(fn(), self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        if not self.thread.is_alive():
            self.loop.close()


class Producer:
    """Heartbeats for its group, sends half messages and ends them, and answers the broker's
    CHECK_TRANSACTION_STATE with ``decide(uniq)`` (a commitOrRollback value; None: no
    answer). Every check is kept in ``checks`` as (header, message)."""

    def __init__(
        self, address: str, group: str = PG, decide: Callable[[str], int | None] | None = None
    ) -> None:
        self.address = address
        self.group = group
        self.decide = decide or (lambda uniq: UNKNOWN)
        self.checks: list[tuple[dict[str, Any], MessageExt]] = []
        self._lock = threading.Lock()
        self.loop = LoopThread()
        self.client: AsyncRemotingClient

        async def make() -> None:
            self.client = AsyncRemotingClient({RequestCode.CHECK_TRANSACTION_STATE: self._check})

        self.loop.call(make)

    def close(self) -> None:
        async def down() -> None:
            self.client.close()

        try:
            self.loop.call(down)
        finally:
            self.loop.close()

    def call(self, cmd: RemotingCommand, timeout: float = 5.0) -> RemotingCommand:
        async def go() -> RemotingCommand:
            return await self.client.invoke(self.address, cmd, timeout)

        return self.loop.call(go, timeout + 5)

    def oneway(self, cmd: RemotingCommand) -> None:
        async def go() -> None:
            await self.client.invoke_oneway(self.address, cmd)

        self.loop.call(go)

    def heartbeat(self) -> None:
        r = self.call(heartbeat_request(f"fault-client-{self.group}", self.group))
        assert r.code == RC.SUCCESS, r.remark

    def send_half(
        self,
        topic: str,
        body: bytes,
        queue_id: int = 1,
        *,
        born_ms: int | None = None,
        **props: str,
    ) -> tuple[RemotingCommand, str]:
        uniq = f"FAULT{next(_ids):08d}"
        properties = half_properties(self.group, uniq, **props)
        header = half_header(self.group, topic, queue_id, properties, born_ms)
        r = self.call(RemotingCommand.request(RequestCode.SEND_MESSAGE, header, body))
        assert r.code == RC.SUCCESS, r.remark
        return r, uniq

    def send_plain(self, topic: str, body: bytes, queue_id: int = 0) -> RemotingCommand:
        header = {
            "producerGroup": self.group,
            "topic": topic,
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": "4",
            "queueId": str(queue_id),
            "sysFlag": "0",
            "bornTimestamp": str(int(time.time() * 1000)),
            "flag": "0",
            "properties": properties_to_string({"UNIQ_KEY": f"PLAIN{next(_ids):08d}"}),
            "reconsumeTimes": "0",
        }
        r = self.call(RemotingCommand.request(RequestCode.SEND_MESSAGE, header, body))
        assert r.code == RC.SUCCESS, r.remark
        return r

    @staticmethod
    def end_header(sent: RemotingCommand, uniq: str, kind: int, group: str = PG) -> dict[str, str]:
        return end_header(sent, uniq, kind, group)

    def end(self, sent: RemotingCommand, uniq: str, kind: int) -> RemotingCommand:
        header = self.end_header(sent, uniq, kind, self.group)
        return self.call(RemotingCommand.request(RequestCode.END_TRANSACTION, header))

    def end_raw(self, header: dict[str, str]) -> RemotingCommand:
        return self.call(RemotingCommand.request(RequestCode.END_TRANSACTION, header))

    def max_offset(self, topic: str, queue_id: int) -> int:
        header = {"topic": topic, "queueId": str(queue_id)}
        r = self.call(RemotingCommand.request(RequestCode.GET_MAX_OFFSET, header))
        assert r.code == RC.SUCCESS, r.remark
        return int(r.ext_fields["offset"])

    def checked(self) -> list[str]:
        with self._lock:
            return [ext["transactionId"] for ext, _ in self.checks]

    def _check(self, cmd: RemotingCommand, conn: Any) -> None:
        """The broker's CHECK_TRANSACTION_STATE (one-way). Producer's loop thread."""
        ext = dict(cmd.ext_fields)
        msg = decode_stored(bytes(cmd.body), 0, len(cmd.body))
        with self._lock:
            self.checks.append((ext, msg))
        kind = self.decide(ext["transactionId"])
        if kind is None:
            return
        header = {
            "producerGroup": self.group,
            "tranStateTableOffset": ext["tranStateTableOffset"],
            "commitLogOffset": ext["commitLogOffset"],
            "commitOrRollback": str(kind),
            "fromTransactionCheck": "true",
            "msgId": ext["msgId"],
            "transactionId": ext["transactionId"],
        }
        conn.send(RemotingCommand.request(RequestCode.END_TRANSACTION, header, oneway=True))


def wait_for(cond: Callable[[], bool], timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return bool(cond())


# ---- a broker in a child process ----------------------------------------------------------------

_BROKER_LINE = re.compile(r"^broker \S+ \(.*\) listening on ([^,\s]+),", re.M)
CRASH_CONF = (
    "mappedFileSizeCommitLog=4194304\n"
    "mappedFileSizeConsumeQueue=60000\n"
    "flushDiskType=SYNC_FLUSH\n"
    "transactionTimeOut=0\n"
    "transactionCheckInterval=150\n"
    "flushConsumerOffsetInterval=100\n"
)


class BrokerProcess:
    """``rocketstore broker`` on 127.0.0.1 (ports chosen by the system); output into ``log``."""

    def __init__(self, store: Path, conf: Path, log: Path) -> None:
        self.log = log
        self._out = open(log, "wb")  # noqa: SIM115  (closed in kill / stop)
        args = [sys.executable, "-m", "rocketstore.cli", "broker", "--store", str(store)]
        args += ["--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "-c", str(conf)]
        args += ["--flush", "SYNC_FLUSH"]
        self.proc = subprocess.Popen(
            args, stdout=self._out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 20
        while True:
            found = _BROKER_LINE.search(self.output())
            if found:
                self.address = found.group(1)
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"broker did not start:\n{self.output()[-3000:]}")
            time.sleep(0.02)

    def output(self) -> str:
        try:
            return self.log.read_text("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def kill(self) -> None:
        """kill -9, and wait until the process is gone."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._out.close()

    def stop(self) -> int:
        """SIGTERM (a clean shutdown); kill -9 after 15 s. The exit status."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        self._out.close()
        return int(self.proc.returncode)


def read_topic(store: Path, conf: Path, topic: str, queues: int) -> list[MessageExt]:
    """Every message of ``topic`` in a store no broker owns any more (recovered here)."""
    config = StoreConfig.from_broker_conf(conf)
    config = dataclasses.replace(config, store_path_root_dir=str(store), ha_listen_port=0)
    out: list[MessageExt] = []
    with MessageStore(config) as ms:
        for queue_id in range(queues):
            offset = ms.get_min_offset_in_queue(topic, queue_id)
            end = ms.get_max_offset_in_queue(topic, queue_id)
            while offset < end:
                r = ms.get_message("fault-check", topic, queue_id, offset, 32)
                out += r.messages
                if r.next_begin_offset <= offset:
                    break
                offset = r.next_begin_offset
    return out


# ---- kill -9 --------------------------------------------------------------------------------------


def test_kill_9_under_sync_flush_keeps_every_acknowledged_end(tmp_path: Path) -> None:
    """Halves are committed, rolled back or left open (the broker checks every 150 ms and the
    producer answers "unknown" for the open ones, so check copies pile up) and the broker is
    killed with -9. After the restart the open halves are checked again and committed by the
    producer's answer; in the end every committed body is in the topic exactly once, no
    rolled-back body is there, and only the open transactions were asked about again."""
    store, conf = tmp_path / "store", tmp_path / "broker.conf"
    conf.write_text(CRASH_CONF)
    topic, queues = "TxCrashTopic", 4
    state: dict[str, str] = {}  # uniq → "commit" / "rollback" / "open"
    bodies: dict[str, bytes] = {}

    def faithful(open_answer: int) -> Callable[[str], int | None]:
        def decide(uniq: str) -> int | None:
            s = state.get(uniq)
            if s == "commit":
                return COMMIT
            if s == "rollback":
                return ROLLBACK
            if s == "canary":
                return None  # never answered: asked again every check round
            return open_answer

        return decide

    first = BrokerProcess(store, conf, tmp_path / "first.log")
    p1: Producer | None = None
    try:
        p1 = Producer(first.address, decide=faithful(UNKNOWN))
        p1.heartbeat()
        for i in range(24):
            body = f"tx-{i}".encode()
            sent, uniq = p1.send_half(topic, body, queue_id=i % queues)
            bodies[uniq] = body
            kind = ("commit", "rollback", "open")[i % 3]
            state[uniq] = kind
            if kind != "open":
                # acknowledged once the commit (or rollback) and its op are flushed
                r = p1.end(sent, uniq, COMMIT if kind == "commit" else ROLLBACK)
                assert r.code == RC.SUCCESS, r.remark
            time.sleep(0.02)
        open_ = {u for u, s in state.items() if s == "open"}
        # the open halves were checked (copies appended) before the crash
        assert wait_for(lambda: open_ <= set(p1.checked()), 10), (p1.checked(), first.output())
    finally:
        first.kill()
        if p1 is not None:
            p1.close()

    second = BrokerProcess(store, conf, tmp_path / "second.log")
    p2: Producer | None = None
    status = -1
    try:
        p2 = Producer(second.address, decide=faithful(COMMIT))
        p2.heartbeat()
        committed = {u for u, s in state.items() if s == "commit"}
        want = len(committed) + len(open_)
        producer = p2

        def stored() -> int:
            return sum(producer.max_offset(topic, q) for q in range(queues))

        assert wait_for(lambda: stored() >= want, 60), (stored(), p2.checked(), second.output())
        # a canary half of another topic, never answered, is asked about every check round:
        # four rounds after it was first asked, a wrong second copy would have shown up
        _sent, canary = p2.send_half("TxCanaryTopic", b"canary", queue_id=0)
        state[canary] = "canary"
        assert wait_for(lambda: p2.checked().count(canary) >= 5, 60), second.output()[-3000:]
        assert open_ <= set(p2.checked())
        asked_again = set(p2.checked()) - open_ - {canary}
        assert not asked_again, f"ended transactions asked about after the restart: {asked_again}"
    finally:
        status = second.stop()
        if p2 is not None:
            p2.close()
    assert status == 0, second.output()[-3000:]

    messages = read_topic(store, conf, topic, queues)
    found = collections.Counter(m.properties.get("UNIQ_KEY", "") for m in messages)
    expected = {u: 1 for u in committed | open_}
    assert dict(found) == expected
    for m in messages:
        uniq = m.properties["UNIQ_KEY"]
        assert bytes(m.body) == bodies[uniq]
        assert m.sys_flag & SYSFLAG_TRANSACTION_MASK == TRANSACTION_COMMIT_TYPE
        assert m.queue_id == list(bodies).index(uniq) % queues


# ---- forged and corrupted END_TRANSACTION -------------------------------------------------------


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    with quiet_broker(tmp_path) as b:
        yield b


@pytest.fixture
def producer(broker: BrokerThread) -> Iterator[Producer]:
    p = Producer(broker.broker.address)
    try:
        yield p
    finally:
        p.close()


def _frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def _send_raw(address: str, data: bytes) -> bytes:
    """Write ``data`` on a fresh connection and read what comes back until the broker closes
    it or 0.5 s pass."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=2) as s:
        s.sendall(data)
        s.settimeout(0.5)
        got = b""
        with contextlib.suppress(OSError):
            while chunk := s.recv(65536):
                got += chunk
        return got


def test_forged_end_transaction_headers_are_refused_and_the_broker_keeps_serving(
    broker: BrokerThread, producer: Producer
) -> None:
    topic = "TxForgedTopic"
    sent, uniq = producer.send_half(topic, b"the real one", queue_id=1)
    good = Producer.end_header(sent, uniq, COMMIT)
    phys, qo = int(good["commitLogOffset"]), int(good["tranStateTableOffset"])
    # other records to point at: a plain message, and an op message (of another half)
    plain = producer.send_plain("TxOtherTopic", b"plain", 0)
    plain_phys = decode_msg_id(plain.ext_fields["msgId"])[1]
    other, other_uniq = producer.send_half(topic, b"other", queue_id=1)
    assert producer.end(other, other_uniq, ROLLBACK).code == RC.SUCCESS
    (op,) = queue_messages(broker, OP, 0)

    forged: list[dict[str, str]] = []
    for value in ("-1", "-88", str(phys + 1), str(phys - 1), str(2**63 - 1), str(2**64), "abc"):
        forged.append({**good, "commitLogOffset": value})
    for value in ("1.5", "0x10", str(op.commitlog_offset), str(plain_phys)):
        forged.append({**good, "commitLogOffset": value})
    forged.append({**good, "commitLogOffset": str(plain_phys), "tranStateTableOffset": "0"})
    for value in ("-1", str(qo + 1), str(2**63), "x"):
        forged.append({**good, "tranStateTableOffset": value})
    for value in ("4", "99", "-8", "x", str(2**40)):
        forged.append({**good, "commitOrRollback": value})
    forged.append({**good, "producerGroup": "SomeoneElse"})
    forged.append({**good, "msgId": "NOT-THE-ID"})
    forged.append({k: v for k, v in good.items() if k != "commitLogOffset"})
    forged.append({k: v for k, v in good.items() if k != "tranStateTableOffset"})
    for header in forged:
        r = producer.end_raw(header)
        assert r.code != RC.SUCCESS, header
    # the same forgeries one-way (no answer), a header of the wrong shape, and frames that are
    # not remoting frames at all, each on a connection of its own
    for header in forged[:6]:
        producer.oneway(RemotingCommand.request(RequestCode.END_TRANSACTION, header))
    request = RemotingCommand.request(RequestCode.END_TRANSACTION, good)
    request.opaque = 7
    valid = request.encode_header()
    assert b'"code":37' in valid.replace(b" ", b"")
    _send_raw(broker.broker.address, _frame(valid.replace(b"{", b"[", 1)))  # not JSON
    answer = _send_raw(broker.broker.address, _frame(b'{"code":37,"extFields":"x","opaque":1}'))
    assert decode_frame(answer[4:]).code == RC.SYSTEM_ERROR  # the wrong shape is answered
    _send_raw(broker.broker.address, struct.pack(">i", 2**31 - 1) + b"\0" * 64)  # huge length
    _send_raw(broker.broker.address, _frame(valid)[:-5])  # cut short
    _send_raw(broker.broker.address, b"\xff" * 32)

    # nothing was committed, nothing more marked done, and the half is still checked
    assert queue_messages(broker, topic, 1) == []
    assert queue_messages(broker, "TxOtherTopic", 0)[0].body == b"plain"
    assert len(queue_messages(broker, OP, 0)) == 1
    producer.heartbeat()
    assert check(broker) == 1 and wait_for(lambda: producer.checked() == [uniq])
    # the real end still works, once
    assert producer.end_raw(good).code == RC.SUCCESS
    assert producer.end_raw(good).code == RC.SUCCESS
    (msg,) = queue_messages(broker, topic, 1)
    assert bytes(msg.body) == b"the real one" and msg.properties["UNIQ_KEY"] == uniq


def test_end_pointing_into_a_message_body_is_refused(
    broker: BrokerThread, producer: Producer
) -> None:
    genuine, genuine_uniq = producer.send_half("TxGenuineTopic", b"genuine", queue_id=0)
    half_offset = int(genuine.ext_fields["queueOffset"])
    fake = encode_record(
        topic=HALF,
        body=b"injected",
        queue_offset=half_offset,
        properties=properties_to_string(
            {
                "REAL_TOPIC": "TxVictimTopic",
                "REAL_QID": "0",
                "TRAN_MSG": "true",
                "PGROUP": PG,
                "UNIQ_KEY": "FORGED",
            }
        ),
    )
    carrier = producer.send_plain("TxCarrierTopic", fake)
    carrier_phys = decode_msg_id(carrier.ext_fields["msgId"])[1]
    inside = carrier_phys + 88  # a record with IPv4 hosts: its body starts 88 bytes in

    def look() -> MessageExt | None:
        return broker.broker.store.look_message_by_offset(inside)

    seen = broker.run(look)
    assert seen is not None and seen.topic == HALF  # the forgery decodes as a half record
    header = {
        "producerGroup": PG,
        "tranStateTableOffset": str(half_offset),
        "commitLogOffset": str(inside),
        "commitOrRollback": str(COMMIT),
        "fromTransactionCheck": "false",
        "msgId": "FORGED",
        "transactionId": "FORGED",
    }
    r = producer.end_raw(header)
    victim = queue_messages(broker, "TxVictimTopic", 0)
    producer.heartbeat()
    asked = check(broker)
    assert r.code != RC.SUCCESS
    assert victim == []
    assert asked == 1 and wait_for(lambda: producer.checked() == [genuine_uniq])


def test_a_transaction_is_ended_once_across_a_duplicate_storm(
    broker: BrokerThread, producer: Producer
) -> None:
    """The producer's end and the check's answer race (both commit) while more copies are
    made: one message in the end, and the other resolution is refused."""
    producer.heartbeat()
    producer.decide = lambda uniq: COMMIT
    sent, uniq = producer.send_half("TxStormTopic", b"storm", queue_id=2)
    header = Producer.end_header(sent, uniq, COMMIT)
    for _ in range(3):
        check(broker)
        producer.oneway(RemotingCommand.request(RequestCode.END_TRANSACTION, header))
    assert producer.end_raw(header).code == RC.SUCCESS
    check(broker)
    assert wait_for(lambda: len(queue_messages(broker, "TxStormTopic", 2)) >= 1)
    time.sleep(0.2)
    assert len(queue_messages(broker, "TxStormTopic", 2)) == 1
    refused = producer.end_raw({**header, "commitOrRollback": str(ROLLBACK)})
    assert refused.code == RC.SYSTEM_ERROR


def test_end_without_producer_group_is_refused(broker: BrokerThread, producer: Producer) -> None:
    sent, uniq = producer.send_half("TxNoGroupTopic", b"x", queue_id=0)
    header = Producer.end_header(sent, uniq, COMMIT)
    del header["producerGroup"]
    r = producer.end_raw(header)
    assert r.code != RC.SUCCESS
    assert queue_messages(broker, "TxNoGroupTopic", 0) == []


# ---- the bookkeeping of ended transactions ------------------------------------------------------


def test_an_end_repeated_after_a_restart_stores_nothing_more(tmp_path: Path) -> None:
    overrides = {"transaction_timeout": 0, "transaction_check_interval": 3_600_000}
    b = BrokerThread(tmp_path, broker_overrides=overrides)
    b.start()
    p = Producer(b.broker.address)
    try:
        sent, uniq = p.send_half("TxRepeatTopic", b"once", queue_id=0)
        assert p.end(sent, uniq, COMMIT).code == RC.SUCCESS
    finally:
        p.close()
        b.close()
    b2 = BrokerThread(tmp_path, broker_overrides=overrides)
    b2.start()
    p2 = Producer(b2.broker.address)
    try:
        again = p2.end(sent, uniq, COMMIT)  # the producer retries: it never saw the answer
        assert again.code == RC.SUCCESS
        other = p2.end(sent, uniq, ROLLBACK)
        assert len(queue_messages(b2, "TxRepeatTopic", 0)) == 1
        assert other.code == RC.SYSTEM_ERROR
    finally:
        p2.close()
        b2.close()


@pytest.mark.parametrize("how", ["end", "check"])
def test_a_commit_stored_without_its_op_is_not_stored_again_after_a_restart(
    tmp_path: Path, how: str
) -> None:
    """The broker stored the committed message and died before the op message (a kill -9, or
    a master that failed over, between the two puts): the restarted broker finds the commit
    by its key and neither the producer's repeated end nor a check's answer stores it again."""
    overrides = {"transaction_timeout": 0, "transaction_check_interval": 3_600_000}
    topic = "TxNoOpTopic"
    b = BrokerThread(tmp_path, broker_overrides=overrides)
    b.start()
    p = Producer(b.broker.address)
    try:
        sent, uniq = p.send_half(topic, b"once", queue_id=0)
        service = b.broker.transactions

        async def died_before_the_op(half_offset: int, commit: bool | None) -> None:
            raise RuntimeError("the broker died before the op message")

        service._write_op = died_before_the_op  # type: ignore[method-assign]
        assert p.end(sent, uniq, COMMIT).code == RC.SYSTEM_ERROR
        assert len(queue_messages(b, topic, 0)) == 1
    finally:
        p.close()
        b.close()
    b2 = BrokerThread(tmp_path, broker_overrides=overrides)
    b2.start()
    p2 = Producer(b2.broker.address, decide=lambda u: COMMIT)
    try:
        if how == "end":
            assert p2.end(sent, uniq, COMMIT).code == RC.SUCCESS  # never saw the answer
            assert p2.end(sent, uniq, ROLLBACK).code == RC.SYSTEM_ERROR  # it was committed
        else:
            p2.heartbeat()
            assert check(b2) == 1  # the open half is asked about; the answer is a commit
            assert wait_for(lambda: p2.checked() == [uniq])
            assert wait_for(lambda: check(b2) == 0)  # ended: not asked again
        assert len(queue_messages(b2, topic, 0)) == 1
    finally:
        p2.close()
        b2.close()


@pytest.mark.parametrize("kind", ["immunity", "born-in-the-future"])
def test_a_half_that_is_not_due_does_not_hold_back_later_halves(
    broker: BrokerThread, producer: Producer, kind: str
) -> None:
    producer.heartbeat()
    if kind == "immunity":
        producer.send_half("TxHeldTopic", b"held", CHECK_IMMUNITY_TIME_IN_SECONDS="86400")
    else:
        producer.send_half("TxHeldTopic", b"held", born_ms=int(time.time() * 1000) + 86_400_000)
    _, later = producer.send_half("TxHeldTopic", b"later")
    check(broker)
    assert wait_for(lambda: later in producer.checked(), 1.0)


def test_a_check_copy_of_an_ended_half_is_not_committed_again_after_a_restart(
    tmp_path: Path,
) -> None:
    overrides = {"transaction_timeout": 0, "transaction_check_interval": 3_600_000}
    topic = "TxCopyTopic"
    b = BrokerThread(tmp_path, broker_overrides=overrides)
    b.start()
    p = Producer(b.broker.address)  # answers "unknown"
    try:
        p.heartbeat()
        sent, uniq = p.send_half(topic, b"once", queue_id=0)
        held, held_uniq = p.send_half(topic, b"held", CHECK_IMMUNITY_TIME_IN_SECONDS="86400")
        assert check(b) == 1  # the first half is copied and asked; the walk stops at "held"
        assert wait_for(lambda: p.checked() == [uniq])
        assert p.end(sent, uniq, COMMIT).code == RC.SUCCESS
        check(b)  # the half progress stays at "held", the op progress moves on
        assert p.end(held, held_uniq, ROLLBACK).code == RC.SUCCESS
    finally:
        p.close()
        b.close()
    b2 = BrokerThread(tmp_path, broker_overrides=overrides)
    b2.start()
    p2 = Producer(b2.broker.address, decide=lambda u: COMMIT if u == uniq else ROLLBACK)
    try:
        p2.heartbeat()
        check(b2)
        time.sleep(0.3)  # time for an answer to a wrong check to be stored
        assert len(queue_messages(b2, topic, 0)) == 1
        assert p2.checked() == []
    finally:
        p2.close()
        b2.close()


def test_a_prepared_batch_is_refused(broker: BrokerThread, producer: Producer) -> None:
    items = [(f"b{i}".encode(), {"UNIQ_KEY": f"BATCH{i}", "TRAN_MSG": "true"}) for i in range(3)]
    header = {
        "producerGroup": PG,
        "topic": "TxBatchTopic",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "0",
        "sysFlag": str(TRANSACTION_PREPARED_TYPE),
        "bornTimestamp": str(int(time.time() * 1000)),
        "flag": "0",
        "properties": "",
        "reconsumeTimes": "0",
        "batch": "true",
    }
    r = producer.call(
        RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, header, encode_batch(items))
    )
    assert queue_messages(broker, "TxBatchTopic", 0) == []
    assert r.code == RC.MESSAGE_ILLEGAL
