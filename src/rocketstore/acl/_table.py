"""The authorisation table: what each request the broker, the name server and the controller
serve needs.

Every request is first authenticated (a global white address, else a known access key and
the account's white address or its signature; see ``_plain``). Then its rule decides:

- ``SIGNED``: any signed account (reads of metadata: routes, configs, lists);
- ``ADMIN``: an admin account (anything that changes the cluster's state or reads every
  group's);
- ``SCOPED``: the account's permissions on the topics and groups the request names, read from
  the header the handler uses (``needs``, checked before the handler runs), and, where the
  resource is only known once the handler has decoded a body or looked a message up, on
  that (``then``, checked by the handler before anything is done or returned).

A group's permission is SUB (plain ACL's only group permission; a group is kept as its retry
topic). A group's retry and dead-letter topics are the group's (``_request.topic_need``).
``changes``: the request changes state; let in, it is written to the audit log.

ACL 2.0 (``_auth_eval``) reads the same rules: a topic's PUB is ``Topic:<t>`` Pub, SUB
``Topic:<t>`` Sub, a group ``Group:<g>`` Sub, unless the rule names its ``actions`` (any one
of them suffices, as RocketMQ 5.3's request headers declare them); an admin rule needs its
``actions`` on its ``target`` (``Cluster:<cluster>`` Update when it changes something, Get
when it reads; a topic or group a field names for topic and group creation and deletion; the
user and ACL requests, ``auth_admin``, the same as RocketMQ 5.3's headers declare them, a
Super user's own protection left to their handlers); a SIGNED rule nothing more than the
user. The actions differing from the permission's::

    12 QUERY_MESSAGE, 14 QUERY_CONSUMER_OFFSET, 38 GET_CONSUMER_LIST_BY_GROUP   Sub or Get
    15 UPDATE_CONSUMER_OFFSET                                                  Sub or Update
    29, 30, 31, 32 (offsets and times of queues), 33 VIEW_MESSAGE_BY_ID, 202, 203, 208,
    223, 300, 307, 321 (statistics, connections, consume queues)              Get
    222 RESET_CONSUMER_OFFSET, 314 CLONE_GROUP_OFFSET                          Update
    35 UNREGISTER_CLIENT                                                       Pub or Sub
    17 UPDATE_AND_CREATE_TOPIC        Topic:<topic> Create
    215 DELETE_TOPIC_IN_BROKER        Topic:<topic> Delete
    207 DELETE_SUBSCRIPTIONGROUP      Group:<groupName> Delete

Broker (remoting port)::

    code  request                            needs
    ----  ---------------------------------  --------------------------------------------
    10    SEND_MESSAGE                       the topic: PUB (a group's %RETRY% / %DLQ% topic:
    310   SEND_MESSAGE_V2                    SUB on the group), from the decoded send header
    320   SEND_BATCH_MESSAGE
    11    PULL_MESSAGE                       topic and consumerGroup: SUB
    12    QUERY_MESSAGE                      topic: SUB; then each message found: its topic SUB
    14    QUERY_CONSUMER_OFFSET              topic and consumerGroup: SUB
    15    UPDATE_CONSUMER_OFFSET             topic and consumerGroup: SUB
    29    SEARCH_OFFSET_BY_TIMESTAMP         topic: SUB
    30    GET_MAX_OFFSET                     topic: SUB
    31    GET_MIN_OFFSET                     topic: SUB
    32    GET_EARLIEST_MSG_STORETIME         topic: SUB
    33    VIEW_MESSAGE_BY_ID                 then the message's topic: SUB
    34    HEART_BEAT                         then each consumer group and subscribed topic: SUB
    35    UNREGISTER_CLIENT                  consumerGroup (when given): SUB
    36    CONSUMER_SEND_MSG_BACK             group: SUB; then the message's topic: SUB
    37    END_TRANSACTION                    then the half message's topic: PUB
    38    GET_CONSUMER_LIST_BY_GROUP         consumerGroup: SUB
    41    LOCK_BATCH_MQ                      then the body's group and each queue's topic: SUB
    42    UNLOCK_BATCH_MQ                    then the body's group and each queue's topic: SUB
    202   GET_TOPIC_STATS_INFO               topic: SUB
    203   GET_CONSUMER_CONNECTION_LIST       consumerGroup: SUB
    208   GET_CONSUME_STATS                  consumerGroup, and topic when given: SUB
    222   RESET_CONSUMER_OFFSET              topic and group: SUB (audited)
    223   INVOKE_BROKER_TO_GET_CONSUMER_STATUS  topic and group: SUB
    300   QUERY_TOPIC_CONSUME_BY_WHO         topic: SUB
    307   GET_CONSUMER_RUNNING_INFO          consumerGroup: SUB
    314   CLONE_GROUP_OFFSET                 srcGroup, destGroup, and topic when given: SUB
                                             (audited)
    321   QUERY_CONSUME_QUEUE                topic, and consumerGroup when given: SUB
    9001  GET_TIER_MANIFEST                  topic: SUB
    17    UPDATE_AND_CREATE_TOPIC            admin (audited)
    25    UPDATE_BROKER_CONFIG               admin (audited)
    200   UPDATE_AND_CREATE_SUBSCRIPTIONGROUP  admin (audited)
    207   DELETE_SUBSCRIPTIONGROUP           admin (audited)
    215   DELETE_TOPIC_IN_BROKER             admin (audited)
    306   CLEAN_EXPIRED_CONSUMEQUEUE         admin (audited)
    316   CLEAN_UNUSED_TOPIC                 admin (audited)
    1008  NOTIFY_BROKER_ROLE_CHANGED         admin (audited; a controller's notice unsigned is
                                             refused and the broker learns its role by asking)
    3001  AUTH_CREATE_USER ... 3003 AUTH_DELETE_USER, 3006 AUTH_CREATE_ACL ... 3008
          AUTH_DELETE_ACL                    admin; ACL 2.0: Cluster Update (audited)
    3004  AUTH_GET_USER, 3005 AUTH_LIST_USER, 3009 AUTH_GET_ACL, 3010 AUTH_LIST_ACL
                                             admin; ACL 2.0: Cluster Get
    43    GET_ALL_CONSUMER_OFFSET            admin (every group's offsets)
    204   GET_PRODUCER_CONNECTION_LIST       admin
    315   VIEW_BROKER_STATS_DATA             admin
    317   GET_BROKER_CONSUME_STATS           admin (every group's progress)
    21    GET_ALL_TOPIC_CONFIG               any signed account
    26    GET_BROKER_CONFIG                  any signed account
    28    GET_BROKER_RUNTIME_INFO            any signed account
    201   GET_ALL_SUBSCRIPTIONGROUP_CONFIG   any signed account
    1007  GET_BROKER_EPOCH_CACHE             any signed account

Name server (with ACL on)::

    103 REGISTER_BROKER, 104 UNREGISTER_BROKER, 322 QUERY_DATA_VERSION (a broker's liveness),
    205 WIPE_WRITE_PERM_OF_BROKER, 327 ADD_WRITE_PERM_OF_BROKER, 216 DELETE_TOPIC_IN_NAMESRV,
    100 PUT_KV_CONFIG, 102 DELETE_KV_CONFIG, 318 UPDATE_NAMESRV_CONFIG     admin (audited)
    105 GET_ROUTEINFO_BY_TOPIC, 106 GET_BROKER_CLUSTER_INFO,
    206 GET_ALL_TOPIC_LIST_FROM_NAMESERVER, 101 GET_KV_CONFIG,
    219 GET_KVLIST_BY_NAMESPACE, 319 GET_NAMESRV_CONFIG                   any signed account

Controller (RocketMQ 5's, standalone or beside a name server, with ACL on)::

    1003 CONTROLLER_REGISTER_BROKER, 1013 CONTROLLER_APPLY_BROKER_ID,
    1001 CONTROLLER_ALTER_SYNC_STATE_SET, 1002 CONTROLLER_ELECT_MASTER, 904 BROKER_HEARTBEAT
    (a broker's replication role and liveness), 1011 CLEAN_BROKER_DATA,
    1009 UPDATE_CONTROLLER_CONFIG                                         admin (audited)
    1012 CONTROLLER_GET_NEXT_BROKER_ID, 1004 CONTROLLER_GET_REPLICA_INFO,
    1006 CONTROLLER_GET_SYNC_STATE_DATA, 1005 CONTROLLER_GET_METADATA_INFO,
    1010 GET_CONTROLLER_CONFIG                                            any signed account

Messages to ``RMQ_SYS_TRACE_TOPIC`` may always be sent by a known account (``_plain``).
Pulls, pops and the tier read only the queues of the topic they name, so checking that topic
covers every record they return. A code served and missing here is refused as admin-only
(``rule``), and tests/test_acl_table.py fails.

Immutable; any thread.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..remoting import RemotingCommand
from ..remoting._send_header import send_header
from ._auth_model import (
    CLUSTER,
    CREATE,
    DELETE,
    GET,
    GROUP,
    TOPIC,
    UPDATE,
)
from ._auth_model import (
    PUB as A_PUB,
)
from ._auth_model import (
    SUB as A_SUB,
)
from ._plain import PUB, SUB
from ._request import (
    NameFields,
    Names,
    Need,
    decoded_names,
    group_need,
    group_needs,
    topic_need,
    topic_needs,
)


class Access(enum.Enum):
    SIGNED = "any signed account"
    ADMIN = "an admin account"
    SCOPED = "its topics and groups"


@dataclass(frozen=True, slots=True)
class Rule:
    """What one request code needs. ``needs(cmd)``: checked before the handler runs;
    ``then(value)``: checked by the handler on ``then_what``, once it has it."""

    name: str
    access: Access
    fields: NameFields | None = None
    needs: Callable[[RemotingCommand], list[Need]] | None = None
    then: Callable[[Any], list[Need]] | None = None
    then_what: str = ""
    changes: bool = False
    # ACL 2.0: the actions the named topics and groups need (any one; none: by permission,
    # PUB → Pub, SUB → Sub); for an admin rule the actions on ``target``
    actions: tuple[str, ...] = ()
    # ACL 2.0, admin rules: the resource type and the ext field naming it ("": the cluster)
    target: tuple[str, str] = (CLUSTER, "")
    # ACL 2.0's user and ACL admin requests (plain ACL: an admin account); their decision is
    # written to the audit log as RocketMQ 5.3's authorisation line
    auth_admin: bool = False


def signed(name: str) -> Rule:
    return Rule(name, Access.SIGNED)


def admin(
    name: str,
    *,
    changes: bool = True,
    actions: tuple[str, ...] = (),
    target: tuple[str, str] = (CLUSTER, ""),
    auth_admin: bool = False,
) -> Rule:
    """An admin account's (ACL 2.0: ``actions`` on ``target``, by default Update on the
    cluster when the request changes something, else Get)."""
    return Rule(
        name,
        Access.ADMIN,
        changes=changes,
        actions=actions or ((UPDATE,) if changes else (GET,)),
        target=target,
        auth_admin=auth_admin,
    )


def scoped(
    name: str,
    *,
    topic: str | None = None,
    group: str | None = None,
    source_group: str | None = None,
    perm: int = SUB,
    then: Callable[[Any], list[Need]] | None = None,
    then_what: str = "",
    changes: bool = False,
    actions: tuple[str, ...] = (),
) -> Rule:
    """A rule over the topic (``perm``) and groups (SUB) named in the ext ``fields``
    (ACL 2.0: ``actions`` on each, when given)."""
    fields = NameFields(topic, group, source_group)

    def needs(cmd: RemotingCommand) -> list[Need]:
        n = decoded_names(cmd, fields)
        return topic_needs((n.topic,), perm) + group_needs((n.group, n.source_group))

    return Rule(name, Access.SCOPED, fields, needs, then, then_what, changes, actions)


def then_only(
    name: str, then: Callable[[Any], list[Need]], then_what: str, actions: tuple[str, ...] = ()
) -> Rule:
    """A rule whose resources the handler learns (a body it decodes, a message it finds)."""
    return Rule(name, Access.SCOPED, then=then, then_what=then_what, actions=actions)


def _send_needs(cmd: RemotingCommand) -> list[Need]:
    topic = send_header(cmd).topic
    return [] if topic is None else [topic_need(topic, PUB)]


def send(name: str) -> Rule:
    return Rule(name, Access.SCOPED, needs=_send_needs)


def readable(topic: str) -> list[Need]:
    return [topic_need(topic, SUB)]


def writable(topic: str) -> list[Need]:
    return [topic_need(topic, PUB)]


def heartbeat_needs(data: Any) -> list[Need]:
    """A decoded heartbeat's consumer groups and their subscribed topics (``consumers``, each
    with ``group_name`` and ``subscriptions``, each with ``topic``)."""
    out: list[Need] = []
    for consumer in data.consumers:
        out.append(group_need(consumer.group_name))
        out.extend(topic_needs((s.topic for s in consumer.subscriptions), SUB))
    return out


def lock_needs(request: Any) -> list[Need]:
    """A decoded lock request's group and its queues' topics (``group``, ``topics``)."""
    return [group_need(request.group), *topic_needs(request.topics, SUB)]


def _table(rules: Iterable[tuple[int, Rule]]) -> Mapping[int, Rule]:
    table: dict[int, Rule] = {}
    for code, r in rules:
        if code in table:
            raise ValueError(f"request code {code} is in the table twice")
        table[code] = r
    return MappingProxyType(table)


BROKER: Mapping[int, Rule] = _table(
    [
        (10, send("SEND_MESSAGE")),
        (310, send("SEND_MESSAGE_V2")),
        (320, send("SEND_BATCH_MESSAGE")),
        (11, scoped("PULL_MESSAGE", topic="topic", group="consumerGroup")),
        (
            12,
            scoped(
                "QUERY_MESSAGE",
                topic="topic",
                then=readable,
                then_what="a found topic",
                actions=(A_SUB, GET),
            ),
        ),
        (
            14,
            scoped(
                "QUERY_CONSUMER_OFFSET",
                topic="topic",
                group="consumerGroup",
                actions=(A_SUB, GET),
            ),
        ),
        (
            15,
            scoped(
                "UPDATE_CONSUMER_OFFSET",
                topic="topic",
                group="consumerGroup",
                actions=(A_SUB, UPDATE),
            ),
        ),
        (29, scoped("SEARCH_OFFSET_BY_TIMESTAMP", topic="topic", actions=(GET,))),
        (30, scoped("GET_MAX_OFFSET", topic="topic", actions=(GET,))),
        (31, scoped("GET_MIN_OFFSET", topic="topic", actions=(GET,))),
        (32, scoped("GET_EARLIEST_MSG_STORETIME", topic="topic", actions=(GET,))),
        (33, then_only("VIEW_MESSAGE_BY_ID", readable, "the message's topic", (GET,))),
        (34, then_only("HEART_BEAT", heartbeat_needs, "the decoded heartbeat")),
        (35, scoped("UNREGISTER_CLIENT", group="consumerGroup", actions=(A_PUB, A_SUB))),
        (
            36,
            scoped("CONSUMER_SEND_MSG_BACK", group="group", then=readable, then_what="its topic"),
        ),
        (37, then_only("END_TRANSACTION", writable, "the half message's topic")),
        (38, scoped("GET_CONSUMER_LIST_BY_GROUP", group="consumerGroup", actions=(A_SUB, GET))),
        (41, then_only("LOCK_BATCH_MQ", lock_needs, "the decoded lock request")),
        (42, then_only("UNLOCK_BATCH_MQ", lock_needs, "the decoded unlock request")),
        (202, scoped("GET_TOPIC_STATS_INFO", topic="topic", actions=(GET,))),
        (203, scoped("GET_CONSUMER_CONNECTION_LIST", group="consumerGroup", actions=(GET,))),
        (208, scoped("GET_CONSUME_STATS", topic="topic", group="consumerGroup", actions=(GET,))),
        (
            222,
            scoped(
                "RESET_CONSUMER_OFFSET",
                topic="topic",
                group="group",
                changes=True,
                actions=(UPDATE,),
            ),
        ),
        (
            223,
            scoped(
                "INVOKE_BROKER_TO_GET_CONSUMER_STATUS", topic="topic", group="group", actions=(GET,)
            ),
        ),
        (300, scoped("QUERY_TOPIC_CONSUME_BY_WHO", topic="topic", actions=(GET,))),
        (307, scoped("GET_CONSUMER_RUNNING_INFO", group="consumerGroup", actions=(GET,))),
        (
            314,
            scoped(
                "CLONE_GROUP_OFFSET",
                topic="topic",
                group="destGroup",
                source_group="srcGroup",
                changes=True,
                actions=(UPDATE,),
            ),
        ),
        (321, scoped("QUERY_CONSUME_QUEUE", topic="topic", group="consumerGroup", actions=(GET,))),
        (9001, scoped("GET_TIER_MANIFEST", topic="topic")),
        (17, admin("UPDATE_AND_CREATE_TOPIC", actions=(CREATE,), target=(TOPIC, "topic"))),
        (25, admin("UPDATE_BROKER_CONFIG")),
        (200, admin("UPDATE_AND_CREATE_SUBSCRIPTIONGROUP")),
        (207, admin("DELETE_SUBSCRIPTIONGROUP", actions=(DELETE,), target=(GROUP, "groupName"))),
        (215, admin("DELETE_TOPIC_IN_BROKER", actions=(DELETE,), target=(TOPIC, "topic"))),
        (306, admin("CLEAN_EXPIRED_CONSUMEQUEUE")),
        (316, admin("CLEAN_UNUSED_TOPIC")),
        (43, admin("GET_ALL_CONSUMER_OFFSET", changes=False)),
        (204, admin("GET_PRODUCER_CONNECTION_LIST", changes=False)),
        (315, admin("VIEW_BROKER_STATS_DATA", changes=False)),
        (317, admin("GET_BROKER_CONSUME_STATS", changes=False)),
        (21, signed("GET_ALL_TOPIC_CONFIG")),
        (26, signed("GET_BROKER_CONFIG")),
        (28, signed("GET_BROKER_RUNTIME_INFO")),
        (201, signed("GET_ALL_SUBSCRIPTIONGROUP_CONFIG")),
        (1008, admin("NOTIFY_BROKER_ROLE_CHANGED")),
        (1007, signed("GET_BROKER_EPOCH_CACHE")),
        (3001, admin("AUTH_CREATE_USER", auth_admin=True)),
        (3002, admin("AUTH_UPDATE_USER", auth_admin=True)),
        (3003, admin("AUTH_DELETE_USER", auth_admin=True)),
        (3004, admin("AUTH_GET_USER", changes=False, auth_admin=True)),
        (3005, admin("AUTH_LIST_USER", changes=False, auth_admin=True)),
        (3006, admin("AUTH_CREATE_ACL", auth_admin=True)),
        (3007, admin("AUTH_UPDATE_ACL", auth_admin=True)),
        (3008, admin("AUTH_DELETE_ACL", auth_admin=True)),
        (3009, admin("AUTH_GET_ACL", changes=False, auth_admin=True)),
        (3010, admin("AUTH_LIST_ACL", changes=False, auth_admin=True)),
    ]
)

NAMESRV: Mapping[int, Rule] = _table(
    [
        (103, admin("REGISTER_BROKER")),
        (104, admin("UNREGISTER_BROKER")),
        (322, admin("QUERY_DATA_VERSION")),
        (205, admin("WIPE_WRITE_PERM_OF_BROKER")),
        (327, admin("ADD_WRITE_PERM_OF_BROKER")),
        (216, admin("DELETE_TOPIC_IN_NAMESRV")),
        (100, admin("PUT_KV_CONFIG")),
        (102, admin("DELETE_KV_CONFIG")),
        (318, admin("UPDATE_NAMESRV_CONFIG")),
        (105, signed("GET_ROUTEINFO_BY_TOPIC")),
        (106, signed("GET_BROKER_CLUSTER_INFO")),
        (206, signed("GET_ALL_TOPIC_LIST_FROM_NAMESERVER")),
        (101, signed("GET_KV_CONFIG")),
        (219, signed("GET_KVLIST_BY_NAMESPACE")),
        (319, signed("GET_NAMESRV_CONFIG")),
    ]
)

CONTROLLER: Mapping[int, Rule] = _table(
    [
        (1003, admin("CONTROLLER_REGISTER_BROKER")),
        (1013, admin("CONTROLLER_APPLY_BROKER_ID")),
        (1001, admin("CONTROLLER_ALTER_SYNC_STATE_SET")),
        (1002, admin("CONTROLLER_ELECT_MASTER")),
        (904, admin("BROKER_HEARTBEAT", changes=False)),  # every second a broker: not audited
        (1011, admin("CLEAN_BROKER_DATA")),
        (1009, admin("UPDATE_CONTROLLER_CONFIG")),
        (1012, signed("CONTROLLER_GET_NEXT_BROKER_ID")),
        (1004, signed("CONTROLLER_GET_REPLICA_INFO")),
        (1006, signed("CONTROLLER_GET_SYNC_STATE_DATA")),
        (1005, signed("CONTROLLER_GET_METADATA_INFO")),
        (1010, signed("GET_CONTROLLER_CONFIG")),
    ]
)

UNLISTED = admin("UNLISTED", changes=False)
"""What a served code missing from its table needs: an admin account (closed by default)."""


def rule(table: Mapping[int, Rule], code: int) -> Rule:
    """The rule of ``code`` in ``table`` (``UNLISTED`` when it has none)."""
    return table.get(code, UNLISTED)


def request_names(cmd: RemotingCommand) -> Names:
    """The topic and groups of a broker request, read from the fields its rule names, once:
    the object the ACL decided on (when it is on) and the handler acts on."""
    fields = BROKER[cmd.code].fields
    if fields is None:
        raise LookupError(f"request code {cmd.code} names no topic or group fields")
    return decoded_names(cmd, fields)
