"""A broker and a name server with ACL on, the accounts the ACL tests use, and a sample request
for every request code they serve (raw frames, signed by the project's remoting client).

Accounts (plain_acl.yml)::

    adminAK01   admin
    attackAK1   defaultTopicPerm DENY, defaultGroupPerm DENY, topicPerms [PubOnly=PUB]
    userAK001   defaultTopicPerm DENY, defaultGroupPerm DENY, topicPerms [Shared=PUB|SUB],
                groupPerms [GShared=SUB]
    readerAK1   defaultTopicPerm SUB, defaultGroupPerm SUB, topicPerms [Secret=DENY]

Topics Shared, Secret and PubOnly and groups GShared and GSecret exist; ``World`` holds where a
message of Shared, one of Secret and a half message of Shared were stored.
"""

from __future__ import annotations

import asyncio
import json
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocketstore.acl import AclFile, RequestSigner
from rocketstore.acl._remoting import EXCEPTION_PREFIX
from rocketstore.namesrv import NameServer
from rocketstore.protocol._namesrv_bodies import DataVersion, RegisterBrokerBody, TopicConfigWrapper
from rocketstore.remoting import RemotingClient, RemotingCommand, ResponseCode
from rocketstore.store.log._record import decode_msg_id, properties_to_string

from .grpc_broker import BrokerThread

RC = ResponseCode

# the account denied every topic and group but PubOnly's sending (an entry of plain_acl.yml's
# accounts list)
ATTACKER_ACCOUNT = """\
  - accessKey: attackAK1
    secretKey: attackSK1
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [PubOnly=PUB]
"""
ACL_YML = f"""\
accounts:
  - accessKey: adminAK01
    secretKey: adminSK01
    admin: true
{ATTACKER_ACCOUNT}  - accessKey: userAK001
    secretKey: userSK001
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [Shared=PUB|SUB]
    groupPerms: [GShared=SUB]
  - accessKey: readerAK1
    secretKey: readerSK1
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
    topicPerms: [Secret=DENY]
"""
ADMIN = RequestSigner("adminAK01", "adminSK01")
ATTACKER = RequestSigner("attackAK1", "attackSK1")
USER = RequestSigner("userAK001", "userSK001")
READER = RequestSigner("readerAK1", "readerSK1")  # reads everything but Secret
UNSIGNED = None

TOPICS = ("Shared", "Secret", "PubOnly")
GROUPS = ("GShared", "GSecret")


def call(
    address: str,
    code: int,
    ext: dict[str, str] | None = None,
    signer: Any = UNSIGNED,
    body: bytes = b"",
) -> RemotingCommand:
    """One request, signed by ``signer`` (None: unsigned), its answer."""
    with RemotingClient(timeout=10, signer=signer) as client:
        return client.invoke(address, RemotingCommand.request(code, dict(ext or {}), body))


def acl_refused(r: RemotingCommand) -> bool:
    """Whether ``r`` is the plain ACL's refusal (RocketMQ 4.x's AclException answer)."""
    return r.code == RC.SYSTEM_ERROR and (r.remark or "").startswith(EXCEPTION_PREFIX)


def acl2_refused(r: RemotingCommand) -> bool:
    """Whether ``r`` is ACL 2.0's refusal (RocketMQ 5.3's: NO_PERMISSION, the reason alone)."""
    return r.code == RC.NO_PERMISSION and not (r.remark or "").startswith(EXCEPTION_PREFIX)


def create_topic_ext(topic: str, perm: int = 6) -> dict[str, str]:
    return {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": "2",
        "writeQueueNums": "2",
        "perm": str(perm),
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0",
        "order": "false",
    }


def group_body(group: str) -> bytes:
    return json.dumps(
        {
            "groupName": group,
            "consumeEnable": True,
            "consumeFromMinEnable": True,
            "consumeBroadcastEnable": True,
            "retryQueueNums": 1,
            "retryMaxTimes": 16,
            "brokerId": 0,
            "whichBrokerWhenConsumeSlowly": 1,
            "notifyConsumerIdsChangedEnable": True,
        }
    ).encode()


def send_v2_ext(topic: str, props: dict[str, str] | None = None, /, **extra: str) -> dict[str, str]:
    """SEND_MESSAGE_V2's header (short names); ``extra`` fields added as given."""
    return {
        "a": "PG_acl",
        "b": topic,
        "c": "TBW102",
        "d": "2",
        "e": "0",
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": properties_to_string(props or {"KEYS": "k1"}),
        "j": "0",
        "k": "false",
        "m": "false",
        **extra,
    }


def send_v1_ext(topic: str, props: dict[str, str] | None = None, /, **extra: str) -> dict[str, str]:
    """SEND_MESSAGE's header (long names)."""
    return {
        "producerGroup": "PG_acl",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "2",
        "queueId": "0",
        "sysFlag": "0",
        "bornTimestamp": str(int(time.time() * 1000)),
        "flag": "0",
        "properties": properties_to_string(props or {"KEYS": "k1"}),
        "reconsumeTimes": "0",
        "unitMode": "false",
        "batch": "false",
        **extra,
    }


def batch_body(*bodies: bytes) -> bytes:
    """A SEND_BATCH_MESSAGE body: each message as the clients encode it (total size, magic,
    body CRC, flag, body length, body, properties length, properties)."""
    out = b""
    for body in bodies:
        total = 20 + len(body) + 2
        out += struct.pack(">iiiii", total, 0, 0, 0, len(body)) + body + struct.pack(">h", 0)
    return out


def heartbeat_body(group: str, topic: str, client_id: str = "acl-client@1") -> bytes:
    return json.dumps(
        {
            "clientID": client_id,
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": [{"topic": topic, "subString": "*"}],
                    "unitMode": False,
                }
            ],
            "producerDataSet": [],
        }
    ).encode()


def lock_body(group: str, topic: str, broker_name: str, client_id: str = "acl-client@1") -> bytes:
    return json.dumps(
        {
            "consumerGroup": group,
            "clientId": client_id,
            "mqSet": [{"topic": topic, "brokerName": broker_name, "queueId": 0}],
        }
    ).encode()


def acl_body(subject: str, topic: str, actions: tuple[str, ...] = ("Pub", "Sub")) -> bytes:
    """An ACL 2.0 AclInfo: ``actions`` on ``Topic:<topic>`` allowed."""
    entry = {"resource": f"Topic:{topic}", "actions": list(actions), "decision": "Allow"}
    return json.dumps({"subject": subject, "policies": [{"entries": [entry]}]}).encode()


def register_body(topic: str) -> bytes:
    configs = {
        topic: {
            "topicName": topic,
            "readQueueNums": 4,
            "writeQueueNums": 4,
            "perm": 6,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": False,
        }
    }
    wrapper = TopicConfigWrapper(DataVersion.of({"counter": 1, "timestamp": 1}), configs)
    return RegisterBrokerBody(wrapper, []).encode()


@dataclass
class World:
    """Where the fixture's messages are."""

    broker: BrokerThread
    namesrv: NameServer
    shared_offset: int = 0  # commit-log offset of a message of Shared
    secret_offset: int = 0  # ... of Secret
    half: dict[str, str] = field(default_factory=dict)  # a half message of Shared: its ends

    @property
    def address(self) -> str:
        return self.broker.broker.address

    @property
    def namesrv_address(self) -> str:
        return self.namesrv.address

    @property
    def broker_name(self) -> str:
        return self.broker.broker.config.broker_name


def acl_world(root: Path) -> Iterator[World]:
    """A broker (its own name server without ACL, for its registration) and a second name
    server with ACL on, both checking ``ACL_YML``; topics, groups and messages made by the
    admin. Stopped on exit."""
    acl_path = root / "plain_acl.yml"
    acl_path.write_text(ACL_YML)
    b = BrokerThread(
        root / "store", broker_overrides={"acl_enable": True, "acl_file": str(acl_path)}
    )
    b.start()
    namesrv: NameServer | None = None
    try:

        async def start_namesrv() -> NameServer:
            ns = NameServer("127.0.0.1", 0, acl=AclFile(acl_path))
            await ns.start()
            return ns

        namesrv = b.call(start_namesrv)
        world = World(b, namesrv)
        for topic in TOPICS:
            r = call(world.address, 17, create_topic_ext(topic), ADMIN)
            assert r.code == RC.SUCCESS, r.remark
        for group in GROUPS:
            r = call(world.address, 200, {}, ADMIN, group_body(group))
            assert r.code == RC.SUCCESS, r.remark
        for topic in ("Shared", "Secret"):
            r = call(world.address, 310, send_v2_ext(topic), ADMIN, f"body of {topic}".encode())
            assert r.code == RC.SUCCESS, r.remark
            offset = decode_msg_id(r.ext_fields["msgId"])[1]
            if topic == "Shared":
                world.shared_offset = offset
            else:
                world.secret_offset = offset
        uniq = "UNIQ_ACL_HALF_1"
        props = {"TRAN_MSG": "true", "PGROUP": "PG_tx", "UNIQ_KEY": uniq, "WAIT": "true"}
        ext = send_v1_ext("Shared", props, producerGroup="PG_tx", sysFlag="4")
        r = call(world.address, 10, ext, ADMIN, b"half of Shared")
        assert r.code == RC.SUCCESS, r.remark
        world.half = {
            "producerGroup": "PG_tx",
            "tranStateTableOffset": str(r.ext_fields["queueOffset"]),
            "commitLogOffset": str(decode_msg_id(r.ext_fields["msgId"])[1]),
            "commitOrRollback": "8",
            "fromTransactionCheck": "false",
            "msgId": uniq,
            "transactionId": uniq,
        }
        store = b.broker.store
        deadline = time.monotonic() + 10
        while store.dispatch_behind_bytes() > 0:
            assert time.monotonic() < deadline, "dispatch did not catch up"
            time.sleep(0.01)
        yield world
    finally:
        if namesrv is not None:
            ns = namesrv

            async def stop() -> None:
                await ns.close()

            b.call(stop)
        b.close()


# ---- a sample request for every code ---------------------------------------------------------

Request = tuple[dict[str, str], bytes]
Sample = Callable[[World, str, str], Request]
"""(world, topic, group) → (ext fields, body)."""


def _ext(**fields: str) -> Callable[[World, str, str], Request]:
    """A request of ext fields; ``{topic}`` / ``{group}`` in a value take the sample's."""

    def make(w: World, topic: str, group: str) -> Request:
        return {k: v.format(topic=topic, group=group) for k, v in fields.items()}, b""

    return make


BROKER_SAMPLES: dict[int, Sample] = {
    10: lambda w, t, g: (send_v1_ext(t), b"m"),
    310: lambda w, t, g: (send_v2_ext(t), b"m"),
    320: lambda w, t, g: (send_v2_ext(t, m="true"), b"not a batch"),
    11: _ext(
        consumerGroup="{group}",
        topic="{topic}",
        queueId="0",
        queueOffset="0",
        maxMsgNums="4",
        sysFlag="4",
        commitOffset="0",
        suspendTimeoutMillis="0",
        subscription="*",
        subVersion="0",
        expressionType="TAG",
    ),
    12: _ext(topic="{topic}", key="k1", maxNum="32", beginTimestamp="0", endTimestamp=str(2**62)),
    14: _ext(consumerGroup="{group}", topic="{topic}", queueId="0"),
    15: _ext(consumerGroup="{group}", topic="{topic}", queueId="0", commitOffset="1"),
    29: _ext(topic="{topic}", queueId="0", timestamp="0"),
    30: _ext(topic="{topic}", queueId="0"),
    31: _ext(topic="{topic}", queueId="0"),
    32: _ext(topic="{topic}", queueId="0"),
    33: lambda w, t, g: (
        {"offset": str(w.secret_offset if t == "Secret" else w.shared_offset)},
        b"",
    ),
    34: lambda w, t, g: ({}, heartbeat_body(g, t)),
    35: _ext(clientID="acl-client@1", consumerGroup="{group}"),
    36: lambda w, t, g: (
        {
            "group": g,
            "offset": str(w.secret_offset if t == "Secret" else w.shared_offset),
            "delayLevel": "0",
            "originMsgId": "x",
            "originTopic": t,
            "maxReconsumeTimes": "16",
        },
        b"",
    ),
    37: lambda w, t, g: (dict(w.half), b""),
    38: _ext(consumerGroup="{group}"),
    41: lambda w, t, g: ({}, lock_body(g, t, w.broker_name)),
    42: lambda w, t, g: ({}, lock_body(g, t, w.broker_name)),
    202: _ext(topic="{topic}"),
    203: _ext(consumerGroup="{group}"),
    208: _ext(consumerGroup="{group}", topic="{topic}"),
    222: _ext(topic="{topic}", group="{group}", timestamp="0", isForce="true"),
    223: _ext(topic="{topic}", group="{group}"),
    300: _ext(topic="{topic}"),
    307: _ext(consumerGroup="{group}", clientId="acl-client@1"),
    314: _ext(srcGroup="{group}", destGroup="{group}", topic="{topic}", offline="false"),
    321: _ext(topic="{topic}", queueId="0", index="0", count="1", consumerGroup="{group}"),
    9001: _ext(topic="{topic}"),
    17: lambda w, t, g: (create_topic_ext(f"Made{t}"), b""),
    25: lambda w, t, g: ({}, b"brokerPermission=6\n"),
    200: lambda w, t, g: ({}, group_body(f"Made{g}")),
    207: _ext(groupName="NoSuchGroup", removeOffset="false"),
    215: _ext(topic="NoSuchTopic"),
    306: _ext(),
    316: _ext(),
    43: _ext(),
    204: _ext(producerGroup="PG_acl"),
    315: _ext(statsName="TOPIC_PUT_NUMS", statsKey="{topic}"),
    317: _ext(isOrder="false"),
    21: _ext(),
    26: _ext(),
    28: _ext(),
    201: _ext(),
    1007: _ext(),
    1008: lambda w, t, g: (
        {
            "masterAddress": "127.0.0.1:1",
            "masterEpoch": "99",
            "syncStateSetEpoch": "99",
            "masterBrokerId": "7",
        },
        b'{"syncStateSet":[7],"syncStateSetEpoch":99}',
    ),
    3001: lambda w, t, g: ({"username": "tableUser"}, b'{"password":"tablePass1"}'),
    3002: lambda w, t, g: ({"username": "tableUser"}, b'{"userStatus":"enable"}'),
    3003: _ext(username="noSuchUser"),
    3004: _ext(username="tableUser"),
    3005: _ext(),
    3006: lambda w, t, g: ({"subject": "User:tableUser"}, acl_body("User:tableUser", t)),
    3007: lambda w, t, g: ({"subject": "User:tableUser"}, acl_body("User:tableUser", t)),
    3008: _ext(subject="User:tableUser", resource="Topic:NoSuchTopic"),
    3009: _ext(subject="User:tableUser"),
    3010: _ext(),
}

NAMESRV_SAMPLES: dict[int, Sample] = {
    103: lambda w, t, g: (
        {
            "brokerName": "fake-broker",
            "brokerAddr": "127.0.0.1:1",
            "clusterName": "FakeCluster",
            "haServerAddr": "127.0.0.1:2",
            "brokerId": "0",
            "compressed": "false",
        },
        register_body(t),
    ),
    104: _ext(
        brokerName="fake-broker", brokerAddr="127.0.0.1:1", clusterName="FakeCluster", brokerId="0"
    ),
    322: lambda w, t, g: (
        {
            "brokerName": "fake-broker",
            "brokerAddr": "127.0.0.1:1",
            "clusterName": "FakeCluster",
            "brokerId": "0",
        },
        b'{"counter":1,"timestamp":1}',
    ),
    205: _ext(brokerName="fake-broker"),
    327: _ext(brokerName="fake-broker"),
    216: _ext(topic="{topic}"),
    100: _ext(namespace="ORDER_TOPIC_CONFIG", key="{topic}", value="fake-broker:1"),
    102: _ext(namespace="ORDER_TOPIC_CONFIG", key="{topic}"),
    318: lambda w, t, g: ({}, b"orderMessageEnable=true\n"),
    105: _ext(topic="{topic}"),
    106: _ext(),
    206: _ext(),
    101: _ext(namespace="ORDER_TOPIC_CONFIG", key="{topic}"),
    219: _ext(namespace="ORDER_TOPIC_CONFIG"),
    319: _ext(),
}


def served_codes(world: World) -> tuple[set[int], set[int]]:
    """The request codes the broker's and the name server's remoting servers serve."""
    broker = set(world.broker.run(lambda: list(world.broker.server.server.handlers)))
    namesrv = set(world.broker.run(lambda: list(world.namesrv.server.handlers)))
    return {int(c) for c in broker}, {int(c) for c in namesrv}


def wait_loop(world: World) -> None:
    """Let the broker's loop run what the last requests scheduled."""

    async def tick() -> None:
        await asyncio.sleep(0.05)

    world.broker.call(tick)
