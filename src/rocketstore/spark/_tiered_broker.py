"""Which tiered Parquet files of running brokers the driver reads itself, and where the pulls
take over (broker mode of ``read_topic``; no pyspark needed).

For each topic, each readable broker group of its route is asked GET_TIER_MANIFEST on its
master: the broker's tiered directory, the files of the topic below its covered offset and each
queue's first offset past them, from one reading of its manifest. When that directory is
reachable here (it exists, and each listed file opens with the size the manifest gives: the
same machine, or storage the tier is shared on), the files are read as Parquet and the group's
queues are pulled from those offsets; otherwise the group's queues of that topic are read by
pulling alone, from their first offsets in the commit log, as the source reads them (logged
once per group, naming the topics).

A queue's tiered offsets are ``[first, last]`` with nothing missing and the files end at or
below the covered offset (past which the commit log keeps every message), so no message is
read twice or missed. The executors read the files by the same path as the driver.

Driver only.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..client._admin import AdminClient
from ..client._route import ClientError, TopicRoute
from ..remoting import RemotingError
from ..tier._answer import TierManifestBody
from ..tier._manifest import TierError, topic_dir

log = logging.getLogger(__name__)

MASTER_ID = 0
PERM_READ = 4


def unreachable(body: TierManifestBody) -> str | None:
    """Why the files of a broker's answer cannot be read here, or None when they can: the
    directory exists and each listed file opens with the size its manifest entry gives."""
    root = Path(body.tiered_dir)
    if not root.is_dir():
        return f"{root} is no directory here"
    for f in body.files:
        try:
            path = topic_dir(root, body.topic) / f.name
        except TierError as exc:
            return str(exc)
        try:
            with open(path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
        except OSError as exc:
            return f"cannot read {path}: {exc.strerror or exc}"
        if size != f.bytes:
            return f"{path} has {size} bytes here, the broker's manifest {f.bytes}"
    return None


@dataclass
class BrokerTiers:
    """The tier files the driver reads and the ``startingOffsets`` of the pulls past them:
    ``{topic: {broker name: {queue id: offset}}}`` (a group whose tier cannot be read for a
    topic is left out there, so its queues of the topic start at the earliest).
    ``fallbacks``: broker name → {topic: why that topic is pulled alone from it}."""

    files: list[str] = field(default_factory=list)
    starting: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    fallbacks: dict[str, dict[str, str]] = field(default_factory=dict)


def _readable_groups(route: TopicRoute) -> list[str]:
    """The broker groups the source reads the topic from (readable queue data), by name."""
    return sorted(
        {
            str(qd["brokerName"])
            for qd in route.queue_data
            if int(qd.get("perm", 6)) & PERM_READ and route.brokers.get(str(qd["brokerName"]))
        }
    )


def _ask(admin: AdminClient, route: TopicRoute, name: str) -> TierManifestBody | str:
    """The group's answer for the route's topic, or why there is none to read."""
    master = route.brokers.get(name, {}).get(MASTER_ID)
    if master is None:
        return "no master in the route (the tier is asked of the master)"
    try:
        body = admin.tier_manifest(master, route.topic)
    except (ClientError, RemotingError) as exc:
        return f"GET_TIER_MANIFEST of {master} failed: {exc}"
    if body is None:
        return f"{master} keeps no tiered store"
    if not body.files:
        return body  # nothing tiered yet: nothing to read here
    why = unreachable(body)
    if why is not None:
        where = f" (on {body.host})" if body.host else ""
        return f"its tier {body.tiered_dir}{where} is not readable here: {why}"
    return body


def broker_tiers(admin: AdminClient, topics: Sequence[str]) -> BrokerTiers:
    """The tiers of every readable broker group of ``topics``' routes, asked through
    ``admin`` (its name servers). ValueError for a topic without a route."""
    out = BrokerTiers()
    for topic in topics:
        route = admin.route(topic)
        if route is None:
            where = ";".join(admin.namesrv_addrs)
            raise ValueError(f"unknown topic {topic}: the name server ({where}) has no route")
        for name in _readable_groups(route):
            answer = _ask(admin, route, name)
            if isinstance(answer, str):
                out.fallbacks.setdefault(name, {})[topic] = answer
                continue
            d = topic_dir(answer.tiered_dir, topic)
            out.files.extend(str(d / f.name) for f in answer.files)
            if answer.boundary:
                out.starting.setdefault(topic, {})[name] = {
                    str(q): o for q, o in sorted(answer.boundary.items())
                }
    for name, why in sorted(out.fallbacks.items()):
        first = next(iter(why.values()))
        log.warning(
            "read_topic: broker %s is read by pulling alone for %s (%s); messages only its "
            "tier holds are not read",
            name,
            ", ".join(why),
            first,
        )
    return out
