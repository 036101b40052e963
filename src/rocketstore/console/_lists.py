"""The topic and group lists with the figures an operator scans them for, as RocketMQ
Dashboard's lists carry them: per topic its queues, messages and put TPS; per group its
consumers online, how it consumes, its consume TPS and its total lag.

Where the figures come from (the masters only: a slave holds copies):

- topics: GET_ALL_TOPIC_CONFIG once per master (which topics it has, their queue counts);
  for each topic on it, GET_TOPIC_STATS_INFO (messages: the sum over its queues of max
  offset - min offset) and VIEW_BROKER_STATS_DATA TOPIC_PUT_NUMS (the last minute's TPS);
- groups: GET_ALL_SUBSCRIPTIONGROUP_CONFIG and GET_BROKER_CONSUME_STATS once per master (each
  group's lag and TPS on every topic it has offsets on: the same reckoning as GET_CONSUME_STATS
  and the group's own page), GET_CONSUMER_CONNECTION_LIST per group (its clients online).

A figure a broker does not give (it refused, or is out of reach) is None and the error is
noted in the row; the list itself is still answered.

Blocking (the admin client): the console's server runs these in a worker thread.
"""

from __future__ import annotations

from typing import Any

from ..client._admin import AdminClient
from ..client._route import ClientError
from ..remoting import RemotingError, ResponseCode
from ._views import SYSTEM_GROUPS, _topic_kind

TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
_FAILURES = (ClientError, RemotingError, ValueError)


def _add(row: dict[str, Any], key: str, value: float) -> None:
    """Add to a figure, unless a broker failed to give it (None stays None)."""
    if row[key] is not None:
        row[key] += value


def _note(row: dict[str, Any], broker_name: str, exc: Exception) -> None:
    row.setdefault("errors", []).append(f"{broker_name}: {exc}")


def _put_tps(admin: AdminClient, addr: str, topic: str) -> float:
    """The last minute's puts a second; 0 where the broker has counted none (it answers
    SYSTEM_ERROR "The stats <N> <K> not exist" then)."""
    try:
        return admin.broker_stats(addr, TOPIC_PUT_NUMS, topic).minute.tps
    except ClientError as exc:
        if exc.code == ResponseCode.SYSTEM_ERROR and "not exist" in (exc.remark or ""):
            return 0.0
        raise


def topic_list(admin: AdminClient) -> dict[str, Any]:
    """Every topic the name servers know, with its kind and, from each master that has it,
    its queues, messages and put TPS."""
    names = sorted(admin.topic_list())
    info = admin.cluster_info()
    clusters = set(info.cluster_addr_table)
    brokers = set(info.broker_addr_table)
    rows: dict[str, dict[str, Any]] = {
        t: {
            "topic": t,
            "kind": _topic_kind(t, clusters, brokers),
            "brokers": [],
            "readQueues": 0,
            "writeQueues": 0,
            "messages": 0,
            "putTps": 0.0,
        }
        for t in names
    }
    for broker_name, addr in sorted(admin.masters().items()):
        try:
            configs = admin.topic_configs(addr)
        except _FAILURES as exc:
            for row in rows.values():
                _note(row, broker_name, exc)
                row["messages"] = row["putTps"] = None
            continue
        for name, config in configs.items():
            if name not in rows:  # not registered with the name servers (yet)
                continue
            row = rows[name]
            row["brokers"].append(broker_name)
            row["readQueues"] += int(str(config.get("readQueueNums", 0)))
            row["writeQueues"] += int(str(config.get("writeQueueNums", 0)))
            try:
                stats = admin.topic_stats(addr, name)
                messages = sum(max(0, o.max_offset - o.min_offset) for o in stats.values())
                tps = _put_tps(admin, addr, name)
            except _FAILURES as exc:
                _note(row, broker_name, exc)
                row["messages"] = row["putTps"] = None
                continue
            _add(row, "messages", messages)
            _add(row, "putTps", tps)
    return {"topics": list(rows.values())}


def group_list(admin: AdminClient) -> dict[str, Any]:
    """Every master's subscription groups with their consumers online, consume type and
    model, consume TPS and total lag (summed over the masters)."""
    masters = sorted(admin.masters().items())
    rows: dict[str, dict[str, Any]] = {}

    def row_of(group: str) -> dict[str, Any]:
        return rows.setdefault(
            group,
            {
                "group": group,
                "kind": "system" if group in SYSTEM_GROUPS else "normal",
                "consumers": 0,
                "consumeType": "",
                "messageModel": "",
                "versions": [],
                "consumeTps": 0.0,
                "totalLag": 0,
            },
        )

    for broker_name, addr in masters:
        for group in admin.subscription_group_docs(addr):
            row_of(group)
        try:
            stats = admin.broker_consume_stats(addr)
        except _FAILURES as exc:
            for row in rows.values():
                _note(row, broker_name, exc)
                row["consumeTps"] = row["totalLag"] = None
            continue
        for group, per_topic in stats.groups:
            row = row_of(group)
            _add(row, "totalLag", sum(s.total_lag() for s in per_topic))
            _add(row, "consumeTps", sum(s.consume_tps for s in per_topic))
    for group, row in rows.items():
        clients: dict[str, int] = {}
        for broker_name, addr in masters:
            try:
                conn = admin.consumer_connection(addr, group)
            except ClientError as exc:
                if exc.code != ResponseCode.CONSUMER_NOT_ONLINE:
                    _note(row, broker_name, exc)
                continue
            except (RemotingError, ValueError) as exc:
                _note(row, broker_name, exc)
                continue
            row["consumeType"] = conn.consume_type
            row["messageModel"] = conn.message_model
            for c in conn.connections:
                clients[c.client_id] = c.version
        row["consumers"] = len(clients)
        row["versions"] = sorted(set(clients.values()))
    return {"groups": [rows[g] for g in sorted(rows)]}
