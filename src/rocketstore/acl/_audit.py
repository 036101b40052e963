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

Refusals repeat: a client with a wrong key, or an outsider trying a port, is refused as fast as
it asks, and a line each would rotate the real trail out of the file. So refusals are counted
per source (its host, whatever its port) in intervals of ``SUMMARY_INTERVAL_S``: in each, the
first refusal of each (account, request, resource) of the source is written in full, up to
``FULL_LINES`` of them; the rest are counted, and when the interval is over one line tells
how many (written with the next refusal of any source, or by ``flush``, which the servers'
housekeeping calls)::

    DENY account=- source=10.0.0.9:50130 request=gRPC SendMessage resource=topic:T reason="..."
    DENY-SUMMARY source=10.0.0.9 refused=61,204 more in 60 s accounts=- requests=gRPC SendMessage

At most ``MAX_SOURCES`` sources are followed at once; beyond, the one followed longest is told
and forgotten first.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
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


SUMMARY_INTERVAL_S = 60.0
FULL_LINES = 32
MAX_SOURCES = 4096
_MAX_NAMED = 4  # accounts and requests named in a summary line


def _host(source: str) -> str:
    """``1.2.3.4:5000`` / ``[::1]:5000`` / ``ipv4:1.2.3.4:5000`` → the host alone."""
    for prefix in ("ipv4:", "ipv6:"):
        source = source.removeprefix(prefix)
    if source.startswith("["):
        return source[: source.find("]") + 1] or source
    host, sep, port = source.rpartition(":")
    return host if sep and port.isdigit() and ":" not in host else source


@dataclass(slots=True)
class _Source:
    ends: float  # when its interval ends
    seen: set[tuple[str, str, str]] = field(default_factory=set)  # written in full
    counted: int = 0  # refused beyond those
    accounts: collections.Counter[str] = field(default_factory=collections.Counter)
    requests: collections.Counter[str] = field(default_factory=collections.Counter)


def _named(counts: collections.Counter[str]) -> str:
    names = [name for name, _n in counts.most_common(_MAX_NAMED)]
    more = len(counts) - len(names)
    return ",".join(names) + (f",+{more}" if more > 0 else "")


class RefusalLog:
    """Refusals written to the audit log, repeated ones of a source counted (see the module
    docstring). Any thread."""

    def __init__(
        self,
        *,
        interval_s: float = SUMMARY_INTERVAL_S,
        full_lines: int = FULL_LINES,
        max_sources: int = MAX_SOURCES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = interval_s
        self.full_lines = full_lines
        self.max_sources = max_sources
        self._clock = clock
        self._lock = threading.Lock()
        self._sources: collections.OrderedDict[str, _Source] = collections.OrderedDict()
        self.written = 0  # refusals written in full
        self.counted = 0  # refusals counted into a summary

    def refused(
        self, *, account: str | None, source: str, request: str, resource: str, reason: str
    ) -> bool:
        """Write the refusal in full or count it; True when it was written."""
        now = self._clock()
        host = _host(source or "-")
        key = (account or "-", request, resource)
        with self._lock:
            self._tell_ended(now)
            entry = self._sources.get(host)
            if entry is None:
                while len(self._sources) >= self.max_sources:
                    self._tell(*self._sources.popitem(last=False))
                entry = self._sources[host] = _Source(now + self.interval_s)
            if key not in entry.seen and len(entry.seen) < self.full_lines:
                entry.seen.add(key)
                self.written += 1
                full = True
            else:
                entry.counted += 1
                entry.accounts[key[0]] += 1
                entry.requests[request] += 1
                self.counted += 1
                full = False
        if full:
            log.info(
                "DENY account=%s source=%s request=%s resource=%s reason=%s",
                account or "-",
                source or "-",
                request,
                resource,
                _quoted(reason),
            )
        return full

    def clear(self) -> None:
        """Forget every source, untold (tests: each starts with a clean slate)."""
        with self._lock:
            self._sources.clear()

    def flush(self) -> None:
        """Tell the sources whose interval is over."""
        with self._lock:
            self._tell_ended(self._clock())

    def _tell_ended(self, now: float) -> None:
        """Under the lock: the sources whose interval ended told and forgotten (they are
        kept in the order they were first seen in their interval, so the oldest lead)."""
        while self._sources:
            host, entry = next(iter(self._sources.items()))
            if entry.ends > now:
                return
            del self._sources[host]
            self._tell(host, entry)

    def _tell(self, host: str, entry: _Source) -> None:
        if not entry.counted:
            return
        log.info(
            "DENY-SUMMARY source=%s refused=%s more in %g s accounts=%s requests=%s",
            host,
            f"{entry.counted:,}",
            self.interval_s,
            _named(entry.accounts),
            _quoted(_named(entry.requests)),
        )


REFUSALS = RefusalLog()


def refused(*, account: str | None, source: str, request: str, resource: str, reason: str) -> None:
    """A request the ACL refused (written in full, or counted: ``RefusalLog``)."""
    REFUSALS.refused(
        account=account, source=source, request=request, resource=resource, reason=reason
    )


def flush() -> None:
    """Tell the counts of the sources whose interval is over (servers' housekeeping)."""
    REFUSALS.flush()


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
