"""Brokers in controller mode, in one process: the project's controller (file backend), a name
server and three rocketstore brokers of one group on a loop thread. The brokers register as
RocketMQ 5.1.4's do (ids from the controller, kept in brokerIdentity), the first becomes master
and the others its slaves in its SyncStateSet; writes are routed to the master and held by every
replica; a master that goes is replaced and comes back as a slave under its own id; an
administrator's election moves the role (NOTIFY_BROKER_ROLE_CHANGED); a master whose controller
is gone stops acknowledging once its lease runs out, and takes writes again when the controller
confirms it; the broker answers GET_BROKER_EPOCH_CACHE and NOTIFY_BROKER_ROLE_CHANGED frames, and
the metrics, the console's cluster view and ``cluster list`` show roles and epochs.

Time-outs are shortened (heartbeats declared dead after 4 s, the controller's scans every 100 ms)
so that a failover takes seconds; every wait is a bounded poll.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketstore.client import Producer
from rocketstore.client._admin import AdminClient
from rocketstore.client._controller import ControllerAdmin
from rocketstore.protocol._controller_bodies import SyncStateSet
from rocketstore.protocol._controller_headers import NotifyBrokerRoleChangedRequest
from rocketstore.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from rocketstore.server import BrokerServer
from rocketstore.store.ha._auto_service import AutoSwitchHAService
from support.replicas import GROUP, Group
from support.waits import wait_until


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    g = Group(tmp_path)
    try:
        yield g
    finally:
        g.close()


def form(g: Group) -> None:
    for name in ("b1", "b2", "b3"):
        g.start_broker(name)
    assert wait_until(g.whole, 60, poll=0.1), g.sync_state()


def send(namesrv: str, count: int, prefix: str, within: float = 30.0) -> list[str]:
    """Send ``count`` messages with one producer, each tried again until acknowledged (a
    failover refuses writes for a moment: IN_SYNC_REPLICAS_NOT_ENOUGH until a slave joins the
    new master's SyncStateSet); the keys acknowledged."""
    import time

    acked = []
    deadline = time.monotonic() + within
    with Producer(namesrv, "replicas-test", timeout=3.0) as p:
        for i in range(count):
            body = f"{prefix}-{i}".encode()
            while time.monotonic() < deadline:
                try:
                    r = p.send("ReplicaTopic", body)
                except Exception:
                    time.sleep(0.1)
                    continue
                if r.status == "SEND_OK":
                    acked.append(body.decode())
                    break
                time.sleep(0.1)
    return acked


def log_bytes(server: BrokerServer) -> bytes:
    store = server.store
    out = b""
    offset = 0
    while offset < store.max_phy_offset:
        r = store.commit_log.get_data(offset)
        assert r is not None
        try:
            out += bytes(r.buffer[: r.size])
            offset += r.size
        finally:
            r.release()
    return out


def test_a_group_registers_elects_and_replicates(group: Group) -> None:
    form(group)
    ids = {n: group.replicas(n).broker_id for n in group.brokers}
    assert sorted(ids.values()) == [1, 2, 3]
    for name, broker_id in ids.items():  # kept for restarts, as RocketMQ's brokerIdentity
        text = (group.root / name / "brokerIdentity").read_text()
        assert text == f"DefaultCluster#{GROUP}#{broker_id}"
        assert not (group.root / name / "brokerIdentity-temp").exists()
    master = group.master()
    assert master is not None and group.replicas(master).master_epoch == 1
    # the name server routes writes to the master (broker id 0), the slaves under their ids
    with AdminClient(group.namesrv.address) as admin:
        assert wait_until(
            lambda: admin.masters().get(GROUP) == group.brokers[master].address, 10, poll=0.1
        )
        slaves = {b.broker_id for b in admin.brokers() if b.broker_id != 0}
    assert slaves == {ids[n] for n in group.brokers if n != master}
    acked = send(group.namesrv.address, 30, "a")
    assert len(acked) == 30
    # acknowledged means held by the whole SyncStateSet: every replica has the bytes
    logs = {n: log_bytes(s) for n, s in group.brokers.items()}
    assert len(set(logs.values())) == 1 and logs[master]
    # GET_BROKER_EPOCH_CACHE, as mqadmin getBrokerEpoch asks
    with RemotingClient() as client:
        r = client.invoke(
            group.brokers[master].address,
            RemotingCommand.request(RequestCode.GET_BROKER_EPOCH_CACHE),
        )
    assert r.code == ResponseCode.SUCCESS
    doc = json.loads(r.body)
    assert doc["brokerName"] == GROUP and doc["brokerId"] == 0
    assert doc["epochList"] == [{"endOffset": (1 << 63) - 1, "epoch": 1, "startOffset": 0}]
    assert doc["maxOffset"] == group.brokers[master].store.max_phy_offset


def test_a_master_that_goes_is_replaced_and_comes_back_as_a_slave(group: Group) -> None:
    form(group)
    old = group.master()
    assert old is not None
    old_id = group.replicas(old).broker_id
    before = send(group.namesrv.address, 20, "before")
    group.stop_broker(old)
    assert wait_until(lambda: group.master() is not None, 20, poll=0.1)
    new = group.master()
    assert new is not None and new != old
    assert group.replicas(new).master_epoch == 2
    # the same producer's next sends reach the new master (the route moves with it)
    after = send(group.namesrv.address, 20, "after")
    assert len(after) == 20
    group.start_broker(old)
    assert wait_until(group.whole, 30, poll=0.1), group.sync_state()
    assert group.role(old) == "SLAVE" and group.replicas(old).broker_id == old_id
    ha = group.brokers[old].store.ha
    assert isinstance(ha, AutoSwitchHAService)
    assert [e.epoch for e in ha.epochs.entries()] == [1, 2]
    logs = {n: log_bytes(s) for n, s in group.brokers.items()}
    assert len(set(logs.values())) == 1
    text = logs[new]
    for key in before + after:
        assert key.encode() in text


def test_an_administrators_election_moves_the_role(group: Group) -> None:
    form(group)
    old = group.master()
    target = next(n for n in group.brokers if n != old)
    target_id = group.replicas(target).broker_id
    with ControllerAdmin(group.controller_addr) as admin:
        header, _body = admin.elect_master("DefaultCluster", GROUP, target_id)
    assert header.master_broker_id == target_id
    # the controller tells every broker (NOTIFY_BROKER_ROLE_CHANGED); they switch
    assert wait_until(lambda: group.master() == target, 10, poll=0.1)
    assert wait_until(group.whole, 30, poll=0.1), group.sync_state()
    assert group.role(old) == "SLAVE"
    assert len(send(group.namesrv.address, 10, "moved")) == 10


def test_without_its_controller_a_master_stops_acknowledging(tmp_path: Path) -> None:
    g = Group(tmp_path, lease_ms=1500)
    try:
        form(g)
        master = g.master()
        assert master is not None
        assert len(send(g.namesrv.address, 5, "leased")) == 5
        g.stop_controller()
        store = g.brokers[master].store
        ha = store.ha
        assert isinstance(ha, AutoSwitchHAService)
        assert wait_until(lambda: bool(ha.fenced), 10, poll=0.1)
        from rocketstore import Message

        r = store.put_message(Message("ReplicaTopic", b"late", 0))
        assert r.status.name == "SERVICE_NOT_AVAILABLE" and "fenced" in (r.error or "")
        # a producer hears why (SEND_MESSAGE_V2 to the master itself)
        from rocketstore.client import MessageQueue
        from rocketstore.client._producer import message_properties, send_request

        mq = MessageQueue("ReplicaTopic", GROUP, 0)
        cmd = send_request(
            "fenced-test", mq.topic, mq, message_properties(None, None, None), b"x", batch=False
        )
        with RemotingClient() as client:
            refused = client.invoke(g.brokers[master].address, cmd)
        assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
        assert "fenced: the controller has not confirmed this master" in (refused.remark or "")
        # it registers with the name server under its own id: no route to it for writes
        address = g.brokers[master].address
        with AdminClient(g.namesrv.address) as admin:
            assert wait_until(lambda: admin.masters().get(GROUP) != address, 10, poll=0.1)
        g.start_controller()  # the same state file: the same master and epoch
        assert wait_until(lambda: not ha.fenced, 20, poll=0.1)
        assert g.master() == master and g.replicas(master).master_epoch == 1
        with AdminClient(g.namesrv.address) as admin:
            assert wait_until(lambda: admin.masters().get(GROUP) == address, 10, poll=0.1)
        assert len(send(g.namesrv.address, 5, "again")) == 5
    finally:
        g.close()


def test_notify_frames_are_checked(group: Group) -> None:
    form(group)
    master = group.master()
    slave = next(n for n in group.brokers if n != master)
    addr = group.brokers[slave].address
    with RemotingClient() as client:
        bad = RemotingCommand.request(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, {}, b"not json")
        r = client.invoke(addr, bad)
        assert r.code == ResponseCode.SYSTEM_ERROR and "JSON" in (r.remark or "")
        # an old epoch changes nothing
        header = NotifyBrokerRoleChangedRequest(addr, 0, 0, group.replicas(slave).broker_id)
        old = RemotingCommand.request(
            RequestCode.NOTIFY_BROKER_ROLE_CHANGED,
            header.to_ext(),
            SyncStateSet(frozenset({1}), 0).encode(),
        )
        assert client.invoke(addr, old).code == ResponseCode.SUCCESS
    assert group.role(slave) == "SLAVE"


def test_operators_see_roles_and_epochs(group: Group) -> None:
    form(group)
    master = group.master()
    assert master is not None
    from rocketstore.metrics._broker_source import BrokerSource
    from rocketstore.metrics._collector import RocketMQCollector

    collector = RocketMQCollector([BrokerSource(group.brokers[master].broker)])

    def in_sync() -> float:
        size = {f.name: f for f in collector.collect()}["rocketstore_replica_sync_state_set_size"]
        return float(size.samples[0].value)

    # the master learns the whole SyncStateSet from the controller's answer, a moment later
    assert wait_until(lambda: in_sync() == 3, 60, poll=0.1), in_sync()
    families = {f.name: f for f in collector.collect()}
    roles = {s.labels["role"]: s.value for s in families["rocketstore_replica_role"].samples}
    assert roles == {"master": 1, "slave": 0, "none": 0}
    assert families["rocketstore_replica_master_epoch"].samples[0].value == 1
    from rocketstore.console._views import cluster

    with AdminClient(group.namesrv.address) as admin:
        rows = cluster(admin)["brokers"]
    by_addr = {r["address"]: r for r in rows}
    row = by_addr[group.brokers[master].address]
    assert row["role"] == "MASTER" and row["epoch"] == 1 and row["syncStateSet"] == "1,2,3"
    from click.testing import CliRunner

    from rocketstore.cli import main

    out = CliRunner().invoke(main, ["cluster", "list", "-n", group.namesrv.address, "--json"])
    assert out.exit_code == 0, out.output
    listed = {r["address"]: r for r in json.loads(out.output)}
    assert listed[group.brokers[master].address]["role"] == "MASTER"
    assert {r["epoch"] for r in listed.values()} == {1}
