"""The console's views of one broker and of clients: a broker's configuration and runtime
figures, a producer group's connections, and sending a test message (RocketMQ Dashboard's
cluster "config" / "status" dialogs, Producer page and topic "send message" dialog).

Every request goes to the brokers signed with the visitor's account (the admin client's
signer), so the brokers' ACL decides: sending a test message needs PUB on the topic, as for any
producer. A broker is named by its address, and only an address the name servers list is
asked (the console does not relay requests to other hosts).

Blocking (the admin client): the console's server runs these in a worker thread.
"""

from __future__ import annotations

from typing import Any

from ..client._admin import AdminClient
from ..client._names import check_group, check_topic
from ..client._producer import Producer
from ..client._route import TopicNotFoundError

# the group RocketMQ's tools and Dashboard send test messages with (MixAll.SELF_TEST_PRODUCER_GROUP)
TEST_PRODUCER_GROUP = "SELF_TEST_P_GROUP"
MAX_TEST_BODY_BYTES = 16 * 1024
MAX_TAGS_OR_KEYS = 255


def _known_broker(admin: AdminClient, addr: str) -> str:
    addr = addr.strip()
    if addr not in admin.broker_addresses():
        raise ValueError(f"{addr!r} is not a broker the name servers list")
    return addr


def broker_config(admin: AdminClient, addr: str) -> dict[str, Any]:
    """GET_BROKER_CONFIG: the broker's settings as ``key=value`` pairs, in its order."""
    addr = _known_broker(admin, addr)
    return {"broker": addr, "entries": [[k, v] for k, v in admin.broker_config(addr).items()]}


def broker_runtime(admin: AdminClient, addr: str) -> dict[str, Any]:
    """GET_BROKER_RUNTIME_INFO: every figure the broker reports, by name."""
    addr = _known_broker(admin, addr)
    info = admin.runtime_info(addr)
    return {"broker": addr, "entries": [[k, info[k]] for k in sorted(info)]}


def producers(admin: AdminClient, topic: str, group: str) -> dict[str, Any]:
    """The producer group's clients connected to the brokers of ``topic``
    (GET_PRODUCER_CONNECTION_LIST on each, merged by client id)."""
    check_topic(topic)
    check_group(group)
    if admin.route(topic) is None:
        raise TopicNotFoundError(topic, f"no route for topic {topic}")
    found = admin.examine_producer_connection(group, topic)
    return {
        "topic": topic,
        "group": group,
        "connections": [
            {
                "clientId": c.client_id,
                "clientAddr": c.client_addr,
                "language": c.language,
                "version": c.version,
            }
            for c in sorted(found, key=lambda c: c.client_id)
        ],
    }


def _text(doc: dict[str, Any], key: str, limit: int) -> str:
    value = doc.get(key) or ""
    if not isinstance(value, str):
        raise ValueError(f"{key} must be text")
    if len(value.encode()) > limit:
        raise ValueError(f"{key} is longer than {limit} bytes")
    return value


def send_test_message(admin: AdminClient, doc: dict[str, Any]) -> dict[str, Any]:
    """One message to an existing topic (its tags, keys and UTF-8 body as given), sent by a
    producer of the group SELF_TEST_P_GROUP signed with the visitor's account."""
    topic = check_topic(str(doc.get("topic", "")))
    tags = _text(doc, "tags", MAX_TAGS_OR_KEYS)
    keys = _text(doc, "keys", MAX_TAGS_OR_KEYS)
    body = _text(doc, "body", MAX_TEST_BODY_BYTES).encode()
    if not body:
        raise ValueError("give a message body")
    if admin.route(topic) is None:
        raise TopicNotFoundError(topic, f"no route for topic {topic}")
    namesrv = ";".join(admin.namesrv_addrs)
    with Producer(namesrv, TEST_PRODUCER_GROUP, signer=admin.client.signer) as producer:
        r = producer.send(topic, body, tags=tags or None, keys=keys.split() or None)
    return {
        "topic": topic,
        "status": r.status,
        "msgId": r.msg_id,
        "offsetMsgId": r.offset_msg_id,
        "brokerName": r.queue.broker_name,
        "queueId": r.queue.queue_id,
        "queueOffset": r.queue_offset,
    }
