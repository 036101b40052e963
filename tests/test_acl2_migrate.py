"""plain_acl.yml → ACL 2.0 (rocketstore.acl._auth_migrate), as RocketMQ 5.3 migrates it with
migrateAuthFromV1Enabled: the migrated users decide as the plain accounts did, white addresses
become source addresses, and a broker started with the switch migrates its plain_acl.yml once
(an existing user is left as it is)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rocketstore.acl import AddressPattern, RequestSigner, parse_plain_acl
from rocketstore.acl._auth_eval import AuthRules, AuthSettings, Principal
from rocketstore.acl._auth_migrate import migrate, white_cidrs
from rocketstore.acl._auth_model import ip_in
from rocketstore.acl._errors import AccessDeniedError
from rocketstore.acl._plain import PUB, SUB, Account
from rocketstore.remoting import ResponseCode
from support.acl_env import ACL_YML, acl2_refused, call, create_topic_ext, send_v2_ext
from support.grpc_broker import BrokerThread

ON = AuthSettings(authentication_enabled=True, authorization_enabled=True)
TOPICS = ("Shared", "Secret", "PubOnly", "Other")
GROUPS = ("GShared", "GSecret")


def allowed_v1(account: Account, resource: str, perm: int) -> bool:
    try:
        account.require([(resource, perm)])
    except AccessDeniedError:
        return False
    return True


def allowed_v2(principal: Principal, resource: str, perm: int) -> bool:
    try:
        principal.require([(resource, perm)])
    except AccessDeniedError:
        return False
    return True


def test_migrated_users_decide_as_the_plain_accounts() -> None:
    plain = parse_plain_acl(yaml.safe_load(ACL_YML))
    users, acls = migrate(plain, existing=())
    assert {u.username: u.user_type for u in users} == {
        "adminAK01": "Super",
        "attackAK1": "Normal",
        "userAK001": "Normal",
        "readerAK1": "Normal",
    }
    rules = AuthRules(
        users={u.username: u for u in users}, acls={a.subject: a for a in acls}, settings=ON
    )
    checked = 0
    for ak, account in plain.accounts.items():
        principal = rules.authenticate(
            host="10.1.1.1", access_key=ak, verify=lambda s, a=account: s == a.secret_key
        )
        assert isinstance(principal, Principal)
        needs = [(t, p) for t in TOPICS for p in (PUB, SUB)] + [
            (f"%RETRY%{g}", SUB) for g in GROUPS
        ]
        for resource, perm in needs:
            v1 = allowed_v1(account, resource, perm)
            assert allowed_v2(principal, resource, perm) == v1, (ak, resource, perm, v1)
            checked += 1
    assert checked == 4 * (len(TOPICS) * 2 + len(GROUPS))


def test_the_policies_a_plain_account_becomes() -> None:
    plain = parse_plain_acl(
        yaml.safe_load(
            """
accounts:
  - accessKey: plainUser1
    secretKey: plainSecret1
    whiteRemoteAddress: 192.168.1.*
    defaultTopicPerm: SUB
    topicPerms: [A=PUB|SUB, B=DENY]
    groupPerms: [G=SUB]
"""
        )
    )
    _, acls = migrate(plain, existing=())
    assert acls[0].to_json() == {
        "subject": "User:plainUser1",
        "policies": [
            {
                "policyType": "Custom",
                "entries": [
                    {
                        "resource": "Topic:A",
                        "actions": ["Pub", "Sub"],
                        "decision": "Allow",
                    },
                    {
                        "resource": "Topic:B",
                        "actions": ["All"],
                        "decision": "Deny",
                    },
                    {
                        "resource": "Group:G",
                        "actions": ["Sub"],
                        "decision": "Allow",
                    },
                    {
                        "resource": "*",
                        "actions": ["All"],
                        "sourceIps": ["192.168.1.0/24"],
                        "decision": "Allow",
                    },
                ],
            },
            {
                "policyType": "Default",
                "entries": [
                    {
                        "resource": "Topic:*",
                        "actions": ["Sub"],
                        "decision": "Allow",
                    },
                    {
                        "resource": "Group:*",
                        "actions": ["All"],
                        "decision": "Deny",
                    },
                ],
            },
        ],
    }
    assert migrate(plain, existing=("plainUser1",)) == ([], [])  # a user there stays


@pytest.mark.parametrize(
    ("pattern", "inside", "outside"),
    [
        ("192.168.1.*", ["192.168.1.0", "192.168.1.255"], ["192.168.2.1"]),
        ("10.10.1-3.*", ["10.10.1.5", "10.10.3.255"], ["10.10.4.0", "10.10.0.255"]),
        ("192.168.1.{1,9}", ["192.168.1.1", "192.168.1.9"], ["192.168.1.2"]),
        ("10.0.0.7", ["10.0.0.7"], ["10.0.0.8"]),
        ("2001:db8::1-ff", ["2001:db8::1", "2001:db8::ff"], ["2001:db8::100"]),
        ("*", ["1.2.3.4", "::1"], []),
    ],
)
def test_white_addresses_become_the_same_cidr_blocks(
    pattern: str, inside: list[str], outside: list[str]
) -> None:
    white = AddressPattern.parse(pattern)
    cidrs = white_cidrs(white)
    for host in inside + outside:
        assert ip_in(host, cidrs) == white.matches(host), (pattern, host, cidrs)
    assert all(ip_in(h, cidrs) for h in inside)


# ---- through a broker ---------------------------------------------------------------------------

USER = RequestSigner("userAK001", "userSK001")
ADMIN = RequestSigner("adminAK01", "adminSK01")


def start(root: Path) -> BrokerThread:
    overrides = {
        "authentication_enabled": True,
        "authorization_enabled": True,
        "migrate_auth_from_v1_enabled": True,
        "acl_file": str(root / "plain_acl.yml"),
    }
    return BrokerThread(root / "store", broker_overrides=overrides).start()


def test_a_broker_migrates_its_plain_acl_once(tmp_path: Path) -> None:
    from rocketstore.client._admin import AdminClient
    from rocketstore.client._auth_admin import AuthAdmin

    (tmp_path / "plain_acl.yml").write_text(ACL_YML)
    b = start(tmp_path)
    try:
        addr = b.broker.address
        for topic in ("Shared", "Secret"):
            r = call(addr, 17, create_topic_ext(topic), ADMIN)  # a migrated Super user
            assert r.code == ResponseCode.SUCCESS, r.remark
        assert call(addr, 310, send_v2_ext("Shared"), USER, b"x").code == ResponseCode.SUCCESS
        refused = call(addr, 310, send_v2_ext("Secret"), USER, b"x")
        assert acl2_refused(refused) and "User:userAK001" in (refused.remark or "")
        stored = json.loads((tmp_path / "store" / "config" / "auth.json").read_text())
        assert {u["username"] for u in stored["users"]} == {
            "adminAK01",
            "attackAK1",
            "userAK001",
            "readerAK1",
        }
        with AdminClient(signer=ADMIN) as admin:
            AuthAdmin(admin).update_user(addr, "userAK001", password="changedSK1")
    finally:
        b.close()
    b = start(tmp_path)  # migrates again: the changed user stays as it is now
    try:
        addr = b.broker.address
        assert acl2_refused(call(addr, 310, send_v2_ext("Shared"), USER, b"x"))
        changed = RequestSigner("userAK001", "changedSK1")
        assert call(addr, 310, send_v2_ext("Shared"), changed, b"x").code == ResponseCode.SUCCESS
    finally:
        b.close()
