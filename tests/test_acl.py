"""RocketMQ 4.x's plain ACL: white addresses, the plain_acl.yml parser, the permission model,
reloading, request signatures, and the broker's remoting port refusing what an account may not
do (and serving on after a refusal)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rocketstore.acl import (
    DENY,
    PUB,
    SUB,
    AccessDeniedError,
    AclConfigError,
    AclFile,
    AddressPattern,
    default_acl_path,
    load_acl,
    parse_plain_acl,
)
from rocketstore.acl._addresses import normalize_host
from rocketstore.acl._errors import PermissionDeniedError
from rocketstore.acl._remoting import EXCEPTION_PREFIX, check_request, request_needs
from rocketstore.broker._config import BrokerConfig, ignored_keys
from rocketstore.cli import main as cli_main
from rocketstore.client import ClientError, MessageQueue, Producer, PullConsumer
from rocketstore.remoting import RemotingClient, RemotingCommand, ResponseCode
from rocketstore.remoting._signing import (
    RequestSigner,
    signature,
    signed_content,
    signer_from_env,
)
from rocketstore.server._broker import ignored_keys_warning
from rocketstore.store import StoreConfig
from support.grpc_broker import BrokerThread
from support.waits import wait_dispatched

RC = ResponseCode

ACL_YML = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
"""


# ---- white remote addresses -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "inside", "outside"),
    [
        ("192.168.0.*", ["192.168.0.1", "192.168.0.255"], ["192.168.1.1", "10.0.0.1"]),
        ("192.168.*", ["192.168.7.9"], ["192.169.0.1"]),
        ("192.168.1-10.*", ["192.168.1.4", "192.168.10.0"], ["192.168.11.1", "192.168.0.1"]),
        ("192.168.1.{1,2}", ["192.168.1.1", "192.168.1.2"], ["192.168.1.3", "192.168.2.1"]),
        ("10.10.103.*,192.168.1.*", ["10.10.103.8", "192.168.1.200"], ["10.10.104.8"]),
        ("127.0.0.1", ["127.0.0.1", "127.0.0.1:4567", "::ffff:127.0.0.1"], ["127.0.0.2"]),
        ("*", ["1.2.3.4", "::1"], []),
        ("*.*.*.*", ["1.2.3.4"], []),
        ("", [], ["127.0.0.1", "::1"]),
        ("::1", ["::1", "0:0:0:0:0:0:0:1", "[::1]:80", "ipv6:[::1]:80"], ["::2", "127.0.0.1"]),
        ("2::ac5:78:1-200:*", ["2::ac5:78:1ff:9", "2:0:0:0:ac5:78:1:0"], ["2::ac5:78:201:1"]),
        ("1.2.3.4,::1", ["1.2.3.4", "::1"], ["1.2.3.5"]),
    ],
)
def test_white_address_patterns(pattern: str, inside: list[str], outside: list[str]) -> None:
    white = AddressPattern.parse(pattern)
    for host in inside:
        assert white.matches(host), (pattern, host)
    for host in outside:
        assert not white.matches(host), (pattern, host)


@pytest.mark.parametrize(
    "bad", ["300.1.1.1", "1.2.3.4.5", "a.b.c.d", "192.168.{1,2}.3", "1.2.3.{}", "1.2.9-3.*"]
)
def test_bad_white_addresses_are_refused(bad: str) -> None:
    with pytest.raises(AclConfigError):
        AddressPattern.parse(bad)


def test_peer_addresses_are_normalized() -> None:
    assert normalize_host("ipv4:127.0.0.1:5000") == "127.0.0.1"
    assert normalize_host("ipv6:[::1]:5000") == "::1"
    assert normalize_host("10.0.0.1:9876") == "10.0.0.1"
    assert normalize_host("::ffff:10.0.0.1") == "10.0.0.1"


# ---- the file format ------------------------------------------------------------------------


def test_rocketmq_sample_file_parses() -> None:
    import yaml

    acl = parse_plain_acl(yaml.safe_load(ACL_YML))
    assert set(acl.accounts) == {"RocketMQ", "rocketmq2"}
    user = acl.accounts["RocketMQ"]
    assert user.secret_key == "12345678"  # a YAML number, taken as text
    assert not user.admin and not user.white.matches("127.0.0.1")
    assert (user.default_topic_perm, user.default_group_perm) == (DENY, SUB)
    assert user.resources == {
        "topicA": DENY,
        "topicB": PUB | SUB,
        "topicC": SUB,
        "%RETRY%groupA": DENY,
        "%RETRY%groupB": PUB | SUB,
        "%RETRY%groupC": SUB,
    }
    admin = acl.accounts["rocketmq2"]
    assert admin.admin and admin.white.matches("192.168.1.7") and admin.resources is None
    assert admin.default_topic_perm == DENY  # no defaultTopicPerm: DENY, as RocketMQ reads it
    assert len(acl.global_white) == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("accounts:\n  - accessKey: short\n    secretKey: 12345678\n", "longer than 6"),
        ("accounts:\n  - accessKey: longEnough\n", "longer than 6"),
        (
            "accounts:\n  - {accessKey: longEnough, secretKey: longEnough, topicPerms: [t]}\n",
            "not NAME=PERM",
        ),
        (
            "accounts:\n  - {accessKey: longEnough, secretKey: longEnough, "
            "topicPerms: [t=WRITE]}\n",
            "DENY, PUB, SUB or PUB|SUB",
        ),
        (
            "accounts:\n  - {accessKey: longEnough, secretKey: longEnough}\n"
            "  - {accessKey: longEnough, secretKey: otherOne1}\n",
            "listed twice",
        ),
        ("accounts: 7\n", "a list of accounts"),
        (
            "accounts:\n  - {accessKey: longEnough, secretKey: longEnough, "
            "defaultTopicPerm: PUBB}\n",
            "account longEnough: defaultTopicPerm 'PUBB': the permission must be DENY, PUB",
        ),
        (
            "accounts:\n  - {accessKey: longEnough, secretKey: longEnough, "
            "defaultGroupPerm: ALL}\n",
            "defaultGroupPerm 'ALL'",
        ),
        (
            "accounts:\n  - {accessKey: longEnough, secretKey: longEnough, admin: maybe}\n",
            "account longEnough: admin must be true or false, not 'maybe'",
        ),
        (
            "accounts:\n  - accessKey: longEnough\n  secretKey: [longEnough\n",
            "plain_acl.yml is not valid YAML: .* at line 3, column",
        ),
        ("globalWhiteRemoteAddresses: [1.2.3.400]\n", "out of range"),
        (
            "accounts:\n  - {accessKey: longEnough, secretKey: longEnough, "
            "whiteRemoteAddress: 1.2.x.4}\n",
            "account longEnough",
        ),
    ],
)
def test_bad_files_say_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(text)
    with pytest.raises(AclConfigError, match=message.replace("|", r"\|")):
        load_acl(path)


def test_key_lists_of_the_older_option_are_admin_accounts(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("# accounts\nak1:sk1\nak2=sk2\n")
    (tmp_path / "b.json").write_text('{"a": "b"}')
    (tmp_path / "c.yml").write_text("ak3: sk3\n")
    for name, keys in (("a.txt", {"ak1", "ak2"}), ("b.json", {"a"}), ("c.yml", {"ak3"})):
        acl = load_acl(tmp_path / name)
        assert set(acl.accounts) == keys
        assert all(a.admin and a.resources is None for a in acl.accounts.values())
    assert load_acl(tmp_path / "a.txt").accounts["ak2"].secret_key == "sk2"
    (tmp_path / "empty.yml").write_text("")
    assert not load_acl(tmp_path / "empty.yml").accounts  # nobody: every request refused
    with pytest.raises(AclConfigError, match="cannot read"):
        load_acl(tmp_path / "missing.yml")


# ---- the permission model -------------------------------------------------------------------


def _authorize(
    acl: Any,
    *,
    host: str = "127.0.0.1",
    access_key: str | None = "RocketMQ",
    good: bool = True,
    needs: dict[str, int] | None = None,
    admin: bool = False,
) -> None:
    acl.authorize(
        host=host,
        access_key=access_key,
        verify=lambda secret: good and secret == "12345678",
        code=17 if admin else 10,
        needs=needs or {},
        admin_needed=admin,
    )


def test_permission_model() -> None:
    import yaml

    acl = parse_plain_acl(yaml.safe_load(ACL_YML))
    # global white addresses need nothing at all
    _authorize(acl, host="10.10.103.5", access_key=None, admin=True)
    with pytest.raises(AccessDeniedError, match="No accessKey is configured"):
        _authorize(acl, access_key=None)
    with pytest.raises(AccessDeniedError, match="No acl config for nobody"):
        _authorize(acl, access_key="nobody")
    with pytest.raises(AccessDeniedError, match="Check signature failed for accessKey=RocketMQ"):
        _authorize(acl, good=False)
    # the account's white address: no signature and no permission check
    _authorize(acl, access_key="rocketmq2", host="192.168.1.3", good=False, admin=True)
    with pytest.raises(AccessDeniedError, match="Check signature failed"):
        _authorize(acl, access_key="rocketmq2", host="192.168.2.3", good=False)
    # admin requests
    with pytest.raises(PermissionDeniedError, match="Need admin permission for request code=17"):
        _authorize(acl, admin=True)
    _authorize(acl, access_key="rocketmq2", admin=True, needs={"anyTopic": PUB})
    # resources: listed, then the defaults
    _authorize(acl, needs={"topicB": PUB, "topicC": SUB, "%RETRY%groupB": SUB})
    for needs, name in (
        ({"topicA": SUB}, "topic:topicA"),
        ({"topicC": PUB}, "topic:topicC"),
        ({"otherTopic": SUB}, "topic:otherTopic"),  # defaultTopicPerm: DENY
        ({"%RETRY%groupA": SUB}, "group:groupA"),
    ):
        with pytest.raises(PermissionDeniedError, match=f"No default permission for {name}$"):
            _authorize(acl, needs=needs)
    _authorize(acl, needs={"%RETRY%otherGroup": SUB})  # defaultGroupPerm: SUB
    _authorize(acl, needs={"RMQ_SYS_TRACE_TOPIC": PUB})  # traces may always be written


# ---- reloading ------------------------------------------------------------------------------


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_acl_file_reloads_when_it_changes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text("accounts:\n  - {accessKey: firstAK1, secretKey: firstSK1, admin: true}\n")
    clock = FakeMonotonic()
    acl_file = AclFile(path, check_interval_s=1.0, monotonic=clock)
    assert set(acl_file.current().accounts) == {"firstAK1"}

    path.write_text("accounts:\n  - {accessKey: secondAK, secretKey: secondSK, admin: true}\n")
    os.utime(path, ns=(1, 1))  # another modification time whatever the file system's resolution
    clock.now += 0.5
    assert set(acl_file.current().accounts) == {"firstAK1"}  # not looked at within a second
    clock.now += 0.6
    assert set(acl_file.current().accounts) == {"secondAK"}
    assert acl_file.reloads == 1

    # a broken file keeps the rules read last, and says so
    path.write_text("accounts:\n  - {accessKey: x}\n")
    os.utime(path, ns=(2, 2))
    clock.now += 1.1
    with caplog.at_level(logging.ERROR, logger="rocketstore.acl"):
        assert set(acl_file.current().accounts) == {"secondAK"}
    assert "not reloaded" in caplog.text and "longer than 6" in caplog.text
    # so does a file that is gone
    path.unlink()
    clock.now += 1.1
    assert set(acl_file.current().accounts) == {"secondAK"}
    # and a fixed file is read again
    path.write_text("globalWhiteRemoteAddresses: ['*']\n")
    clock.now += 1.1
    assert acl_file.current().global_white[0].everybody


def test_acl_file_must_exist_and_parse_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(AclConfigError, match=r"does not exist$"):
        AclFile(tmp_path / "missing.yml")
    # aclEnable=true without ROCKETMQ_HOME: the file looked for, and what to do
    monkeypatch.delenv("ROCKETMQ_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AclConfigError) as missing:
        AclFile(default_acl_path())
    assert str(missing.value) == (
        "ACL file conf/plain_acl.yml does not exist (aclEnable=true reads "
        "$ROCKETMQ_HOME/conf/plain_acl.yml, and ROCKETMQ_HOME is not set): set ROCKETMQ_HOME, "
        "or give the file with --acl-file PATH"
    )
    (tmp_path / "bad.yml").write_text("accounts: [{accessKey: a}]\n")
    with pytest.raises(AclConfigError, match=r"bad\.yml"):
        AclFile(tmp_path / "bad.yml")


# ---- signatures -----------------------------------------------------------------------------


def test_signature_covers_sorted_fields_and_body() -> None:
    cmd = RemotingCommand.request(310, {"b": "T", "a": "G", "c": 7}, b"body")
    RequestSigner("AK_long1", "SK_long1")(cmd)
    assert cmd.ext_fields["AccessKey"] == "AK_long1"
    # sorted names: AccessKey, a, b, c (upper case sorts first)
    content = b"AK_long1" + b"G" + b"T" + b"7" + b"body"
    assert signed_content(cmd.ext_fields, cmd.body) == content
    import base64
    import hashlib
    import hmac

    expected = base64.b64encode(hmac.new(b"SK_long1", content, hashlib.sha1).digest()).decode()
    assert cmd.ext_fields["Signature"] == expected == signature(content, "SK_long1")
    # signing again (a retried request) gives the same fields
    RequestSigner("AK_long1", "SK_long1")(cmd)
    assert cmd.ext_fields["Signature"] == expected


def test_signer_from_env() -> None:
    assert signer_from_env({}) is None
    signer = signer_from_env(
        {"ROCKETSTORE_ACCESS_KEY": "akakakak", "ROCKETSTORE_SECRET_KEY": "sksksksk"}
    )
    assert signer is not None and signer.access_key == "akakakak"
    with pytest.raises(ValueError, match="both"):
        signer_from_env({"ROCKETSTORE_ACCESS_KEY": "akakakak"})


def test_remoting_clients_sign_with_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every remoting client of a process (the CLI's, a broker's own: slave sync, name server
    registration, gRPC cluster routes) signs with the environment's account."""
    from rocketstore.remoting import AsyncRemotingClient

    monkeypatch.setenv("ROCKETSTORE_ACCESS_KEY", "")
    monkeypatch.setenv("ROCKETSTORE_SECRET_KEY", "")
    assert RemotingClient().signer is None and AsyncRemotingClient().signer is None
    monkeypatch.setenv("ROCKETSTORE_ACCESS_KEY", "envAK001")
    monkeypatch.setenv("ROCKETSTORE_SECRET_KEY", "envSK001")
    for client in (RemotingClient(), AsyncRemotingClient()):
        assert isinstance(client.signer, RequestSigner)
        assert client.signer.access_key == "envAK001"
    assert RemotingClient(signer=None).signer is None


def test_check_request_verifies_the_signature() -> None:
    import yaml

    acl = parse_plain_acl(yaml.safe_load(ACL_YML))
    cmd = RemotingCommand.request(310, {"a": "P", "b": "topicB", "_UNIQUE_KEY_QUERY": "x"}, b"m")
    RequestSigner("RocketMQ", "12345678")(cmd)
    check_request(acl, cmd, "127.0.0.1")
    cmd.ext_fields["_UNIQUE_KEY_QUERY"] = "changed"  # left out of what the broker checks
    check_request(acl, cmd, "127.0.0.1")
    cmd.body = b"tampered"
    with pytest.raises(AccessDeniedError, match="Check signature failed"):
        check_request(acl, cmd, "127.0.0.1")
    wrong = RemotingCommand.request(310, {"a": "P", "b": "topicB"}, b"m")
    RequestSigner("RocketMQ", "wrong-secret")(wrong)
    with pytest.raises(AccessDeniedError, match="Check signature failed"):
        check_request(acl, wrong, "127.0.0.1")


def test_resources_of_requests() -> None:
    def needs(code: int, ext: dict[str, str], body: bytes = b"") -> dict[str, int]:
        return request_needs(RemotingCommand.request(code, ext, body))

    assert needs(10, {"topic": "T", "producerGroup": "P"}) == {"T": PUB}
    assert needs(310, {"a": "P", "b": "T"}) == {"T": PUB}
    assert needs(320, {"a": "P", "b": "T"}) == {"T": PUB}  # a batch as a single send
    assert needs(310, {"a": "G", "b": "%RETRY%G"}) == {"%RETRY%G": SUB}
    assert needs(11, {"topic": "T", "consumerGroup": "G"}) == {"T": SUB, "%RETRY%G": SUB}
    assert needs(15, {"topic": "T", "consumerGroup": "G"}) == {"T": SUB, "%RETRY%G": SUB}
    assert needs(36, {"group": "G", "offset": "1"}) == {"%RETRY%G": SUB}
    assert needs(35, {"clientID": "c", "consumerGroup": "G"}) == {"%RETRY%G": SUB}
    assert needs(38, {"consumerGroup": "G"}) == {"%RETRY%G": SUB}
    assert needs(12, {"topic": "T", "key": "k"}) == {"T": SUB}
    assert needs(215, {"topic": "T"}) == {}  # admin: checked by the admin flag
    assert needs(14, {"topic": "T", "consumerGroup": "G"}) == {"T": SUB, "%RETRY%G": SUB}
    assert needs(310, {"a": "G", "b": "%DLQ%G"}) == {"%RETRY%G": SUB}  # a group's DLQ: the group
    assert needs(10, {"topic": "%RETRY%G2", "producerGroup": "P"}) == {"%RETRY%G2": SUB}
    assert needs(314, {"srcGroup": "A", "destGroup": "B"}) == {"%RETRY%A": SUB, "%RETRY%B": SUB}


# ---- broker.conf keys the broker does not act on --------------------------------------------


def test_ignored_broker_conf_keys(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "brokerName=broker-x\naclEnable=true\nflushDiskType=ASYNC_FLUSH\n"
        "sendMessageThreadPoolNums=4\nuseEpollNativeSelector=true\nbrokerClusterName=C\n"
        "traceTopicEnable=true\nmsgTraceTopicName=T\n"
    )
    store = StoreConfig.from_broker_conf(conf)
    assert ignored_keys(store) == ["sendMessageThreadPoolNums", "useEpollNativeSelector"]
    config = BrokerConfig.from_store_config(store)
    assert config.acl_enable and config.broker_name == "broker-x"
    assert config.trace_topic_enable and config.msg_trace_topic_name == "T"
    assert config.acl_path == str(
        Path(os.environ.get("ROCKETMQ_HOME") or ".") / "conf/plain_acl.yml"
    )


def test_broker_warns_once_of_ignored_keys(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    extra = (("brokerName", "broker-x"), ("noSuchSetting", "1"), ("aclEnable", "false"))
    with caplog.at_level(logging.WARNING):
        b = BrokerThread(tmp_path / "b", store_overrides={"extra": extra})
        try:
            b.start()
        finally:
            b.close()
    warnings = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert warnings == [
        "unknown broker configuration keys ignored (neither RocketMQ's nor rocketstore's): "
        "noSuchSetting"
    ]


def test_a_misspelt_broker_conf_key_is_told_apart_from_an_unsupported_one() -> None:
    warning = ignored_keys_warning(["sendMessageThreadPoolNums", "brokerRoel", "fooBar"])
    assert warning == (
        "broker configuration keys ignored (not supported): sendMessageThreadPoolNums; "
        "unknown broker configuration keys ignored (neither RocketMQ's nor rocketstore's): "
        "brokerRoel (did you mean brokerRole?), fooBar"
    )
    assert "did you mean tieredDir?" in ignored_keys_warning(["tieredDri"])  # rocketstore's own


# ---- the broker's remoting port -------------------------------------------------------------

BROKER_ACL = """\
accounts:
  - accessKey: adminAK01
    secretKey: adminSK01
    admin: true
  - accessKey: userAK001
    secretKey: userSK001
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [topicA=DENY, topicB=PUB|SUB, topicC=SUB]
    groupPerms: [groupA=DENY]
"""
ADMIN = RequestSigner("adminAK01", "adminSK01")
USER = RequestSigner("userAK001", "userSK001")


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    root = tmp_path_factory.mktemp("acl")
    acl_path = root / "plain_acl.yml"
    acl_path.write_text(BROKER_ACL)
    b = BrokerThread(
        root / "store", broker_overrides={"acl_enable": True, "acl_file": str(acl_path)}
    )
    try:
        b.start()
        yield b
    finally:
        b.close()


def call(
    b: BrokerThread, code: int, ext: dict[str, str], signer: Any = None, body: bytes = b""
) -> RemotingCommand:
    with RemotingClient(timeout=5, signer=signer) as client:
        return client.invoke(b.broker.address, RemotingCommand.request(code, ext, body))


def refused(r: RemotingCommand, why: str) -> bool:
    return (
        r.code == RC.SYSTEM_ERROR
        and r.remark is not None
        and r.remark.startswith(EXCEPTION_PREFIX)
        and why in r.remark
    )


def create_ext(topic: str, perm: int = 6) -> dict[str, str]:
    return {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": "1",
        "writeQueueNums": "1",
        "perm": str(perm),
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0",
        "order": "false",
    }


def send_ext(topic: str) -> dict[str, str]:
    return {
        "a": "P_acl",
        "b": topic,
        "c": "TBW102",
        "d": "1",
        "e": "0",
        "f": "0",
        "g": "0",
        "h": "0",
        "i": "",
        "j": "0",
        "k": "false",
        "m": "false",
    }


def test_admin_requests_need_an_admin_account(acl_broker: BrokerThread) -> None:
    b = acl_broker
    for signer, why in (
        (None, "No accessKey is configured"),
        (USER, "Need admin permission for request code=17, but accessKey=userAK001 is not"),
        (RequestSigner("userAK001", "not-the-secret"), "Check signature failed"),
        (RequestSigner("stranger", "whatever1"), "No acl config for stranger"),
    ):
        assert refused(call(b, 17, create_ext("topicB"), signer), why), signer
    assert b.broker.topics.select("topicB") is None
    assert call(b, 17, create_ext("topicB"), ADMIN).code == RC.SUCCESS
    assert b.broker.topics.select("topicB") is not None

    # a topic's permission cannot be set to 0 nor the topic deleted without admin
    for signer in (None, USER):
        assert refused(call(b, 17, create_ext("topicB", perm=0), signer), "")
        assert refused(call(b, 215, {"topic": "topicB"}, signer), "")
        assert refused(call(b, 207, {"groupName": "groupB"}, signer), "")
        r = call(b, 25, {}, signer, b"brokerPermission=0\n")  # UPDATE_BROKER_CONFIG
        assert refused(r, "") or r.code == RC.REQUEST_CODE_NOT_SUPPORTED
    config = b.broker.topics.select("topicB")
    assert config is not None and config.perm == 6
    assert b.broker.config.broker_permission == 6


def test_other_requests_need_a_known_account(acl_broker: BrokerThread) -> None:
    b = acl_broker
    assert refused(call(b, 26, {}), "No accessKey is configured")  # GET_BROKER_CONFIG
    assert refused(call(b, 21, {}), "No accessKey is configured")  # GET_ALL_TOPIC_CONFIG
    assert call(b, 26, {}, USER).code == RC.SUCCESS
    assert call(b, 26, {}, ADMIN).code == RC.SUCCESS


def test_sends_and_offsets_need_their_topic_and_group(acl_broker: BrokerThread) -> None:
    b = acl_broker
    assert call(b, 17, create_ext("topicA"), ADMIN).code == RC.SUCCESS
    assert call(b, 17, create_ext("topicC"), ADMIN).code == RC.SUCCESS
    assert refused(call(b, 310, send_ext("topicB"), None, b"x"), "No accessKey")
    assert refused(call(b, 310, send_ext("topicA"), USER, b"x"), "permission for topic:topicA")
    assert refused(call(b, 310, send_ext("topicC"), USER, b"x"), "permission for topic:topicC")
    assert refused(call(b, 320, send_ext("topicA"), USER, b"x"), "topic:topicA")
    assert call(b, 310, send_ext("topicB"), USER, b"x").code == RC.SUCCESS
    assert call(b, 310, send_ext("topicA"), ADMIN, b"x").code == RC.SUCCESS  # admin: all
    wait_dispatched(b.broker.store)
    assert b.broker.store.get_max_offset_in_queue("topicA", 0) == 1

    offset = {"consumerGroup": "groupB", "topic": "topicB", "queueId": "0", "commitOffset": "1"}
    assert refused(call(b, 15, offset), "No accessKey")
    assert refused(call(b, 15, {**offset, "consumerGroup": "groupA"}, USER), "group:groupA")
    assert refused(call(b, 15, {**offset, "topic": "topicA"}, USER), "topic:topicA")
    assert b.broker.offsets.query_offset("groupB", "topicB", 0) == -1
    assert call(b, 15, offset, USER).code == RC.SUCCESS
    assert b.broker.offsets.query_offset("groupB", "topicB", 0) == 1


def test_broker_serves_on_after_refusals(acl_broker: BrokerThread) -> None:
    b = acl_broker
    with RemotingClient(timeout=5, signer=None) as client:
        for _ in range(20):
            r = client.invoke(b.broker.address, RemotingCommand.request(215, {"topic": "x"}))
            assert refused(r, "No accessKey")
        client.invoke_oneway(b.broker.address, RemotingCommand.request(215, {"topic": "x"}))
        client.signer = USER  # the same connection, now signed
        r = client.invoke(b.broker.address, RemotingCommand.request(26, {}))
        assert r.code == RC.SUCCESS


def test_project_clients_sign_with_credentials(
    acl_broker: BrokerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = acl_broker
    assert call(b, 17, create_ext("topicB"), ADMIN).code == RC.SUCCESS
    mq = MessageQueue("topicB", b.broker.config.broker_name, 0)
    with Producer(b.namesrv_address) as producer:
        producer.client.signer = None
        with pytest.raises(ClientError, match="AclException"):
            producer.send("topicB", b"unsigned", queue=mq)
    monkeypatch.setenv("ROCKETSTORE_ACCESS_KEY", "userAK001")
    monkeypatch.setenv("ROCKETSTORE_SECRET_KEY", "userSK001")
    with Producer(b.namesrv_address) as producer:
        sent = producer.send("topicB", b"signed", queue=mq)
    wait_dispatched(b.broker.store)  # in its new queue: the send is answered before that
    with PullConsumer(b.namesrv_address, "groupB") as consumer:
        result = consumer.pull(mq, sent.queue_offset)
    assert [m.body for m in result.messages] == [b"signed"]


def test_cli_admin_commands_take_credentials(
    acl_broker: BrokerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = acl_broker
    # "" is no credential; the CLI's options set these, which the test's end undoes
    monkeypatch.setenv("ROCKETSTORE_ACCESS_KEY", "")
    monkeypatch.setenv("ROCKETSTORE_SECRET_KEY", "")
    args = ["topic", "create", "--namesrv", b.namesrv_address, "--topic", "CliAclTopic"]
    args += ["--broker", b.broker.address]
    runner = CliRunner()
    plain = runner.invoke(cli_main, args)
    assert plain.exit_code != 0 and "AclException" in plain.output, plain.output
    assert b.broker.topics.select("CliAclTopic") is None
    half = runner.invoke(cli_main, ["--access-key", "adminAK01", *args])
    assert half.exit_code != 0 and "both" in half.output
    good = runner.invoke(
        cli_main, ["--access-key", "adminAK01", "--secret-key", "adminSK01", *args]
    )
    assert good.exit_code == 0, good.output
    assert b.broker.topics.select("CliAclTopic") is not None


# ---- the server commands --------------------------------------------------------------------


def test_acl_file_option_turns_the_acl_on(tmp_path: Path) -> None:
    from rocketstore.cli._serve import _make_broker

    path = tmp_path / "plain_acl.yml"
    path.write_text(BROKER_ACL)
    args = (str(tmp_path / "s"), None, "127.0.0.1:0", None, None, None, None, None, None)
    broker = _make_broker(*args, acl_file=str(path))
    assert broker.config.acl_enable and broker.config.acl_path == str(path)
    assert _make_broker(*args).config.acl_path is None


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"plain_acl.yml": "accounts: [{accessKey: a}]\n"}, "longer than 6"),
        ({"broker.conf": "aclEnable=true\n"}, "does not exist (set ROCKETMQ_HOME or give"),
    ],
)
def test_server_commands_refuse_a_bad_acl_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str], message: str
) -> None:
    monkeypatch.setenv("ROCKETMQ_HOME", str(tmp_path / "home"))
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    args = ["broker", "--store", str(tmp_path / "s"), "--listen", "127.0.0.1:0"]
    if "plain_acl.yml" in files:
        args += ["--acl-file", str(tmp_path / "plain_acl.yml")]
    else:
        args += ["-c", str(tmp_path / "broker.conf")]
    result = CliRunner().invoke(cli_main, args)
    assert result.exit_code == 1
    assert message in result.output and "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0]


def test_broker_applies_a_changed_file_without_a_restart(tmp_path: Path) -> None:
    import time

    path = tmp_path / "plain_acl.yml"
    path.write_text(BROKER_ACL)
    b = BrokerThread(tmp_path / "s", broker_overrides={"acl_enable": True, "acl_file": str(path)})
    try:
        b.start()
        assert refused(call(b, 310, send_ext("topicA"), USER, b"x"), "topic:topicA")
        path.write_text(BROKER_ACL.replace("topicA=DENY", "topicA=PUB"))
        os.utime(path, ns=(10**9, 10**9))
        deadline = time.monotonic() + 60
        while (r := call(b, 310, send_ext("topicA"), USER, b"x")).code != RC.SUCCESS:
            assert time.monotonic() < deadline, r.remark
            time.sleep(0.2)
        # dispatch into the consume queue follows the acknowledgement of the send
        while b.broker.store.get_max_offset_in_queue("topicA", 0) != 1:
            assert time.monotonic() < deadline + 10
            time.sleep(0.05)
    finally:
        b.close()
