"""What each view of the console shows, read with the admin client (blocking: the server runs
these in a worker thread). Every function takes the AdminClient of the visitor and plain
arguments, checks them (ValueError for bad input) and returns JSON-ready data.
"""

from __future__ import annotations

import time
from typing import Any

from ..client._admin import PERM_READ_WRITE, AdminClient
from ..client._names import check_group, check_topic
from ..client._route import ClientError, MessageQueue, TopicNotFoundError
from ..remoting import RemotingError, ResponseCode
from ..store.log._record import MessageExt

MAX_SEARCH_RESULTS = 64
BODY_PREVIEW_BYTES = 2048
PERMS = {2: "W", 4: "R", 6: "RW"}
SYSTEM_GROUPS = frozenset(
    {
        "TOOLS_CONSUMER",
        "FILTERSRV_CONSUMER",
        "SELF_TEST_C_GROUP",
        "CID_ONS-HTTP-PROXY",
        "CID_ONSAPI_PULL",
        "CID_ONSAPI_PERMISSION",
        "CID_ONSAPI_OWNER",
    }
)

# CONSUME_MESSAGE_DIRECTLY (309) is sent by a broker to one connected consumer client: it
# cannot be answered without a client of the group, so the console offers no resend.
RESEND_UNSUPPORTED = (
    "resending a message to a group (CONSUME_MESSAGE_DIRECTLY) needs the broker to push it to "
    "a connected consumer client; the console is not one, so it is not offered"
)


def _float(text: str) -> float:
    try:
        return float(text.split()[0])
    except (IndexError, ValueError):
        return 0.0


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


def cluster(admin: AdminClient) -> dict[str, Any]:
    """Every broker with its role, version, TPS, disk and replication figures.

    ``haLagBytes``: on a master, the bytes its nearest slave has not acknowledged; on a slave,
    how far its commit log is behind its master's. None where there is no such figure: a
    master with no slave connected, a slave whose master is not listed."""
    rows: list[dict[str, Any]] = []
    for b in admin.brokers():
        row: dict[str, Any] = {
            "cluster": b.cluster,
            "brokerName": b.broker_name,
            "brokerId": b.broker_id,
            "address": b.address,
            "role": "MASTER" if b.broker_id == 0 else "SLAVE",
        }
        try:
            info = admin.runtime_info(b.address)
        except (ClientError, RemotingError, ValueError) as exc:  # one broker down: show it
            row["error"] = str(exc)
        else:
            row.update(
                version=info.get("brokerVersionDesc", ""),
                putTps=_float(info.get("putTps", "")),
                getTps=_float(info.get("getTransferedTps", "")),
                commitLogMaxOffset=_int(info.get("commitLogMaxOffset")),
                disk=info.get("commitLogDirCapacity", ""),
                diskRatio=info.get("commitLogDiskRatio", ""),
                haRole=info.get("haRole", ""),
                # a master's nearest slave; absent when no slave is connected (no lag figure)
                haLagBytes=(
                    _int(info["haNearestSlaveLagBytes"])
                    if "haNearestSlaveLagBytes" in info
                    else None
                ),
                msgPutTotalTodayNow=_int(info.get("msgPutTotalTodayNow")),
                runtime=info.get("runtime", ""),
            )
            if info.get("haRole") == "SLAVE":
                row["role"] = "SLAVE"
            if info.get("controllerRole"):  # controller mode: the role and epoch it was given
                row["role"] = info["controllerRole"]
                row["epoch"] = _int(info.get("masterEpoch"))
                row["replicaId"] = _int(info.get("controllerBrokerId"))
                row["syncStateSet"] = info.get("syncStateSet", "")
                row["confirmOffset"] = _int(info.get("confirmOffset"))
        rows.append(row)
    # a slave's lag: how far its commit log is behind its master's (none without a master)
    masters = {r["brokerName"]: r for r in rows if r["brokerId"] == 0 and "error" not in r}
    for r in rows:
        m = masters.get(r["brokerName"])
        if r["brokerId"] != 0 and "error" not in r:
            r["haLagBytes"] = (
                max(0, m["commitLogMaxOffset"] - r["commitLogMaxOffset"]) if m else None
            )
    return {"brokers": rows, "time": int(time.time() * 1000)}


def throughput(admin: AdminClient) -> dict[str, Any]:
    """Put and get TPS per broker now (the charts poll it)."""
    doc = cluster(admin)
    return {
        "time": doc["time"],
        "brokers": [
            {
                "broker": f"{r['brokerName']}/{r['brokerId']}",
                "putTps": r.get("putTps", 0.0),
                "getTps": r.get("getTps", 0.0),
            }
            for r in doc["brokers"]
        ],
    }


SYSTEM_TOPICS = frozenset(
    {"TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC"}
)


def _topic_kind(name: str, clusters: set[str], brokers: set[str]) -> str:
    if name.startswith("%RETRY%"):
        return "retry"
    if name.startswith("%DLQ%"):
        return "dlq"
    if (
        name in SYSTEM_TOPICS
        or name.upper().startswith("RMQ_SYS_")
        or name in clusters
        or name in brokers
        or (name.endswith("_REPLY_TOPIC") and name[: -len("_REPLY_TOPIC")] in clusters)
    ):
        return "system"
    return "normal"


def topic(admin: AdminClient, name: str) -> dict[str, Any]:
    """The topic's route, per-queue min / max offsets and its consumer groups."""
    check_topic(name)
    route = admin.route(name)
    if route is None:
        raise TopicNotFoundError(name, f"no route for topic {name}")
    queues: list[dict[str, Any]] = []
    groups: set[str] = set()
    perms: dict[str, str] = {}
    for qd in route.queue_data:
        perms[str(qd["brokerName"])] = PERMS.get(int(qd.get("perm", 6)), str(qd.get("perm")))
    for broker_name in sorted(route.brokers):
        addr = route.address(broker_name)
        if addr is None:
            continue
        stats = admin.topic_stats(addr, name)
        for mq in sorted(stats):
            o = stats[mq]
            queues.append(
                {
                    "brokerName": mq.broker_name,
                    "queueId": mq.queue_id,
                    "minOffset": o.min_offset,
                    "maxOffset": o.max_offset,
                    "lastUpdateTimestamp": o.last_update_timestamp,
                }
            )
        groups.update(admin.topic_consumer_groups(addr, name))
    return {
        "topic": name,
        "route": {
            "brokers": {
                n: {str(i): a for i, a in sorted(ids.items())}
                for n, ids in sorted(route.brokers.items())
            },
            "queueData": route.queue_data,
        },
        "perm": perms,
        "queues": queues,
        "groups": sorted(groups),
    }


def _masters_for(admin: AdminClient, broker_names: list[str] | None) -> dict[str, str]:
    masters = admin.masters()
    if not broker_names:
        return masters
    unknown = [n for n in broker_names if n not in masters]
    if unknown:
        raise ValueError(f"no master broker named {', '.join(unknown)}")
    return {n: masters[n] for n in broker_names}


def _queue_count(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key, 8)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1024:
        raise ValueError(f"{key} must be a whole number from 1 to 1024")
    return value


def _perm(doc: dict[str, Any]) -> int:
    value = doc.get("perm", PERM_READ_WRITE)
    if value not in PERMS or isinstance(value, bool):
        raise ValueError("perm must be 2 (write), 4 (read) or 6 (read and write)")
    return int(value)


def create_topic(admin: AdminClient, doc: dict[str, Any]) -> dict[str, Any]:
    name = check_topic(str(doc.get("topic", "")))
    read = _queue_count(doc, "readQueueNums")
    write = _queue_count(doc, "writeQueueNums")
    perm = _perm(doc)
    brokers = doc.get("brokers")
    if brokers is not None and not (
        isinstance(brokers, list) and all(isinstance(b, str) for b in brokers)
    ):
        raise ValueError("brokers must be a list of broker names")
    targets = _masters_for(admin, brokers)
    for addr in targets.values():
        admin.create_topic(addr, name, read_queue_nums=read, write_queue_nums=write, perm=perm)
    return {"topic": name, "brokers": sorted(targets)}


def delete_topic(admin: AdminClient, doc: dict[str, Any]) -> dict[str, Any]:
    name = check_topic(str(doc.get("topic", "")))
    route = admin.route(name)
    if route is None:
        raise TopicNotFoundError(name, f"no route for topic {name}")
    done = []
    for broker_name, ids in sorted(route.brokers.items()):
        for addr in ids.values():
            admin.delete_topic_in_broker(addr, name)
        done.append(broker_name)
    admin.delete_topic_in_namesrv(name)
    return {"topic": name, "brokers": done}


def change_perm(admin: AdminClient, doc: dict[str, Any]) -> dict[str, Any]:
    """The topic's permission on every master that has it, its queue counts kept."""
    name = check_topic(str(doc.get("topic", "")))
    perm = _perm(doc)
    route = admin.route(name)
    if route is None:
        raise TopicNotFoundError(name, f"no route for topic {name}")
    changed = []
    for broker_name in sorted(route.brokers):
        addr = route.master(broker_name)
        if addr is None:
            continue
        config = admin.topic_configs(addr).get(name)
        if config is None:
            continue
        admin.create_topic(
            addr,
            name,
            read_queue_nums=int(str(config.get("readQueueNums", 8))),
            write_queue_nums=int(str(config.get("writeQueueNums", 8))),
            perm=perm,
            order=bool(config.get("order", False)),
            topic_sys_flag=int(str(config.get("topicSysFlag", 0))),
            topic_filter_type=str(config.get("topicFilterType", "SINGLE_TAG")),
        )
        changed.append(broker_name)
    return {"topic": name, "perm": perm, "brokers": changed}


def group(admin: AdminClient, name: str, topic_name: str | None) -> dict[str, Any]:
    """The group's consumers (client ids per broker) and its lag per queue."""
    check_group(name)
    if topic_name:
        check_topic(topic_name)
    members: dict[str, list[str]] = {}
    for broker_name, addr in sorted(admin.group_brokers(name, topic_name or None).items()):
        members[broker_name] = admin.consumer_ids(addr, name)
    stats = admin.examine_consume_stats(name, topic_name or None)
    queues = [
        {
            "topic": mq.topic,
            "brokerName": mq.broker_name,
            "queueId": mq.queue_id,
            "brokerOffset": w.broker_offset,
            "consumerOffset": w.consumer_offset,
            "lag": w.lag,
            "lastTimestamp": w.last_timestamp,
        }
        for mq, w in sorted(stats.offset_table.items())
    ]
    clients = sorted({c for ids in members.values() for c in ids})
    return {
        "group": name,
        "members": clients,
        "membersByBroker": members,
        "consumeTps": stats.consume_tps,
        "totalLag": stats.total_lag(),
        "queues": queues,
        "topics": sorted({q["topic"] for q in queues}),
        "reset": {
            "supported": True,
            "how": "SEARCH_OFFSET_BY_TIMESTAMP then UPDATE_CONSUMER_OFFSET per queue; "
            "stop the group's consumers first, or they commit their own offsets over it",
        },
    }


def reset_offset(admin: AdminClient, doc: dict[str, Any]) -> dict[str, Any]:
    name = check_group(str(doc.get("group", "")))
    topic_name = check_topic(str(doc.get("topic", "")))
    ts = doc.get("timestamp")
    if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
        raise ValueError("timestamp must be milliseconds since the epoch")
    done = admin.reset_offset_by_time(name, topic_name, ts)
    return {
        "group": name,
        "topic": topic_name,
        "queues": [
            {"brokerName": mq.broker_name, "queueId": mq.queue_id, "old": old, "new": new}
            for mq, (old, new) in sorted(done.items())
        ],
    }


def message_doc(m: MessageExt) -> dict[str, Any]:
    body = bytes(m.body)
    preview = body[:BODY_PREVIEW_BYTES]
    try:
        text: str | None = preview.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    props = dict(m.properties)
    return {
        "topic": m.topic,
        "msgId": props.get("UNIQ_KEY", m.msg_id),
        "offsetMsgId": m.msg_id,
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "tags": m.tags,
        "keys": list(m.keys),
        "bornTimestamp": m.born_timestamp,
        "storeTimestamp": m.store_timestamp,
        "reconsumeTimes": m.reconsume_times,
        "bodySize": len(body),
        "bodyText": text,
        "bodyHex": None if text is not None else preview.hex(),
        "bodyTruncated": len(body) > BODY_PREVIEW_BYTES,
        "properties": props,
    }


def _time_arg(value: str | None, default: int, what: str) -> int:
    if value is None or value == "":
        return default
    if not value.isdigit():
        raise ValueError(f"{what} must be milliseconds since the epoch")
    return int(value)


def messages_by_time(
    admin: AdminClient, topic_name: str, begin_text: str | None, end_text: str | None
) -> dict[str, Any]:
    """The topic's messages stored from ``begin`` to ``end`` (ms), at most
    MAX_SEARCH_RESULTS, read from each queue from its offset at ``begin``."""
    check_topic(topic_name)
    now = int(time.time() * 1000)
    end = _time_arg(end_text, now, "end")
    begin = _time_arg(begin_text, end - 3_600_000, "begin")
    if begin > end:
        raise ValueError("begin is after end")
    route = admin.route(topic_name)
    if route is None:
        raise TopicNotFoundError(topic_name, f"no route for topic {topic_name}")
    found: list[MessageExt] = []
    truncated = False
    for mq in route.queues(write=False):
        addr = route.address(mq.broker_name)
        if addr is None:
            continue
        offset = admin.search_offset(addr, mq, begin)
        while len(found) < MAX_SEARCH_RESULTS * 4:
            msgs, nxt = admin.pull_messages(addr, mq, offset, 32)
            if not msgs:
                break
            stop = False
            for m in msgs:
                if m.store_timestamp > end:
                    stop = True
                    break
                if m.store_timestamp >= begin:
                    found.append(m)
            if stop or nxt <= offset:
                break
            offset = nxt
        else:
            truncated = True
    found.sort(key=lambda m: m.store_timestamp, reverse=True)
    if len(found) > MAX_SEARCH_RESULTS:
        truncated = True
    return {
        "messages": [message_doc(m) for m in found[:MAX_SEARCH_RESULTS]],
        "truncated": truncated,
        "begin": begin,
        "end": end,
    }


def messages_by_key(admin: AdminClient, topic_name: str, key: str) -> dict[str, Any]:
    check_topic(topic_name)
    if not key:
        raise ValueError("give a key")
    found = admin.query_message(topic_name, key, max_num=MAX_SEARCH_RESULTS)
    return {"messages": [message_doc(m) for m in found[:MAX_SEARCH_RESULTS]]}


def message_by_id(admin: AdminClient, msg_id: str, topic_name: str | None) -> dict[str, Any]:
    """The message with that id. Whatever kept it from being shown (no message there, a topic
    the account may not read, any refusal of the broker's) is answered alike: not found,
    naming no topic, so an account learns nothing of what lies at an offset it may not read."""
    if not msg_id or len(msg_id) > 128:
        raise ValueError("give a message id")
    if topic_name:
        check_topic(topic_name)
    msg_id = msg_id.strip()
    try:
        m = admin.find_message(msg_id, topic=topic_name or None)
    except ClientError:
        raise ClientError(
            ResponseCode.QUERY_NOT_FOUND, f"no message {msg_id} that this account may read"
        ) from None
    return {"messages": [message_doc(m)], "resend": RESEND_UNSUPPORTED}


__all__ = ["MessageQueue"]
