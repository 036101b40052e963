"""A message's trace as RocketMQ Dashboard shows it: the trace messages that clients with
message trace on wrote about it to the trace topic, found by the message's id (their keys),
decoded (``client._trace``) and laid out as rows (Pub, SubBefore, SubAfter, EndTransaction)
and, per consumer group, its consume attempts (a SubBefore and the SubAfter of the same
request).

Blocking (the admin client): the console's server runs it in a worker thread.
"""

from __future__ import annotations

from typing import Any

from ..client._admin import AdminClient
from ..client._names import check_topic
from ..client._route import TopicNotFoundError
from ..client._trace import TRACE_TOPIC, TraceContext, decode_traces

MAX_TRACE_MESSAGES = 64


def _row(ctx: TraceContext, client_host: str) -> dict[str, Any]:
    return {
        "type": ctx.trace_type,
        "group": ctx.group,
        "clientHost": ctx.client_host or client_host,
        "storeHost": ctx.store_host,
        "timestamp": ctx.timestamp,
        "costTime": ctx.cost_time,
        # a SubBefore says nothing of the outcome
        "status": "" if ctx.trace_type == "SubBefore" else "success" if ctx.success else "failed",
        "requestId": ctx.request_id,
        "retryTimes": ctx.retry_times,
        "topic": ctx.topic,
        "tags": ctx.tags,
        "keys": ctx.keys,
        "msgType": ctx.msg_type,
        "offsetMsgId": ctx.offset_msg_id,
        "transactionState": ctx.transaction_state,
    }


def _attempts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consume attempts per group: each SubBefore with the SubAfter of its request (the
    SubAfter's group and time are the SubBefore's where a client wrote none)."""
    after = {r["requestId"]: r for r in rows if r["type"] == "SubAfter"}
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["type"] != "SubBefore":
            continue
        done = after.pop(r["requestId"], None)
        if done is not None and not done["group"]:
            done["group"] = r["group"]
        if done is not None and not done["timestamp"]:
            done["timestamp"] = r["timestamp"] + done["costTime"]
        groups.setdefault(r["group"], []).append(
            {
                "requestId": r["requestId"],
                "clientHost": r["clientHost"],
                "retryTimes": r["retryTimes"],
                "beginTimestamp": r["timestamp"],
                "costTime": done["costTime"] if done else None,
                "status": done["status"] if done else "no result yet",
            }
        )
    for done in after.values():  # a result whose start was not found
        groups.setdefault(done["group"], []).append(
            {
                "requestId": done["requestId"],
                "clientHost": done["clientHost"],
                "retryTimes": None,
                "beginTimestamp": None,
                "costTime": done["costTime"],
                "status": done["status"],
            }
        )
    return [
        {"group": g, "attempts": sorted(a, key=lambda x: x["beginTimestamp"] or 0)}
        for g, a in sorted(groups.items())
    ]


def message_trace(admin: AdminClient, msg_id: str, trace_topic: str | None) -> dict[str, Any]:
    """Every trace of the message ``msg_id`` (the client's id) in ``trace_topic``."""
    msg_id = msg_id.strip()
    if not msg_id or len(msg_id) > 128:
        raise ValueError("give a message id")
    topic = check_topic(trace_topic or TRACE_TOPIC)
    try:
        found = admin.query_message(topic, msg_id, max_num=MAX_TRACE_MESSAGES)
    except TopicNotFoundError:
        found = []
    rows: list[dict[str, Any]] = []
    unreadable = 0
    for m in found:
        decoded = decode_traces(bytes(m.body).decode("utf-8", "replace"))
        unreadable += decoded.unreadable
        host = m.born_host_str.rpartition(":")[0]
        rows.extend(_row(c, host) for c in decoded.contexts if c.msg_id == msg_id)
    order = {"Pub": 0, "EndTransaction": 1, "SubBefore": 2, "SubAfter": 3}
    rows.sort(key=lambda r: (r["timestamp"] or 0, order.get(r["type"], 9)))
    return {
        "msgId": msg_id,
        "traceTopic": topic,
        "traceMessages": len(found),
        "unreadable": unreadable,
        "rows": rows,
        "consumers": _attempts([dict(r) for r in rows]),
    }
