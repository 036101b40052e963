"""GET_TIER_MANIFEST (9001, rocketstore's own request code): where a broker's tiered store is
and which of its Parquet files hold a topic, so a reader on the same machine (or on storage the
broker's tier is shared on) reads those files itself and pulls only what follows them.

=====  ==================  =====================================================================
code   request             ext fields → answer
=====  ==================  =====================================================================
9001   GET_TIER_MANIFEST   topic → SUCCESS, JSON body (``tier._answer``): the tier's absolute
                           directory, the broker's host name, the covered offset, the file
                           entries of the topic's manifest and per queue the first offset
                           past them. The files are those whose commit-log range ends at or below
                           ``covered`` (``TopicManifest.covered_files``); ``covered`` and the
                           manifest are read once each, so files and boundary agree.
                           TOPIC_NOT_EXIST: neither the broker nor its tier knows the topic;
                           SYSTEM_ERROR with ext ``tiered=false``: the broker keeps no tier
=====  ==================  =====================================================================

The request is a read of the topic: with the ACL on it needs SUB on the topic (as a pull).
The manifest is read in a worker thread; the handler runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import TYPE_CHECKING, Any, Protocol

from ...acl._table import request_names
from ...remoting import Connection, RemotingCommand, RequestCode, ResponseCode
from ...tier._answer import NO_TIER, TierManifestBody
from ...tier._manifest import TierError, is_topic_name, load_covered
from .._services import HasConfig, HasTier, HasTopics

if TYPE_CHECKING:
    from ...tier._read import TierReader

RC = ResponseCode


class TierAdminContext(HasTier, HasTopics, HasConfig, Protocol):
    """What GET_TIER_MANIFEST uses of the broker."""


def tier_answer(tier: TierReader, topic: str, host: str) -> TierManifestBody:
    """The answer to GET_TIER_MANIFEST for ``topic``: ``covered`` read first, then the manifest
    once (any thread). TierError when the tier cannot be read."""
    covered = load_covered(tier.root)
    return TierManifestBody.of(
        topic, os.path.abspath(tier.root), host, covered, tier.manifest(topic)
    )


class TierAdminProcessor:
    """Serves GET_TIER_MANIFEST for one BrokerController (loop thread)."""

    def __init__(self, broker: TierAdminContext) -> None:
        self.broker = broker
        self.host = socket.gethostname()

    def handlers(self) -> dict[int, Any]:
        return {int(RequestCode.GET_TIER_MANIFEST): self.get_tier_manifest}

    def get_tier_manifest(self, cmd: RemotingCommand, conn: Connection) -> Any:
        topic = request_names(cmd).topic  # as the ACL read it
        if not topic:
            return RemotingCommand.response(RC.SYSTEM_ERROR, "the custom field <topic> is null")
        tier = self.broker.tier_reader()
        if tier is None:
            return RemotingCommand.response(
                RC.SYSTEM_ERROR,
                f"broker {self.broker.config.broker_name} keeps no tiered store (tieredDir is "
                "not set)",
                {NO_TIER: "false"},
            )
        if not is_topic_name(topic):
            return RemotingCommand.response(
                RC.TOPIC_NOT_EXIST, f"topic[{topic}] is not a topic name (^[%|a-zA-Z0-9_-]+$)"
            )
        return self._answer(tier, topic)

    async def _answer(self, tier: TierReader, topic: str) -> RemotingCommand:
        try:
            body = await asyncio.to_thread(tier_answer, tier, topic, self.host)
        except TierError as exc:
            return RemotingCommand.response(RC.SYSTEM_ERROR, f"tier error: {exc}")
        if not body.files and self.broker.topics.select(topic) is None:
            return RemotingCommand.response(
                RC.TOPIC_NOT_EXIST,
                f"topic[{topic}] not exist on broker {self.broker.config.broker_name} nor in "
                "its tiered store",
            )
        return RemotingCommand.response(RC.SUCCESS, None, None, body.encode())
