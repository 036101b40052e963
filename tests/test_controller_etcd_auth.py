"""The etcd backend over a secured etcd: a real 3-member cluster serving its clients over TLS
(certificates made by the test with openssl) with etcd's auth on (a root user, a user for the
controllers whose role reads and writes their key prefix, tokens living 2 s unused).

The controller works with the right credentials (ACL on at its port too); wrong ones stop its
start with etcd's reason; a token that expired is replaced and the call goes through; a client
without credentials, or with another user's, cannot write a group's keys; and with ACL on, an
etcd backend without credentials is refused unless ``etcd_insecure`` says so."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore.client._controller import ControllerAdmin
from rocketstore.controller import (
    ControllerConfig,
    ControllerConfigError,
    EtcdAuthError,
    EtcdBackend,
    EtcdSecurity,
    GroupRecord,
    Member,
)
from rocketstore.controller._etcd_client import b64
from rocketstore.remoting import ResponseCode
from rocketstore.server import ControllerServer
from rocketstore.server._addresses import free_port
from support.acl_env import ACL_YML, ADMIN
from support.controllers import CLUSTER, FakeBroker, run
from support.etcd import EtcdCluster, make_tls
from support.processes import read_until
from support.waits import wait_until

USER, PASSWORD = "controllers", "controllers-pw"
PREFIX = "/rocketstore-secure"
ROOT_PASSWORD = "root-pw"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    root = tmp_path_factory.mktemp("etcd-secured")
    cluster = EtcdCluster(root, tls=make_tls(root / "tls"), extra=("--auth-token-ttl", "2"))
    try:
        cluster.start()
        cluster.enable_auth(
            ROOT_PASSWORD, {USER: (PASSWORD, PREFIX + "/"), "other": ("other-pw", "/elsewhere/")}
        )
        yield cluster
    finally:
        cluster.stop()


def security(cluster: EtcdCluster, user: str = USER, password: str = PASSWORD) -> EtcdSecurity:
    tls = cluster.tls
    assert tls is not None
    return EtcdSecurity(user, password, str(tls.ca), str(tls.client_cert), str(tls.client_key))


def config(cluster: EtcdCluster, tmp_path: Path, **overrides: Any) -> ControllerConfig:
    sec = security(cluster)
    base: dict[str, Any] = {
        "listen_port": 0,
        "store_path": str(tmp_path / "controller"),
        "backend": "etcd",
        "etcd_endpoints": tuple(cluster.endpoints),
        "etcd_prefix": PREFIX,
        "etcd_user": sec.user,
        "etcd_password": sec.password,
        "etcd_ca_file": sec.ca_file,
        "etcd_cert_file": sec.cert_file,
        "etcd_key_file": sec.key_file,
        "lease_ttl_s": 2,
        "scan_not_active_broker_interval_ms": 100,
        "scan_inactive_master_interval_ms": 100,
        "broker_heartbeat_timeout_ms": 1000,
    }
    base.update(overrides)
    return ControllerConfig(**base)


def root_token(cluster: EtcdCluster) -> str:
    answer = cluster.post("/v3/auth/authenticate", {"name": "root", "password": ROOT_PASSWORD})
    return str(answer["token"])


def group_key(name: str) -> str:
    return f"{PREFIX}/group1/groups/{name}"


def read_key(cluster: EtcdCluster, key: str) -> bytes | None:
    answer = cluster.post("/v3/kv/range", {"key": b64(key)}, token=root_token(cluster))
    kvs = answer.get("kvs")
    if not isinstance(kvs, list) or not kvs:
        return None
    import base64

    return base64.b64decode(kvs[0].get("value", ""))


def test_a_controller_with_credentials_elects(secured: EtcdCluster, tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YML)

    async def main() -> None:
        server = ControllerServer(config(secured, tmp_path), acl_file=str(acl))
        await server.start()
        broker = await FakeBroker(server.address, "secured-a").start()
        broker.client.signer = ADMIN
        try:
            await broker.register()
            await broker.heartbeat()
            r = await broker.elect()
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert r.ext_fields["masterEpoch"] == "1"
        finally:
            await broker.die()
            await server.shutdown()

    run(main)
    stored = read_key(secured, group_key("secured-a"))
    assert stored is not None
    record = GroupRecord.decode(stored)
    assert 1 in record.replicas and record.master_epoch >= 1  # (then its master died: 2)

    # a client without credentials, or with a user of another prefix, cannot write it
    for token in (None, _token(secured, "other", "other-pw")):
        answer = secured.post(
            "/v3/kv/put",
            {"key": b64(group_key("secured-a")), "value": b64("{}")},
            token=token,
        )
        assert "error" in answer, answer
    assert read_key(secured, group_key("secured-a")) == stored


def _token(cluster: EtcdCluster, user: str, password: str) -> str:
    return str(cluster.post("/v3/auth/authenticate", {"name": user, "password": password})["token"])


def test_wrong_credentials_stop_the_start_with_etcds_reason(
    secured: EtcdCluster, tmp_path: Path
) -> None:
    async def main() -> None:
        server = ControllerServer(config(secured, tmp_path, etcd_password="wrong-password"))
        with pytest.raises(EtcdAuthError, match="authentication failed"):
            await server.start()
        await server.shutdown()

    run(main)


def test_an_expired_token_is_replaced(secured: EtcdCluster) -> None:
    async def main() -> None:
        backend = EtcdBackend(
            secured.endpoints, "group1", prefix=PREFIX, ttl_s=30, security=security(secured)
        )
        await backend.open()
        try:
            assert await backend.take_leadership(Member("n9", "127.0.0.1:1"))
            assert backend.client.authentications == 1
            await asyncio.sleep(3.5)  # the token (2 s unused) expires
            record = GroupRecord(CLUSTER, "expiry-a").with_replica(1, "127.0.0.1:1", "c")
            assert await backend.compare_and_set("expiry-a", record, 0) is not None
            assert backend.client.authentications == 2  # refused as invalid, asked for again
            found = await backend.read("expiry-a")
            assert found is not None and found.record == record
        finally:
            await backend.close()

    run(main)


def test_acl_on_needs_etcd_credentials_unless_insecure(
    secured: EtcdCluster, tmp_path: Path
) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YML)
    plain = {"etcd_user": "", "etcd_password": "", "etcd_cert_file": "", "etcd_key_file": ""}

    async def main() -> None:
        refused = ControllerServer(config(secured, tmp_path, **plain), acl_file=str(acl))
        with pytest.raises(ControllerConfigError, match="etcd-insecure"):
            await refused.start()
        await refused.shutdown()
        # accepted when told; etcd itself then refuses it (no user): it stays a standby
        insecure = ControllerServer(
            config(secured, tmp_path, etcd_insecure=True, **plain), acl_file=str(acl)
        )
        await insecure.start()
        try:
            assert not insecure.controller.active
        finally:
            await insecure.shutdown()

    run(main)


def test_the_settings_never_answer_secrets(secured: EtcdCluster, tmp_path: Path) -> None:
    properties = config(
        secured, tmp_path, inner_client_credentials=json.dumps({"accessKey": "a", "secretKey": "s"})
    ).to_properties()
    assert properties["controllerEtcdUser"] == USER
    assert "controllerEtcdPassword" not in properties
    assert "innerClientAuthenticationCredentials" not in properties
    assert PASSWORD not in json.dumps(properties)


def test_the_command_line_flags(secured: EtcdCluster, tmp_path: Path) -> None:
    """``rocketstore controller`` with the etcd flags (the password from a file, the prefix
    from a controller.conf) becomes the active controller; the wrong password ends the command
    with etcd's reason."""
    tls = secured.tls
    assert tls is not None
    good, bad = tmp_path / "password", tmp_path / "wrong"
    good.write_text(PASSWORD + "\n")
    bad.write_text("not-it\n")

    conf = tmp_path / "controller.conf"
    conf.write_text(f"controllerEtcdPrefix={PREFIX}\ncontrollerBackend=etcd\n")

    def command(password_file: Path, port: int) -> list[str]:
        return [
            sys.executable, "-m", "rocketstore.cli", "controller", "-c", str(conf),
            "--listen", f"127.0.0.1:{port}", "--backend", "etcd",
            "--etcd-endpoints", ",".join(secured.endpoints), "--self-id", "cli",
            "--etcd-user", USER, "--etcd-password-file", str(password_file),
            "--etcd-ca-file", str(tls.ca), "--etcd-cert-file", str(tls.client_cert),
            "--etcd-key-file", str(tls.client_key),
            "--metrics-listen", "", "--log-dir", str(tmp_path / "logs"),
        ]  # fmt: skip

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    wrong = subprocess.run(command(bad, free_port("127.0.0.1")), capture_output=True,
                           text=True, timeout=60, env=env)  # fmt: skip
    assert wrong.returncode != 0
    assert "authentication failed" in wrong.stdout + wrong.stderr
    port = free_port("127.0.0.1")
    proc = subprocess.Popen(command(good, port), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)  # fmt: skip
    try:
        read_until(proc, re.escape("listening on"), 60)
        with ControllerAdmin(f"127.0.0.1:{port}") as admin:
            assert wait_until(lambda: admin.metadata().is_leader, 30, poll=0.1)
    finally:
        proc.terminate()
        proc.wait(30)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_endpoints_and_tls_settings(tmp_path: Path) -> None:
    """No etcd needed: what the settings accept and refuse."""
    from rocketstore.controller._etcd_client import EtcdClient, parse_endpoint

    assert parse_endpoint("https://127.0.0.1:2379").tls
    assert not parse_endpoint("http://127.0.0.1:2379").tls
    assert not parse_endpoint("127.0.0.1:2379").tls
    with pytest.raises(ControllerConfigError, match="https://HOST:PORT"):
        parse_endpoint("https://127.0.0.1")
    with pytest.raises(ControllerConfigError, match="no https:// endpoint"):
        EtcdClient(["http://127.0.0.1:2379"], security=EtcdSecurity(ca_file="ca.crt"))
    with pytest.raises(ControllerConfigError, match="etcd TLS files"):
        EtcdClient(
            ["https://127.0.0.1:2379"], security=EtcdSecurity(ca_file=str(tmp_path / "none"))
        )
    with pytest.raises(ControllerConfigError, match="go together"):
        ControllerConfig(etcd_cert_file="c.crt")
    with pytest.raises(ControllerConfigError, match="needs controllerEtcdPassword"):
        ControllerConfig(etcd_user="u").etcd_security(env={})
    assert ControllerConfig(etcd_user="u").etcd_security(
        env={"ROCKETSTORE_ETCD_PASSWORD": "p"}
    ) == EtcdSecurity("u", "p")
