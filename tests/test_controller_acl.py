"""Controller mode with ACL on every port, configured as docs/controller.md says: the controller
and the name server check plain_acl.yml, the brokers' broker.conf has ``aclEnable=true`` and
``innerClientAuthenticationCredentials`` naming an admin account of it. The brokers sign their
controller requests and heartbeats and their name-server registrations with that account, the
controller signs its role notices with its own inner account: the group elects a master, sends
succeed, a failover reaches the slave by notice; and a broker whose account the controller
refuses says so (the ACL and the account) rather than "no controller", as does one that reaches
no controller at all.

Every wait is a bounded poll; servers run on a loop thread and are stopped in ``finally``."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore import StoreConfig
from rocketstore.acl import Account, AclFile, WithAccounts, process_account
from rocketstore.broker._config import BrokerConfig
from rocketstore.client import Producer
from rocketstore.client._admin import AdminClient
from rocketstore.client._controller import ControllerAdmin
from rocketstore.controller import ControllerConfig
from rocketstore.namesrv import NameServer
from rocketstore.remoting import RemotingClient
from rocketstore.server import BrokerServer, ControllerServer
from rocketstore.server._addresses import free_port
from support.acl_env import ACL_YML, ADMIN
from support.waits import wait_until

GROUP = "broker-a"
INNER = '{"accessKey":"adminAK01","secretKey":"adminSK01"}'


@pytest.fixture(autouse=True)
def _no_env_account(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the configured accounts sign: none from the environment."""
    for name in (
        "ROCKETSTORE_ACCESS_KEY",
        "ROCKETSTORE_SECRET_KEY",
        "ROCKETSTORE_INNER_CLIENT_ACCESS_KEY",
        "ROCKETSTORE_INNER_CLIENT_SECRET_KEY",
    ):
        monkeypatch.delenv(name, raising=False)


class SecuredGroup:
    """A controller and a name server with ACL on, and brokers of one group, on a loop thread."""

    def __init__(self, root: Path, inner: Account | None = None) -> None:
        """``inner``: the process's own account (``serve``'s), known to the name server and the
        controller besides the file's, the controller's notices signed with it."""
        self.root = root
        self.acl = root / "conf" / "plain_acl.yml"  # $ROCKETMQ_HOME/conf/plain_acl.yml
        self.acl.parent.mkdir()
        self.acl.write_text(ACL_YML)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.brokers: dict[str, BrokerServer] = {}
        source = AclFile(self.acl)
        self.namesrv = NameServer(
            port=0, acl=source if inner is None else WithAccounts(source, [inner])
        )
        self.run(self.namesrv.start())
        self.controller = ControllerServer(
            ControllerConfig(
                listen_port=0,
                store_path=str(root / "controller"),
                scan_not_active_broker_interval_ms=100,
                scan_inactive_master_interval_ms=100,
                broker_heartbeat_timeout_ms=4000,
                inner_client_credentials=INNER if inner is None else "",
            ),
            acl_file=str(self.acl),
            inner_account=inner,
        )
        self.run(self.controller.start())

    def run(self, coro: Any, timeout: float = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def broker_conf(self, name: str, *, controller: str | None = None, inner: str = INNER) -> Path:
        """broker.conf as docs/controller.md and docs/failover.md write it."""
        conf = self.root / f"{name}.conf"
        lines = [
            f"brokerName={GROUP}",
            "brokerClusterName=DefaultCluster",
            "brokerId=-1",
            f"listenPort={free_port('127.0.0.1')}",
            f"storePathRootDir={self.root / name}",
            f"namesrvAddr={self.namesrv.address}",
            "enableControllerMode=true",
            f"controllerAddr={controller or self.controller.address}",
            "controllerHeartBeatTimeoutMills=4000",
            "syncBrokerMetadataPeriod=500",
            "checkSyncStateSetPeriod=500",
            "allAckInSyncStateSet=true",
            f"haListenPort={free_port('127.0.0.1')}",
            "mappedFileSizeCommitLog=262144",
            "aclEnable=true",
        ]
        if inner:
            lines.append(f"innerClientAuthenticationCredentials={inner}")
        else:  # no account to prove itself to its group with: replication without proof
            lines.append("haAuthEnabled=false")
        conf.write_text("\n".join(lines) + "\n")
        return conf

    def start_broker(self, name: str, account: Account | None = None, **conf: Any) -> BrokerServer:
        store = StoreConfig.from_broker_conf(str(self.broker_conf(name, **conf)))
        server = BrokerServer(store, BrokerConfig.from_store_config(store), inner_account=account)
        self.run(server.start())
        self.brokers[name] = server
        return server

    def stop_broker(self, name: str) -> None:
        self.run(self.brokers.pop(name).shutdown())

    def role(self, name: str) -> str:
        replicas = self.brokers[name].broker.replicas
        return "NONE" if replicas is None else str(replicas.role)

    def sync_state(self) -> Any:
        client = RemotingClient(timeout=5.0, signer=ADMIN)
        with ControllerAdmin(self.controller.address, client=client) as admin:
            return admin.sync_state([GROUP]).table.get(GROUP)

    def close(self) -> None:
        try:
            for name in list(self.brokers):
                try:
                    self.stop_broker(name)
                except Exception:
                    pass
            self.run(self.controller.shutdown())
            self.run(self.namesrv.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


@pytest.fixture
def group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SecuredGroup]:
    monkeypatch.setenv("ROCKETMQ_HOME", str(tmp_path))
    g = SecuredGroup(tmp_path)
    try:
        yield g
    finally:
        g.close()


def _sent(namesrv: str, body: bytes) -> bool:
    """One send through the name server's route, signed by an admin account: SEND_OK?"""
    try:
        with Producer(namesrv, "PG_ctl_acl", signer=ADMIN) as producer:
            return producer.send("Shared", body).status == "SEND_OK"
    except Exception:
        return False


def test_a_secured_group_elects_a_master_and_takes_sends(
    group: SecuredGroup, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="rocketstore.acl")
    group.start_broker("a")
    group.start_broker("b")
    assert wait_until(lambda: {group.role("a"), group.role("b")} == {"MASTER", "SLAVE"}, 60)
    assert wait_until(lambda: len(group.sync_state().in_sync_replicas) == 2, 60)
    master = "a" if group.role("a") == "MASTER" else "b"
    slave = "b" if master == "a" else "a"
    with AdminClient(group.namesrv.address, signer=ADMIN) as admin:
        admin.create_topic(group.brokers[master].broker.address, "Shared", read_queue_nums=2,
                           write_queue_nums=2)  # fmt: skip
    assert wait_until(lambda: _sent(group.namesrv.address, b"first"), 60)

    # the master goes: the controller elects the slave and tells it (a signed notice)
    replicas = group.brokers[slave].broker.replicas
    assert replicas is not None
    notices_before = replicas.notices
    group.stop_broker(master)
    assert wait_until(lambda: group.role(slave) == "MASTER", 60)
    assert wait_until(lambda: replicas.notices > notices_before, 30)
    assert wait_until(lambda: _sent(group.namesrv.address, b"second"), 60)
    # nothing of the cluster's own traffic was refused by an ACL on the way
    refused = [r.getMessage() for r in caplog.records if "ACL" in r.getMessage()]
    assert not refused, refused


def test_a_refused_account_is_named_as_the_cause(group: SecuredGroup) -> None:
    """Without credentials, or with an account that is not admin, the broker's registration
    fails naming the controller's ACL and the account; with no controller to reach, it says
    that instead."""
    unsigned = group.start_broker("unsigned", inner="")
    user = group.start_broker("user", inner='{"accessKey":"userAK001","secretKey":"userSK001"}')
    nowhere = group.start_broker("nowhere", controller=f"127.0.0.1:{free_port('127.0.0.1')}")

    def last_error(server: BrokerServer) -> str:
        replicas = server.broker.replicas
        assert replicas is not None
        return str(replicas.last_error)

    assert wait_until(lambda: "ACL refused" in last_error(unsigned), 30), last_error(unsigned)
    assert "unsigned" in last_error(unsigned)
    assert "innerClientAuthenticationCredentials" in last_error(unsigned)
    assert wait_until(lambda: "ACL refused" in last_error(user), 30), last_error(user)
    assert "userAK001" in last_error(user) and "admin" in last_error(user)
    assert wait_until(lambda: "no active controller" in last_error(nowhere), 30)
    assert "ACL" not in last_error(nowhere)
    for name in ("unsigned", "user", "nowhere"):
        assert group.role(name) == "NONE"


def test_serves_own_account_reaches_its_controller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``serve`` with ACL and a controller: no account configured, the broker and the controller
    of one process share the process's own admin account (random keys, in memory)."""
    monkeypatch.setenv("ROCKETMQ_HOME", str(tmp_path))
    inner = process_account()
    group = SecuredGroup(tmp_path, inner=inner)
    try:
        group.start_broker("a", inner="", account=inner)
        assert wait_until(lambda: group.role("a") == "MASTER", 60)
    finally:
        group.close()
