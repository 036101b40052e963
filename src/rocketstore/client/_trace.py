"""Message trace data: what RocketMQ clients with message trace on write to the trace topic
(``RMQ_SYS_TRACE_TOPIC`` unless they name another), in the text format of RocketMQ 4.9.8's
client (TraceDataEncoder / TraceContext / TraceBean), decoded and encoded here.

A trace message's body is UTF-8 text: one or more contexts, each ended by FIELD (\\x02), their
fields apart by CONTENT (\\x01). Its keys are the traced messages' ids (the client's
UNIQ_KEY, not the offset id) and their keys, so the broker's index finds every trace of a
message by its id. The fields, by context type::

    Pub             timestamp, regionId, producer group, topic, msgId, tags, keys, storeHost,
                    bodyLength, costTime (ms), msgType (ordinal, below), offsetMsgId, success
                    [, clientHost]                            (12 fields: no offsetMsgId)
    SubBefore       timestamp, regionId, consumer group, requestId, msgId, retryTimes, keys
    SubAfter        requestId, msgId, costTime (ms), success, keys [, contextCode
                    [, timestamp, consumer group]]            (a CLOUD channel writes no
                                                               timestamp and group)
    EndTransaction  timestamp, regionId, producer group, topic, msgId, tags, keys, storeHost,
                    msgType, transactionId, transactionState (COMMIT_MESSAGE,
                    ROLLBACK_MESSAGE, UNKNOW), fromTransactionCheck

each line starting with its type's name. msgType ordinals: 0 Normal_Msg, 1 Trans_Msg_Half,
2 Trans_msg_Commit, 3 Delay_Msg. A SubBefore and its SubAfter share the requestId of one
consume call (a batch: one context per message, the same requestId).

A context this module cannot read (an unknown type, a field that is not a number, too few
fields) is counted as unreadable by ``decode_traces`` and left out; the others still count.
Pure functions, any thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CONTENT = "\x01"
FIELD = "\x02"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
TRACE_PRODUCER_GROUP_PREFIX = "_INNER_TRACE_PRODUCER"
MESSAGE_TYPES = ("Normal_Msg", "Trans_Msg_Half", "Trans_msg_Commit", "Delay_Msg")
TRACE_TYPES = ("Pub", "SubBefore", "SubAfter", "EndTransaction")


@dataclass(frozen=True, slots=True)
class TraceContext:
    """One context with its one bean (RocketMQ's TraceContext and TraceBean in one)."""

    trace_type: str  # one of TRACE_TYPES
    msg_id: str
    timestamp: int = 0  # ms; 0: not written (a SubAfter of the CLOUD channel)
    region_id: str = ""
    group: str = ""
    request_id: str = ""
    cost_time: int = 0  # ms
    success: bool = True
    context_code: int = 0
    topic: str = ""
    offset_msg_id: str = ""
    tags: str = ""
    keys: str = ""
    store_host: str = ""
    client_host: str = ""
    body_length: int = 0
    retry_times: int = 0
    msg_type: str = ""  # one of MESSAGE_TYPES, "" where the context has none
    transaction_id: str = ""
    transaction_state: str = ""
    from_transaction_check: bool = False


@dataclass(slots=True)
class DecodedTraces:
    contexts: list[TraceContext] = field(default_factory=list)
    unreadable: int = 0


def _bool(text: str) -> bool:
    return text.lower() == "true"  # Java's Boolean.parseBoolean


def _msg_type(text: str) -> str:
    return MESSAGE_TYPES[int(text)]


def _decode_one(line: list[str]) -> TraceContext | None:
    kind = line[0]
    if kind == "Pub" and len(line) >= 13:
        offset_id, success, client = "", line[12], ""
        if len(line) >= 14:
            offset_id, success = line[12], line[13]
        if len(line) >= 15:
            client = line[14]
        return TraceContext(
            "Pub",
            line[5],
            timestamp=int(line[1]),
            region_id=line[2],
            group=line[3],
            topic=line[4],
            tags=line[6],
            keys=line[7],
            store_host=line[8],
            body_length=int(line[9]),
            cost_time=int(line[10]),
            msg_type=_msg_type(line[11]),
            offset_msg_id=offset_id,
            success=_bool(success),
            client_host=client,
        )
    if kind == "SubBefore" and len(line) >= 7:
        return TraceContext(
            "SubBefore",
            line[5],
            timestamp=int(line[1]),
            region_id=line[2],
            group=line[3],
            request_id=line[4],
            retry_times=int(line[6]),
            keys=line[7] if len(line) >= 8 else "",
        )
    if kind == "SubAfter" and len(line) >= 6:
        return TraceContext(
            "SubAfter",
            line[2],
            request_id=line[1],
            cost_time=int(line[3]),
            success=_bool(line[4]),
            keys=line[5],
            context_code=int(line[6]) if len(line) >= 7 and line[6] else 0,
            timestamp=int(line[7]) if len(line) >= 9 else 0,
            group=line[8] if len(line) >= 9 else "",
        )
    if kind == "EndTransaction" and len(line) >= 13:
        return TraceContext(
            "EndTransaction",
            line[5],
            timestamp=int(line[1]),
            region_id=line[2],
            group=line[3],
            topic=line[4],
            tags=line[6],
            keys=line[7],
            store_host=line[8],
            msg_type=_msg_type(line[9]),
            transaction_id=line[10],
            transaction_state=line[11],
            from_transaction_check=_bool(line[12]),
        )
    return None


def decode_traces(text: str) -> DecodedTraces:
    """The contexts of one trace message's body (TraceDataEncoder.decoderFromTraceDataString)."""
    out = DecodedTraces()
    for context in text.split(FIELD):
        if not context.strip():
            continue
        try:
            decoded = _decode_one(context.split(CONTENT))
        except (ValueError, IndexError):
            decoded = None
        if decoded is None:
            out.unreadable += 1
        else:
            out.contexts.append(decoded)
    return out


def _join(*fields: object) -> str:
    return CONTENT.join("true" if f is True else "false" if f is False else str(f) for f in fields)


def encode_trace(ctx: TraceContext) -> str:
    """One context as a client writes it (TraceDataEncoder.encoderFromContextBean; a SubAfter
    with its timestamp and group, as every channel but CLOUD writes it)."""
    kind = ctx.trace_type
    msg_type = str(MESSAGE_TYPES.index(ctx.msg_type or MESSAGE_TYPES[0]))
    if kind == "Pub":
        body = _join(
            kind,
            ctx.timestamp,
            ctx.region_id,
            ctx.group,
            ctx.topic,
            ctx.msg_id,
            ctx.tags,
            ctx.keys,
            ctx.store_host,
            ctx.body_length,
            ctx.cost_time,
            msg_type,
            ctx.offset_msg_id,
            ctx.success,
        )
    elif kind == "SubBefore":
        body = _join(
            kind,
            ctx.timestamp,
            ctx.region_id,
            ctx.group,
            ctx.request_id,
            ctx.msg_id,
            ctx.retry_times,
            ctx.keys,
        )
    elif kind == "SubAfter":
        body = _join(
            kind,
            ctx.request_id,
            ctx.msg_id,
            ctx.cost_time,
            ctx.success,
            ctx.keys,
            ctx.context_code,
            ctx.timestamp,
            ctx.group,
        )
    elif kind == "EndTransaction":
        body = _join(
            kind,
            ctx.timestamp,
            ctx.region_id,
            ctx.group,
            ctx.topic,
            ctx.msg_id,
            ctx.tags,
            ctx.keys,
            ctx.store_host,
            msg_type,
            ctx.transaction_id,
            ctx.transaction_state,
            ctx.from_transaction_check,
        )
    else:
        raise ValueError(f"not a trace type: {kind!r}")
    return body + FIELD


def trace_keys(ctx: TraceContext) -> list[str]:
    """The keys a trace message of ``ctx`` carries: the message id, then its keys."""
    return [ctx.msg_id, *(k for k in ctx.keys.split(" ") if k)]
