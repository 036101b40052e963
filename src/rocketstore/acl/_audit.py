"""The audit log: one line per request the ACL refused and per admin request that changes
state, as RocketMQ 5.3's ACL 2.0 keeps its ``auth_audit.log``.

Lines go to the logger ``rocketstore.audit``, which the servers' log set-up writes to
``audit.log`` in the server's log directory (rotated like the other files; see ``rocketstore._logs``)::

    DENY account=userAK001 source=127.0.0.1:50112 request=310 SEND_MESSAGE_V2 resource=topic:Secret reason="No default permission for topic:Secret"
    ALLOW account=adminAK01 source=127.0.0.1:50120 request=17 UPDATE_AND_CREATE_TOPIC resource=topic:Orders
    DENY account=- source=127.0.0.1:50130 request=gRPC SendMessage resource=topic:Secret reason="..."

``account`` is the request's access key (``-`` when it has none), ``source`` the client's
address, ``resource`` what the request acts on as far as it names it (``cluster`` when it
names nothing narrower). Any thread.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

AUDIT_LOGGER = "rocketstore.audit"
log = logging.getLogger(AUDIT_LOGGER)

# ext fields that name what a request acts on, and how the audit line calls them
_RESOURCE_FIELDS = (
    ("topic", "topic"),
    ("b", "topic"),
    ("groupName", "group"),
    ("consumerGroup", "group"),
    ("group", "group"),
    ("srcGroup", "group"),
    ("destGroup", "group"),
    ("brokerName", "broker"),
    ("namespace", "namespace"),
    ("key", "key"),
    ("username", "user"),  # ACL 2.0's user and ACL admin requests
    ("subject", "subject"),
)


def resource_text(ext: Mapping[str, Any]) -> str:
    """What a request names (``topic:T group:G``), ``cluster`` when it names nothing."""
    parts = [
        f"{kind}:{ext[name]}"
        for name, kind in _RESOURCE_FIELDS
        if name in ext and ext[name] not in (None, "")
    ]
    return " ".join(parts) if parts else "cluster"


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def refused(*, account: str | None, source: str, request: str, resource: str, reason: str) -> None:
    """A request the ACL refused."""
    log.info(
        "DENY account=%s source=%s request=%s resource=%s reason=%s",
        account or "-",
        source or "-",
        request,
        resource,
        _quoted(reason),
    )


def allowed(*, account: str | None, source: str, request: str, resource: str) -> None:
    """A request that changes state, let in."""
    log.info(
        "ALLOW account=%s source=%s request=%s resource=%s",
        account or "-",
        source or "-",
        request,
        resource,
    )


def authorization(
    *, subject: str, decision: str, actions: str, source: str, resource: str, request: str
) -> None:
    """An ACL 2.0 decision in RocketMQ 5.3's own audit shape (written for the changes of
    users and ACLs, beside their ALLOW line)."""
    log.info(
        "[AUTHORIZATION] Subject = %s is %s Action = %s from sourceIp = %s on resource = %s "
        "for request = %s.",
        subject,
        decision,
        actions,
        source or "-",
        resource,
        request,
    )
