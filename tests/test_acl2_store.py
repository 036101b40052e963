"""ACL 2.0's users and ACLs on disk (rocketstore.acl._auth_store): what a change writes is read
back by a new store, RocketMQ 5.3's rules for the changes, a bad file refused without being
overwritten, and a process killed (SIGKILL) while it writes leaves a file that loads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocketstore.acl._auth_model import Acl, UserChange
from rocketstore.acl._auth_store import FILE_NAME, AuthStore
from rocketstore.acl._errors import AclConfigError, AuthMetadataError


def acl_info(subject: str, *entries: tuple[str, str, str], policy: str = "Custom") -> Acl:
    return Acl.from_json(
        {
            "subject": subject,
            "policies": [
                {
                    "policyType": policy,
                    "entries": [
                        {"resource": r, "actions": a.split(","), "decision": d}
                        for r, a, d in entries
                    ],
                }
            ],
        }
    )


def test_changes_are_read_back_by_a_new_store(tmp_path: Path) -> None:
    store = AuthStore(tmp_path)
    store.create_user(UserChange("alice", "alicepass"))
    store.create_user(UserChange("root", "rootpass", "Super"))
    store.put_acl(acl_info("User:alice", ("Topic:t", "Pub", "Allow")))
    store.put_acl(acl_info("User:alice", ("Group:g", "Sub", "Allow")))  # merged
    store.put_acl(acl_info("User:alice", ("Topic:*", "All", "Deny"), policy="Default"))
    again = AuthStore(tmp_path)
    assert again.list_users() == store.list_users()
    got = again.get_acl("User:alice")
    assert got is not None and got == store.get_acl("User:alice")
    assert [e.resource.key for e in got.policies[0].entries] == ["Topic:t", "Group:g"]
    assert got.policies[1].policy_type == "Default"
    doc = json.loads((tmp_path / FILE_NAME).read_text())
    assert doc["users"][1] == {
        "username": "root",
        "password": "rootpass",
        "userType": "Super",
        "userStatus": "enable",
    }
    assert not (tmp_path / (FILE_NAME + ".tmp")).exists()


def test_rocketmq_rules_for_changes(tmp_path: Path) -> None:
    store = AuthStore(tmp_path)
    store.create_user(UserChange("alice", "alicepass"))
    with pytest.raises(AuthMetadataError, match="The user is existed"):
        store.create_user(UserChange("alice", "other"))
    with pytest.raises(AuthMetadataError, match="The user is not exist"):
        store.update_user(UserChange("bob", "x"))
    with pytest.raises(AuthMetadataError, match="User:bob is not exist"):
        store.put_acl(acl_info("User:bob", ("Topic:t", "Pub", "Allow")))
    store.put_acl(acl_info("User:alice", ("Topic:t", "Pub", "Allow"), ("Topic:u", "Sub", "Allow")))
    store.delete_acl("User:alice", "custom", "Topic:t")
    got = store.get_acl("User:alice")
    assert got is not None and [e.resource.key for e in got.policies[0].entries] == ["Topic:u"]
    store.delete_acl("User:alice", None, "Topic:u")  # the last entry: the ACL goes
    assert store.get_acl("User:alice") is None
    with pytest.raises(AuthMetadataError, match="The acl is not exist"):
        store.delete_acl("User:alice")
    store.put_acl(acl_info("User:alice", ("Topic:t", "Pub", "Allow")))
    assert store.delete_user("alice") and not store.delete_user("alice")
    store.create_user(UserChange("alice", "alicepass"))
    assert store.get_acl("User:alice") is None  # went with the user
    store.create_user(UserChange("alex", "alexpass"))
    # listed by name, as RocketMQ 5.3 lists its store's keys, whatever the order made
    assert [u.username for u in store.list_users("al")] == ["alex", "alice"]
    assert [u.username for u in store.list_users("ex")] == ["alex"]
    store.put_acl(
        acl_info("User:alex", ("Topic:orders", "Pub", "Allow"), ("Group:g", "Sub", "Allow"))
    )
    listed = store.list_acls(None, "orders")
    assert [e.resource.key for a in listed for p in a.policies for e in p.entries] == [
        "Topic:orders"
    ]
    assert store.list_acls("alice") == []
    store.create_user(UserChange("aaron", "aaronpass"))
    store.put_acl(acl_info("User:aaron", ("Topic:orders", "Sub", "Allow")))
    assert [a.subject for a in store.list_acls()] == ["User:aaron", "User:alex"]


def test_a_bad_file_is_refused_and_kept(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    path.write_text('{"users": [{"username": "x"}]}')
    with pytest.raises(AclConfigError, match="password can not be blank"):
        AuthStore(tmp_path)
    path.write_text("{not json")
    with pytest.raises(AclConfigError, match="not an ACL 2"):
        AuthStore(tmp_path)
    assert path.read_text() == "{not json"


WRITER = """
import sys
from rocketstore.acl._auth_model import UserChange
from rocketstore.acl._auth_store import AuthStore
store = AuthStore(sys.argv[1])
i = len(store.list_users())
while True:
    store.create_user(UserChange(f"user{i:06d}", "p" * 200))
    i += 1
"""


def test_kill_during_writes_leaves_a_file_that_loads(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    for round_ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], env=os.environ)
        try:
            deadline = time.monotonic() + 60
            before = len(AuthStore(tmp_path).list_users()) if path.exists() else 0
            while True:  # wait until this writer has written some users
                assert time.monotonic() < deadline, "the writer wrote nothing"
                assert proc.poll() is None, "the writer died"
                try:
                    if len(json.loads(path.read_bytes())["users"]) > before + 20 * (round_ + 1):
                        break
                except (FileNotFoundError, ValueError):
                    pass
                time.sleep(0.02)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait(30)
        users = AuthStore(tmp_path).list_users()  # loads: the old file or the new one
        names = [u.username for u in users]
        assert len(names) > before and len(set(names)) == len(names)
        # what is there is whole: every user read back has its full password
        assert all(u.password == "p" * 200 for u in users)


def test_a_brokers_start_makes_the_users_broker_conf_names(tmp_path: Path) -> None:
    from rocketstore.broker._config import BrokerConfig
    from rocketstore.broker._controller import load_auth
    from rocketstore.store._errors import StoreConfigError

    config = BrokerConfig(
        authentication_enabled=True,
        init_authentication_user='{"username": "admin", "password": "adminPass1"}',
        inner_client_credentials='{"accessKey": "inner01", "secretKey": "innerSK01"}',
        authentication_whitelist="30, 31",
        cluster_name="C9",
    )
    auth = load_auth(config, tmp_path)
    assert auth.is_super("admin") and auth.is_super("inner01")
    assert auth.settings.authentication_whitelist == frozenset({30, 31})
    assert auth.settings.cluster_name == "C9"
    auth.update_user(UserChange("admin", "changed1"))
    assert load_auth(config, tmp_path).get_user("admin") == auth.get_user("admin")  # kept
    for bad in (
        {"init_authentication_user": '{"username": "a"}'},
        {"authorization_whitelist": "30,x"},
        {"authentication_provider": "com.example.MyProvider"},
    ):
        with pytest.raises(StoreConfigError):
            BrokerConfig(**bad)  # type: ignore[arg-type]
    BrokerConfig(
        authentication_strategy="org.apache.rocketmq.auth.authentication.strategy."
        "StatefulAuthenticationStrategy",
        authorization_provider="org.apache.rocketmq.auth.authorization.provider."
        "DefaultAuthorizationProvider",
    )
    with pytest.raises(AclConfigError, match="does not exist"):
        load_auth(
            BrokerConfig(migrate_auth_from_v1_enabled=True, acl_file=str(tmp_path / "missing.yml")),
            tmp_path,
        )


def test_the_metrics_port_takes_a_super_user(tmp_path: Path) -> None:
    from rocketstore.acl._auth_eval import AuthSettings
    from rocketstore.metrics._auth import ALLOWED, AclAdminAuth

    store = AuthStore(tmp_path, AuthSettings(authentication_enabled=True))
    store.create_user(UserChange("root1", "rootPass1", "Super"))
    store.create_user(UserChange("alice", "alicePass1"))
    auth = AclAdminAuth(store.current)

    def basic(user: str, password: str) -> str:
        import base64

        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    assert auth.check(basic("root1", "rootPass1"), "10.0.0.1") == ALLOWED
    assert auth.check(basic("root1", "wrong"), "10.0.0.1").status == 401
    assert auth.check(basic("alice", "alicePass1"), "10.0.0.1").status == 403


def test_a_broker_with_a_bad_auth_file_does_not_start_and_releases_its_store(
    tmp_path: Path,
) -> None:
    import asyncio

    from rocketstore.broker._config import BrokerConfig
    from rocketstore.server import BrokerServer
    from support.grpc_broker import small_store_config

    (tmp_path / "config").mkdir()
    (tmp_path / "config" / FILE_NAME).write_text('{"users": [{"username": 7}]}')
    config = BrokerConfig(listen_port=0, authentication_enabled=True, authorization_enabled=True)

    async def attempt() -> None:
        server = BrokerServer(small_store_config(tmp_path), config)
        try:
            await server.start()
        finally:
            await server.shutdown()

    with pytest.raises(AclConfigError, match="not an ACL 2"):
        asyncio.run(attempt())
    assert (tmp_path / "config" / FILE_NAME).read_text() == '{"users": [{"username": 7}]}'
    (tmp_path / "config" / FILE_NAME).unlink()
    asyncio.run(attempt())  # the store was released: it opens again
