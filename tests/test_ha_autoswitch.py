"""Controller-mode replication in one process (RocketMQ 5's AutoSwitch HA): the epoch file's
format and consistent point, stores switched between master and slave by hand (as the broker
does on the controller's word), the SyncStateSet's acknowledgements, the confirm offset that
holds consumers back, the cut of a divergent tail when a former master rejoins, the lease, and
a raw slave speaking the wire protocol."""

from __future__ import annotations

import dataclasses
import socket
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore import Message, MessageStore, PutMessageStatus, StoreConfig
from rocketstore.store._errors import CorruptFileError
from rocketstore.store.ha._auto_service import AutoSwitchHAService
from rocketstore.store.ha._auto_wire import (
    HANDSHAKE,
    MASTER_HANDSHAKE,
    MASTER_TRANSFER,
    SLAVE_HANDSHAKE,
    SLAVE_TRANSFER,
    TRANSFER,
    decode_entries,
)
from rocketstore.store.ha._epoch import (
    EpochEntry,
    EpochFile,
    consistent_point,
    decode,
    encode,
)
from support.waits import wait_until

FILE = 64 * 1024
S = PutMessageStatus
E = EpochEntry


# ---- the epoch file -------------------------------------------------------------------------


def test_epoch_file_text_is_rocketmqs_checkpoint_format(tmp_path: Path) -> None:
    f = EpochFile(tmp_path / "epochFileCheckpoint")
    assert f.append(1, 0) and f.append(2, 720)
    text = (tmp_path / "epochFileCheckpoint").read_text()
    lines = text.split("\n")
    assert lines[0] == "2" and lines[2:] == ["1-0", "2-720", ""]
    import zlib

    assert int(lines[1]) == zlib.crc32(b"1-0\n2-720\n") & 0x7FFFFFFF
    assert EpochFile(tmp_path / "epochFileCheckpoint").load() == [E(1, 0), E(2, 720)]


def test_epoch_file_refuses_older_epochs_and_keeps_an_empty_one(tmp_path: Path) -> None:
    f = EpochFile(tmp_path / "e")
    assert f.append(3, 100)
    assert not f.append(2, 200)  # older epoch
    assert not f.append(4, 50)  # starts before the last
    assert f.append(4, 100)  # epoch 3 holds no data; it stays, shared with other replicas
    assert f.entries() == [E(3, 100), E(4, 100)]
    assert f.find_by_offset(100) == E(4, 100)
    # a replica that only saw epoch 3 shares it with this log
    assert consistent_point([E(3, 100)], 100, f.entries(), 500) == 100


def test_epoch_file_falls_back_to_its_backup(tmp_path: Path) -> None:
    path = tmp_path / "e"
    f = EpochFile(path)
    f.append(1, 0)
    f.append(2, 10)  # the backup now holds [1-0]
    path.write_text("2\n12345\n1-0\n2-10\n")  # a CRC that does not match
    assert EpochFile(path).load() == [E(1, 0)]
    (tmp_path / "e.bak").write_text("garbage")
    with pytest.raises(CorruptFileError):
        EpochFile(path).load()


def test_epoch_file_decode_rejects_bad_counts_and_order() -> None:
    good = encode([E(1, 0), E(2, 5)])
    assert decode(good, "x") == [E(1, 0), E(2, 5)]
    with pytest.raises(CorruptFileError):
        decode(b"3\n0\n1-0\n2-5\n", "x")
    with pytest.raises(CorruptFileError):
        decode(b"2\n0\n2-0\n1-5\n", "x")
    assert decode(b"1\n0\n7-9\n", "x") == [E(7, 9)]  # CRC 0: not checked, as RocketMQ


def test_epoch_file_truncations(tmp_path: Path) -> None:
    f = EpochFile(tmp_path / "e")
    for epoch, start in ((1, 0), (2, 100), (3, 250)):
        f.append(epoch, start)
    f.truncate_suffix_by_offset(250)
    assert f.entries() == [E(1, 0), E(2, 100)]
    f.truncate_prefix_by_offset(100)
    assert f.entries() == [E(2, 100)]
    f.truncate_suffix_by_epoch(2)
    assert f.entries() == [] and not (tmp_path / "e").exists()
    assert f.find_by_offset(5) is None


@pytest.mark.parametrize(
    ("mine", "my_end", "theirs", "their_end", "point"),
    [
        # a slave behind its master: keeps everything
        ([E(1, 0)], 500, [E(1, 0)], 900, 500),
        # a former master with a tail the new master never had
        ([E(1, 0)], 900, [E(1, 0), E(2, 600)], 1000, 600),
        # both wrote in epochs of their own after epoch 1
        ([E(1, 0), E(2, 600)], 800, [E(1, 0), E(3, 650)], 700, 600),
        # the same epoch 2 on both sides, the slave shorter
        ([E(1, 0), E(2, 600)], 640, [E(1, 0), E(2, 600), E(3, 700)], 900, 640),
        # a master elected with an empty log: nothing of epoch 2 there, all of it cut
        ([E(2, 0)], 100, [E(3, 0)], 100, 0),
        ([E(1, 20), E(2, 50)], 100, [E(3, 0)], 300, 0),
        # a master whose epochs begin after this log's: what it holds before them is unknown
        ([E(1, 0), E(2, 50)], 100, [E(3, 80)], 300, -1),
        # nothing in common, and the master is not newer
        ([E(3, 0)], 100, [E(2, 0)], 100, -1),
    ],
)
def test_consistent_point(
    mine: list[EpochEntry], my_end: int, theirs: list[EpochEntry], their_end: int, point: int
) -> None:
    assert consistent_point(mine, my_end, theirs, their_end) == point


# ---- stores switched by hand ----------------------------------------------------------------


def cm_config(root: Path, **over: Any) -> StoreConfig:
    base = StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=FILE,
        mapped_file_size_consume_queue=20 * 200,
        max_hash_slot_num=1000,
        max_index_num=4000,
        flush_interval_commit_log=10,
        ha_listen_port=0,
        ha_send_heartbeat_interval=200,
        ha_housekeeping_interval=3000,
        ha_reconnect_interval=100,
        sync_flush_timeout=1000,
        enable_controller_mode=True,
        all_ack_in_sync_state_set=True,
        broker_role="SLAVE",
    )
    return dataclasses.replace(base, **over)


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Callable[..., MessageStore]]:
    opened: list[MessageStore] = []

    def open_(name: str, **over: Any) -> MessageStore:
        s = MessageStore(cm_config(tmp_path / name, **over))
        s.load()
        s.start()
        opened.append(s)
        return s

    yield open_
    for s in opened:
        s.shutdown()


def ha(store: MessageStore) -> AutoSwitchHAService:
    assert isinstance(store.ha, AutoSwitchHAService)
    return store.ha


def ha_addr(store: MessageStore) -> str:
    return f"127.0.0.1:{ha(store).listen_port}"


def put(store: MessageStore, body: bytes, topic: str = "T") -> PutMessageStatus:
    return store.put_message(Message(topic, body, 0, keys=[body.decode()])).status


def log_bytes(store: MessageStore, end: int | None = None) -> bytes:
    out = b""
    offset = 0
    stop = store.max_phy_offset if end is None else end
    while offset < stop:
        r = store.commit_log.get_data(offset)
        assert r is not None
        try:
            out += bytes(r.buffer[: min(r.size, stop - offset)])
            offset += min(r.size, stop - offset)
        finally:
            r.release()
    return out


def pair(stores: Callable[..., MessageStore], **over: Any) -> tuple[MessageStore, MessageStore]:
    """A master (id 1, epoch 1) and a slave (id 2) in its SyncStateSet."""
    a, b = stores("a", **over), stores("b", **over)
    assert ha(a).change_to_master(1, 1, frozenset({1}), 1)
    proposals: list[frozenset[int]] = []
    ha(a).in_sync.on_propose = proposals.append
    assert ha(b).change_to_slave(1, 2, ha_addr(a))
    assert wait_until(lambda: proposals == [frozenset({1, 2})], 10)
    assert ha(a).in_sync.set_sync_state_set(frozenset({1, 2}), 2)
    return a, b


def test_a_store_in_controller_mode_takes_no_writes_without_a_role(
    stores: Callable[..., MessageStore],
) -> None:
    a = stores("a")
    assert put(a, b"x") is S.SERVICE_NOT_AVAILABLE
    assert ha(a).change_to_master(1, 1, frozenset({1}), 1)
    assert put(a, b"x") is S.PUT_OK
    assert a.is_master and ha(a).epochs.entries() == [E(1, 0)]


def test_slave_replicates_and_joins_the_sync_state_set(
    stores: Callable[..., MessageStore],
) -> None:
    a, b = pair(stores)
    for i in range(20):
        assert put(a, f"m{i}".encode()) is S.PUT_OK
    # every acknowledged put is held by the slave: it was in the set
    assert b.max_phy_offset == a.max_phy_offset
    assert log_bytes(a) == log_bytes(b)
    assert ha(b).epochs.entries() == [E(1, 0)]
    stats = ha(a).replica_statistics()
    assert stats.sync_state_set == (1, 2) and stats.confirm_offset == a.max_phy_offset


def test_consumers_see_only_what_the_set_holds(stores: Callable[..., MessageStore]) -> None:
    a, b = pair(stores, sync_flush_timeout=500)
    assert put(a, b"held") is S.PUT_OK
    assert wait_until(lambda: a.get_max_offset_in_queue("T", 0) == 1)
    ha(b).change_to_master(2, 2, frozenset({2}), 1)  # the slave goes away from a
    status = put(a, b"only-on-a")
    assert status is S.FLUSH_SLAVE_TIMEOUT  # the set {1, 2} never held it
    # written to a's log, but not dispatched: consumers of a never see it
    assert a.max_phy_offset > ha(a).confirm_offset()
    assert a.get_max_offset_in_queue("T", 0) == 1


def test_a_former_master_cuts_what_the_new_master_never_had(
    stores: Callable[..., MessageStore],
) -> None:
    a, b = pair(stores, sync_flush_timeout=300)
    for i in range(5):
        assert put(a, f"both-{i}".encode()) is S.PUT_OK
    shared = a.max_phy_offset
    # b leaves; the controller shrinks the set to a alone, a writes (and dispatches) more
    ha(b).change_to_master(2, 2, frozenset({2}), 1)
    assert wait_until(lambda: not ha(a).connections, 5)
    ha(a).in_sync.set_sync_state_set(frozenset({1}), 3)
    for i in range(5):
        assert put(a, f"a-only-{i}".encode()) is S.PUT_OK
    assert wait_until(lambda: a.get_max_offset_in_queue("T", 0) == 10)
    assert a.query_message("T", "a-only-0").messages
    # b, master of epoch 2, writes its own; a rejoins as b's slave
    assert put(b, b"b-epoch-2") is S.PUT_OK
    assert ha(a).change_to_slave(2, 1, ha_addr(b))
    assert wait_until(lambda: a.max_phy_offset == b.max_phy_offset and a.max_phy_offset > 0, 10)
    assert wait_until(lambda: log_bytes(a) == log_bytes(b), 5)
    assert ha(a).epochs.entries() == [E(1, 0), E(2, shared)]
    stats = ha(a).replica_statistics()
    assert stats.truncations == 1 and stats.bytes_truncated > 0
    # the consume queue and the index lost the cut records, and took b's
    assert wait_until(lambda: a.get_max_offset_in_queue("T", 0) == 6)
    got = a.get_message("g", "T", 0, 5, 10)
    assert [m.body for m in got.messages] == [b"b-epoch-2"]
    assert not a.query_message("T", "a-only-0").messages


def test_the_new_master_rebuilds_queue_offsets_over_its_whole_log(
    stores: Callable[..., MessageStore],
) -> None:
    a, b = pair(stores, sync_flush_timeout=300)
    for i in range(3):
        assert put(a, f"m{i}".encode()) is S.PUT_OK
    # b holds records its confirm offset has not reached (not dispatched there yet)
    assert b.max_phy_offset == a.max_phy_offset
    ha(a).change_to_slave(2, 1, "")
    assert ha(b).change_to_master(2, 2, frozenset({2}), 1)
    r = b.put_message(Message("T", b"after", 0))
    assert r.status is S.PUT_OK and r.queue_offset == 3


def test_min_in_sync_replicas_refuses_writes_while_the_set_is_small(
    stores: Callable[..., MessageStore],
) -> None:
    a = stores("a", min_in_sync_replicas=2)
    ha(a).change_to_master(1, 1, frozenset({1}), 1)
    r = a.put_message(Message("T", b"x", 0))
    assert r.status is S.IN_SYNC_REPLICAS_NOT_ENOUGH and not r.ok
    assert a.max_phy_offset == 0  # refused before it was written
    b = stores("b", min_in_sync_replicas=2)
    ha(a).in_sync.on_propose = lambda members: None
    ha(b).change_to_slave(1, 2, ha_addr(a))
    # a proposal out counts as RocketMQ counts it (the larger of the two sets)
    assert wait_until(lambda: ha(a).in_sync.proposed == frozenset({1, 2}), 10)
    ha(a).in_sync.set_sync_state_set(frozenset({1, 2}), 2)
    assert put(a, b"x") is S.PUT_OK


def test_a_master_whose_lease_ran_out_acknowledges_nothing(
    stores: Callable[..., MessageStore],
) -> None:
    a, _b = pair(stores)
    now = a.clock.monotonic()
    ha(a).in_sync.renew_lease(now + 60)
    assert put(a, b"ok") is S.PUT_OK
    ha(a).in_sync.renew_lease(now - 1)  # the standing was last confirmed too long ago
    r = a.put_message(Message("T", b"late", 0))
    assert r.status is S.SERVICE_NOT_AVAILABLE and "lease" in (r.error or "")
    ha(a).fence("the controller cannot be reached")
    r = a.put_message(Message("T", b"fenced", 0))
    assert r.status is S.SERVICE_NOT_AVAILABLE and "fenced" in (r.error or "")
    end = a.max_phy_offset
    ha(a).fence(None)
    ha(a).in_sync.renew_lease(now + 60)
    assert put(a, b"again") is S.PUT_OK and a.max_phy_offset > end


def test_shrink_drops_a_slave_that_is_gone(stores: Callable[..., MessageStore]) -> None:
    a, b = pair(stores, ha_max_time_slave_not_catchup=200)
    proposals: list[frozenset[int]] = []
    ha(a).in_sync.on_propose = proposals.append
    b.shutdown()
    # the closed connection proposes the smaller set at once; writes wait for it until the
    # controller agrees
    assert wait_until(lambda: frozenset({1}) in proposals, 10)
    assert ha(a).in_sync.in_force() == frozenset({1, 2})
    ha(a).in_sync.set_sync_state_set(frozenset({1}), 3)
    assert put(a, b"alone") is S.PUT_OK


# ---- a raw slave on the wire ----------------------------------------------------------------


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "connection closed"
        out += chunk
    return out


def test_wire_handshake_and_transfer_frames(stores: Callable[..., MessageStore]) -> None:
    a = stores("a")
    ha(a).change_to_master(3, 1, frozenset({1}), 1)
    for i in range(3):
        assert put(a, f"m{i}".encode()) is S.PUT_OK
    with socket.create_connection(("127.0.0.1", ha(a).listen_port), timeout=5) as sock:
        sock.sendall(SLAVE_HANDSHAKE.pack(HANDSHAKE, 0, 0, 7))
        state, size, max_offset, last_epoch = MASTER_HANDSHAKE.unpack(
            recv_exactly(sock, MASTER_HANDSHAKE.size)
        )
        assert (state, max_offset, last_epoch) == (HANDSHAKE, a.max_phy_offset, 3)
        assert decode_entries(recv_exactly(sock, size)) == [(3, 0)]
        sock.sendall(SLAVE_TRANSFER.pack(TRANSFER, 0))
        got = b""
        while len(got) < a.max_phy_offset:
            head = recv_exactly(sock, MASTER_TRANSFER.size)
            state, n, offset, epoch, start, _confirm = MASTER_TRANSFER.unpack(head)
            assert (state, epoch, start, offset) == (TRANSFER, 3, 0, len(got))
            got += recv_exactly(sock, n)
        assert got == log_bytes(a)
        # an acknowledgement beyond the master's end closes the connection
        sock.sendall(SLAVE_TRANSFER.pack(TRANSFER, a.max_phy_offset + 1000))
        assert wait_until(lambda: not ha(a).connections, 5)
    assert struct.calcsize(">iiqiqq") == 36


def test_recovery_dispatches_nothing_the_set_did_not_hold(
    stores: Callable[..., MessageStore], tmp_path: Path
) -> None:
    """A replica that crashed with records past its confirm offset: recovery (abnormal, the
    abort file is there) puts none of them in the consume queues; they wait for the confirm
    offset as before the crash."""
    import shutil

    a = stores("a", sync_flush_timeout=300)
    ha(a).change_to_master(1, 1, frozenset({1}), 1)
    for i in range(3):
        assert put(a, f"held-{i}".encode()) is S.PUT_OK
    assert wait_until(lambda: a.get_max_offset_in_queue("T", 0) == 3)
    ha(a).in_sync.set_sync_state_set(frozenset({1, 2}), 2)  # broker 2 never connects
    for i in range(2):
        assert put(a, f"unheld-{i}".encode()) is S.FLUSH_SLAVE_TIMEOUT
    assert a.get_max_offset_in_queue("T", 0) == 3
    crashed = tmp_path / "crashed"
    shutil.copytree(a.root, crashed)  # the files as a kill -9 leaves them (abort file too)
    assert (crashed / "abort").exists()
    b = MessageStore(cm_config(crashed))
    b.load()
    try:
        assert b.load_result is not None and b.load_result.mode == "abnormal"
        assert b.max_phy_offset == a.max_phy_offset  # the records stay in the log
        assert b.get_max_offset_in_queue("T", 0) == 3  # and out of the queues
    finally:
        b.shutdown()
