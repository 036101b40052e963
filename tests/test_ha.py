"""Replication in one process: master and slave stores on loopback, raw peers speaking the HA
wire protocol (a forged slave, a confused master), SYNC_MASTER waits and their failures."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from rocketstore import Message, MessageStore, PutMessageStatus, StoreConfig
from rocketstore.store.ha import ClientState, ConnectionState, HAStatistics
from rocketstore.store.ha._wire import HEADER, HEADER_SIZE, REPORT
from support.ha_stores import ha_config as base_config
from support.ha_stores import ha_stores
from support.waits import wait_dispatched, wait_until

FILE = 64 * 1024
S = PutMessageStatus


# the HA tests' settings (support.ha_stores), with quick flushes and housekeeping
HA = {"flush_interval_commit_log": 10, "ha_housekeeping_interval": 2000}


def ha_config(root: Path, **over: Any) -> StoreConfig:
    return base_config(root, **{**HA, **over})


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Callable[..., MessageStore]]:
    """Open stores (load + start) under tmp_path; all shut down after the test, slaves first."""
    with ha_stores(tmp_path, **HA) as open_:
        yield open_


def master_addr(master: MessageStore) -> str:
    return f"127.0.0.1:{master.ha.listen_port}"


def body_of(i: int) -> bytes:
    return (f"m{i}-" * (1 + (i * 37) % 400)).encode()


def put_many(store: MessageStore, n: int, start: int = 0) -> list[Any]:
    out = []
    for i in range(start, start + n):
        r = store.put_message(Message("T", body_of(i), i % 3, keys=[f"k{i}"], tags=f"t{i % 2}"))
        assert r.status is S.PUT_OK, r
        out.append(r)
    return out


def caught_up(master: MessageStore, slave: MessageStore, timeout: float = 10.0) -> None:
    assert wait_until(lambda: slave.max_phy_offset == master.max_phy_offset, timeout), (
        slave.max_phy_offset,
        master.max_phy_offset,
    )


def assert_same_bytes(master: MessageStore, slave: MessageStore) -> None:
    """Every commit-log file the slave holds data of equals the master's, byte for byte."""
    end = master.max_phy_offset
    m_files = {mf.from_offset: mf for mf in master.commit_log.queue.files if mf.from_offset < end}
    s_files = {mf.from_offset: mf for mf in slave.commit_log.queue.files if mf.from_offset < end}
    assert s_files and set(s_files) <= set(m_files)
    for off, smf in s_files.items():
        assert bytes(smf.mm) == bytes(m_files[off].mm), f"file {off} differs"


def slave_bodies(slave: MessageStore, queue_id: int) -> list[bytes]:
    wait_dispatched(slave)
    out: list[bytes] = []
    offset = slave.get_min_offset_in_queue("T", queue_id)
    while True:
        g = slave.get_message("g", "T", queue_id, offset, 32)
        if not g.messages:
            return out
        out.extend(m.body for m in g.messages)
        offset = g.next_begin_offset


# ---- replication ------------------------------------------------------------------------------


def test_slave_log_is_byte_identical_over_rolls_and_blanks(stores: Any) -> None:
    master = stores("m", broker_role="ASYNC_MASTER", ha_enable=True)
    put_many(master, 300)  # before the slave: it catches up from the last file only
    slave = stores("s", broker_role="SLAVE", ha_master_address=master_addr(master))
    # a slave that asks for 0 gets the master's last file from its start
    first_sent = master.max_phy_offset - master.max_phy_offset % FILE
    caught_up(master, slave)
    assert slave.commit_log.min_offset == first_sent
    results = put_many(master, 700, start=300)
    caught_up(master, slave)
    assert len(master.commit_log.queue.files) >= 6  # rolls, each ending in a BLANK record
    assert_same_bytes(master, slave)
    # the slave dispatched what it received: consume queues, index, reads
    sent = [r for r in results]
    for q in range(3):
        got = slave_bodies(slave, q)
        want = [body_of(i) for i in range(300, 1000) if i % 3 == q]
        assert got[-len(want) :] == want
    q = slave.query_message("T", "k999")
    assert [m.body for m in q.messages] == [body_of(999)]
    assert sent[-1].wrote_offset + sent[-1].wrote_bytes == slave.max_phy_offset
    # the slave refuses writes
    r = slave.put_message(Message("T", b"x", 0))
    assert r.status is S.SERVICE_NOT_AVAILABLE
    # statistics on both sides (the master takes the slave's last report on its reader thread)
    assert wait_until(lambda: master.statistics().ha.slaves[0].lag_bytes == 0)  # type: ignore[union-attr]
    st = master.statistics().ha
    assert isinstance(st, HAStatistics)
    assert st.connection_count == 1 and st.slaves[0].state == ConnectionState.TRANSFER.value
    assert st.slaves[0].lag_bytes == 0 and st.push2slave_max_offset == master.max_phy_offset
    info = master.runtime_info()
    assert info["haConnectionCount"] == "1"
    assert f"haSlave_{st.slaves[0].address}" in info
    sinfo = slave.runtime_info()
    assert sinfo["haClientState"] == ClientState.TRANSFER.value
    assert sinfo["haMasterAddress"] == master_addr(master)


def test_sync_master_put_returns_only_after_the_slave_holds_it(stores: Any) -> None:
    master = stores("m", broker_role="SYNC_MASTER", flush_disk_type="SYNC_FLUSH")
    slave = stores("s", broker_role="SLAVE", ha_master_address=master_addr(master))
    assert wait_until(lambda: master.ha.connection_count() == 1)
    for i in range(200):
        r = master.put_message(Message("T", body_of(i), i % 3))
        assert r.status is S.PUT_OK
        # the slave holds the record when the producer hears PUT_OK
        assert slave.commit_log.max_offset >= r.wrote_offset + r.wrote_bytes
    # batches and the non-blocking put, from several threads at once
    futures: list[Future[Any]] = []
    lock = threading.Lock()

    def producer(k: int) -> None:
        for j in range(50):
            if j % 5 == 0:
                f = master.put_messages_async([Message("T", b"b%d-%d" % (k, j), 1)] * 3)
            else:
                f = master.put_message_async(Message("T", b"a%d-%d" % (k, j), k % 3))
            with lock:
                futures.append(f)

    threads = [threading.Thread(target=producer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for f in futures:
        r = f.result(timeout=60)
        assert r.status is S.PUT_OK
        assert master.ha.push2slave_max_offset >= r.wrote_offset + r.wrote_bytes
    caught_up(master, slave)
    assert_same_bytes(master, slave)
    # WAIT=false does not wait for the slave (nor for the disk)
    r = master.put_message(Message("T", b"nowait", 0, properties={"WAIT": "false"}))
    assert r.status is S.PUT_OK


def test_slave_gone_then_back(stores: Any, tmp_path: Path) -> None:
    master = stores("m", broker_role="SYNC_MASTER", sync_flush_timeout=300)
    # no slave connected: SLAVE_NOT_AVAILABLE, not a wait ending in FLUSH_SLAVE_TIMEOUT (the
    # record is stored all the same)
    r = master.put_message(Message("T", b"alone", 0))
    assert r.status is S.SLAVE_NOT_AVAILABLE
    f = master.put_message_async(Message("T", b"alone-async", 0))
    assert f.result(timeout=60).status is S.SLAVE_NOT_AVAILABLE
    slave = stores("s", broker_role="SLAVE", ha_master_address=master_addr(master))
    caught_up(master, slave)
    assert master.put_message(Message("T", b"with-slave", 0)).status is S.PUT_OK
    # the slave stops answering: the connection stays until housekeeping, puts time out
    assert slave.ha.client is not None
    slave.ha.client.stop()
    began = time.monotonic()
    r = master.put_message(Message("T", b"unanswered", 0))
    waited = time.monotonic() - began
    assert r.status in (S.FLUSH_SLAVE_TIMEOUT, S.SLAVE_NOT_AVAILABLE)
    if r.status is S.FLUSH_SLAVE_TIMEOUT:
        assert 0.25 <= waited < 60  # its 300 ms at least, and it ended
    assert wait_until(lambda: master.ha.connection_count() == 0)
    assert master.put_message(Message("T", b"gone", 0)).status is S.SLAVE_NOT_AVAILABLE
    st = master.statistics().ha
    assert st is not None and st.slave_not_available >= 2
    # a slave again (a fresh one on the same directory): PUT_OK once it caught up
    slave.shutdown()
    slave2 = stores("s", broker_role="SLAVE", ha_master_address=master_addr(master))
    caught_up(master, slave2)
    assert master.put_message(Message("T", b"back", 0)).status is S.PUT_OK
    assert_same_bytes(master, slave2)
    assert slave_bodies(slave2, 0)[-1] == b"back"


def test_slave_too_far_behind_is_not_available(stores: Any) -> None:
    master = stores("m", broker_role="SYNC_MASTER", ha_slave_fallbehind_max=FILE // 2)
    put_blocked = master.put_message(Message("T", b"x" * 100, 0))
    assert put_blocked.status is S.SLAVE_NOT_AVAILABLE
    # a slave connected but holding nothing yet (a raw peer that reports 0 and never acks)
    with socket.create_connection(("127.0.0.1", master.ha.listen_port)) as peer:
        peer.sendall(REPORT.pack(0))
        assert wait_until(lambda: master.ha.connection_count() == 1)
        for _i in range(400):  # past FILE // 2 bytes beyond the last ack
            master.put_message_async(Message("T", b"y" * 100, 0, properties={"WAIT": "false"}))
        r = master.put_message(Message("T", b"z", 0))
        assert r.status is S.SLAVE_NOT_AVAILABLE


def test_several_slaves_and_a_slave_learning_its_master(stores: Any) -> None:
    master = stores("m", broker_role="SYNC_MASTER")
    s1 = stores("s1", broker_role="SLAVE", ha_master_address=master_addr(master))
    s2 = stores("s2", broker_role="SLAVE")  # no address yet: waits
    assert wait_until(lambda: master.ha.connection_count() == 1)
    assert s2.ha.statistics().client_state == ClientState.READY.value
    put_many(master, 50)
    s2.ha.update_master_address(master_addr(master))  # as the name server tells a broker
    assert wait_until(lambda: master.ha.connection_count() == 2)
    put_many(master, 150, start=50)
    for s in (s1, s2):
        caught_up(master, s)
        assert_same_bytes(master, s)
    st = master.statistics().ha
    assert st is not None and sorted(x.state for x in st.slaves) == ["TRANSFER", "TRANSFER"]


def test_write_buffers_send_only_committed_data(stores: Any) -> None:
    master = stores(
        "m",
        broker_role="ASYNC_MASTER",
        ha_enable=True,
        transient_store_pool_enable=True,
        transient_store_pool_size=3,
        mlock_write_buffers=False,
        commit_interval_commit_log=60_000,  # commits only when forced below
        commit_commit_log_least_pages=10_000,
        commit_commit_log_thorough_interval=60_000,
    )
    slave = stores("s", broker_role="SLAVE", ha_master_address=master_addr(master))
    assert wait_until(lambda: master.ha.connection_count() == 1)
    put_many(master, 30)
    written = master.commit_log.written_end()
    assert master.commit_log.max_offset < written  # still in the write buffer
    time.sleep(0.3)
    assert slave.max_phy_offset <= master.commit_log.max_offset
    master.commit_log.queue.commit_all(0)
    caught_up(master, slave)
    assert slave.max_phy_offset == written
    assert_same_bytes(master, slave)


# ---- raw peers: the wire protocol -------------------------------------------------------------


def read_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return out


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    offset, size = HEADER.unpack(read_exact(sock, HEADER_SIZE))
    return offset, read_exact(sock, size)


def closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except (TimeoutError, ConnectionError):
        return False


def test_raw_slave_frames_heartbeats_and_forged_offsets(stores: Any) -> None:
    master = stores("m", broker_role="ASYNC_MASTER", ha_enable=True, ha_transfer_batch_size=1000)
    put_many(master, 120)
    end = master.max_phy_offset
    last_file = end - end % FILE
    with socket.create_connection(("127.0.0.1", master.ha.listen_port), timeout=5) as peer:
        peer.sendall(REPORT.pack(0))
        got = b""
        offset = last_file
        while offset < end:
            off, data = read_frame(peer)
            assert off == offset and 0 < len(data) <= 1000
            got += data
            offset += len(data)
        assert got == bytes(master.commit_log.queue.files[-1].mm[: end - last_file])
        # nothing new: an empty frame at the next offset, every heartbeat interval
        peer.sendall(REPORT.pack(end))
        off, data = read_frame(peer)
        assert (off, data) == (end, b"")
        # a report beyond the master's end: disconnected
        peer.sendall(REPORT.pack(end + 1))
        assert closed_by_peer(peer, 60)
    assert wait_until(lambda: master.ha.connection_count() == 0)
    # a first report beyond the end is refused too; one inside the log is served from there
    with socket.create_connection(("127.0.0.1", master.ha.listen_port), timeout=5) as peer:
        peer.sendall(REPORT.pack(end + 4096))
        assert closed_by_peer(peer, 60)
    mid = master.commit_log.queue.files[1].from_offset
    with socket.create_connection(("127.0.0.1", master.ha.listen_port), timeout=5) as peer:
        peer.sendall(REPORT.pack(mid))
        off, data = read_frame(peer)
        assert off == mid and data == bytes(master.commit_log.queue.files[1].mm[: len(data)])
        # reports split across writes, several in one write: the newest counts
        peer.sendall(REPORT.pack(mid)[:3])
        time.sleep(0.05)
        peer.sendall(REPORT.pack(mid)[3:] + REPORT.pack(mid + 10) + REPORT.pack(mid + len(data)))
        conn = master.ha.connections[0]
        assert wait_until(lambda: conn.ack_offset == mid + len(data))
        # push2SlaveMaxOffset only grows: the first peer's acknowledgement stays
        assert master.ha.push2slave_max_offset == end


def test_silent_slave_is_closed_after_housekeeping(stores: Any) -> None:
    master = stores("m", broker_role="ASYNC_MASTER", ha_enable=True, ha_housekeeping_interval=1200)
    began = time.monotonic()  # before the connection: its silence is counted from later
    with socket.create_connection(("127.0.0.1", master.ha.listen_port)) as peer:
        assert wait_until(lambda: master.ha.connection_count() == 1)
        st = master.statistics().ha
        assert st is not None and st.slaves[0].state == ConnectionState.HANDSHAKE.value
        assert closed_by_peer(peer, 60)
        assert time.monotonic() - began >= 1.2  # not before the housekeeping interval
    # the connection leaves the table just after it closes its socket
    assert wait_until(lambda: master.ha.connection_count() == 0)


class FakeMaster:
    """A master speaking the protocol by hand: records the reports of each connection and
    sends what the test gives it."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(60)
        self.port = self.server.getsockname()[1]

    def accept(self) -> socket.socket:
        conn, _ = self.server.accept()
        conn.settimeout(60)
        return conn

    def close(self) -> None:
        self.server.close()


def test_slave_refuses_a_frame_at_the_wrong_offset_and_reconnects(stores: Any) -> None:
    fake = FakeMaster()
    try:
        slave = stores("s", broker_role="SLAVE", ha_master_address=f"127.0.0.1:{fake.port}")
        conn = fake.accept()
        assert REPORT.unpack(read_exact(conn, 8)) == (0,)  # an empty slave asks for 0
        # a chunk at the start of a file is taken (zeroes: dispatch sees no record yet)
        chunk = bytes(1024)
        conn.sendall(HEADER.pack(FILE, len(chunk)) + chunk)
        assert REPORT.unpack(read_exact(conn, 8)) == (FILE + len(chunk),)
        assert slave.max_phy_offset == FILE + len(chunk)
        # a frame that does not start at the slave's end: connection closed, nothing written
        conn.sendall(HEADER.pack(FILE + len(chunk) + 8, 8) + b"\x00" * 8)
        assert closed_by_peer(conn, 60)
        conn.close()
        assert slave.max_phy_offset == FILE + len(chunk)
        conn = fake.accept()  # it comes back, reporting what it holds
        assert REPORT.unpack(read_exact(conn, 8)) == (FILE + len(chunk),)
        # a frame that would cross the end of a file
        conn.sendall(HEADER.pack(FILE + len(chunk), FILE) + b"\x00" * FILE)
        assert closed_by_peer(conn, 60)
        conn.close()
        assert slave.max_phy_offset == FILE + len(chunk)
        # the slave's heartbeats: a report every heartbeat interval
        conn = fake.accept()
        read_exact(conn, 8)
        assert REPORT.unpack(read_exact(conn, 8)) == (FILE + len(chunk),)  # and the next one
        conn.close()
    finally:
        fake.close()


def test_master_heartbeat_keeps_an_idle_slave_connected(stores: Any) -> None:
    """Heartbeats every 100 ms both ways keep a connection with nothing to send open past
    twice the housekeeping interval (2 s of silence would close it)."""
    quick = {"ha_send_heartbeat_interval": 100, "ha_housekeeping_interval": 2000}
    master = stores("m", broker_role="ASYNC_MASTER", ha_enable=True, **quick)
    slave = stores("s", broker_role="SLAVE", ha_master_address=master_addr(master), **quick)
    assert wait_until(lambda: master.ha.connection_count() == 1)
    client = slave.ha.client
    assert client is not None
    connects = client.connects
    quiet_until = time.monotonic() + 4.0  # twice the housekeeping interval, nothing to send
    while time.monotonic() < quiet_until:
        assert master.ha.connection_count() == 1 and client.connects == connects
        time.sleep(0.1)
    put_many(master, 5)
    caught_up(master, slave)


# ---- the store's own additions ----------------------------------------------------------------


def test_delete_topic(stores: Any) -> None:
    store = stores("m")
    for i in range(20):
        store.put_message(Message("Gone", b"g%d" % i, i % 4))
        store.put_message(Message("Kept", b"k%d" % i, i % 2))
    wait_dispatched(store)
    gone_dir = Path(store.config.store_path_root_dir) / "consumequeue" / "Gone"
    assert gone_dir.is_dir()
    assert store.delete_topic("Gone") == 4
    assert store.delete_topic("Gone") == 0
    assert store.delete_topic("Never") == 0
    assert not any(t == "Gone" for t, _q in store.commit_log.topic_queue_table)
    assert "Gone" not in store.consume_queues.queues
    assert not any(p.is_file() for p in gone_dir.rglob("*")) if gone_dir.exists() else True
    assert store.get_max_offset_in_queue("Gone", 0) == 0
    assert store.get_max_offset_in_queue("Kept", 1) == 10
    # the topic starts again from offset 0
    r = store.put_message(Message("Gone", b"again", 0))
    assert r.status is S.PUT_OK and r.queue_offset == 0
    wait_dispatched(store)
    g = store.get_message("g", "Gone", 0, 0, 8)
    assert [m.body for m in g.messages] == [b"again"]


def test_ha_configuration_from_broker_conf(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "brokerRole=SLAVE\nlistenPort=20911\nhaMasterAddress=10.0.0.1:20912\n"
        "haSendHeartbeatInterval=1000\nhaHousekeepingInterval=3000\n"
        "haTransferBatchSize=65536\nhaSlaveFallbehindMax=1048576\n"
    )
    cfg = StoreConfig.from_broker_conf(conf)
    assert cfg.broker_role == "SLAVE" and cfg.ha_master_address == "10.0.0.1:20912"
    assert cfg.ha_listen_port == 20912  # listenPort + 1, as RocketMQ's broker
    assert (cfg.ha_send_heartbeat_interval, cfg.ha_housekeeping_interval) == (1000, 3000)
    assert (cfg.ha_transfer_batch_size, cfg.ha_slave_fallbehind_max) == (65536, 1048576)
    assert (
        StoreConfig.from_mapping({"listenPort": "20911", "haListenPort": "30000"}).ha_listen_port
        == 30000
    )
    assert not StoreConfig().ha_listens and StoreConfig(broker_role="SYNC_MASTER").ha_listens
    assert StoreConfig(ha_enable=True).ha_listens


def test_ha_port_in_use_is_an_error(stores: Any, tmp_path: Path) -> None:
    master = stores("m", broker_role="SYNC_MASTER")
    other = MessageStore(
        ha_config(tmp_path / "o", broker_role="SYNC_MASTER", ha_listen_port=master.ha.listen_port)
    )
    with pytest.raises(OSError, match="cannot listen"):
        other.__enter__()
    assert not other.running
    # the directory was released: it opens once the port is free
    with MessageStore(ha_config(tmp_path / "o", broker_role="SYNC_MASTER")) as again:
        assert again.ha.listen_port > 0
