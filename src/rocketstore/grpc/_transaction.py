"""Transactional messages for gRPC clients, over the broker's TransactionService.

- SendMessage with message type TRANSACTION stores a half message (see
  ``broker/messaging/_transaction.py``); the send result's ``transaction_id`` names it: 32 hex digits, its
  commit-log offset then its half-queue offset.
- EndTransaction commits or rolls it back. The id must name a half message of the request's
  topic with the request's message id (else INVALID_TRANSACTION_ID).
- A half left open past the broker's transaction timeout is asked about: a
  RecoverOrphanedTransactionCommand (the message as its producer sent it, and the id of the
  copy the broker made for the check) goes down the Telemetry stream of a producer that
  publishes the topic. Its checker's answer comes back as EndTransaction (source
  SOURCE_SERVER_CHECK).

Loop thread only.
"""

from __future__ import annotations

import itertools
import logging
from typing import Protocol

from ..broker._services import HasStore, HasStoreConfig, HasTopics, TopicCreation
from ..broker.messaging._transaction import CheckRequest, HasTransactions, TransactionError
from ..store.log._record import PROPERTY_REAL_TOPIC
from ._checks import check_topic
from ._clients import ClientRegistry
from ._convert import Code, GrpcError, status, to_proto_message
from ._pb import definition_pb2 as pb
from ._pb import service_pb2 as spb
from ._replies import Replies

log = logging.getLogger(__name__)

_END_CODES = {
    "unknown": Code.INVALID_TRANSACTION_ID,
    "mismatch": Code.INVALID_TRANSACTION_ID,
    "conflict": Code.BAD_REQUEST,
    "store": Code.INTERNAL_SERVER_ERROR,
}


class TransactionContext(
    HasStore, HasStoreConfig, HasTopics, HasTransactions, TopicCreation, Protocol
):
    """What gRPC transactions use of the broker."""


def transaction_id(commit_log_offset: int, queue_offset: int) -> str:
    return f"{commit_log_offset:016X}{queue_offset:016X}"


def parse_transaction_id(text: str) -> tuple[int, int]:
    """(commit-log offset, half-queue offset); GrpcError INVALID_TRANSACTION_ID otherwise."""
    if len(text) != 32:
        raise GrpcError(Code.INVALID_TRANSACTION_ID, f"not a transaction id: {text!r}")
    try:
        return int(text[:16], 16), int(text[16:], 16)
    except ValueError:
        raise GrpcError(Code.INVALID_TRANSACTION_ID, f"not a transaction id: {text!r}") from None


class TransactionFront:
    """EndTransaction, and the Telemetry streams orphaned-transaction checks go down."""

    def __init__(self, broker: TransactionContext, clients: ClientRegistry) -> None:
        self.broker = broker
        self.clients = clients
        # client id → the outgoing queues of its open Telemetry streams
        self._streams: dict[str, list[Replies]] = {}
        self._turn = itertools.count()

    # ---- Telemetry streams -------------------------------------------------------------------

    def add_stream(self, client_id: str, out: Replies) -> None:
        self._streams.setdefault(client_id, []).append(out)

    def remove_stream(self, client_id: str, out: Replies) -> None:
        queues = self._streams.get(client_id)
        if queues is not None and out in queues:
            queues.remove(out)
            if not queues:
                del self._streams[client_id]

    def stream_ids(self) -> set[str]:
        """The client ids with a Telemetry stream open."""
        return set(self._streams)

    def check(self, request: CheckRequest) -> bool:
        """The TransactionService's checker: a producer publishing the half's topic with an
        open stream gets a RecoverOrphanedTransactionCommand; False when there is none, when
        the half is not a 5.x client's (its producer group is its topic), or when the chosen
        stream has no place or room for it now (its client does not read: checked again in
        the next round)."""
        if request.producer_group != request.real_topic:
            return False
        candidates: list[Replies] = []
        for client_id, queues in self._streams.items():
            info = self.clients.get(client_id)
            settings = info.settings if info is not None else None
            if settings is None or settings.WhichOneof("pub_sub") != "publishing":
                continue
            if any(t.name == request.real_topic for t in settings.publishing.topics):
                candidates.append(queues[-1])
        if not candidates:
            return False
        half = request.half
        message = to_proto_message(half, topic=request.real_topic)
        message.system_properties.queue_id = request.real_queue_id
        command = spb.TelemetryCommand()
        recover = command.recover_orphaned_transaction_command
        recover.message.CopyFrom(message)
        recover.transaction_id = transaction_id(half.commitlog_offset, half.queue_offset)
        return candidates[next(self._turn) % len(candidates)].offer(command)

    # ---- EndTransaction ----------------------------------------------------------------------

    async def end(self, request: spb.EndTransactionRequest) -> spb.EndTransactionResponse:
        topic = check_topic(request.topic, self.broker.topics)
        if request.resolution not in (pb.COMMIT, pb.ROLLBACK):
            raise GrpcError(Code.BAD_REQUEST, "the resolution is neither COMMIT nor ROLLBACK")
        if not self.broker.store.is_master:
            raise GrpcError(Code.FORBIDDEN, "the broker is a slave: it ends no transaction")
        phys, queue_offset = parse_transaction_id(request.transaction_id)
        service = self.broker.transactions
        try:
            half = await service.find_half(phys, queue_offset)
        except TransactionError as exc:
            raise GrpcError(Code.INVALID_TRANSACTION_ID, str(exc)) from None
        real_topic = half.properties.get(PROPERTY_REAL_TOPIC)
        if real_topic != topic:
            raise GrpcError(
                Code.INVALID_TRANSACTION_ID,
                f"transaction {request.transaction_id} is of topic {real_topic}, not {topic}",
            )
        try:
            await service.end(
                half,
                request.resolution == pb.COMMIT,
                message_id=request.message_id or None,
                from_check=request.source == pb.SOURCE_SERVER_CHECK,
            )
        except TransactionError as exc:
            raise GrpcError(_END_CODES.get(exc.kind, Code.BAD_REQUEST), str(exc)) from None
        return spb.EndTransactionResponse(status=status(Code.OK))
