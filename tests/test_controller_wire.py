"""The controller's wire codecs: RocketMQ 5.1.4's controller headers as extFields (Java field
names, text values, @CFNotNull fields required) and its bodies in fastjson's text (bean fields in
name order, Long map keys bare), both ways; bad input is a RequestError, never a guess."""

from __future__ import annotations

import pytest

from rocketstore.protocol import _controller_headers as headers
from rocketstore.protocol._controller_bodies import (
    BodyError,
    BrokerMemberGroup,
    BrokerReplicasInfo,
    ElectMasterResponseBody,
    ReplicaIdentity,
    ReplicasInfo,
    SyncStateSet,
    decode_broker_names,
    encode_broker_names,
)
from rocketstore.protocol._controller_headers import (
    AlterSyncStateSetRequest,
    BrokerHeartbeatRequest,
    CleanBrokerDataRequest,
    ElectMasterRequest,
    GetMetaDataResponse,
    RegisterBrokerResponse,
)
from rocketstore.remoting import RequestCode, RequestError, ResponseCode


def test_codes_are_rocketmq_5s() -> None:
    assert RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET == 1001
    assert RequestCode.CONTROLLER_APPLY_BROKER_ID == 1013
    assert RequestCode.BROKER_HEARTBEAT == 904
    assert RequestCode.NOTIFY_BROKER_ROLE_CHANGED == 1008
    assert ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH == 2000
    assert ResponseCode.CONTROLLER_NOT_LEADER == 2007
    assert ResponseCode.CONTROLLER_BROKER_ID_INVALID == 2014


def test_a_header_goes_out_as_java_field_names_and_text() -> None:
    header = RegisterBrokerResponse("C", "broker-a", 1, "127.0.0.1:30911", 3, 4)
    assert header.to_ext() == {
        "clusterName": "C",
        "brokerName": "broker-a",
        "masterBrokerId": "1",
        "masterAddress": "127.0.0.1:30911",
        "masterEpoch": "3",
        "syncStateSetEpoch": "4",
    }
    # a null field is left out, as makeCustomHeaderToNet leaves it out
    assert RegisterBrokerResponse("C", "broker-a").to_ext() == {
        "clusterName": "C",
        "brokerName": "broker-a",
    }
    assert GetMetaDataResponse(
        "group1", "n0", "127.0.0.1:9878", True, "n0:127.0.0.1:9878;"
    ).to_ext() == {
        "group": "group1",
        "controllerLeaderId": "n0",
        "controllerLeaderAddress": "127.0.0.1:9878",
        "isLeader": "true",
        "peers": "n0:127.0.0.1:9878;",
    }


# RocketMQ 5.1.4's header classes as Java declares them: field, type ("!": @CFNotNull)
JAVA_HEADERS = {
    "GetNextBrokerIdRequest": "clusterName String, brokerName String",
    "GetNextBrokerIdResponse": "clusterName String, brokerName String, nextBrokerId Long",
    "ApplyBrokerIdRequest": (
        "clusterName String, brokerName String, appliedBrokerId Long, registerCheckCode String"
    ),
    "ApplyBrokerIdResponse": "clusterName String, brokerName String",
    "RegisterBrokerRequest": (
        "clusterName String, brokerName String, brokerId Long, brokerAddress String"
    ),
    "RegisterBrokerResponse": (
        "clusterName String, brokerName String, masterBrokerId Long, masterAddress String, "
        "masterEpoch Integer, syncStateSetEpoch Integer"
    ),
    "ElectMasterRequest": (
        "clusterName String!, brokerName String!, brokerId Long!, designateElect Boolean!"
    ),
    "ElectMasterResponse": (
        "masterBrokerId Long, masterAddress String, masterEpoch Integer, syncStateSetEpoch Integer"
    ),
    "AlterSyncStateSetRequest": "brokerName String, masterBrokerId Long, masterEpoch Integer",
    "AlterSyncStateSetResponse": "newSyncStateSetEpoch Integer",
    "GetReplicaInfoRequest": "brokerName String",
    "GetReplicaInfoResponse": "masterBrokerId Long, masterAddress String, masterEpoch Integer",
    "GetMetaDataResponse": (
        "group String, controllerLeaderId String, controllerLeaderAddress String, "
        "isLeader Boolean, peers String"
    ),
    "BrokerHeartbeatRequest": (
        "clusterName String!, brokerAddr String!, brokerName String!, brokerId Long, "
        "epoch Integer, maxOffset Long, confirmOffset Long, heartbeatTimeoutMills Long, "
        "electionPriority Integer"
    ),
    "NotifyBrokerRoleChangedRequest": (
        "masterAddress String, masterEpoch Integer, syncStateSetEpoch Integer, masterBrokerId Long"
    ),
    "CleanBrokerDataRequest": (
        "clusterName String, brokerName String!, brokerControllerIdsToClean String, "
        "isCleanLivingBroker Boolean"
    ),
}


def test_each_header_declared_once_derives_java_s_fields() -> None:
    """A header's wire table (extFields key, Java type, @CFNotNull) comes from its one
    declaration: the attribute in camelCase, the annotation's type, no default."""
    declared = {
        name: cls
        for name, cls in vars(headers).items()
        if isinstance(cls, type) and issubclass(cls, headers.Header) and cls is not headers.Header
    }
    assert sorted(declared) == sorted(JAVA_HEADERS)
    for name, cls in declared.items():
        java = {}
        for item in JAVA_HEADERS[name].split(", "):
            key, kind = item.split(" ")
            java[key] = (kind.rstrip("!"), kind.endswith("!"))
        derived = {key: (kind, required) for _attr, key, kind, required in cls.WIRE}
        assert derived == java, name


def test_a_header_field_without_a_java_type_is_refused_at_declaration() -> None:
    with pytest.raises(TypeError, match="no Java type"):

        @headers.header
        class Odd(headers.Header):
            when: float | None = None


def test_a_header_reads_numbers_sent_as_text_or_json_numbers() -> None:
    ext = {"clusterName": "C", "brokerName": "b", "brokerId": 2, "designateElect": "TRUE"}
    assert ElectMasterRequest.from_ext(ext) == ElectMasterRequest("C", "b", 2, True)
    ext = {"clusterName": "C", "brokerName": "b", "brokerId": "2", "designateElect": "no"}
    assert ElectMasterRequest.from_ext(ext).designate_elect is False


@pytest.mark.parametrize(
    ("ext", "message"),
    [
        ({"brokerName": "b", "brokerId": "1", "designateElect": "true"}, "<clusterName> is null"),
        ({"clusterName": "C", "brokerName": "b", "brokerId": "1"}, "<designateElect> is null"),
        (
            {"clusterName": "C", "brokerName": "b", "brokerId": "x", "designateElect": "true"},
            "brokerId",
        ),
        (
            {"clusterName": "C", "brokerName": "b", "brokerId": "1.5", "designateElect": "true"},
            "brokerId",
        ),
    ],
)
def test_a_required_field_missing_or_a_bad_number_is_refused(
    ext: dict[str, str], message: str
) -> None:
    with pytest.raises(RequestError, match=message):
        ElectMasterRequest.from_ext(ext)


def test_an_int_field_beyond_32_bits_is_refused() -> None:
    with pytest.raises(RequestError, match="masterEpoch"):
        AlterSyncStateSetRequest.from_ext({"brokerName": "b", "masterEpoch": str(1 << 31)})


def test_heartbeat_header_and_java_defaults() -> None:
    ext = {"clusterName": "C", "brokerAddr": "127.0.0.1:1", "brokerName": "b", "brokerId": "1",
           "epoch": "2", "maxOffset": "1024", "heartbeatTimeoutMills": "3000"}  # fmt: skip
    header = BrokerHeartbeatRequest.from_ext(ext)
    assert (header.broker_id, header.epoch, header.max_offset) == (1, 2, 1024)
    assert header.confirm_offset is None and header.election_priority is None
    # a primitive boolean that is absent takes Java's default
    clean = CleanBrokerDataRequest.from_ext({"brokerName": "b"})
    assert clean.is_clean_living_broker is False and clean.cluster_name is None
    assert CleanBrokerDataRequest.from_ext(
        {"brokerName": "b", "isCleanLivingBroker": "true"}
    ).is_clean_living_broker


def test_peers_text_splits_into_id_and_address() -> None:
    meta = GetMetaDataResponse.from_ext(
        {"group": "g", "isLeader": "false", "peers": "n0:127.0.0.1:9878;n1:127.0.0.1:9868;"}
    )
    assert meta.is_leader is False
    assert meta.peer_list() == [("n0", "127.0.0.1:9878"), ("n1", "127.0.0.1:9868")]


# ---- bodies -----------------------------------------------------------------------------------


def test_sync_state_set_as_fastjson_writes_it() -> None:
    body = SyncStateSet(frozenset({2, 1}), 3).encode()
    assert body == b'{"syncStateSet":[1,2],"syncStateSetEpoch":3}'
    assert SyncStateSet.decode(body) == SyncStateSet(frozenset({1, 2}), 3)


def test_elect_master_body_with_bare_long_keys() -> None:
    group = BrokerMemberGroup("C", "broker-a", {2: "127.0.0.1:2", 1: "127.0.0.1:1"})
    body = ElectMasterResponseBody(group, frozenset({1})).encode()
    assert body == (
        b'{"brokerMemberGroup":{"brokerAddrs":{1:"127.0.0.1:1",2:"127.0.0.1:2"},'
        b'"brokerName":"broker-a","cluster":"C"},"syncStateSet":[1]}'
    )
    assert ElectMasterResponseBody.decode(body) == ElectMasterResponseBody(group, frozenset({1}))
    # the master unchanged: no member group
    assert ElectMasterResponseBody(None, frozenset({1})).encode() == b'{"syncStateSet":[1]}'
    # mqadmin reads the same body as a BrokerMemberGroup: fastjson finds no brokerAddrs there
    assert BrokerMemberGroup.decode(body).broker_addrs == {}


def test_broker_replicas_info_round_trip() -> None:
    info = BrokerReplicasInfo(
        {
            "broker-a": ReplicasInfo(
                1,
                "127.0.0.1:1",
                2,
                3,
                (ReplicaIdentity("broker-a", 1, "127.0.0.1:1", True),),
                (ReplicaIdentity("broker-a", 2, "127.0.0.1:2", False),),
            )
        }
    )
    body = info.encode()
    assert body == (
        b'{"replicasInfoTable":{"broker-a":{"inSyncReplicas":[{"alive":true,"brokerAddress":'
        b'"127.0.0.1:1","brokerId":1,"brokerName":"broker-a"}],"masterAddress":"127.0.0.1:1",'
        b'"masterBrokerId":1,"masterEpoch":2,"notInSyncReplicas":[{"alive":false,'
        b'"brokerAddress":"127.0.0.1:2","brokerId":2,"brokerName":"broker-a"}],'
        b'"syncStateSetEpoch":3}}}'
    )
    assert BrokerReplicasInfo.decode(body) == info


def test_broker_names_body() -> None:
    assert encode_broker_names(["a", "b"]) == b'["a","b"]'
    assert decode_broker_names(b'["a","b"]') == ["a", "b"]
    assert decode_broker_names(b"") == []


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[1,2]",
        b'{"syncStateSet":"1,2","syncStateSetEpoch":1}',
        b'{"syncStateSet":[1,"x"],"syncStateSetEpoch":1}',
        b'{"syncStateSet":[true],"syncStateSetEpoch":1}',
        b'{"syncStateSet":[1],"syncStateSetEpoch":4294967296}',
        b"[" * 100_000 + b"]" * 100_000,  # nested past the parser's depth
    ],
)
def test_a_sync_state_set_that_is_not_one_is_refused(body: bytes) -> None:
    with pytest.raises(BodyError):
        SyncStateSet.decode(body)
    assert issubclass(BodyError, RequestError)


def test_broker_names_that_are_not_names_are_refused() -> None:
    for body in (b'{"a":1}', b"[1,2]", b"nope"):
        with pytest.raises(BodyError):
            decode_broker_names(body)
