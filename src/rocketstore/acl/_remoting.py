"""The ACL on the broker's remoting port: every request is checked before its handler runs.

What each request needs (RocketMQ 4.9's PlainAccessValidator.parse; a group's permission is
its retry topic's)::

    SEND_MESSAGE / _V2 / SEND_BATCH_MESSAGE   the topic: PUB (a %RETRY% topic: its group SUB)
    CONSUMER_SEND_MSG_BACK                    the group: SUB
    PULL_MESSAGE                              the topic and the group: SUB
    QUERY_MESSAGE                             the topic: SUB
    GET_TIER_MANIFEST (rocketstore's own)     the topic: SUB
    HEART_BEAT                                each consumer group and subscribed topic: SUB
    UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP   the group: SUB
    UPDATE_CONSUMER_OFFSET                    the topic and the group: SUB
    UPDATE_AND_CREATE_TOPIC, UPDATE_BROKER_CONFIG, DELETE_TOPIC_IN_BROKER,
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, DELETE_SUBSCRIPTIONGROUP   an admin account
    anything else                             a known account and a good signature

RocketMQ 4.9 leaves SEND_BATCH_MESSAGE out of that table (a batch only needs a signature);
here it needs PUB on its topic like a single send.

A refusal is answered as RocketMQ's broker answers an AclException thrown by its RPC hook:
SYSTEM_ERROR with the remark ``org.apache.rocketmq.acl.common.AclException: <why>``. One-way
requests are dropped. The connection stays open.

Loop thread.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..remoting import Connection, Handler, RemotingCommand, RequestCode, ResponseCode
from ..remoting._fastjson import loads_lenient
from ..remoting._signing import (
    ACCESS_KEY,
    SIGNATURE,
    UNIQUE_KEY_QUERY,
    field_text,
    signature,
    signed_content,
)
from ._errors import AccessDeniedError
from ._plain import PUB, SUB, PlainAcl, retry_topic

log = logging.getLogger(__name__)

UPDATE_BROKER_CONFIG = 25
ADMIN_CODES = frozenset(
    {
        int(RequestCode.UPDATE_AND_CREATE_TOPIC),
        UPDATE_BROKER_CONFIG,
        int(RequestCode.DELETE_TOPIC_IN_BROKER),
        int(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP),
        int(RequestCode.DELETE_SUBSCRIPTIONGROUP),
    }
)
EXCEPTION_PREFIX = "org.apache.rocketmq.acl.common.AclException: "


class AclSource(Protocol):
    def current(self) -> PlainAcl: ...


def _get(ext: Mapping[str, Any], key: str) -> str | None:
    value = ext.get(key)
    return None if value is None else field_text(value)


def _add(needs: dict[str, int], resource: str | None, perm: int) -> None:
    if resource is not None:
        needs[resource] = perm


def _send_needs(needs: dict[str, int], topic: str | None, group: str | None) -> None:
    if topic is not None and topic.startswith("%RETRY%"):
        _add(needs, None if group is None else retry_topic(group), SUB)
    else:
        _add(needs, topic, PUB)


def _heartbeat_needs(needs: dict[str, int], body: bytes | bytearray | memoryview) -> None:
    try:
        doc = loads_lenient(bytes(body).decode("utf-8")) if len(body) else {}
        consumers = doc.get("consumerDataSet") or [] if isinstance(doc, dict) else []
        for consumer in consumers:
            _add(needs, retry_topic(str(consumer["groupName"])), SUB)
            for sub in consumer.get("subscriptionDataSet") or []:
                _add(needs, str(sub["topic"]), SUB)
    except (ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise AccessDeniedError(f"cannot read the heartbeat's groups and topics: {exc}") from None


def request_needs(cmd: RemotingCommand) -> dict[str, int]:
    """The resources request ``cmd`` needs: resource → PUB / SUB (groups as retry topics)."""
    ext = cmd.ext_fields
    code = cmd.code
    needs: dict[str, int] = {}
    if code == RequestCode.SEND_MESSAGE:
        # RocketMQ reads the group of a %RETRY% send from a "group" field this header lacks
        _send_needs(needs, _get(ext, "topic"), _get(ext, "group"))
    elif code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        _send_needs(needs, _get(ext, "b"), _get(ext, "a"))
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        group = _get(ext, "group")
        _add(needs, None if group is None else retry_topic(group), SUB)
    elif code == RequestCode.PULL_MESSAGE:
        _add(needs, _get(ext, "topic"), SUB)
        group = _get(ext, "consumerGroup")
        _add(needs, None if group is None else retry_topic(group), SUB)
    elif code in (RequestCode.QUERY_MESSAGE, RequestCode.GET_TIER_MANIFEST):
        _add(needs, _get(ext, "topic"), SUB)
    elif code == RequestCode.HEART_BEAT:
        _heartbeat_needs(needs, cmd.body)
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        group = _get(ext, "consumerGroup")
        _add(needs, None if group is None else retry_topic(group), SUB)
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        group = _get(ext, "consumerGroup")
        _add(needs, None if group is None else retry_topic(group), SUB)
        _add(needs, _get(ext, "topic"), SUB)
    return needs


def is_admin_request(cmd: RemotingCommand) -> bool:
    """Whether the broker's request ``cmd`` needs an admin account."""
    return cmd.code in ADMIN_CODES


def check_request(
    acl: PlainAcl,
    cmd: RemotingCommand,
    host: str,
    admin: Callable[[RemotingCommand], bool] = is_admin_request,
) -> None:
    """Let ``cmd`` from ``host`` in, or raise AccessDeniedError (RocketMQ's wording); ``admin``
    tells the requests that need an admin account (the broker's, unless told otherwise)."""
    ext = cmd.ext_fields
    given = _get(ext, SIGNATURE)

    def verify(secret_key: str) -> bool:
        if given is None:
            return False
        # RocketMQ's broker leaves _UNIQUE_KEY_QUERY out, its Java client signs it: take both
        skips: list[tuple[str, ...]] = [(SIGNATURE, UNIQUE_KEY_QUERY)]
        if UNIQUE_KEY_QUERY in ext:
            skips.append((SIGNATURE,))
        return any(
            hmac.compare_digest(
                signature(signed_content(ext, cmd.body, skip=skip), secret_key), given
            )
            for skip in skips
        )

    acl.authorize(
        host=host,
        access_key=_get(ext, ACCESS_KEY),
        verify=verify,
        code=cmd.code,
        needs=request_needs(cmd),
        admin_needed=admin(cmd),
    )


def peer_host(conn: Connection) -> str:
    """The client's address without its port (``host:port`` → ``host``)."""
    return conn.peer.rpartition(":")[0] if ":" in conn.peer else conn.peer


class RemotingAcl:
    """Wraps a server's request handlers so that each request is checked first; ``admin``
    tells which requests need an admin account (the broker's by default; the controller names
    its own)."""

    def __init__(
        self, source: AclSource, admin: Callable[[RemotingCommand], bool] = is_admin_request
    ) -> None:
        self.source = source
        self.admin = admin
        self.refused = 0

    def guard(self, handler: Handler) -> Handler:
        def guarded(cmd: RemotingCommand, conn: Connection) -> Any:
            try:
                check_request(self.source.current(), cmd, peer_host(conn), self.admin)
            except AccessDeniedError as exc:
                self.refused += 1
                log.warning(
                    "ACL: refused request code %s from %s: %s", cmd.code, conn.peer or "?", exc
                )
                if cmd.is_oneway:
                    return None
                return RemotingCommand.response(
                    ResponseCode.SYSTEM_ERROR, EXCEPTION_PREFIX + str(exc)
                )
            return handler(cmd, conn)

        return guarded

    def guard_all(self, handlers: Mapping[int, Handler]) -> dict[int, Handler]:
        return {code: self.guard(handler) for code, handler in handlers.items()}
