"""The remoting side of transactional messages: END_TRANSACTION (37) from producers, and
CHECK_TRANSACTION_STATE (39) from the broker to a producer of a half message's group.

END_TRANSACTION's header (EndTransactionRequestHeader): ``producerGroup``,
``tranStateTableOffset`` (the half's queue offset, the send result's queueOffset),
``commitLogOffset`` (from the send result's offsetMsgId), ``commitOrRollback`` (8 commit, 12
rollback, 0 unknown: nothing is done), ``fromTransactionCheck``, ``msgId``
and ``transactionId``. Java clients send it one-way; an answer goes only to a two-way request.

CHECK_TRANSACTION_STATE is one-way, on the producer's own connection: header
``tranStateTableOffset``, ``commitLogOffset``, ``msgId`` and ``transactionId`` (the half's
UNIQ_KEY) and ``offsetMsgId``; the body is the half message encoded as a stored record with
its real topic and queue, as RocketMQ's MessageDecoder encodes it. The producer answers with
END_TRANSACTION (fromTransactionCheck true).

With the ACL on, an end of transaction needs PUB on the half message's real topic (checked
once the half is found), and a check goes only to a producer whose heartbeat's account may
send to that topic: the check carries the message.

Loop thread only.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from ...acl._remoting import PRODUCER_GRANTS, Grant, check_then
from ...acl._table import writable
from ...remoting._codes import RequestCode
from ...remoting._codes import ResponseCode as RC
from ...remoting._command import RemotingCommand, ext_int, ext_str
from ...remoting._connection import Connection
from ...store.log._record import (
    PROPERTY_REAL_TOPIC,
    SYSFLAG_TRANSACTION_MASK,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    encode_record,
)
from .._services import HasAcl, HasProducers, HasStore, HasStoreConfig
from ..state._topic_config import owning_topic
from ._transaction import CheckRequest, HasTransactions, TransactionError

log = logging.getLogger(__name__)


class EndTransactionContext(
    HasAcl, HasProducers, HasStore, HasStoreConfig, HasTransactions, Protocol
):
    """What END_TRANSACTION and the producers' checks use of the broker."""


class EndTransactionProcessor:
    def __init__(self, broker: EndTransactionContext) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Any]:
        return {RequestCode.END_TRANSACTION: self.end_transaction}

    async def end_transaction(self, cmd: RemotingCommand, conn: Connection) -> Any:
        broker = self.broker
        if not broker.store.is_master:
            return RemotingCommand.response(
                RC.SLAVE_NOT_AVAILABLE, "the broker is a slave: it takes no end of transaction"
            )
        ext = cmd.ext_fields
        try:
            kind = ext_int(ext, "commitOrRollback", TRANSACTION_NOT_TYPE)
            queue_offset = ext_int(ext, "tranStateTableOffset")
            commit_log_offset = ext_int(ext, "commitLogOffset")
        except ValueError as exc:
            return RemotingCommand.response(RC.SYSTEM_ERROR, f"bad end of transaction: {exc}")
        from_check = (ext_str(ext, "fromTransactionCheck") or "").lower() == "true"
        producer_group = ext_str(ext, "producerGroup")
        msg_id = ext_str(ext, "msgId")
        if not producer_group or not msg_id:
            return RemotingCommand.response(
                RC.SYSTEM_ERROR, "producerGroup and msgId are required in an end of transaction"
            )
        if kind == TRANSACTION_NOT_TYPE:
            log.info(
                "end of transaction %s from %s: state unknown (%s)",
                ext_str(ext, "transactionId"),
                conn.peer,
                "check" if from_check else "producer",
            )
            return RemotingCommand.response(RC.SUCCESS)  # (a one-way request gets no answer)
        if kind not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            return RemotingCommand.response(
                RC.SYSTEM_ERROR, f"commitOrRollback {kind} is neither commit nor rollback"
            )
        if queue_offset is None or commit_log_offset is None:
            return RemotingCommand.response(
                RC.SYSTEM_ERROR, "tranStateTableOffset and commitLogOffset are required"
            )
        service = broker.transactions
        try:
            half = await service.find_half(commit_log_offset, queue_offset)
            real = half.properties.get(PROPERTY_REAL_TOPIC)
            refused = check_then(cmd, owning_topic(half.topic, real))
            if refused is not None:
                return refused
            await service.end(
                half,
                kind == TRANSACTION_COMMIT_TYPE,
                producer_group=producer_group,
                message_id=msg_id,
                from_check=from_check,
            )
        except TransactionError as exc:
            log.warning("end of transaction from %s refused: %s", conn.peer, exc)
            return RemotingCommand.response(exc.code, str(exc))
        return RemotingCommand.response(RC.SUCCESS)

    # ---- checks --------------------------------------------------------------------------------

    def check(self, request: CheckRequest) -> bool:
        """Ask a connected producer of the half's group (the TransactionService's checker)."""
        group = request.producer_group
        if not group:
            return False
        need = writable(request.real_topic)

        def may_ask(c: Any) -> bool:
            if not isinstance(c, Connection) or c.closed:
                return False
            if self.broker.acl is None:
                return True
            grant = c.attributes.get(PRODUCER_GRANTS, {}).get(group)
            return isinstance(grant, Grant) and grant.allows(need)

        conn = self.broker.producers.available_channel(group, may_ask)
        if conn is None:
            return False
        half = request.half
        msg_id = half.msg_id
        header = {
            "tranStateTableOffset": str(half.queue_offset),
            "commitLogOffset": str(half.commitlog_offset),
            "msgId": request.transaction_id or msg_id,
            "transactionId": request.transaction_id or msg_id,
            "offsetMsgId": msg_id,
        }
        body = encode_record(
            topic=request.real_topic,
            body=bytes(half.body),
            queue_id=request.real_queue_id,
            flag=half.flag,
            queue_offset=half.queue_offset,
            phys_offset=half.commitlog_offset,
            sys_flag=half.sys_flag & ~SYSFLAG_TRANSACTION_MASK,
            born_timestamp=half.born_timestamp,
            born_host=bytes(half.born_host),
            store_timestamp=half.store_timestamp,
            store_host=bytes(half.store_host),
            reconsume_times=half.reconsume_times,
            prepared_transaction_offset=half.prepared_transaction_offset,
            properties=half.properties_string,
        )
        conn.send(
            RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, header, body, oneway=True)
        )
        return True
