"""Who may replicate, in one process: master and slave stores on loopback with the HA port's
proof of membership on (``store/ha/_auth.py``), raw peers speaking both HA protocols (a peer
without the secret, one replaying an earlier answer, one claiming an id that is connected), and
the same ports with the proof off, where the bytes stay RocketMQ's."""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore import Message, MessageStore, PutMessageStatus, StoreConfig
from rocketstore.store.ha import HAGuard
from rocketstore.store.ha._auth import (
    ANSWER_HEAD,
    CHALLENGE,
    CHALLENGE_SIZE,
    MAGIC,
    PROTOCOL_4X,
    PROTOCOL_AUTO_SWITCH,
    RESULT_HEAD,
    RESULT_HEAD_SIZE,
    VERSION,
    Answer,
    slave_mac,
)
from rocketstore.store.ha._auto_wire import HANDSHAKE, SLAVE_HANDSHAKE, SLAVE_TRANSFER, TRANSFER
from rocketstore.store.ha._wire import REPORT
from support.ha_stores import GROUP, INNER, Audit, ha_stores
from support.waits import wait_until

S = PutMessageStatus


def guard(audit: Audit, broker_id: int = 1, credentials: Any = INNER) -> HAGuard:
    return HAGuard(credentials, GROUP, broker_id, audit)


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Callable[..., MessageStore]]:
    with ha_stores(tmp_path) as open_:
        yield open_


def put(store: MessageStore, body: bytes = b"x" * 100) -> PutMessageStatus:
    return store.put_message(Message("T", body)).status


def connect(store: MessageStore) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", store.ha.listen_port), timeout=5)
    sock.settimeout(5)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return out


def closed_by_peer(sock: socket.socket, within: float = 10.0) -> bool:
    """Whether the peer closes the connection (everything it sends first is read)."""
    sock.settimeout(within)
    try:
        while True:
            if not sock.recv(4096):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def answer_frame(
    challenge: bytes, protocol: int, broker_id: int, secret: str, access_key: str = INNER[0]
) -> bytes:
    nonce = bytes(range(32))
    a = Answer(protocol, broker_id, nonce, GROUP, access_key, b"")
    mac = slave_mac(secret.encode(), challenge, a)
    name, key = GROUP.encode(), access_key.encode()
    head = ANSWER_HEAD.pack(MAGIC, VERSION, protocol, broker_id, nonce, len(name), len(key))
    return head + name + key + mac


def read_result(sock: socket.socket) -> tuple[int, str]:
    magic, status, size = RESULT_HEAD.unpack(recv_exactly(sock, RESULT_HEAD_SIZE))
    assert magic == MAGIC
    text = recv_exactly(sock, size).decode()
    recv_exactly(sock, 32)
    return status, text


# ---- RocketMQ 4.x's HA port -------------------------------------------------------------------


def test_a_slave_with_the_inner_account_replicates(stores: Callable[..., MessageStore]) -> None:
    audit = Audit()
    master = stores("m", guard(audit, 0), broker_role="SYNC_MASTER")
    slave = stores(
        "s",
        guard(audit, 1),
        broker_role="SLAVE",
        ha_master_address=f"127.0.0.1:{master.ha.listen_port}",
    )
    assert wait_until(lambda: master.ha.connection_count() == 1, 10)
    assert put(master) is S.PUT_OK
    assert wait_until(lambda: slave.max_phy_offset == master.max_phy_offset, 10)
    assert audit.lines == []
    assert slave.ha.statistics().client_state == "TRANSFER"


def test_the_4x_forgery_is_refused(stores: Callable[..., MessageStore]) -> None:
    """A peer without the secret sends what a 4.x slave sends, a report of the master's max
    offset: it is refused (audited), and a SYNC put is not acknowledged."""
    audit = Audit()
    master = stores("m", guard(audit, 0), broker_role="SYNC_MASTER")
    with connect(master) as fake:
        magic, _version, _flags, _nonce = CHALLENGE.unpack(recv_exactly(fake, CHALLENGE_SIZE))
        assert magic == MAGIC
        fake.sendall(REPORT.pack(master.max_phy_offset))
        assert closed_by_peer(fake)
    assert wait_until(lambda: len(audit.lines) == 1, 10), audit.lines
    assert "no authentication answer" in audit.reasons()[0]
    assert put(master) is S.SLAVE_NOT_AVAILABLE  # no slave: the fake never counted as one
    assert master.ha.push2slave_max_offset == 0
    assert master.ha.statistics().refused_peers == 1


def test_a_wrong_secret_and_a_replayed_answer_are_refused(
    stores: Callable[..., MessageStore],
) -> None:
    audit = Audit()
    master = stores("m", guard(audit, 0), broker_role="SYNC_MASTER")
    with connect(master) as peer:
        challenge = CHALLENGE.unpack(recv_exactly(peer, CHALLENGE_SIZE))[3]
        peer.sendall(answer_frame(challenge, PROTOCOL_4X, 1, "not-the-secret"))
        status, text = read_result(peer)
        assert status != 0 and "proof does not hold" in text
        assert closed_by_peer(peer)
    # the right secret is let in; its answer, sent again on a new connection, is not
    with connect(master) as first:
        challenge = CHALLENGE.unpack(recv_exactly(first, CHALLENGE_SIZE))[3]
        answer = answer_frame(challenge, PROTOCOL_4X, 1, INNER[1])
        first.sendall(answer)
        assert read_result(first) == (0, "")
    assert wait_until(lambda: master.ha.connection_count() == 0, 10)
    with connect(master) as replay:
        recv_exactly(replay, CHALLENGE_SIZE)
        replay.sendall(answer)
        status, text = read_result(replay)
        assert status != 0 and "proof does not hold" in text
    assert wait_until(lambda: len(audit.lines) == 2, 10), audit.lines
    assert all(line[1] == INNER[0] for line in audit.lines)


def test_a_second_connection_under_a_connected_id_is_refused(
    stores: Callable[..., MessageStore],
) -> None:
    """Even with the secret: the real slave keeps its place and keeps replicating."""
    audit = Audit()
    master = stores("m", guard(audit, 0), broker_role="SYNC_MASTER")
    slave = stores(
        "s",
        guard(audit, 1),
        broker_role="SLAVE",
        ha_master_address=f"127.0.0.1:{master.ha.listen_port}",
    )
    assert wait_until(lambda: master.ha.connection_count() == 1, 10)
    with connect(master) as dup:
        challenge = CHALLENGE.unpack(recv_exactly(dup, CHALLENGE_SIZE))[3]
        dup.sendall(answer_frame(challenge, PROTOCOL_4X, 1, INNER[1]))
        status, text = read_result(dup)
        assert status != 0 and "connected already" in text
    assert put(master) is S.PUT_OK
    assert wait_until(lambda: slave.max_phy_offset == master.max_phy_offset, 10)
    assert master.ha.statistics().refused_peers == 1
    assert master.ha.connection_count() == 1


def test_a_slave_without_the_secret_is_told_and_does_not_replicate(
    stores: Callable[..., MessageStore],
) -> None:
    audit = Audit()
    master = stores("m", guard(audit, 0), broker_role="SYNC_MASTER")
    slave = stores(
        "s",
        guard(audit, 1, ("innerAK", "another-secret")),
        broker_role="SLAVE",
        ha_master_address=f"127.0.0.1:{master.ha.listen_port}",
    )
    assert wait_until(lambda: "refused" in slave.ha.statistics().client_error, 10)
    assert put(master) is not S.PUT_OK
    assert slave.max_phy_offset == 0


def test_with_the_proof_off_the_4x_bytes_are_rocketmqs(
    stores: Callable[..., MessageStore],
) -> None:
    """No challenge: the master waits for the slave's 8-byte report, then sends a frame."""
    master = stores("m", HAGuard(None, GROUP, 0), broker_role="SYNC_MASTER")
    with connect(master) as peer:
        peer.settimeout(0.5)
        with pytest.raises(TimeoutError):
            peer.recv(1)
        peer.sendall(REPORT.pack(0))
        peer.settimeout(5)
        offset, size = struct.unpack(">qi", recv_exactly(peer, 12))
        assert (offset, size) == (0, 0)


# ---- AutoSwitch (controller mode) -------------------------------------------------------------


def auto_pair(
    stores: Callable[..., MessageStore], audit: Audit, credentials: Any = INNER
) -> tuple[MessageStore, MessageStore]:
    over = {
        "enable_controller_mode": True,
        "all_ack_in_sync_state_set": True,
        "min_in_sync_replicas": 2,
        "broker_role": "SLAVE",
    }
    master = stores("m", guard(audit, 1, credentials), **over)
    slave = stores("s", guard(audit, 2, credentials), **over)
    ms, ss = master.ha.switch, slave.ha.switch
    assert ms is not None and ss is not None
    assert ms.change_to_master(1, 1, frozenset({1, 2}), 1)
    in_sync = ms.in_sync

    def agree(members: frozenset[int]) -> None:  # the controller takes every proposal
        in_sync.set_sync_state_set(members, in_sync.confirmed_epoch + 1)

    in_sync.on_propose = agree
    assert ss.change_to_slave(1, 2, f"127.0.0.1:{master.ha.listen_port}")
    return master, slave


def test_autoswitch_forgery_is_refused_and_changes_nothing(
    stores: Callable[..., MessageStore],
) -> None:
    """A peer without the secret sends the AutoSwitch handshake as the slave and reports the
    master's max offset: refused before its handshake is read; the set and the confirm
    offset stay as the real slave made them."""
    audit = Audit()
    master, slave = auto_pair(stores, audit)
    switch = master.ha.switch
    assert switch is not None
    assert put(master) is S.PUT_OK
    assert wait_until(lambda: slave.max_phy_offset == master.max_phy_offset, 10)
    with connect(master) as fake:
        recv_exactly(fake, CHALLENGE_SIZE)
        fake.sendall(SLAVE_HANDSHAKE.pack(HANDSHAKE, 0, 0, 2))
        fake.sendall(SLAVE_TRANSFER.pack(TRANSFER, master.max_phy_offset + 0))
        assert closed_by_peer(fake)
    assert wait_until(lambda: len(audit.lines) == 1, 10)
    assert "no authentication answer" in audit.reasons()[0]
    assert switch.in_sync.confirmed == frozenset({1, 2})
    assert put(master) is S.PUT_OK  # the real slave still acknowledges
    assert wait_until(lambda: slave.max_phy_offset == master.max_phy_offset, 10)


def test_autoswitch_ids_must_be_known_to_the_controller(
    stores: Callable[..., MessageStore],
) -> None:
    audit = Audit()
    master, _slave = auto_pair(stores, audit)
    switch = master.ha.switch
    assert switch is not None
    asked: list[int] = []
    switch.on_unknown_replica = asked.append
    with connect(master) as peer:
        challenge = CHALLENGE.unpack(recv_exactly(peer, CHALLENGE_SIZE))[3]
        peer.sendall(answer_frame(challenge, PROTOCOL_AUTO_SWITCH, 7, INNER[1]))
        status, text = read_result(peer)
        assert status != 0 and "not in the controller's replica table" in text
    assert asked == [7]
    switch.set_known_replicas(frozenset({1, 2, 7}))
    with connect(master) as peer:
        challenge = CHALLENGE.unpack(recv_exactly(peer, CHALLENGE_SIZE))[3]
        peer.sendall(answer_frame(challenge, PROTOCOL_AUTO_SWITCH, 7, INNER[1]))
        assert read_result(peer) == (0, "")
        # a proven peer's handshake must claim the id it proved
        peer.sendall(SLAVE_HANDSHAKE.pack(HANDSHAKE, 0, 0, 2))
        assert closed_by_peer(peer)
    assert wait_until(lambda: any("a handshake as 2" in r for r in audit.reasons()), 10)
    assert switch.in_sync.confirmed == frozenset({1, 2})


def test_autoswitch_duplicate_id_is_refused_with_the_proof_off(
    stores: Callable[..., MessageStore],
) -> None:
    """RocketMQ's trust (no proof): still, a second connection under the slave's id is refused,
    and its closing does not take the real slave out of the SyncStateSet."""
    audit = Audit()
    master, slave = auto_pair(stores, audit, credentials=None)
    switch = master.ha.switch
    assert switch is not None
    assert put(master) is S.PUT_OK
    with connect(master) as fake:
        fake.sendall(SLAVE_HANDSHAKE.pack(HANDSHAKE, 0, 0, 2))
        fake.sendall(SLAVE_TRANSFER.pack(TRANSFER, master.max_phy_offset))
        assert closed_by_peer(fake)
    assert wait_until(lambda: len(audit.lines) == 1, 10)
    assert "connected already" in audit.reasons()[0]
    assert switch.in_sync.proposed is None and switch.in_sync.confirmed == frozenset({1, 2})
    for _ in range(3):
        assert put(master) is S.PUT_OK
    assert wait_until(lambda: slave.max_phy_offset == master.max_phy_offset, 10)
    assert master.ha.statistics().refused_peers == 1


# ---- the broker's setting ---------------------------------------------------------------------


def test_the_proof_follows_acl_unless_set_and_needs_the_inner_account(tmp_path: Path) -> None:
    from rocketstore.broker._config import BrokerConfig
    from rocketstore.server._broker import ha_guard
    from rocketstore.store._errors import StoreConfigError

    def conf(**keys: str) -> tuple[StoreConfig, BrokerConfig]:
        text = "".join(f"{k}={v}\n" for k, v in {"brokerRole": "SYNC_MASTER", **keys}.items())
        path = tmp_path / "broker.conf"
        path.write_text(text)
        store = StoreConfig.from_broker_conf(path)
        return store, BrokerConfig.from_store_config(store)

    store, broker = conf(aclEnable="true")
    assert broker.ha_auth
    assert ha_guard(store, broker, INNER).enabled
    with pytest.raises(StoreConfigError, match="innerClientAuthenticationCredentials"):
        ha_guard(store, broker, None)  # a SYNC_MASTER must replicate
    store, broker = conf(aclEnable="true", brokerRole="ASYNC_MASTER")
    closed = ha_guard(store, broker, None)  # an ASYNC_MASTER starts; no slave gets in
    assert closed.enabled and closed.credentials is None
    store, broker = conf(aclEnable="true", haAuthEnabled="false")
    assert not ha_guard(store, broker, None).enabled  # RocketMQ's trust, chosen
    store, broker = conf(haAuthEnabled="true")
    assert ha_guard(store, broker, INNER).enabled
    store, broker = conf()
    assert not ha_guard(store, broker, INNER).enabled
    with pytest.raises(StoreConfigError, match="haAuthEnabled"):
        conf(haAuthEnabled="yes")


def test_acl_without_an_inner_account_takes_no_slave(stores: Callable[..., MessageStore]) -> None:
    """Authentication on and nothing to check a proof against: every peer is refused."""
    audit = Audit()
    master = stores("m", HAGuard(None, GROUP, 0, audit, closed=True), broker_role="ASYNC_MASTER",
                    ha_enable=True)  # fmt: skip
    with connect(master) as peer:
        challenge = CHALLENGE.unpack(recv_exactly(peer, CHALLENGE_SIZE))[3]
        peer.sendall(answer_frame(challenge, PROTOCOL_4X, 1, INNER[1]))
        status, text = read_result(peer)
        assert status != 0 and "no inner account" in text
    assert wait_until(lambda: len(audit.lines) == 1, 10)
    assert put(master) is S.PUT_OK  # an ASYNC_MASTER takes writes all the same
