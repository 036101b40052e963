"""The name server with ACL on: ``serve`` with aclEnable (its broker registering with an account
the two share), ``namesrv --acl-file`` with a broker signing its registrations with the account
broker.conf names (innerClientAuthenticationCredentials), and the audit log of what they
refused and let change."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore.acl import AclFile
from rocketstore.broker._config import BrokerConfig
from rocketstore.namesrv import NameServer
from rocketstore.remoting import ResponseCode
from rocketstore.remoting._fastjson import loads_lenient
from rocketstore.server import BrokerServer
from support.acl_env import (
    ACL_YML,
    ADMIN,
    ATTACKER,
    USER,
    acl_refused,
    call,
    create_topic_ext,
    register_body,
)
from support.grpc_broker import small_store_config
from support.interop import ServerProcess, servers
from support.remoting import LoopThread

RC = ResponseCode


def wait_for(cond: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def route(namesrv: str, topic: str) -> dict[str, Any] | None:
    r = call(namesrv, 105, {"topic": topic}, USER)
    if r.code != RC.SUCCESS:
        return None
    doc: dict[str, Any] = json.loads(bytes(r.body))
    return doc


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    """``rocketstore serve -c broker.conf`` with aclEnable=true (plain_acl.yml under
    $ROCKETMQ_HOME/conf, as RocketMQ's broker finds it)."""
    root = tmp_path_factory.mktemp("acl-serve")
    home = root / "home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(ACL_YML)
    conf = root / "broker.conf"
    conf.write_text("aclEnable=true\nmappedFileSizeCommitLog=16777216\n")
    with pytest.MonkeyPatch.context() as mp, servers() as started:
        mp.setenv("ROCKETMQ_HOME", str(home))
        for name in ("ROCKETSTORE_ACCESS_KEY", "ROCKETSTORE_SECRET_KEY"):
            mp.delenv(name, raising=False)
        started.append(ServerProcess.serve(root / "store", root / "serve.log", conf=conf))
        yield started[0], root


def test_serve_registers_its_broker_and_refuses_route_changes(
    served: tuple[ServerProcess, Path],
) -> None:
    server, root = served
    assert server.namesrv is not None and server.broker is not None
    ns, broker = server.namesrv, server.broker
    assert "ACL on the name server" in server.output()
    # the broker's registrations are signed (an account serve made for it): its topics route
    assert call(broker, 17, create_topic_ext("Routed"), ADMIN).code == RC.SUCCESS
    assert wait_for(lambda: route(ns, "Routed") is not None), server.output()[-2000:]
    known = route(ns, "Routed")
    assert known is not None and [b["brokerName"] for b in known["brokerDatas"]] == ["broker-a"]
    perm = known["queueDatas"][0]["perm"]

    for signer in (None, ATTACKER):
        # the broker made read-only, a topic's route pinned, a fake broker registered
        wipe = call(ns, 205, {"brokerName": "broker-a"}, signer)
        pin_ext = {"namespace": "ORDER_TOPIC_CONFIG", "key": "Routed", "value": "x:1"}
        pin = call(ns, 100, pin_ext, signer)
        fake = {
            "brokerName": "fake",
            "brokerAddr": "127.0.0.1:1",
            "clusterName": "DefaultCluster",
            "haServerAddr": "127.0.0.1:2",
            "brokerId": "0",
        }
        registered = call(ns, 103, fake, signer, register_body("Routed"))
        assert all(acl_refused(r) for r in (wipe, pin, registered)), [
            r.remark for r in (wipe, pin, registered)
        ]
    after = route(ns, "Routed")
    assert after is not None and [b["brokerName"] for b in after["brokerDatas"]] == ["broker-a"]
    assert after["queueDatas"][0]["perm"] == perm
    kv = call(ns, 101, {"namespace": "ORDER_TOPIC_CONFIG", "key": "Routed"}, USER)
    assert kv.code == RC.QUERY_NOT_FOUND
    # reads need a signature too
    assert acl_refused(call(ns, 105, {"topic": "Routed"}, None))

    audit = (root / "logs" / "store" / "audit.log").read_text()
    assert "request=205 WIPE_WRITE_PERM_OF_BROKER" in audit
    deny = next(line for line in audit.splitlines() if "DENY account=attackAK1" in line)
    assert " source=127.0.0.1:" in deny and "request=205 WIPE_WRITE_PERM_OF_BROKER" in deny
    assert "resource=broker:broker-a" in deny and 'reason="Need admin permission' in deny
    fake = [line for line in audit.splitlines() if "request=103 REGISTER_BROKER" in line]
    assert any(" DENY account=- " in line and "broker:fake" in line for line in fake)
    # the broker's own registrations, signed with the account serve made for it
    assert any(" ALLOW account=rocketstore-inner-" in line for line in fake)
    allow = next(line for line in audit.splitlines() if "UPDATE_AND_CREATE_TOPIC" in line)
    assert " ALLOW account=adminAK01 source=127.0.0.1:" in allow and "topic:Routed" in allow


class Cluster:
    """A name server with ACL on and brokers, on one loop thread."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.loop = LoopThread()
        self.acl_path = root / "plain_acl.yml"
        self.acl_path.write_text(ACL_YML)
        self.namesrv = NameServer("127.0.0.1", 0, acl=AclFile(self.acl_path))
        self.brokers: list[BrokerServer] = []
        self.loop.run(self.namesrv.start())

    def broker(self, name: str, **overrides: Any) -> BrokerServer:
        config = BrokerConfig(
            broker_name=name,
            listen_port=0,
            namesrv_addr=self.namesrv.address,
            acl_enable=True,
            acl_file=str(self.acl_path),
            **overrides,
        )
        server = BrokerServer(small_store_config(self.root / name), config)
        self.loop.run(server.start(), 30)
        self.brokers.append(server)
        return server

    def close(self) -> None:
        async def down() -> None:
            for b in self.brokers:
                await b.shutdown()
            await self.namesrv.close()

        try:
            self.loop.run(down(), 30)
        finally:
            self.loop.stop()


def test_brokers_sign_registrations_with_their_inner_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ROCKETSTORE_ACCESS_KEY", "ROCKETSTORE_SECRET_KEY"):
        monkeypatch.delenv(name, raising=False)
    cluster = Cluster(tmp_path)
    try:
        admin = json.dumps({"accessKey": "adminAK01", "secretKey": "adminSK01"})
        signed = cluster.broker("broker-signed", inner_client_credentials=admin)
        unsigned = cluster.broker("broker-unsigned")
        # a broker whose account is not an admin's: its registration is refused too
        user = json.dumps({"accessKey": "userAK001", "secretKey": "userSK001"})
        weak = cluster.broker("broker-weak", inner_client_credentials=user)

        def names() -> set[str]:
            r = call(cluster.namesrv.address, 106, {}, USER)
            doc = loads_lenient(bytes(r.body).decode()) if r.code == RC.SUCCESS else {}
            return set(doc.get("brokerAddrTable", {}))

        assert wait_for(lambda: "broker-signed" in names())
        assert names() == {"broker-signed"}
        for server in (unsigned, weak):
            registrar = server.broker.registrar
            assert registrar is not None and registrar.last_result is None
        # GET_BROKER_CONFIG never shows the inner account's secret
        r = call(signed.address, 26, {}, USER)
        assert r.code == RC.SUCCESS and b"adminSK01" not in bytes(r.body)
    finally:
        cluster.close()


def test_inner_credentials_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from rocketstore.store._errors import StoreConfigError

    with pytest.raises(StoreConfigError, match="innerClientAuthenticationCredentials"):
        BrokerConfig(inner_client_credentials="ak:sk")
    config = BrokerConfig()
    monkeypatch.setenv("ROCKETSTORE_INNER_CLIENT_ACCESS_KEY", "innerAK1")
    monkeypatch.setenv("ROCKETSTORE_INNER_CLIENT_SECRET_KEY", "innerSK1")
    assert config.inner_credentials() == ("innerAK1", "innerSK1")
    conf = BrokerConfig(inner_client_credentials='{"accessKey":"confAK01","secretKey":"s1"}')
    assert conf.inner_credentials() == ("confAK01", "s1")  # broker.conf's key first
    monkeypatch.delenv("ROCKETSTORE_INNER_CLIENT_SECRET_KEY")
    with pytest.raises(StoreConfigError, match="both"):
        config.inner_credentials()


def test_namesrv_command_takes_an_acl_file(tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YML)
    args = [sys.executable, "-c", "from rocketstore.cli import main; main()", "namesrv"]
    args += ["--listen", "127.0.0.1:0", "--acl-file", str(acl), "--log-dir", str(tmp_path)]
    args += ["--kv-config", str(tmp_path / "kv.json")]
    with servers() as started:
        server = ServerProcess(args, tmp_path / "ns.log", want_namesrv=True, want_broker=False)
        started.append(server._wait_started(30))
        assert server.namesrv is not None
        put = {"namespace": "N", "key": "k", "value": "v"}
        assert acl_refused(call(server.namesrv, 100, put))
        assert acl_refused(call(server.namesrv, 100, put, USER))
        assert call(server.namesrv, 100, put, ADMIN).code == RC.SUCCESS
        got = call(server.namesrv, 101, {"namespace": "N", "key": "k"}, ATTACKER)
        assert got.code == RC.SUCCESS and got.ext_fields.get("value") == "v"
    audit = (tmp_path / "audit.log").read_text()
    assert "DENY account=userAK001" in audit and "ALLOW account=adminAK01" in audit


def test_acl_file_of_the_name_server_must_be_usable(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from rocketstore.cli import main as cli_main

    bad = tmp_path / "plain_acl.yml"
    bad.write_text("accounts: [{accessKey: a}]\n")
    args = ["namesrv", "--listen", "127.0.0.1:0", "--acl-file", str(bad)]
    args += ["--log-dir", str(tmp_path / "logs"), "--kv-config", str(tmp_path / "kv.json")]
    result = CliRunner().invoke(cli_main, args)
    assert result.exit_code == 1 and "longer than 6" in result.output
    assert "Traceback" not in result.output
